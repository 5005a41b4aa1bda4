// Routing on the GPU: route_gpu() against route_cpu() on fresh random logits for every method,
// E in {8, 16, 128, 256, 384} (+ odd sizes and the 512/16 limits), k in {1, 2, 4, 8}, T in
// {0, 1, 7, 127, 4096}, fp32 and bf16 logits, with uniform logits, heavy ties (small integers), all
// equal logits, and special values (NaN, +-0, +-inf, huge, subnormal).
//
// Ids must match exactly. Weights must match BIT FOR BIT (NaN: both NaN): the kernels use the same
// det_math.h operations and the same summation orders as route_cpu (see routing_gpu.cu), so there is
// no rounding difference to tolerate. Outputs start poisoned (0xFF) and every element is compared, so
// an unwritten slot fails; every configuration runs twice and must give identical bits.
#if FP4MOE_HAS_CUDA
// NOTE: before test_util.h: its DeviceBuffer calls cudaMalloc(T**, size_t), the typed overload that
// cuda_runtime.h adds (cuda_runtime_api.h alone only has the void** one, so a .cpp would not compile).
#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/numerics.h"
#include "fp4moe/routing.h"
#include "test_util.h"

#if FP4MOE_HAS_CUDA
namespace fp4moe {
namespace {

using testing::DeviceBuffer;

enum class Dist { kUniform, kTies, kAllEqual, kSpecial };

const char* dist_name(Dist dist) {
  switch (dist) {
    case Dist::kUniform: return "uniform";
    case Dist::kTies: return "ties";
    case Dist::kAllEqual: return "all-equal";
    case Dist::kSpecial: return "special";
  }
  return "?";
}

std::vector<float> make_logits(std::mt19937_64& rng, size_t n, Dist dist) {
  std::uniform_real_distribution<float> uniform(-6.0f, 6.0f);
  std::uniform_int_distribution<int> small_int(-2, 2);
  std::uniform_int_distribution<int> pick(0, 15);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            1e30f, -1e30f, 1e-40f};
  std::vector<float> v(n);
  for (float& x : v) {
    switch (dist) {
      case Dist::kUniform: x = uniform(rng); break;
      case Dist::kTies: x = float(small_int(rng)); break;
      case Dist::kAllEqual: x = 0.5f; break;
      case Dist::kSpecial: x = pick(rng) < 3 ? specials[pick(rng) % 8] : float(small_int(rng)); break;
    }
  }
  return v;
}

// DeepSeek's correction bias: small random values, or quarter steps so that ties survive the bias.
std::vector<float> make_bias(std::mt19937_64& rng, int num_experts, Dist dist) {
  std::uniform_real_distribution<float> uniform(-0.25f, 0.25f);
  std::uniform_int_distribution<int> step(-1, 1);
  std::vector<float> v(num_experts);
  for (float& x : v) x = dist == Dist::kUniform ? uniform(rng) : dist == Dist::kAllEqual ? 0.0f : 0.25f * step(rng);
  return v;
}

bool same_weight(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

struct GpuRun {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Routes on the GPU into freshly poisoned buffers, on a non-default stream.
void run_gpu(const RoutingConfig& config, const RoutingArgs& host_args, const void* d_logits, const float* d_bias,
             cudaStream_t stream, DeviceBuffer<int32_t>& d_ids, DeviceBuffer<float>& d_weights, GpuRun* out) {
  d_ids.poison();
  d_weights.poison();
  // The uploads and the poison run on the legacy default stream, which a non-blocking stream does
  // not wait for.
  CUDA_ASSERT(cudaDeviceSynchronize());
  RoutingArgs args = host_args;
  args.logits = d_logits;
  args.correction_bias = d_bias;
  args.topk_ids = d_ids.get();
  args.topk_weights = d_weights.get();
  ASSERT_OK(route_gpu(config, args, stream));
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  CUDA_ASSERT(cudaGetLastError());
  out->ids = d_ids.download();
  out->weights = d_weights.download();
}

// One configuration: CPU reference, two GPU runs, exact comparison of everything.
void check_config(const RoutingConfig& config, int64_t num_tokens, LogitsType logits_type, Dist dist,
                  std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << to_string(config.method) << " E=" << config.num_experts
                                    << " k=" << config.top_k << " T=" << num_tokens << " renormalize="
                                    << config.renormalize << " groups=" << config.num_groups << "/"
                                    << config.topk_groups << " logits="
                                    << (logits_type == LogitsType::kF32 ? "fp32" : "bf16") << " dist="
                                    << dist_name(dist));
  const size_t num_logits = size_t(num_tokens) * config.num_experts;
  const size_t num_out = size_t(num_tokens) * config.top_k;
  const std::vector<float> logits_f32 = make_logits(rng, num_logits, dist);
  std::vector<uint16_t> logits_bf16(num_logits);
  for (size_t i = 0; i < num_logits; ++i) logits_bf16[i] = float_to_bf16(logits_f32[i]);
  const std::vector<float> bias = make_bias(rng, config.num_experts, dist);
  const bool is_bf16 = logits_type == LogitsType::kBF16;

  RoutingArgs host_args;
  host_args.logits = is_bf16 ? static_cast<const void*>(logits_bf16.data()) : logits_f32.data();
  host_args.logits_type = logits_type;
  host_args.correction_bias = bias.data();
  host_args.num_tokens = num_tokens;
  std::vector<int32_t> ref_ids(num_out, -7);
  std::vector<float> ref_weights(num_out, std::numeric_limits<float>::quiet_NaN());
  host_args.topk_ids = ref_ids.data();
  host_args.topk_weights = ref_weights.data();
  ASSERT_OK(route_cpu(config, host_args));

  if (num_tokens == 0) {
    // Valid, launches nothing; null device pointers are accepted.
    RoutingArgs args = host_args;
    args.logits = nullptr;
    args.topk_ids = nullptr;
    args.topk_weights = nullptr;
    DeviceBuffer<float> d_bias(bias);
    args.correction_bias = d_bias.get();
    ASSERT_OK(route_gpu(config, args, nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    return;
  }

  DeviceBuffer<float> d_logits_f32(is_bf16 ? 0 : num_logits);
  DeviceBuffer<uint16_t> d_logits_bf16(is_bf16 ? num_logits : 0);
  if (is_bf16) {
    d_logits_bf16.upload(logits_bf16);
  } else {
    d_logits_f32.upload(logits_f32);
  }
  DeviceBuffer<float> d_bias(bias);
  DeviceBuffer<int32_t> d_ids(num_out);
  DeviceBuffer<float> d_weights(num_out);
  const void* d_logits = is_bf16 ? static_cast<const void*>(d_logits_bf16.get()) : d_logits_f32.get();

  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GpuRun first, second;
  run_gpu(config, host_args, d_logits, d_bias.get(), stream, d_ids, d_weights, &first);
  if (!::testing::Test::HasFatalFailure()) {
    run_gpu(config, host_args, d_logits, d_bias.get(), stream, d_ids, d_weights, &second);
  }
  CUDA_ASSERT(cudaStreamDestroy(stream));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  ASSERT_EQ(first.ids.size(), num_out);
  for (size_t i = 0; i < num_out; ++i) {
    // The poison is an fp32 NaN; a NaN the kernel computes is the canonical 0x7fffffff, so an
    // unwritten weight is caught even where the reference weight is NaN.
    ASSERT_NE(float_bits(first.weights[i]), 0xffffffffu) << "weight " << i << " was never written";
    ASSERT_EQ(first.ids[i], ref_ids[i]) << "token " << i / config.top_k << " rank " << i % config.top_k;
    ASSERT_TRUE(same_weight(first.weights[i], ref_weights[i]))
        << "token " << i / config.top_k << " rank " << i % config.top_k << ": gpu " << std::hexfloat
        << first.weights[i] << " cpu " << ref_weights[i];
  }
  for (size_t i = 0; i < num_out; ++i) {
    ASSERT_EQ(second.ids[i], first.ids[i]) << "rerun differs at " << i;
    ASSERT_EQ(float_bits(second.weights[i]), float_bits(first.weights[i])) << "rerun differs at " << i;
  }
  if (dist != Dist::kSpecial) {
    EXPECT_GT(testing::l2_norm(first.weights), 0.0);
  }
}

RoutingConfig make_config(RoutingMethod method, int num_experts, int top_k, bool renormalize) {
  RoutingConfig config;
  config.method = method;
  config.num_experts = num_experts;
  config.top_k = method == RoutingMethod::kLlama4 ? 1 : top_k;
  config.renormalize = renormalize;
  return config;
}

// DeepSeek group layout for a size: 8 groups where they divide E (the real model), else one group;
// keep half the groups, or as many as top_k needs.
RoutingConfig make_deepseek(int num_experts, int top_k, bool renormalize, int num_groups) {
  RoutingConfig config = make_config(RoutingMethod::kDeepSeekV3, num_experts, top_k, renormalize);
  config.num_groups = num_groups;
  const int group_size = num_experts / num_groups;
  config.topk_groups = std::min(num_groups, std::max(num_groups / 2, (top_k + group_size - 1) / group_size));
  config.routed_scaling_factor = 2.5f;
  return config;
}

constexpr int kExpertCounts[] = {8, 16, 128, 256, 384};
constexpr int kTopKs[] = {1, 2, 4, 8};
constexpr int64_t kTokenCounts[] = {0, 1, 7, 127, 4096};
constexpr LogitsType kLogitsTypes[] = {LogitsType::kF32, LogitsType::kBF16};

// The full matrix for one method; dists cycle over the cases so every (E, k) sees each of them.
void check_method_matrix(RoutingMethod method) {
  auto rng = testing::make_rng(200 + static_cast<int>(method));
  int case_idx = 0;
  for (int num_experts : kExpertCounts) {
    for (int top_k : kTopKs) {
      if (top_k > num_experts || (method == RoutingMethod::kLlama4 && top_k != 1)) continue;
      for (int64_t num_tokens : kTokenCounts) {
        for (LogitsType logits_type : kLogitsTypes) {
          for (Dist dist : {Dist::kUniform, Dist::kTies}) {
            ++case_idx;
            const bool renormalize = case_idx % 2 == 0;
            const RoutingConfig config =
                method == RoutingMethod::kDeepSeekV3
                    ? make_deepseek(num_experts, top_k, renormalize, num_experts % 8 == 0 ? 8 : 1)
                    : make_config(method, num_experts, top_k, renormalize);
            ASSERT_OK(validate(config));
            check_config(config, num_tokens, logits_type, dist, rng);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(RoutingGpu, SoftmaxTopKMatchesCpu) {
  FP4MOE_REQUIRE_GPU();
  check_method_matrix(RoutingMethod::kSoftmaxTopK);
}

TEST(RoutingGpu, DeepSeekV3MatchesCpu) {
  FP4MOE_REQUIRE_GPU();
  check_method_matrix(RoutingMethod::kDeepSeekV3);
}

TEST(RoutingGpu, Llama4MatchesCpu) {
  FP4MOE_REQUIRE_GPU();
  check_method_matrix(RoutingMethod::kLlama4);
}

TEST(RoutingGpu, TopKSoftmaxMatchesCpu) {
  FP4MOE_REQUIRE_GPU();
  check_method_matrix(RoutingMethod::kTopKSoftmax);
}

// All-equal rows (every selection is a tie) and special values (NaN, +-0, +-inf, huge, subnormal),
// including odd expert counts that leave lanes partly empty and the 512/16 limits.
TEST(RoutingGpu, AdversarialInputsMatchCpu) {
  FP4MOE_REQUIRE_GPU();
  auto rng = testing::make_rng(210);
  const int expert_counts[] = {1, 8, 24, 60, 100, 256, 384, 512};
  for (int num_experts : expert_counts) {
    for (int top_k : {1, 3, 8, 16}) {
      if (top_k > num_experts) continue;
      for (RoutingMethod method : {RoutingMethod::kSoftmaxTopK, RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4,
                                   RoutingMethod::kTopKSoftmax}) {
        for (Dist dist : {Dist::kAllEqual, Dist::kSpecial}) {
          for (LogitsType logits_type : kLogitsTypes) {
            const bool renormalize = dist == Dist::kSpecial;
            const RoutingConfig config =
                method == RoutingMethod::kDeepSeekV3
                    ? make_deepseek(num_experts, top_k, renormalize, num_experts % 4 == 0 ? 4 : 1)
                    : make_config(method, num_experts, top_k, renormalize);
            ASSERT_OK(validate(config));
            check_config(config, 127, logits_type, dist, rng);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Group layouts: one group, groups of one expert (group score = that expert), group sizes that are
// not powers of two (384 / 8 = 48), and more groups than lanes (several passes).
TEST(RoutingGpu, DeepSeekV3GroupLayoutsMatchCpu) {
  FP4MOE_REQUIRE_GPU();
  auto rng = testing::make_rng(220);
  for (int num_experts : {8, 16, 60, 128, 256, 384, 512}) {
    for (int num_groups : {1, 2, 4, 8, 15, 32, 64, 96, 128, 256, 384, 512}) {
      if (num_groups > num_experts || num_experts % num_groups != 0) continue;
      const int group_size = num_experts / num_groups;
      for (int topk_groups : {1, std::max(1, num_groups / 2), num_groups}) {
        for (int top_k : {1, 4, 8, 16}) {
          if (top_k > topk_groups * group_size) continue;
          for (Dist dist : {Dist::kUniform, Dist::kTies}) {
            RoutingConfig config = make_config(RoutingMethod::kDeepSeekV3, num_experts, top_k, dist == Dist::kTies);
            config.num_groups = num_groups;
            config.topk_groups = topk_groups;
            config.routed_scaling_factor = 2.5f;
            ASSERT_OK(validate(config));
            check_config(config, 33, dist == Dist::kTies ? LogitsType::kBF16 : LogitsType::kF32, dist, rng);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// More tokens than one grid covers (the kernel grid-strides past 65536 blocks of 4 tokens).
TEST(RoutingGpu, ManyTokensGridStride) {
  FP4MOE_REQUIRE_GPU();
  auto rng = testing::make_rng(230);
  check_config(make_config(RoutingMethod::kSoftmaxTopK, 8, 2, true), 300001, LogitsType::kBF16, Dist::kTies, rng);
  check_config(make_deepseek(16, 4, true, 4), 300001, LogitsType::kF32, Dist::kUniform, rng);
}

TEST(RoutingGpu, ZeroTokensLaunchesNothing) {
  FP4MOE_REQUIRE_GPU();
  const RoutingConfig config = make_config(RoutingMethod::kSoftmaxTopK, 8, 2, false);
  RoutingArgs args;  // null pointers are fine with no tokens
  args.num_tokens = 0;
  EXPECT_OK(route_gpu(config, args, nullptr));
  DeviceBuffer<float> d_logits(std::vector<float>(8, 1.0f));
  DeviceBuffer<int32_t> d_ids(2);
  DeviceBuffer<float> d_weights(2);
  args.logits = d_logits.get();
  args.topk_ids = d_ids.get();
  args.topk_weights = d_weights.get();
  EXPECT_OK(route_gpu(config, args, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(d_ids.download(), std::vector<int32_t>(2, -1));  // still the 0xFF poison
}

TEST(RoutingGpu, RejectsBadArgumentsBeforeLaunch) {
  FP4MOE_REQUIRE_GPU();
  DeviceBuffer<float> d_logits(std::vector<float>(16, 1.0f));
  DeviceBuffer<int32_t> d_ids(4);
  DeviceBuffer<float> d_weights(4);
  RoutingArgs args;
  args.logits = d_logits.get();
  args.num_tokens = 2;
  args.topk_ids = d_ids.get();
  args.topk_weights = d_weights.get();

  RoutingArgs bad = args;
  bad.topk_weights = nullptr;
  Status status = route_gpu(make_config(RoutingMethod::kSoftmaxTopK, 8, 2, false), bad, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  EXPECT_NE(status.message().find("topk_weights"), std::string::npos) << status.message();

  status = route_gpu(make_config(RoutingMethod::kSoftmaxTopK, 8, 9, false), args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  EXPECT_NE(status.message().find("top_k = 9"), std::string::npos) << status.message();

  status = route_gpu(make_deepseek(8, 2, true, 4), args, nullptr);  // no correction_bias
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  EXPECT_NE(status.message().find("correction_bias"), std::string::npos) << status.message();

  status = route_gpu(make_config(RoutingMethod::kSoftmaxTopK, 513, 2, false), args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();

  // Host memory the device cannot reach is refused by name (where the device can read pageable
  // memory, HMM or ATS, it is routed like device memory instead: not the GPU machines we test on).
  int pageable = 0;
  CUDA_ASSERT(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
  if (!pageable) {
    std::vector<float> host_logits(16, 1.0f);
    bad = args;
    bad.logits = host_logits.data();
    status = route_gpu(make_config(RoutingMethod::kSoftmaxTopK, 8, 2, false), bad, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
    EXPECT_NE(status.message().find("route_gpu: logits = "), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("not registered with CUDA"), std::string::npos) << status.message();
  }

  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(d_ids.download(), std::vector<int32_t>(4, -1));  // nothing ran
}

// route_gpu neither allocates nor synchronizes, so it can be captured into a CUDA graph and replayed.
TEST(RoutingGpu, CapturesIntoCudaGraph) {
  FP4MOE_REQUIRE_GPU();
  auto rng = testing::make_rng(240);
  const RoutingConfig config = make_deepseek(256, 8, true, 8);
  const int64_t num_tokens = 77;
  const std::vector<float> logits = make_logits(rng, size_t(num_tokens) * 256, Dist::kUniform);
  const std::vector<float> bias = make_bias(rng, 256, Dist::kUniform);
  std::vector<int32_t> ref_ids(num_tokens * 8);
  std::vector<float> ref_weights(num_tokens * 8);
  RoutingArgs args;
  args.logits = logits.data();
  args.correction_bias = bias.data();
  args.num_tokens = num_tokens;
  args.topk_ids = ref_ids.data();
  args.topk_weights = ref_weights.data();
  ASSERT_OK(route_cpu(config, args));

  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<float> d_bias(bias);
  DeviceBuffer<int32_t> d_ids(ref_ids.size());
  DeviceBuffer<float> d_weights(ref_weights.size());
  args.logits = d_logits.get();
  args.correction_bias = d_bias.get();
  args.topk_ids = d_ids.get();
  args.topk_weights = d_weights.get();

  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status captured = route_gpu(config, args, stream);
  CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  ASSERT_OK(captured);
  CUDA_ASSERT(cudaGraphInstantiate(&graph_exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    d_ids.poison();
    d_weights.poison();
    CUDA_ASSERT(cudaDeviceSynchronize());  // the poison is on the legacy stream
    CUDA_ASSERT(cudaGraphLaunch(graph_exec, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    EXPECT_EQ(d_ids.download(), ref_ids);
    const std::vector<float> weights = d_weights.download();
    for (size_t i = 0; i < weights.size(); ++i) ASSERT_EQ(float_bits(weights[i]), float_bits(ref_weights[i])) << i;
  }
  CUDA_ASSERT(cudaGraphExecDestroy(graph_exec));
  CUDA_ASSERT(cudaGraphDestroy(graph));
  CUDA_ASSERT(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace fp4moe
#endif  // FP4MOE_HAS_CUDA
