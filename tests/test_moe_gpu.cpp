// The CUDA forward against the fp64 reference: every preset (scaled down), both modes, hostile token
// counts and routings, determinism, validation, EP/TP shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>

#include "fp4moe/moe_gpu.h"
#include "moe_test_util.h"
#include "reference/sharding.h"
#include "src/gemm/sm90/config.h"
#include "src/gemm/sm90/tune.h"
#include "src/moe/weight_layout.h"
#include "src/moe/workspace.h"
#include "src/permute/permute.h"

namespace fp4moe {
namespace {

using testing::DeviceBuffer;
using testing::make_rng;

struct GpuRun {
  std::vector<uint16_t> out;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<float> logits;  // the logits the layer routed from; empty when the routing was given
  int32_t tail_tiles = -1;  // the plan's tail tiles (tail_start[E_local]); -1 at T = 0
};

// DeepSeek-R1 scaled down 16x (scaled_preset: H 512, I 128; 256 experts, top-8) in `mode`, for up
// to `max_tokens`: the layer of the shard, config, batch and tail tests.
void small_deepseek(Mode mode, int64_t max_tokens, MoeProblem* p) {
  MoeProblem full;
  ASSERT_OK(get_preset("deepseek-r1", &full));
  *p = scaled_preset(full, 16);
  p->mode = mode;
  p->max_tokens = max_tokens;
}

// Runs one forward from logits (or precomputed routing) and returns the output and the routing used.
void run_forward(const MoeLayer& layer, const std::vector<uint16_t>& hidden, const std::vector<float>& logits,
                 int64_t T, GpuRun* run, const std::vector<int32_t>* topk_ids = nullptr,
                 const std::vector<float>* topk_weights = nullptr) {
  const MoeProblem& p = layer.problem();
  DeviceBuffer<uint16_t> dh(hidden.empty() ? std::vector<uint16_t>(8) : hidden);
  DeviceBuffer<float> dl(logits.empty() ? std::vector<float>(1) : logits);
  DeviceBuffer<uint16_t> dout(std::max<size_t>(1, size_t(T * p.hidden_size)));
  DeviceBuffer<char> ws(layer.workspace_bytes());
  DeviceBuffer<int32_t> dids(topk_ids ? *topk_ids : std::vector<int32_t>(1));
  DeviceBuffer<float> dw(topk_weights ? *topk_weights : std::vector<float>(1));
  ForwardArgs a;
  a.hidden = dh.get();
  if (topk_ids) {
    a.topk_ids = dids.get();
    a.topk_weights = dw.get();
  } else {
    a.router_logits = dl.get();
  }
  a.num_tokens = T;
  a.out = dout.get();
  ASSERT_OK(layer.forward(a, ws.get(), ws.size(), nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  ASSERT_OK(layer.check_device_errors(ws.get(), nullptr));
  run->out = dout.download();
  run->out.resize(size_t(T * p.hidden_size));
  if (T > 0) {
    const WorkspaceLayout l = WorkspaceLayout::make(p.max_tokens, p.top_k(), layer.num_local_experts(),
                                                    p.hidden_size, layer.local_intermediate_size());
    CUDA_ASSERT(cudaMemcpy(&run->tail_tiles, ws.get() + l.tail_start + 4 * size_t(layer.num_local_experts()), 4,
                           cudaMemcpyDeviceToHost));
  }
  if (topk_ids) {
    run->ids = *topk_ids;
    run->weights = *topk_weights;
  } else {
    run->logits = std::vector<float>(logits.begin(), logits.begin() + T * p.num_experts());
    // Routing the GPU used, read back from the workspace (the first two regions).
    run->ids.resize(size_t(T) * p.top_k());
    run->weights.resize(run->ids.size());
    if (T > 0) {
      const WorkspaceLayout l = WorkspaceLayout::make(p.max_tokens, p.top_k(), layer.num_local_experts(),
                                                      p.hidden_size, layer.local_intermediate_size());
      CUDA_ASSERT(cudaMemcpy(run->ids.data(), ws.get() + l.topk_ids, run->ids.size() * 4, cudaMemcpyDeviceToHost));
      CUDA_ASSERT(cudaMemcpy(run->weights.data(), ws.get() + l.topk_weights, run->weights.size() * 4,
                             cudaMemcpyDeviceToHost));
    }
  }
}

// A token's bits do not depend on its batch: the first t tokens of `batch` (T tokens of hidden and
// logits, routed by the router) forwarded alone, for each t of `firsts`, give exactly the batch's
// rows, and so does the first token with the batch's routing given (precomputed: direct GEMM1 where
// it applies).
void expect_first_tokens_match_the_batch(const MoeLayer& layer, const std::vector<uint16_t>& hidden,
                                         const std::vector<float>& logits, const GpuRun& batch, int64_t T,
                                         std::initializer_list<int64_t> firsts, const std::string& what) {
  const MoeProblem& p = layer.problem();
  const int64_t H = p.hidden_size, E = p.num_experts();
  for (int64_t t : firsts) {
    const std::vector<uint16_t> h(hidden.begin(), hidden.begin() + t * H);
    const std::vector<float> l(logits.begin(), logits.begin() + t * E);
    GpuRun few;
    run_forward(layer, h, l, t, &few);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    for (int64_t r = 0; r < t; ++r)
      EXPECT_EQ(std::memcmp(few.out.data() + r * H, batch.out.data() + r * H, size_t(H) * 2), 0)
          << what << ": token " << r << " alone in a batch of " << t << " (" << layer.kernel_info(t).gemm2
          << ") differs from the batch of " << T << " (" << layer.kernel_info(T).gemm2 << ")";
  }
  const std::vector<int32_t> ids(batch.ids.begin(), batch.ids.begin() + p.top_k());
  const std::vector<float> w(batch.weights.begin(), batch.weights.begin() + p.top_k());
  GpuRun one;
  run_forward(layer, std::vector<uint16_t>(hidden.begin(), hidden.begin() + H), {}, 1, &one, &ids, &w);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(std::memcmp(one.out.data(), batch.out.data(), size_t(H) * 2), 0)
      << what << ": token 0 with precomputed routing (" << layer.kernel_info(1).gemm1 << ") differs from the batch of "
      << T;
}

// The reference refuses expert ids out of [0, num_experts); the layer skips those pairs. As expert 0
// at weight 0 they add exact zeros, so the reference of a routing with them is the reference of this.
void zero_out_of_range_pairs(GpuRun* run, int num_experts) {
  for (size_t k = 0; k < run->ids.size(); ++k)
    if (run->ids[k] < 0 || run->ids[k] >= num_experts) run->ids[k] = 0, run->weights[k] = 0.0f;
}

void expect_matches_reference(const MoeProblem& p, const HostMoeWeights& hw, const ref::ShardSpec& shard,
                              const std::vector<uint16_t>& hidden, const GpuRun& run, int64_t T,
                              const std::string& what) {
  if (!run.logits.empty()) {
    // The layer routed: its ids and weights are route_cpu's, bit for bit (the routing contract).
    std::vector<int32_t> ids(run.ids.size(), -1);
    std::vector<float> weights(run.weights.size(), -1.0f);
    RoutingArgs r;
    r.logits = run.logits.data();
    r.correction_bias = hw.routing_bias.empty() ? nullptr : hw.routing_bias.data();
    r.num_tokens = T;
    r.topk_ids = ids.data();
    r.topk_weights = weights.data();
    ASSERT_OK(route_cpu(p.routing, r));
    ASSERT_EQ(ids, run.ids) << what << ": the layer's routing is not route_cpu's";
    ASSERT_EQ(std::memcmp(weights.data(), run.weights.data(), weights.size() * 4), 0)
        << what << ": the layer's routing weights are not route_cpu's bits";
  }
  std::vector<float> ref_out(size_t(T * p.hidden_size));
  ASSERT_OK(ref::moe_forward_routed(p, hw.view(), shard, hidden.data(), run.ids.data(), run.weights.data(), T,
                                    ref_out.data()));
  const auto got = testing::bf16_to_floats(run.out);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << what << ": NaN (unwritten?) at " << i;
  const double err = testing::rel_l2(got, ref_out);
  EXPECT_GT(testing::l2_norm(got), 0.0) << what;
  EXPECT_LE(err, testing::tolerance(p.mode)) << what << ": normalized error " << err;
}

struct Case {
  std::string preset;
  int factor;  // scale-down factor for H and I
};

const Case kCases[] = {{"deepseek-r1", 16},  {"qwen3-30b-a3b", 4},   {"qwen3-235b-a22b", 8},
                       {"llama4-scout", 16}, {"llama4-maverick", 16}, {"mixtral-8x7b", 16},
                       {"gpt-oss-120b", 8},  {"gpt-oss-20b", 8}};

class PresetTest : public ::testing::TestWithParam<std::tuple<Case, Mode, KernelPath>> {};

TEST_P(PresetTest, MatchesReferenceOnHostileTokenCounts) {
  FP4MOE_REQUIRE_GPU();
  const auto [c, mode, path] = GetParam();
  MoeProblem full;
  ASSERT_OK(get_preset(c.preset, &full));
  if (mode == Mode::kW4A4 && full.weight_format != WeightFormat::kNvfp4) GTEST_SKIP() << "w4a4 is NVFP4-only";
  MoeProblem p = scaled_preset(full, c.factor);
  p.mode = mode;
  p.max_tokens = 256;
  const uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(c.preset);
  HostMoeWeights hw = make_random_weights(p, seed);
  LayerOptions opt;
  opt.path = path;
  std::unique_ptr<MoeLayer> layer;
  Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
  FP4MOE_ASSERT_CREATED(st);
  auto rng = make_rng(seed);
  for (int64_t T : {1, 7, 127}) {
    auto hidden = testing::random_hidden(rng, T, p.hidden_size);
    auto logits = testing::random_logits(rng, T, p.num_experts());
    GpuRun run, again;
    run_forward(*layer, hidden, logits, T, &run);
    const std::string what = p.name + " " + to_string(mode) + " T=" + std::to_string(T);
    expect_matches_reference(p, hw, {}, hidden, run, T, what);
    // The same inputs give the same bits.
    run_forward(*layer, hidden, logits, T, &again);
    EXPECT_EQ(std::memcmp(run.out.data(), again.out.data(), run.out.size() * 2), 0) << what << ": not deterministic";
  }
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(Mode::kW4A16, Mode::kW4A4),
                                            ::testing::Values(KernelPath::kSimt, KernelPath::kSm90)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param).preset + "_" + to_string(std::get<1>(info.param)) +
                                           "_" + to_string(std::get<2>(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

class HostileRoutingTest : public ::testing::TestWithParam<KernelPath> {};

TEST_P(HostileRoutingTest, EveryTokenOnTheSameExpertsAndEmptyExperts) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem full;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &full));
  MoeProblem p = scaled_preset(full, 4);
  p.max_tokens = 300;
  const uint64_t seed = testing::test_seed() + 7;
  HostMoeWeights hw = make_random_weights(p, seed);
  LayerOptions opt;
  opt.path = GetParam();
  std::unique_ptr<MoeLayer> layer;
  Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
  FP4MOE_ASSERT_CREATED(st);
  auto rng = make_rng(seed);
  const int64_t T = 300;  // more tokens on one expert than any token tile
  auto hidden = testing::random_hidden(rng, T, p.hidden_size);
  std::vector<int32_t> ids(size_t(T) * p.top_k());
  std::vector<float> w(ids.size());
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < p.top_k(); ++k) {
      ids[t * p.top_k() + k] = p.num_experts() - 1 - k;  // the same k experts for every token
      w[t * p.top_k() + k] = 0.25f + 0.1f * k;
    }
  GpuRun run;
  run_forward(*layer, hidden, {}, T, &run, &ids, &w);
  expect_matches_reference(p, hw, {}, hidden, run, T, "all tokens on experts E-1..E-k");
}

TEST_P(HostileRoutingTest, ZeroTokensWritesNothingAndSucceeds) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_OK(get_preset("mixtral-8x7b", &p));
  p = scaled_preset(p, 32);
  p.max_tokens = 4;
  LayerOptions opt;
  opt.path = GetParam();
  std::unique_ptr<MoeLayer> layer;
  Status st = MoeLayer::create_dummy(p, 1, opt, &layer);
  FP4MOE_ASSERT_CREATED(st);
  DeviceBuffer<char> ws(layer->workspace_bytes());
  DeviceBuffer<float> logits(8);
  ForwardArgs a;
  a.router_logits = logits.get();
  a.num_tokens = 0;
  ASSERT_OK(layer->forward(a, ws.get(), ws.size(), nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  // Empty tensors of a framework have no data: zero tokens with every array pointer null succeed.
  ForwardArgs none;
  none.num_tokens = 0;
  ASSERT_OK(layer->forward(none, ws.get(), ws.size(), nullptr));
  // Both routings at once stay an error, even with zero tokens.
  DeviceBuffer<int32_t> ids(8);
  DeviceBuffer<float> w(8);
  a.topk_ids = ids.get();
  a.topk_weights = w.get();
  EXPECT_EQ(layer->forward(a, ws.get(), ws.size(), nullptr).code(), StatusCode::kInvalidArgument);
  CUDA_ASSERT(cudaDeviceSynchronize());
}

INSTANTIATE_TEST_SUITE_P(Paths, HostileRoutingTest, ::testing::Values(KernelPath::kSimt, KernelPath::kSm90),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(MoeGpu, ExpertAndTensorParallelShardsSumToTheFullLayer) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_NO_FATAL_FAILURE(small_deepseek(Mode::kW4A16, 64, &p));
  const uint64_t seed = testing::test_seed() + 3;
  HostMoeWeights hw = make_random_weights(p, seed);
  auto rng = make_rng(seed);
  const int64_t T = 33;
  auto hidden = testing::random_hidden(rng, T, p.hidden_size);
  auto logits = testing::random_logits(rng, T, p.num_experts());
  for (auto [ep, tp] : {std::pair<int, int>{2, 1}, {1, 2}, {2, 2}}) {
    std::vector<double> sum(size_t(T * p.hidden_size), 0.0);
    for (int er = 0; er < ep; ++er) {
      for (int tr = 0; tr < tp; ++tr) {
        LayerOptions opt;
        opt.ep_rank = er, opt.ep_size = ep, opt.tp_rank = tr, opt.tp_size = tp;
        std::unique_ptr<MoeLayer> layer;
        ASSERT_OK(MoeLayer::create_dummy(p, seed, opt, &layer));
        GpuRun run;
        run_forward(*layer, hidden, logits, T, &run);
        // Each shard also matches its own reference partial output.
        HostMoeWeights shard;
        ref::ShardSpec spec{er, ep, tr, tp};
        ASSERT_OK(ref::shard_weights(p, hw, spec, &shard));
        expect_matches_reference(p, shard, spec, hidden, run, T,
                                 "ep " + std::to_string(er) + "/" + std::to_string(ep) + " tp " +
                                     std::to_string(tr) + "/" + std::to_string(tp));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += bf16_to_float(run.out[i]);
      }
    }
    GpuRun whole;
    std::unique_ptr<MoeLayer> layer;
    ASSERT_OK(MoeLayer::create_dummy(p, seed, {}, &layer));
    run_forward(*layer, hidden, logits, T, &whole);
    EXPECT_LE(testing::rel_l2(sum, testing::bf16_to_floats(whole.out)), 1e-2) << "ep " << ep << " tp " << tp;
  }
}

// The repack from the checkpoint (linear) layout and the on-device dummy generator must produce the
// same repacked weights: the same seed through MoeLayer::create and create_dummy, same output bits.
TEST(MoeGpu, UploadedWeightsEqualDummyWeights) {
  FP4MOE_REQUIRE_GPU();
  for (const char* name : {"deepseek-r1", "gpt-oss-20b", "qwen3-30b-a3b"}) {
    for (Mode mode : {Mode::kW4A16, Mode::kW4A4}) {
      MoeProblem p;
      ASSERT_OK(get_preset(name, &p));
      if (mode == Mode::kW4A4 && p.weight_format != WeightFormat::kNvfp4) continue;
      p = scaled_preset(p, 16);
      p.mode = mode;
      p.max_tokens = 64;
      const uint64_t seed = testing::test_seed() + 11;
      const HostMoeWeights hw = make_random_weights(p, seed);
      std::unique_ptr<MoeLayer> uploaded, dummy;
      ASSERT_OK(MoeLayer::create(p, hw.view(), {}, &uploaded));
      ASSERT_OK(MoeLayer::create_dummy(p, seed, {}, &dummy));
      EXPECT_EQ(uploaded->weight_bytes(), dummy->weight_bytes());
      auto rng = make_rng(seed);
      const int64_t T = 37;
      auto hidden = testing::random_hidden(rng, T, p.hidden_size);
      auto logits = testing::random_logits(rng, T, p.num_experts());
      GpuRun a, b;
      run_forward(*uploaded, hidden, logits, T, &a);
      run_forward(*dummy, hidden, logits, T, &b);
      EXPECT_GT(testing::l2_norm(testing::bf16_to_floats(a.out)), 0.0);
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0) << name << " " << to_string(mode);
      expect_matches_reference(p, hw, {}, hidden, a, T, std::string(name) + " uploaded");
    }
  }
}

// MoeLayer::create reads its weights view on the host: a view pointing at device memory is refused by
// name (it used to crash the process), and nothing is created.
TEST(MoeGpu, CreateRefusesWeightsInDeviceMemoryNamingThem) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &p));
  p = scaled_preset(p, 16);
  p.max_tokens = 8;
  const HostMoeWeights hw = make_random_weights(p, 3);
  DeviceBuffer<uint8_t> d_w2(hw.w2);
  DeviceBuffer<float> d_scale_2(hw.w13_scale_2);
  for (int which = 0; which < 2; ++which) {
    MoeWeightsView v = hw.view();
    if (which == 0) v.w2 = d_w2.get();
    else v.w13_scale_2 = d_scale_2.get();
    std::unique_ptr<MoeLayer> layer;
    const Status s = MoeLayer::create(p, v, {}, &layer);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(which == 0 ? "w2 = " : "w13_scale_2 = "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("device memory"), std::string::npos) << s.message();
    EXPECT_EQ(layer, nullptr);
  }
}

// A CUDA call that fails inside the library is reported once: the error it left pending in the
// thread is taken with it, so the next call runs (a later launch check would otherwise report it
// again, under another kernel's name). The failure: DeepSeek-R1 with I = 131072, whose dummy weights
// (about 405 GB) no GPU holds.
TEST(MoeGpu, AFailedAllocationIsReportedOnceThenCallsRun) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem big;
  ASSERT_OK(get_preset("deepseek-r1", &big));
  big.intermediate_size = 131072;
  big.max_tokens = 1;
  std::unique_ptr<MoeLayer> none;
  const Status failed = MoeLayer::create_dummy(big, 1, {}, &none);
  FP4MOE_SKIP_IF_NOT_HOPPER(failed);
  ASSERT_EQ(failed.code(), StatusCode::kCudaError) << failed.to_string();
  EXPECT_NE(failed.message().find("cudaErrorMemoryAllocation"), std::string::npos) << failed.message();
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the failed call left its error pending";
  MoeProblem p;
  small_deepseek(Mode::kW4A16, 8, &p);
  const uint64_t seed = testing::test_seed() + 61;
  std::unique_ptr<MoeLayer> layer;
  FP4MOE_ASSERT_CREATED(MoeLayer::create_dummy(p, seed, {}, &layer));
  auto rng = make_rng(seed);
  const auto hidden = testing::random_hidden(rng, 5, p.hidden_size);
  const auto logits = testing::random_logits(rng, 5, p.num_experts());
  GpuRun run;
  run_forward(*layer, hidden, logits, 5, &run);
  expect_matches_reference(p, make_random_weights(p, seed), {}, hidden, run, 5, "after a failed create");
}

// Block scales that are not positive normal numbers are folded into the codes at repack
// (layout::repack_scale): NVFP4 zero and negative-zero scales, negative scales, e4m3 subnormals and
// NaN; MXFP4 the extremes of the accepted e8m0 range. Uploaded through MoeLayer::create, both paths
// must match the fp64 reference, and a NaN scale must give NaN exactly for the tokens routed to its
// expert (the other tokens still matching the reference).
class HostileScalesTest : public ::testing::TestWithParam<KernelPath> {};

TEST_P(HostileScalesTest, ZeroNegativeSubnormalNaNAndExtremeScalesMatchTheReference) {
  FP4MOE_REQUIRE_GPU();
  for (const char* name : {"deepseek-r1", "gpt-oss-20b"}) {
    MoeProblem p;
    ASSERT_OK(get_preset(name, &p));
    p = scaled_preset(p, 16);
    p.max_tokens = 64;
    const bool mx = p.weight_format == WeightFormat::kMxfp4;
    const uint64_t seed = testing::test_seed() + 23;
    auto rng = make_rng(seed);
    HostMoeWeights hw = make_random_weights(p, seed);
    auto poison = [&](std::vector<uint8_t>& scales) {
      const uint8_t nv_kinds[] = {0x00, 0x80, 0x01, 0x03, 0x06, 0x07};  // zero, -0, subnormals
      for (size_t i = 0; i < scales.size(); ++i) {
        const uint64_t r = rng() % 16;
        if (mx) {
          if (r < 2) scales[i] = uint8_t(r == 0 ? layout::kMinE8m0 : layout::kMaxE8m0);
        } else if (r < 6) {
          scales[i] = nv_kinds[r];
        } else if (r < 10) {
          scales[i] = uint8_t(scales[i] | 0x80);  // negative
        }
      }
    };
    poison(hw.w13_scale);
    poison(hw.w2_scale);
    LayerOptions opt;
    opt.path = GetParam();
    const int64_t T = 37;
    auto hidden = testing::random_hidden(rng, T, p.hidden_size);
    auto logits = testing::random_logits(rng, T, p.num_experts());
    const std::string what = std::string(name) + " hostile scales " + to_string(GetParam());
    {
      std::unique_ptr<MoeLayer> layer;
      const Status st = MoeLayer::create(p, hw.view(), opt, &layer);
      FP4MOE_ASSERT_CREATED(st);
      GpuRun run;
      run_forward(*layer, hidden, logits, T, &run);
      expect_matches_reference(p, hw, {}, hidden, run, T, what);
    }
    if (mx) continue;  // (an MXFP4 NaN scale would meet gpt-oss's clamped activation, not this test's subject)
    // One NaN scale in expert 0's w13: NaN outputs exactly for the tokens routed to expert 0 (every
    // third token, by precomputed routing; distinct experts per token, positive weights).
    hw.w13_scale[5] = 0x7f;
    std::vector<int32_t> ids(size_t(T) * p.top_k());
    std::vector<float> weights(ids.size());
    std::vector<int32_t> experts(size_t(p.num_experts()));
    for (int64_t t = 0; t < T; ++t) {
      for (int e = 0; e < p.num_experts(); ++e) experts[size_t(e)] = e;
      std::shuffle(experts.begin() + 1, experts.end(), rng);
      for (int k = 0; k < p.top_k(); ++k) {
        ids[size_t(t * p.top_k() + k)] = experts[size_t(k + (t % 3 == 0 ? 0 : 1))];
        weights[size_t(t * p.top_k() + k)] = 0.05f + float(rng() % 100) / 200.0f;
      }
    }
    std::unique_ptr<MoeLayer> layer;
    ASSERT_OK(MoeLayer::create(p, hw.view(), opt, &layer));
    GpuRun run;
    run_forward(*layer, hidden, logits, T, &run, &ids, &weights);
    std::vector<float> ref_out(size_t(T * p.hidden_size));
    ASSERT_OK(ref::moe_forward_routed(p, hw.view(), {}, hidden.data(), run.ids.data(), run.weights.data(), T,
                                      ref_out.data()));
    const auto got = testing::bf16_to_floats(run.out);
    std::vector<float> got_finite, ref_finite;  // the tokens not routed to expert 0
    int64_t nan_tokens = 0;
    for (int64_t t = 0; t < T; ++t) {
      bool routed_to_0 = false;
      for (int k = 0; k < p.top_k(); ++k) routed_to_0 |= run.ids[size_t(t * p.top_k() + k)] == 0;
      nan_tokens += routed_to_0;
      for (int64_t c = 0; c < p.hidden_size; ++c) {
        const size_t i = size_t(t * p.hidden_size + c);
        ASSERT_EQ(std::isnan(got[i]), std::isnan(ref_out[i])) << what << ": token " << t << " element " << c;
        if (routed_to_0) {
          ASSERT_TRUE(std::isnan(got[i])) << what << ": token " << t << " is routed to expert 0, element " << c;
        } else {
          got_finite.push_back(got[i]);
          ref_finite.push_back(ref_out[i]);
        }
      }
    }
    EXPECT_EQ(nan_tokens, (T + 2) / 3);
    EXPECT_GT(testing::l2_norm(got_finite), 0.0) << what;
    EXPECT_LE(testing::rel_l2(got_finite, ref_finite), testing::tolerance(p.mode)) << what << ": the other tokens";
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, HostileScalesTest, ::testing::Values(KernelPath::kSimt, KernelPath::kSm90),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// A config changes speed, never results: every compiled sm90 config, forced for every token count,
// gives the default choice's output bit for bit (random routing at several T, and every token on
// the same experts so that tiles are full, partial and split across the tile width).
TEST(MoeGpu, EveryCompiledSm90ConfigGivesTheSameBits) {
  FP4MOE_REQUIRE_GPU();
  for (Mode mode : {Mode::kW4A16, Mode::kW4A4}) {
    MoeProblem p;
    ASSERT_NO_FATAL_FAILURE(small_deepseek(mode, 352, &p));
    const uint64_t seed = testing::test_seed() + 13;
    const HostMoeWeights hw = make_random_weights(p, seed);
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    std::unique_ptr<MoeLayer> layer;
    Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
    FP4MOE_ASSERT_CREATED(st);
    auto rng = make_rng(seed);
    // On a 132-SM H200 the default runs both GEMMs narrowed (2 consumers) at T=1, GEMM1 narrowed and
    // GEMM2 not at T=6 (tests/test_config.cpp, NarrowsTheDecodeConfigOnlyForFewTiles), BN16 x 4 at
    // T=40 and BN32 at T=352 (11 rows per expert; T=300 until session 40's BN16 took up to 10). With
    // every token on the same experts, T = 70 and 76 are tiles of 70 and 76 rows, which reach the
    // narrower wgmma N that the other counts miss (NarrowN: BN80's 72, BN96's 72 and 80).
    for (int64_t T : {1, 6, 40, 70, 76, 352}) {
      for (bool same_experts : {false, true}) {
        auto hidden = testing::random_hidden(rng, T, p.hidden_size);
        auto logits = testing::random_logits(rng, T, p.num_experts());
        std::vector<int32_t> ids(size_t(T) * p.top_k());
        std::vector<float> w(ids.size());
        for (int64_t t = 0; t < T; ++t)
          for (int k = 0; k < p.top_k(); ++k) {
            ids[t * p.top_k() + k] = (3 * k + 1) % p.num_experts();
            w[t * p.top_k() + k] = 0.2f + 0.05f * k;
          }
        const std::string what = std::string(to_string(mode)) + " T=" + std::to_string(T) +
                                 (same_experts ? " same experts" : " random routing");
        ASSERT_OK(layer->force_sm90_config(""));
        GpuRun base;
        run_forward(*layer, hidden, logits, T, &base, same_experts ? &ids : nullptr, same_experts ? &w : nullptr);
        expect_matches_reference(p, hw, {}, hidden, base, T, what + " default config");
        for (const std::string& name : MoeLayer::sm90_config_names()) {
          ASSERT_OK(layer->force_sm90_config(name));
          GpuRun run;
          run_forward(*layer, hidden, logits, T, &run, same_experts ? &ids : nullptr, same_experts ? &w : nullptr);
          EXPECT_EQ(std::memcmp(run.out.data(), base.out.data(), run.out.size() * 2), 0) << what << " " << name;
        }
      }
    }
    ASSERT_OK(layer->force_sm90_config(""));
  }
}

// The README's promise: a token's output bits do not depend on the rest of the batch. The first
// tokens of a 352-token batch (BN32 tiles on a 132-SM H200; the plan and the permute apart)
// forwarded alone (T=1: a decode config, the plan and the permute in one kernel; with precomputed
// routing also direct GEMM1) and with a few more (T=9: 72 routed pairs, fused; T=17: 136, past the
// fused kernel's 128) must give exactly the rows they got in the batch, in both modes.
TEST(MoeGpu, OutputBitsDoNotDependOnTheBatch) {
  FP4MOE_REQUIRE_GPU();
  for (Mode mode : {Mode::kW4A16, Mode::kW4A4}) {
    MoeProblem p;
    ASSERT_NO_FATAL_FAILURE(small_deepseek(mode, 352, &p));
    const uint64_t seed = testing::test_seed() + 29;
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    std::unique_ptr<MoeLayer> layer;
    Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
    FP4MOE_ASSERT_CREATED(st);
    auto rng = make_rng(seed);
    const int64_t T = 352, H = p.hidden_size, E = p.num_experts();
    const auto hidden = testing::random_hidden(rng, T, H);
    const auto logits = testing::random_logits(rng, T, E);
    GpuRun batch;
    run_forward(*layer, hidden, logits, T, &batch);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_GT(testing::abs_sum_bf16(batch.out, size_t(9 * H)), 0.0)
        << to_string(mode) << ": the batch's first rows are all zero";
    expect_first_tokens_match_the_batch(*layer, hidden, logits, batch, T, {1, 9, 17}, to_string(mode));
  }
}

// Direct GEMM1 (LayerOptions::direct_gemm1): at T=1 with precomputed routing, GEMM1 makes its tile
// table from the routed ids and reads the hidden row in place. Against the same layer without it (the
// plan's tables and the permuted row): the same bits, and the reference. Routings: distinct ids; a
// repeated id (two rows of one expert: the further row's pieces copied to their swizzled places);
// ids out of range (no row, reported like the plan's); with an expert shard, none, some or all of
// the token's experts local; at top-16, one id 16 times (rows in both 8-row swizzle atoms) and 9
// times. Each through both BN16 configs (the scaled layers pick the 2-consumer one; full-size
// DeepSeek-R1 the 4-consumer one), with the GEMM1/GEMM2 overlap where select_gemm_overlap picks it.
TEST(MoeGpu, DirectGemm1AtOneTokenGivesTheBitsOfThePlannedPath) {
  FP4MOE_REQUIRE_GPU();
  struct Layer {
    std::string preset;
    int factor;
    int ep_rank, ep_size, tp_rank, tp_size;
    int top_k;  // 0: the preset's
  };
  const Layer layers[] = {{"deepseek-r1", 16, 0, 1, 0, 1, 0},  {"qwen3-30b-a3b", 4, 0, 1, 0, 1, 0},
                          {"mixtral-8x7b", 16, 0, 1, 0, 1, 0}, {"deepseek-r1", 16, 1, 2, 0, 1, 0},
                          {"qwen3-30b-a3b", 4, 0, 1, 1, 2, 0}, {"qwen3-30b-a3b", 4, 0, 1, 0, 1, 16}};
  std::vector<std::string> bn16;
  for (const std::string& name : MoeLayer::sm90_config_names())
    if (name.rfind("BN16_", 0) == 0) bn16.push_back(name);
  ASSERT_EQ(bn16.size(), 2u) << "the BN16 configs (4 and 2 consumers)";
  for (const Layer& l : layers) {
    MoeProblem full;
    ASSERT_OK(get_preset(l.preset, &full));
    MoeProblem p = scaled_preset(full, l.factor);
    p.max_tokens = 4;
    if (l.top_k > 0) p.routing.top_k = l.top_k;
    ASSERT_EQ(p.hidden_size % 64, 0) << p.name << ": direct GEMM1 needs H a multiple of 64";
    const uint64_t seed = testing::test_seed() + 31;
    const HostMoeWeights hw = make_random_weights(p, seed);
    const ref::ShardSpec spec{l.ep_rank, l.ep_size, l.tp_rank, l.tp_size};
    HostMoeWeights shard;
    ASSERT_OK(ref::shard_weights(p, hw, spec, &shard));
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    opt.ep_rank = l.ep_rank, opt.ep_size = l.ep_size, opt.tp_rank = l.tp_rank, opt.tp_size = l.tp_size;
    std::unique_ptr<MoeLayer> direct, planned;
    Status st = MoeLayer::create_dummy(p, seed, opt, &direct);
    FP4MOE_ASSERT_CREATED(st);
    opt.direct_gemm1 = false;
    ASSERT_OK(MoeLayer::create_dummy(p, seed, opt, &planned));
    const int E = p.num_experts(), K = p.top_k();
    const int local_begin = l.ep_rank * (E / l.ep_size), local_end = local_begin + E / l.ep_size;
    auto rng = make_rng(seed);
    std::uniform_int_distribution<int> pick(0, E - 1);
    struct Routing {
      std::string name;
      std::vector<int32_t> ids;
      int bad;  // ids out of range
    };
    std::vector<Routing> routings;
    std::vector<int32_t> ids;
    while (int(ids.size()) < K) {
      const int e = pick(rng);
      if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
    }
    routings.push_back({"distinct ids", ids, 0});
    if (K > 1) {
      std::vector<int32_t> rep = ids;
      rep.back() = rep.front();
      routings.push_back({"a repeated id", rep, 0});
      // (One id of a top-2 layer, two of the others: a valid one stays, so the output is not zero.)
      std::vector<int32_t> bad = ids;
      bad.back() = E + 5;
      if (K > 2) bad.front() = -1;
      routings.push_back({"ids out of range", bad, K > 2 ? 2 : 1});
      // (every id a valid local one in the layers without an expert shard: the output is not zero)
    }
    if (K >= 16) {
      routings.push_back({"one id 16 times", std::vector<int32_t>(size_t(K), ids[3]), 0});
      std::vector<int32_t> nine = ids;
      std::fill(nine.begin() + 7, nine.end(), ids[0]);
      routings.push_back({"one id 9 times", nine, 0});
    }
    if (l.ep_size > 1) {
      std::vector<int32_t> other, mine;
      for (int e = 0; e < E && int(other.size()) < K; ++e)
        if (e < local_begin || e >= local_end) other.push_back(e);
      for (int e = local_end - 1; e >= local_begin && int(mine.size()) < K; --e) mine.push_back(e);
      routings.push_back({"no local expert", other, 0});
      routings.push_back({"only local experts", mine, 0});
    }
    const int64_t H = p.hidden_size;
    DeviceBuffer<char> ws(std::max(direct->workspace_bytes(), planned->workspace_bytes()));
    for (const Routing& r : routings) {
      const std::string what = p.name + " ep " + std::to_string(l.ep_rank) + "/" + std::to_string(l.ep_size) +
                               " tp " + std::to_string(l.tp_rank) + "/" + std::to_string(l.tp_size) + ", " + r.name;
      const auto hidden = testing::random_hidden(rng, 1, H);
      std::vector<float> w(static_cast<size_t>(K));
      for (int k = 0; k < K; ++k) w[size_t(k)] = 0.3f + 0.1f * k;
      DeviceBuffer<uint16_t> dh(hidden);
      DeviceBuffer<int32_t> dids(r.ids);
      DeviceBuffer<float> dw(w);
      GpuRun b;
      std::vector<GpuRun> a(bn16.size());
      for (size_t c = 0; c <= bn16.size(); ++c) {
        MoeLayer* const layer = c < bn16.size() ? direct.get() : planned.get();
        GpuRun* const run = c < bn16.size() ? &a[c] : &b;
        if (c < bn16.size()) {
          ASSERT_OK(direct->force_sm90_config(bn16[c]));
          EXPECT_NE(direct->kernel_info(1).gemm1.find("direct"), std::string::npos)
              << what << " " << bn16[c] << ": " << direct->kernel_info(1).gemm1;
        } else {
          EXPECT_EQ(planned->kernel_info(1).gemm1.find("direct"), std::string::npos) << planned->kernel_info(1).gemm1;
        }
        DeviceBuffer<uint16_t> dout(static_cast<size_t>(H));  // poisoned (0xffff, a NaN)
        const ForwardArgs fa{
            .hidden = dh.get(), .topk_ids = dids.get(), .topk_weights = dw.get(), .num_tokens = 1, .out = dout.get()};
        ASSERT_OK(layer->forward(fa, ws.get(), ws.size(), nullptr));
        CUDA_ASSERT(cudaDeviceSynchronize());
        const Status errors = layer->check_device_errors(ws.get(), nullptr);
        if (r.bad == 0) {
          ASSERT_OK(errors);
        } else {
          EXPECT_NE(errors.message().find(std::to_string(r.bad) + " routed expert ids"), std::string::npos)
              << what << ": " << errors.to_string();
        }
        run->out = dout.download();
        run->ids = r.ids;
        run->weights = w;
      }
      for (size_t c = 0; c < bn16.size(); ++c)
        EXPECT_EQ(std::memcmp(a[c].out.data(), b.out.data(), b.out.size() * 2), 0)
            << what << ": direct GEMM1 with " << bn16[c] << " differs";
      bool any_local = false;
      for (int32_t id : r.ids) any_local |= id >= local_begin && id < local_end;
      if (!any_local) {
        for (uint16_t v : b.out) ASSERT_EQ(v & 0x7fff, 0) << what << ": a shard without the token's experts adds 0";
      } else {
        zero_out_of_range_pairs(&b, E);
        expect_matches_reference(p, shard, spec, hidden, b, 1, what);
      }
    }
  }
}

// Tail tiles (LayerOptions::tail_tiles): behind a token tile of 128 or more, an expert's last tile of
// at most 32 rows past full ones runs in a second, BN32 launch. Expert counts straddle the cut (128
// exactly, 129, 160 = 128 + 32, 161, 257, 288 = 256 + 32, one row), the rest random-ish; every config
// with tails, in both modes, must give the bits of the same config without tails and match the
// reference, and the plan must have cut exactly the expected tails.
TEST(MoeGpu, TailTilesGiveTheBitsOfWholeTiles) {
  FP4MOE_REQUIRE_GPU();
  for (Mode mode : {Mode::kW4A16, Mode::kW4A4}) {
    const int64_t T = 300;
    MoeProblem p;
    ASSERT_NO_FATAL_FAILURE(small_deepseek(mode, T, &p));
    const int E = p.num_experts(), K = p.top_k();
    ASSERT_EQ(K, 8);
    const uint64_t seed = testing::test_seed() + 41;
    const HostMoeWeights hw = make_random_weights(p, seed);
    auto rng = make_rng(seed);
    auto hidden = testing::random_hidden(rng, T, p.hidden_size);
    // Slot k of token t goes to expert k while t < limit[k]; other slots spread over experts 7..E-1
    // (distinct within a token: 7 (8t + k) mod (E - 7) differs for k != k').
    const int64_t limit[7] = {129, 160, 161, 288, 257, 128, 1};
    std::vector<int32_t> ids(size_t(T) * K);
    std::vector<float> w(ids.size());
    for (int64_t t = 0; t < T; ++t)
      for (int k = 0; k < K; ++k) {
        const bool pinned = k < 7 && t < limit[k];
        ids[t * K + k] = pinned ? k : 7 + int32_t((7 * (8 * t + k)) % (E - 7));
        w[t * K + k] = 0.1f + 0.02f * k;
      }
    // Tails behind 128-token tiles: 129 (1 row), 160 (32), 257 (1 past 256) and 288 (32); 161 keeps
    // its last tile (33 rows past 128), and 128 has none. Behind BN256: only 257 and 288.
    std::vector<int> counts(size_t(E), 0);
    for (int32_t id : ids) ++counts[size_t(id)];
    for (int e = 7; e < E; ++e) ASSERT_LE(counts[size_t(e)], 32) << "expert " << e;  // (no other tails)
    auto expected_tails = [](int bn) { return bn == 128 ? 4 : bn == 256 ? 2 : 0; };
    for (const std::string& name : MoeLayer::sm90_config_names()) {
      const auto cfg = sm90::config_by_name(name);
      ASSERT_TRUE(cfg.has_value()) << name;
      if (cfg->tile_tokens < 128) continue;
      GpuRun runs[2];
      for (bool tails : {false, true}) {
        LayerOptions opt;
        opt.path = KernelPath::kSm90;
        opt.tail_tiles = tails;
        std::unique_ptr<MoeLayer> layer;
        Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
        FP4MOE_ASSERT_CREATED(st);
        ASSERT_OK(layer->force_sm90_config(name));
        const std::string gemm1 = layer->kernel_info(T).gemm1;
        EXPECT_EQ(gemm1.find(", tail BN32") != std::string::npos, tails) << gemm1;
        run_forward(*layer, hidden, {}, T, &runs[tails], &ids, &w);
        const std::string what = std::string(to_string(mode)) + " " + name + (tails ? " with tails" : " whole tiles");
        EXPECT_EQ(runs[tails].tail_tiles, tails ? expected_tails(cfg->tile_tokens) : 0) << what;
        expect_matches_reference(p, hw, {}, hidden, runs[tails], T, what);
      }
      EXPECT_EQ(std::memcmp(runs[0].out.data(), runs[1].out.data(), runs[0].out.size() * 2), 0)
          << to_string(mode) << " " << name << ": tails change the bits";
    }
  }
}

// Tail tiles on other layers and on an expert-parallel shard: gpt-oss-20b (biases, the gpt-oss
// activation, MXFP4 weights, top-4), Llama-4-Scout (top-1, router weight on the input) and
// DeepSeek-R1 as expert-parallel rank 1 of 2, w4a16, behind the 4-consumer BN128. Experts b..b+6
// (b: the shard's first local expert) get 129, 160, 161, 288, 257, 128 and 1 rows, laid out
// slot-major (each run of one expert is at most T pairs long, so it never meets a token twice); the
// other slots of a token go to distinct local experts from b + 7 on. Tails and whole tiles must
// give the same bits and match the reference, with the tails the plan should cut (4).
TEST(MoeGpu, TailTilesOnOtherLayersAndAnExpertShard) {
  FP4MOE_REQUIRE_GPU();
  struct TailCase {
    const char* preset;
    int factor;
    int64_t tokens;
    int ep_rank, ep_size;
  };
  const int32_t pinned[7] = {129, 160, 161, 288, 257, 128, 1};
  for (const TailCase& c : {TailCase{"gpt-oss-20b", 8, 300, 0, 1}, TailCase{"llama4-scout", 16, 1200, 0, 1},
                            TailCase{"deepseek-r1", 16, 300, 1, 2}}) {
    MoeProblem full;
    ASSERT_OK(get_preset(c.preset, &full));
    MoeProblem p = scaled_preset(full, c.factor);
    const int64_t T = c.tokens;
    p.max_tokens = T;
    const int E = p.num_experts(), K = p.top_k();
    const ref::ShardSpec spec{c.ep_rank, c.ep_size, 0, 1};
    const ref::ExpertRange local = ref::local_experts(E, c.ep_rank, c.ep_size);
    const int b = local.begin, n_local = local.size();
    ASSERT_GE(n_local - 7, K) << c.preset;
    std::vector<int32_t> ids(static_cast<size_t>(T * K), -1);
    int64_t q = 0;  // slot-major position: slot q / T of token q % T
    for (int j = 0; j < 7; ++j)
      for (int32_t r = 0; r < pinned[j]; ++r, ++q) ids[size_t((q % T) * K + q / T)] = b + j;
    ASSERT_LE(q, T * K) << c.preset;
    for (int64_t t = 0; t < T; ++t) {
      int j = 0;
      for (int k = 0; k < K; ++k)
        if (ids[size_t(t * K + k)] < 0) ids[size_t(t * K + k)] = b + 7 + int32_t((t + j++) % (n_local - 7));
    }
    std::vector<float> w(ids.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f + 0.02f * float(i % K);
    std::vector<int> counts(size_t(E), 0);
    for (int32_t id : ids) ++counts[size_t(id)];
    for (int e = b + 7; e < b + n_local; ++e) ASSERT_LE(counts[size_t(e)], 32) << c.preset << " expert " << e;
    const uint64_t seed = testing::test_seed() + 43;
    const HostMoeWeights hw = make_random_weights(p, seed);
    HostMoeWeights shard;
    ASSERT_OK(ref::shard_weights(p, hw, spec, &shard));
    auto rng = make_rng(seed);
    auto hidden = testing::random_hidden(rng, T, p.hidden_size);
    GpuRun runs[2];
    for (bool tails : {false, true}) {
      LayerOptions opt;
      opt.path = KernelPath::kSm90;
      opt.tail_tiles = tails;
      opt.ep_rank = c.ep_rank, opt.ep_size = c.ep_size;
      std::unique_ptr<MoeLayer> layer;
      Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
      FP4MOE_ASSERT_CREATED(st);
      ASSERT_OK(layer->force_sm90_config("BN128_C4_S5_x1"));
      run_forward(*layer, hidden, {}, T, &runs[tails], &ids, &w);
      const std::string what = std::string(c.preset) + (tails ? " with tails" : " whole tiles");
      EXPECT_EQ(runs[tails].tail_tiles, tails ? 4 : 0) << what;
      expect_matches_reference(p, shard, spec, hidden, runs[tails], T, what);
    }
    EXPECT_EQ(std::memcmp(runs[0].out.data(), runs[1].out.data(), runs[0].out.size() * 2), 0)
        << c.preset << ": tails change the bits";
  }
}

// GEMM1/GEMM2 overlap (LayerOptions::gemm_overlap): at decode token counts GEMM2 starts a token tile
// once GEMM1 has counted all its units of it in. The same bits as without, matching the reference,
// one forward at a time; then 24 forwards of varying T back to back on one non-blocking stream and
// one workspace, with precomputed routing (no routing kernel between forwards, so each forward's plan
// follows the previous finalize by programmatic dependent launch), each output against its
// single-forward bits, and the last forward's per-tile counts exactly GEMM1's units. DeepSeek-R1/4
// (GEMM1 16 units), gpt-oss-20b/2 (biases, MXFP4; 45 units) and Qwen3-30B/4 (6 units: at T=6 the
// 4-consumer tile's second m-block has two idle consumers, which must not count). Two tests: the
// single forwards alone (OneForwardAtATime), and with the forwards back to back after them
// (AlsoBackToBack), so that a sanitizer run can take the short one (racecheck took 58 s for both
// parts on an H200 in session 20). With `config`, both layers run that config (the small BN32's
// overlap, session 40) instead of the default choice (BN16 at these T). `Ts` are the three token
// counts; with `expert_pool` > 0 every token picks its experts among the first expert_pool only, so
// that tiles hold many rows (BN32 tiles of 9-32 rows and experts of two tiles, wgmma N of 16 and 32).
void check_gemm_overlap(bool back_to_back, const std::string& config = "", std::array<int64_t, 3> Ts = {1, 3, 6},
                        int expert_pool = 0) {
  struct Case {
    const char* preset;
    int factor;
  };
  for (const Case c : {Case{"deepseek-r1", 4}, Case{"gpt-oss-20b", 2}, Case{"qwen3-30b-a3b", 4}}) {
    SCOPED_TRACE(config.empty() ? std::string("default configs") : config);
    MoeProblem full;
    ASSERT_OK(get_preset(c.preset, &full));
    MoeProblem p = scaled_preset(full, c.factor);
    p.max_tokens = std::max<int64_t>(8, *std::max_element(Ts.begin(), Ts.end()));
    const int E = p.num_experts(), K = p.top_k();
    ASSERT_TRUE(expert_pool == 0 || (expert_pool >= K && expert_pool <= E)) << expert_pool;
    const uint64_t seed = testing::test_seed() + 53;
    const HostMoeWeights hw = make_random_weights(p, seed);
    std::unique_ptr<MoeLayer> layers[2];
    for (bool overlap : {false, true}) {
      LayerOptions opt;
      opt.path = KernelPath::kSm90;
      opt.gemm_overlap = overlap;
      Status st = MoeLayer::create_dummy(p, seed, opt, &layers[overlap]);
      FP4MOE_ASSERT_CREATED(st);
      ASSERT_OK(layers[overlap]->force_sm90_config(config));
    }
    auto rng = make_rng(seed);
    std::uniform_int_distribution<int> pick(0, (expert_pool > 0 ? expert_pool : E) - 1);
    std::vector<uint16_t> hidden[3];
    std::vector<int32_t> ids[3];
    std::vector<float> wts[3];
    std::vector<uint16_t> single[3];
    for (int i = 0; i < 3; ++i) {
      const int64_t T = Ts[i];
      const std::string what = std::string(c.preset) + " T=" + std::to_string(T);
      const std::string gemm2 = layers[1]->kernel_info(T).gemm2;
      ASSERT_NE(gemm2.find("overlaps GEMM1"), std::string::npos) << what << ": " << gemm2;
      EXPECT_EQ(layers[0]->kernel_info(T).gemm2.find("overlaps GEMM1"), std::string::npos) << what;
      // (16- and 32-token GEMM2 tiles, with the overlap or without: dynamically taken units either way)
      if (!config.empty()) {
        EXPECT_NE(gemm2.find(config + ","), std::string::npos) << what << ": " << gemm2;
      }
      EXPECT_NE(gemm2.find("dynamic units"), std::string::npos) << what << ": " << gemm2;
      EXPECT_NE(layers[0]->kernel_info(T).gemm2.find("dynamic units"), std::string::npos) << what;
      hidden[i] = testing::random_hidden(rng, T, p.hidden_size);
      ids[i].resize(size_t(T) * K);
      wts[i].resize(ids[i].size());
      for (int64_t t = 0; t < T; ++t)
        for (int k = 0; k < K; ++k) {
          int e;
          do e = pick(rng);
          while (std::find(&ids[i][t * K], &ids[i][t * K + k], e) != &ids[i][t * K + k]);
          ids[i][t * K + k] = e;
          wts[i][t * K + k] = 0.05f + 0.1f * float(k);
        }
      GpuRun runs[2];
      for (int o = 0; o < 2; ++o) run_forward(*layers[o], hidden[i], {}, T, &runs[o], &ids[i], &wts[i]);
      expect_matches_reference(p, hw, {}, hidden[i], runs[1], T, what + " overlapped");
      EXPECT_EQ(std::memcmp(runs[0].out.data(), runs[1].out.data(), runs[0].out.size() * 2), 0)
          << what << ": the overlap changes the bits";
      single[i] = runs[1].out;
    }
    if (!back_to_back) continue;
    // Back to back: forward f runs T = Ts[f % 3] into its own output, without a sync in between.
    constexpr int kForwards = 24;
    DeviceBuffer<char> ws(layers[1]->workspace_bytes());
    std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> dh, douts;
    std::vector<std::unique_ptr<DeviceBuffer<int32_t>>> dids;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> dw;
    for (int i = 0; i < 3; ++i) {
      dh.push_back(std::make_unique<DeviceBuffer<uint16_t>>(hidden[i]));
      dids.push_back(std::make_unique<DeviceBuffer<int32_t>>(ids[i]));
      dw.push_back(std::make_unique<DeviceBuffer<float>>(wts[i]));
    }
    for (int f = 0; f < kForwards; ++f)
      douts.push_back(std::make_unique<DeviceBuffer<uint16_t>>(size_t(Ts[f % 3] * p.hidden_size)));
    cudaStream_t stream;
    CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int f = 0; f < kForwards; ++f) {
      ForwardArgs a;
      a.hidden = dh[f % 3]->get();
      a.topk_ids = dids[f % 3]->get();
      a.topk_weights = dw[f % 3]->get();
      a.num_tokens = Ts[f % 3];
      a.out = douts[size_t(f)]->get();
      ASSERT_OK(layers[1]->forward(a, ws.get(), ws.size(), stream));
    }
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    CUDA_ASSERT(cudaStreamDestroy(stream));
    ASSERT_OK(layers[1]->check_device_errors(ws.get(), nullptr));
    for (int f = 0; f < kForwards; ++f) {
      std::vector<uint16_t> out = douts[size_t(f)]->download();
      out.resize(single[f % 3].size());
      EXPECT_EQ(std::memcmp(out.data(), single[f % 3].data(), out.size() * 2), 0)
          << c.preset << " back-to-back forward " << f << " (T=" << Ts[f % 3] << ")";
    }
    // The last forward's counts: every token tile got exactly GEMM1's units, no more (an idle
    // consumer counting would let GEMM2 read a tile before its rows are in).
    const WorkspaceLayout l = WorkspaceLayout::make(p.max_tokens, K, layers[1]->num_local_experts(), p.hidden_size,
                                                    layers[1]->local_intermediate_size());
    int32_t tiles = 0;
    CUDA_ASSERT(cudaMemcpy(&tiles, ws.get() + l.tile_start + 4 * size_t(layers[1]->num_local_experts()), 4,
                           cudaMemcpyDeviceToHost));
    ASSERT_GT(tiles, 0);
    std::vector<int32_t> done(static_cast<size_t>(tiles));
    CUDA_ASSERT(cudaMemcpy(done.data(), ws.get() + l.tile_done, 4 * done.size(), cudaMemcpyDeviceToHost));
    const layout::GemmWeightShape g1{2 * layers[1]->local_intermediate_size(), p.hidden_size, true};
    for (int32_t t = 0; t < tiles; ++t)
      EXPECT_EQ(done[size_t(t)], int32_t(g1.m_units())) << c.preset << " token tile " << t;
  }
}

TEST(MoeGpu, GemmOverlapGivesTheSameBitsOneForwardAtATime) {
  FP4MOE_REQUIRE_GPU();
  check_gemm_overlap(false);
  check_gemm_overlap(false, "BN32_C4_S5_x1_db_c2");
}

TEST(MoeGpu, GemmOverlapGivesTheSameBitsAlsoBackToBack) {
  FP4MOE_REQUIRE_GPU();
  check_gemm_overlap(true);
  check_gemm_overlap(true, "BN32_C4_S5_x1_db_c2");
}

// The BN32 overlap with tiles of many rows (session 40's review: the tests above give it one tile of
// at most 6 rows per expert): every token on 16 experts, T = 24 / 40 / 64, so 6-32 rows per expert
// for gpt-oss-20b/2 (top-4) and 12-32 for the top-8 presets, some experts past 32 (two tiles), single
// forwards and back to back. (Written in session 40 after its last GPU run: not yet run on a GPU.)
TEST(MoeGpu, GemmOverlapOnManyRowBn32TilesGivesTheSameBits) {
  FP4MOE_REQUIRE_GPU();
  check_gemm_overlap(true, "BN32_C4_S5_x1_db_c2", {24, 40, 64}, 16);
}

// The prefill tiles (48 tokens or more) take their work units dynamically, from the workspace's
// counters (next_unit: GEMM2's, GEMM1's), which each forward's plan zeroes: forwards of varying T
// back to back on one non-blocking stream and one workspace, without a sync in between, each
// against its own single-forward bits. Qwen3-30B/4 (128 experts, top-8): T = 2048 / 900 / 600 / 8
// run BN128 with BN32 tails, BN80, BN48 and the decode tiles (128, 57, 38 and 1 rows per expert).
TEST(MoeGpu, PrefillTilesBackToBackGiveTheBitsOfSingleForwards) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem full;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &full));
  MoeProblem p = scaled_preset(full, 4);
  p.max_tokens = 2048;
  const uint64_t seed = testing::test_seed() + 61;
  const HostMoeWeights hw = make_random_weights(p, seed);  // create_dummy's weights, on the host
  LayerOptions opt;
  opt.path = KernelPath::kSm90;
  std::unique_ptr<MoeLayer> layer;
  Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
  FP4MOE_ASSERT_CREATED(st);
  auto rng = make_rng(seed);
  constexpr int kSizes = 4;
  const int64_t Ts[kSizes] = {2048, 900, 600, 8};
  std::vector<uint16_t> hidden[kSizes], single[kSizes];
  std::vector<float> logits[kSizes];
  for (int i = 0; i < kSizes; ++i) {
    const int64_t T = Ts[i];
    const std::string gemm1 = layer->kernel_info(T).gemm1, gemm2 = layer->kernel_info(T).gemm2;
    if (T > 8) {
      EXPECT_NE(gemm1.find("dynamic units"), std::string::npos) << "T=" << T << ": " << gemm1;
    }
    EXPECT_NE(gemm2.find("dynamic units"), std::string::npos) << "T=" << T << ": " << gemm2;
    hidden[i] = testing::random_hidden(rng, T, p.hidden_size);
    logits[i] = testing::random_logits(rng, T, p.num_experts());
    GpuRun run;
    run_forward(*layer, hidden[i], logits[i], T, &run);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_GT(testing::abs_sum_bf16(run.out), 0.0) << "T=" << T << ": all zero";
    // Each single forward against the fp64 reference too: the bits below compare the fast path
    // with itself, which a deterministic scheduling error would pass.
    expect_matches_reference(p, hw, {}, hidden[i], run, T, "prefill tiles T=" + std::to_string(T));
    single[i] = run.out;
  }
  EXPECT_NE(layer->kernel_info(2048).gemm1.find(", tail BN32"), std::string::npos) << layer->kernel_info(2048).gemm1;
  constexpr int kForwards = 16;
  DeviceBuffer<char> ws(layer->workspace_bytes());
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> dh, douts;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dl;
  for (int i = 0; i < kSizes; ++i) {
    dh.push_back(std::make_unique<DeviceBuffer<uint16_t>>(hidden[i]));
    dl.push_back(std::make_unique<DeviceBuffer<float>>(logits[i]));
  }
  for (int f = 0; f < kForwards; ++f) {
    douts.push_back(std::make_unique<DeviceBuffer<uint16_t>>(size_t(Ts[f % kSizes] * p.hidden_size)));
    CUDA_ASSERT(cudaMemset(douts.back()->get(), 0xff, size_t(Ts[f % kSizes] * p.hidden_size) * 2));  // poisoned
  }
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int f = 0; f < kForwards; ++f) {
    ForwardArgs a;
    a.hidden = dh[f % kSizes]->get();
    a.router_logits = dl[f % kSizes]->get();
    a.num_tokens = Ts[f % kSizes];
    a.out = douts[size_t(f)]->get();
    ASSERT_OK(layer->forward(a, ws.get(), ws.size(), stream));
  }
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  CUDA_ASSERT(cudaStreamDestroy(stream));
  ASSERT_OK(layer->check_device_errors(ws.get(), nullptr));
  for (int f = 0; f < kForwards; ++f) {
    std::vector<uint16_t> out = douts[size_t(f)]->download();
    out.resize(single[f % kSizes].size());
    EXPECT_EQ(std::memcmp(out.data(), single[f % kSizes].data(), out.size() * 2), 0)
        << "back-to-back forward " << f << " (T=" << Ts[f % kSizes] << ")";
  }
}

// The routing plan on both of its paths (one CTA below kPlanMultiMinPairs routed pairs, kPlanCtas CTAs
// in three launches from there) against a host plan: per-expert counts, segment starts, token-tile and
// tail-tile prefixes and the bad-id count exactly; every local pair a distinct row inside its
// expert's segment, row_pair its inverse, -1 for the others. Random ids over an expert-parallel
// shard (local experts 40..199 of 256), with bad ids, on a workspace poisoned with 0xFF.
TEST(MoeGpu, PlanOnOneAndManyCtasAndWithThePermuteMatchesTheHostPlan) {
  FP4MOE_REQUIRE_GPU();
  const int K = 8, tile = 128, tail_rows = 32, H = 2048;
  auto rng = make_rng(testing::test_seed() + 53);
  // An expert shard of 160 of 256 experts, and 509 of 512 (every warp of the scans carries).
  struct Shard {
    int E, expert_begin, E_local;
  };
  for (const Shard shard : {Shard{256, 40, 160}, Shard{512, 3, 509}}) {
    const int E = shard.E, expert_begin = shard.expert_begin, E_local = shard.E_local;
    // T <= kPlanPermuteMaxPairs / K: the plan and the permute in one kernel (launch_plan_and_permute,
    // a grid of pairs x 2 column ranges at H = 2048), whose rows follow the pair order in each segment.
    for (int64_t T : {int64_t(1), int64_t(3), kPlanPermuteMaxPairs / K, kPlanPermuteMaxPairs / K + 1, int64_t(37),
                      int64_t(1024), kPlanMultiMinPairs / K - 1, kPlanMultiMinPairs / K, int64_t(9000)}) {
      const int64_t pairs = T * K;
      const bool fused = pairs <= kPlanPermuteMaxPairs;
      const WorkspaceLayout l = WorkspaceLayout::make(T, K, E_local, H, 128);
      DeviceBuffer<char> ws(l.total);
      CUDA_ASSERT(cudaMemset(ws.get(), 0x7f, l.total));  // (not -1: pair_row of a skipped pair must be written)
      DeviceBuffer<uint16_t> hidden(size_t(T) * H);
      CUDA_ASSERT(cudaMemset(hidden.get(), 0, 2 * size_t(T) * H));
      std::vector<int32_t> ids(static_cast<size_t>(pairs));
      std::uniform_int_distribution<int> pick(0, E - 1);
      for (auto& id : ids) id = pick(rng);
      for (int64_t i = fused ? 1 : 0; i < pairs; i += fused ? 5 : 997) ids[size_t(i)] = i % 2 ? -3 : E;  // bad ids
      if (fused && pairs > 2) ids[2] = ids[0] = expert_begin + 7;  // two pairs of one expert
      std::vector<float> weights(ids.size());
      for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.25f + float(i);
      CUDA_ASSERT(cudaMemcpy(ws.get() + l.topk_ids, ids.data(), 4 * ids.size(), cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(ws.get() + l.topk_weights, weights.data(), 4 * weights.size(), cudaMemcpyHostToDevice));
      PermuteParams pp;
      pp.num_tokens = T;
      pp.top_k = K;
      pp.num_experts = E;
      pp.expert_begin = expert_begin;
      pp.num_local_experts = E_local;
      pp.tile_tokens = tile;
      pp.tail_rows = tail_rows;
      pp.layout = l;
      pp.ws = WorkspacePtrs::from(ws.get(), l);
      pp.hidden = hidden.get();
      pp.hidden_size = H;
      pp.inter_local = 128;
      pp.plan_is_first = true;
      if (fused) {
        ASSERT_OK(launch_plan_and_permute(pp, nullptr));
      } else {
        ASSERT_OK(launch_plan(pp, nullptr));
      }
      CUDA_ASSERT(cudaDeviceSynchronize());
      auto download = [&](size_t offset, size_t n) {
        std::vector<int32_t> v(n);
        EXPECT_EQ(cudaMemcpy(v.data(), ws.get() + offset, 4 * n, cudaMemcpyDeviceToHost), cudaSuccess);
        return v;
      };
      const auto counts = download(l.counts, E_local + 1), seg = download(l.seg_start, E_local + 1);
      const auto tiles = download(l.tile_start, E_local + 1), tails = download(l.tail_start, E_local + 1);
      const auto pair_row = download(l.pair_row, size_t(pairs)), row_pair = download(l.row_pair, size_t(l.rows_cap));
      // The host plan.
      std::vector<int32_t> want(E_local, 0);
      int32_t bad = 0;
      for (int32_t id : ids) {
        if (id < 0 || id >= E) ++bad;
        else if (id >= expert_begin && id < expert_begin + E_local) ++want[size_t(id - expert_begin)];
      }
      const auto row_weight = download(l.row_weight, size_t(l.rows_cap));
      const std::string what = "E_local=" + std::to_string(E_local) + " T=" + std::to_string(T) +
                               (fused ? " (with the permute)" : pairs >= kPlanMultiMinPairs ? " (many CTAs)" : " (one CTA)");
      int32_t row = 0, tile_n = 0, tail_n = 0;
      for (int e = 0; e < E_local; ++e) {
        const int32_t c = want[size_t(e)];
        const int32_t tail = c > tile && c % tile > 0 && c % tile <= tail_rows;
        ASSERT_EQ(counts[size_t(e)], c) << what << " expert " << e;
        ASSERT_EQ(seg[size_t(e)], row) << what << " expert " << e;
        ASSERT_EQ(tiles[size_t(e)], tile_n) << what << " expert " << e;
        ASSERT_EQ(tails[size_t(e)], tail_n) << what << " expert " << e;
        row += (c + 7) / 8 * 8;
        tile_n += (c + tile - 1) / tile - tail;
        tail_n += tail;
      }
      EXPECT_EQ(seg[E_local], row) << what;
      EXPECT_EQ(tiles[E_local], tile_n) << what;
      EXPECT_EQ(tails[E_local], tail_n) << what;
      EXPECT_EQ(counts[E_local], bad) << what << ": bad ids";
      std::vector<int32_t> used(want.size(), 0);
      std::vector<char> taken(size_t(row), 0);
      for (int64_t i = 0; i < pairs; ++i) {
        const int32_t id = ids[size_t(i)], r = pair_row[size_t(i)];
        if (id < expert_begin || id >= expert_begin + E_local) {
          ASSERT_EQ(r, -1) << what << " pair " << i;
          continue;
        }
        const int e = id - expert_begin;
        ASSERT_GE(r, seg[size_t(e)]) << what << " pair " << i;
        ASSERT_LT(r, seg[size_t(e)] + want[size_t(e)]) << what << " pair " << i;
        ASSERT_FALSE(taken[size_t(r)]) << what << " row " << r << " given twice";
        if (fused) {
          ASSERT_EQ(r, seg[size_t(e)] + used[size_t(e)]) << what << " pair " << i << ": not in pair order";
        }
        taken[size_t(r)] = 1;
        ASSERT_EQ(row_pair[size_t(r)], i) << what << " row " << r;
        if (fused) {
          float w;
          std::memcpy(&w, &row_weight[size_t(r)], 4);
          ASSERT_EQ(w, weights[size_t(i)]) << what << " row " << r << ": row_weight";
        }
        ++used[size_t(e)];
      }
      EXPECT_EQ(used, want) << what;
    }
  }
}

// This GPU's SM count (select_split_k's input), 0 if it cannot be read.
int sm_count() {
  int device = 0, n = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  return n;
}

// LayerOptions::split_k: the decode config cuts each tile's K over otherwise idle SMs. The cases are
// chosen so that GEMM2 always splits and GEMM1 at T=1 (checked with select_split_k on this GPU's SM
// count); the result must match the reference and be the same bits run to run.
TEST(MoeGpu, SplitKMatchesTheReferenceAndIsDeterministic) {
  FP4MOE_REQUIRE_GPU();
  const int num_sms = sm_count();
  ASSERT_GT(num_sms, 0) << "cannot read the GPU's SM count";
  struct SplitCase {
    const char* preset;
    int factor;
    Mode mode;
  };
  for (const SplitCase& c : {SplitCase{"llama4-scout", 4, Mode::kW4A16}, SplitCase{"llama4-scout", 4, Mode::kW4A4},
                             SplitCase{"gpt-oss-120b", 4, Mode::kW4A16}}) {
    MoeProblem full;
    ASSERT_OK(get_preset(c.preset, &full));
    MoeProblem p = scaled_preset(full, c.factor);
    p.mode = c.mode;
    p.max_tokens = 8;
    const uint64_t seed = testing::test_seed() ^ 0x5b17;
    const HostMoeWeights hw = make_random_weights(p, seed);
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    opt.split_k = true;
    std::unique_ptr<MoeLayer> layer;
    Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
    FP4MOE_ASSERT_CREATED(st);
    const std::string bn16 = MoeLayer::sm90_config_names().front();
    ASSERT_EQ(bn16.rfind("BN16_", 0), 0u) << bn16;
    ASSERT_OK(layer->force_sm90_config(bn16));
    auto rng = make_rng(seed);
    for (int64_t T : {1, 3}) {
      sm90::ConfigInput in;
      in.num_tokens = T;
      in.top_k = p.top_k();
      in.num_local_experts = layer->num_local_experts();
      in.num_sms = num_sms;
      const sm90::Sm90Config cfg = *sm90::config_by_name(bn16);
      const int64_t inter = layer->local_intermediate_size();
      const layout::GemmWeightShape g1{2 * inter, p.hidden_size, true}, g2{p.hidden_size, inter, false};
      const std::string what = p.name + " " + to_string(c.mode) + " T=" + std::to_string(T);
      // (gpt-oss at T=3 has 12 routed pairs: GEMM1's 72 tiles are more than half the SMs.)
      if (T == 1) {
        EXPECT_GT(sm90::select_split_k(in, cfg, g1.m_units(), g1.k_units()), 1) << what << ": GEMM1 does not split";
      }
      EXPECT_GT(sm90::select_split_k(in, cfg, g2.m_units(), g2.k_units()), 1) << what << ": GEMM2 does not split";
      auto hidden = testing::random_hidden(rng, T, p.hidden_size);
      auto logits = testing::random_logits(rng, T, p.num_experts());
      GpuRun run, again;
      run_forward(*layer, hidden, logits, T, &run);
      expect_matches_reference(p, hw, {}, hidden, run, T, what + " split-K");
      run_forward(*layer, hidden, logits, T, &again);
      EXPECT_EQ(std::memcmp(run.out.data(), again.out.data(), run.out.size() * 2), 0) << what << ": not deterministic";
    }
  }
}

// GEMM2 over canonical K ranges (workspace.h's k_range_chunks: a local intermediate size of more
// than 64 chunks of 64, as Llama-4's and Mixtral's): every GEMM2 kernel sums K range by range, so the
// default split at the ranges where GEMM2 has few tiles (LayerOptions::range_split,
// sm90::select_range_split) gives the bits of no split, every compiled config (forced; BN16 split
// where it has few tiles, the others summing the ranges in the kernel; and every config of a layer
// that never splits, so that the BN16 kernels sum ranges in the kernel too) gives the default's,
// the tail launch of BN128 (150 rows on each expert: a 22-row tail) too, and a token's bits do not
// depend on its batch. Layers (H 256): Mixtral-like (top-2) with I 16832 (263 chunks: four ranges of
// 56 and one of 39, the middle ones added by reductions in L2, the last stage of a four-chunk config
// partial and of a two-chunk one odd) and Mixtral's own I 14336 (four ranges of 56), and
// Llama-4-like (I 8192: two ranges of 64; top-1, router weight on the input), both modes. Each
// against the reference at T = 1 and 40. One instance per layer and mode (e.g.
// .../mixtral_8x7b_I16832_w4a16), and the default configs apart from the every-config sweep, so
// that a sanitizer can run a part: under racecheck the six instances of the whole did not finish in
// 330 s (session 26), nor one in 170 s (session 27); the default part is 13 of an instance's 113
// forwards (all six under racecheck in 126 s, session 31).
struct RangeLayer {
  const char* preset;
  int64_t inter;
  int ranges;
};
constexpr RangeLayer kRangeLayers[] = {
    {"mixtral-8x7b", 16832, 5}, {"mixtral-8x7b", 14336, 4}, {"llama4-scout", 8192, 2}};

class Gemm2OverKRangesTest : public ::testing::TestWithParam<std::tuple<RangeLayer, Mode>> {
 protected:
  // The layer with the default range split and one with it off (same seed, same weights), and the
  // batches: T = 1, 6, 40, 150 (every token on the same experts, 150 rows each: the BN128 configs run
  // a full tile and a 22-row tail in the BN32 tail launch, its range totals in the slots the main
  // launch used) and 300; run_default gives a batch's default output (base).
  struct Batch {
    int64_t T = 0;
    std::vector<uint16_t> hidden;
    std::vector<float> logits;
    std::vector<int32_t> ids;  // precomputed routing (T=150 only)
    std::vector<float> w;
    std::string what;
    const std::vector<int32_t>* id_arg() const { return ids.empty() ? nullptr : &ids; }
    const std::vector<float>* w_arg() const { return w.empty() ? nullptr : &w; }
  };
  void SetUp() override {
    FP4MOE_REQUIRE_GPU();
    const RangeLayer& c = std::get<0>(GetParam());
    ASSERT_OK(get_preset(c.preset, &p_));
    p_.name = std::string(c.preset) + "/ranges I=" + std::to_string(c.inter);
    p_.hidden_size = 256;
    p_.intermediate_size = c.inter;
    p_.mode = std::get<1>(GetParam());
    p_.max_tokens = kBatchT;
    ASSERT_TRUE(gemm2_has_ranges(p_.intermediate_size));
    seed_ = testing::test_seed() + 41;
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    Status st = MoeLayer::create_dummy(p_, seed_, opt, &layer_);
    FP4MOE_ASSERT_CREATED(st);
    opt.range_split = false;
    ASSERT_OK(MoeLayer::create_dummy(p_, seed_, opt, &unsplit_));
    what0_ = p_.name + " " + to_string(p_.mode);
    // (at T=1 GEMM2 has at most 2 experts x 4 units / 2 consumers = 4 narrowed tiles: it splits on
    // any GPU of 12 SMs or more)
    EXPECT_NE(layer_->kernel_info(1).gemm2.find("split at them"), std::string::npos)
        << what0_ << ": " << layer_->kernel_info(1).gemm2;
    EXPECT_EQ(unsplit_->kernel_info(1).gemm2.find("split at them"), std::string::npos)
        << what0_ << ": " << unsplit_->kernel_info(1).gemm2;
    const std::string ranges = "K in " + std::to_string(c.ranges) + " ranges";
    EXPECT_NE(unsplit_->kernel_info(1).gemm2.find(ranges), std::string::npos)
        << what0_ << ": " << unsplit_->kernel_info(1).gemm2;
    auto rng = make_rng(seed_);
    const int64_t H = p_.hidden_size, E = p_.num_experts();
    for (int64_t T : {int64_t(1), int64_t(6), int64_t(40), int64_t(150), kBatchT}) {
      Batch b;
      b.T = T;
      b.hidden = testing::random_hidden(rng, T, H);
      b.logits = testing::random_logits(rng, T, E);
      const bool same_experts = T == 150;
      if (same_experts) {
        b.ids.resize(size_t(T) * p_.top_k());
        b.w.resize(b.ids.size());
        for (int64_t t = 0; t < T; ++t)
          for (int k = 0; k < p_.top_k(); ++k) {
            b.ids[t * p_.top_k() + k] = (3 * k + 1) % int(E);
            b.w[t * p_.top_k() + k] = 0.4f + 0.1f * k;
          }
      }
      b.what = what0_ + " T=" + std::to_string(T) + (same_experts ? " same experts" : "");
      batches_.push_back(std::move(b));
    }
  }
  // The default layer's output for b (the default config), non-zero.
  void run_default(const Batch& b, GpuRun* base) {
    ASSERT_OK(layer_->force_sm90_config(""));
    run_forward(*layer_, b.hidden, b.logits, b.T, base, b.id_arg(), b.w_arg());
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_GT(testing::abs_sum_bf16(base->out), 0.0) << b.what << ": all zero";
  }
  static constexpr int64_t kBatchT = 300;
  MoeProblem p_;
  uint64_t seed_ = 0;
  std::unique_ptr<MoeLayer> layer_, unsplit_;
  std::string what0_;
  std::vector<Batch> batches_;
};

// The default configs: split at the ranges or not, the same bits; against the reference at T = 1 and
// 40; a token's bits independent of its batch.
TEST_P(Gemm2OverKRangesTest, GivesTheSameBitsSplitOrNotAndInEveryBatch) {
  const HostMoeWeights hw = make_random_weights(p_, seed_);
  for (const Batch& b : batches_) {
    GpuRun base, off;
    run_default(b, &base);
    ASSERT_FALSE(HasFatalFailure());
    if (b.T == 1 || b.T == 40) expect_matches_reference(p_, hw, {}, b.hidden, base, b.T, b.what + " default");
    run_forward(*unsplit_, b.hidden, b.logits, b.T, &off, b.id_arg(), b.w_arg());
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(std::memcmp(off.out.data(), base.out.data(), base.out.size() * 2), 0)
        << b.what << ": range_split off (" << unsplit_->kernel_info(b.T).gemm2 << ") against on ("
        << layer_->kernel_info(b.T).gemm2 << ")";
    if (b.T != kBatchT) continue;
    // The batch's first tokens alone, with a few more, and with the batch's routing given.
    expect_first_tokens_match_the_batch(*layer_, b.hidden, b.logits, base, b.T, {1, 9}, b.what);
  }
}

// Every compiled config, forced, in both layers, gives the default's bits.
TEST_P(Gemm2OverKRangesTest, GivesTheDefaultBitsInEveryConfig) {
  for (const Batch& b : batches_) {
    GpuRun base;
    run_default(b, &base);
    ASSERT_FALSE(HasFatalFailure());
    for (MoeLayer* l : {layer_.get(), unsplit_.get()}) {
      for (const std::string& name : MoeLayer::sm90_config_names()) {
        ASSERT_OK(l->force_sm90_config(name));
        GpuRun run;
        run_forward(*l, b.hidden, b.logits, b.T, &run, b.id_arg(), b.w_arg());
        ASSERT_FALSE(HasFatalFailure());
        EXPECT_EQ(std::memcmp(run.out.data(), base.out.data(), run.out.size() * 2), 0)
            << b.what << " " << l->kernel_info(b.T).gemm2;
      }
      ASSERT_OK(l->force_sm90_config(""));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, Gemm2OverKRangesTest,
                         ::testing::Combine(::testing::ValuesIn(kRangeLayers),
                                            ::testing::Values(Mode::kW4A16, Mode::kW4A4)),
                         [](const auto& info) {
                           std::string n = std::string(std::get<0>(info.param).preset) + "_I" +
                                           std::to_string(std::get<0>(info.param).inter) + "_" +
                                           to_string(std::get<1>(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// GEMM2 split at its K ranges with more than 512 work units (kMaxSplitUnits, workspace.h, was 512
// until session 29): Llama-4-Scout's own shapes (H 5120: 20 four-consumer m-blocks; I 8192: two
// ranges), every token on its own expert of the 16 in turn, so that at 16 tokens or more each
// expert holds one 16-token tile: 16 x 20 tiles, 640 units, whose partial sums reach past the first
// 512 units' slots. The smallest such batch that the rule splits on this GPU (T = 14-31 on 132 SMs),
// against the same layer with range_split off (same bits: those kernels sum the ranges in one unit),
// and its first and last tokens alone. (The weights are dummy ones made on the GPU: 1.1 GB a layer,
// too many for the host reference; the other tests check the split against it at smaller shapes.)
TEST(MoeGpu, Gemm2RangeSplitPastFiveHundredTwelveUnitsGivesTheUnsplitBits) {
  FP4MOE_REQUIRE_GPU();
  const int num_sms = sm_count();
  ASSERT_GT(num_sms, 0) << "cannot read the GPU's SM count";
  MoeProblem p;
  ASSERT_OK(get_preset("llama4-scout", &p));
  p.max_tokens = 48;
  ASSERT_TRUE(gemm2_has_ranges(p.intermediate_size));
  const uint64_t seed = testing::test_seed() + 53;
  LayerOptions opt;
  opt.path = KernelPath::kSm90;
  std::unique_ptr<MoeLayer> layer, unsplit;
  Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
  FP4MOE_ASSERT_CREATED(st);
  opt.range_split = false;
  ASSERT_OK(MoeLayer::create_dummy(p, seed, opt, &unsplit));
  const int64_t E = p.num_experts(), H = p.hidden_size;
  ASSERT_EQ(p.top_k(), 1);
  ASSERT_EQ(E, 16);
  int64_t T = 0;
  for (int64_t t = E; t <= p.max_tokens && T == 0; ++t)
    if (layer->kernel_info(t).gemm2.find("split at them") != std::string::npos) T = t;
  if (T == 0) {
    // (132 SMs, an H100 SXM's or an H200's, split at T = 14-31 when this test was written)
    ASSERT_LT(num_sms, 132) << "no batch of 16-48 tokens splits GEMM2 at its ranges: " << layer->kernel_info(24).gemm2;
    GTEST_SKIP() << "no batch of 16-48 tokens splits GEMM2 at its ranges on " << num_sms << " SMs";
  }
  const std::string what = "llama4-scout T=" + std::to_string(T);
  std::printf("[fp4moe] %s: %s\n", what.c_str(), layer->kernel_info(T).gemm2.c_str());
  EXPECT_NE(layer->kernel_info(T).gemm2.find("sm90_moe_gemm2_wgmma_rs(BN16_C4"), std::string::npos)
      << what << ": " << layer->kernel_info(T).gemm2 << " (the unit count above assumes 4-consumer tiles)";
  auto rng = make_rng(seed);
  auto hidden = testing::random_hidden(rng, T, H);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  std::vector<float> w(ids.size());
  for (int64_t t = 0; t < T; ++t) {
    ids[t] = int32_t(t % E);
    w[t] = 0.25f + 0.5f * float(t) / float(T);
  }
  GpuRun split, off;
  run_forward(*layer, hidden, {}, T, &split, &ids, &w);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GT(testing::abs_sum_bf16(split.out), 0.0) << what << ": all zero";
  const std::vector<float> got = testing::bf16_to_floats(split.out);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << what << ": NaN (unwritten?) at " << i;
  run_forward(*unsplit, hidden, {}, T, &off, &ids, &w);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(std::memcmp(off.out.data(), split.out.data(), split.out.size() * 2), 0)
      << what << ": range_split off (" << unsplit->kernel_info(T).gemm2 << ") against on ("
      << layer->kernel_info(T).gemm2 << ")";
  GpuRun again;
  run_forward(*layer, hidden, {}, T, &again, &ids, &w);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(std::memcmp(again.out.data(), split.out.data(), split.out.size() * 2), 0) << what << ": not deterministic";
  // Token t alone, with its routing given, gives the batch's row (T=1 splits too: the 2-consumer
  // decode tile, 40 x 2 units).
  for (int64_t t : {int64_t(0), T - 1}) {
    const std::vector<uint16_t> h(hidden.begin() + t * H, hidden.begin() + (t + 1) * H);
    const std::vector<int32_t> id1{ids[t]};
    const std::vector<float> w1{w[t]};
    GpuRun one;
    run_forward(*layer, h, {}, 1, &one, &id1, &w1);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(std::memcmp(one.out.data(), split.out.data() + t * H, size_t(H) * 2), 0)
        << what << ": token " << t << " alone (" << layer->kernel_info(1).gemm2 << ") differs from the batch";
  }
}

// Split-K with ranges of unequal, odd chunk counts (DeepSeek-R1/8: GEMM1's 14 chunks in ranges of
// 4, 5, 5) on expert-parallel shards (local expert ids offset by expert_begin).
TEST(MoeGpu, SplitKOnExpertParallelShardsWithUnequalRanges) {
  FP4MOE_REQUIRE_GPU();
  const int num_sms = sm_count();
  ASSERT_GT(num_sms, 0) << "cannot read the GPU's SM count";
  MoeProblem full;
  ASSERT_OK(get_preset("deepseek-r1", &full));
  MoeProblem p = scaled_preset(full, 8);
  p.max_tokens = 4;
  const uint64_t seed = testing::test_seed() + 29;
  const HostMoeWeights hw = make_random_weights(p, seed);
  auto rng = make_rng(seed);
  const int64_t T = 1;
  auto hidden = testing::random_hidden(rng, T, p.hidden_size);
  auto logits = testing::random_logits(rng, T, p.num_experts());
  // One pick on each shard for certain: random logits put all 8 on one half of the experts for 44 of
  // 1500 seeds tried on the host (the grouped routing picks 4 of 8 groups), and that rank's output
  // was then all zeros, which the reference check refuses.
  logits[0] += 20.0f;
  logits[p.num_experts() - 1] += 20.0f;
  for (int er = 0; er < 2; ++er) {
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    opt.split_k = true;
    opt.ep_rank = er, opt.ep_size = 2;
    std::unique_ptr<MoeLayer> layer;
    Status st = MoeLayer::create_dummy(p, seed, opt, &layer);
    FP4MOE_ASSERT_CREATED(st);
    sm90::ConfigInput in;
    in.num_tokens = T;
    in.top_k = p.top_k();
    in.num_local_experts = layer->num_local_experts();
    in.num_sms = num_sms;
    const sm90::Sm90Config cfg = *sm90::config_by_name(MoeLayer::sm90_config_names().front());
    const layout::GemmWeightShape g1{2 * layer->local_intermediate_size(), p.hidden_size, true};
    EXPECT_GE(sm90::select_split_k(in, cfg, g1.m_units(), g1.k_units()), 3) << "GEMM1 of ep rank " << er;
    GpuRun run, again;
    run_forward(*layer, hidden, logits, T, &run);
    run_forward(*layer, hidden, logits, T, &again);
    HostMoeWeights shard;
    const ref::ShardSpec spec{er, 2, 0, 1};
    ASSERT_OK(ref::shard_weights(p, hw, spec, &shard));
    expect_matches_reference(p, shard, spec, hidden, run, T, "split-K ep " + std::to_string(er) + "/2");
    EXPECT_EQ(std::memcmp(run.out.data(), again.out.data(), run.out.size() * 2), 0) << "ep " << er;
  }
}

// LayerOptions::max_sms: the GEMMs' persistent grids on at most that many SMs (more rounds of tiles
// a CTA, other configs where the SM count enters the choice). The same bits as on all SMs, and the
// reference; a negative limit is refused when the layer is made.
TEST(MoeGpu, MaxSmsGivesTheSameBits) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_NO_FATAL_FAILURE(small_deepseek(Mode::kW4A16, 64, &p));
  const uint64_t seed = testing::test_seed() + 61;
  const HostMoeWeights hw = make_random_weights(p, seed);
  std::unique_ptr<MoeLayer> layers[3];
  const int limits[3] = {0, 5, 1};
  for (int i = 0; i < 3; ++i) {
    LayerOptions opt;
    opt.path = KernelPath::kSm90;
    opt.max_sms = limits[i];
    Status st = MoeLayer::create_dummy(p, seed, opt, &layers[i]);
    FP4MOE_ASSERT_CREATED(st);
  }
  auto rng = make_rng(seed);
  for (int64_t T : {1, 9, 64}) {
    const auto hidden = testing::random_hidden(rng, T, p.hidden_size);
    const auto logits = testing::random_logits(rng, T, p.num_experts());
    GpuRun runs[3];
    for (int i = 0; i < 3; ++i) {
      run_forward(*layers[i], hidden, logits, T, &runs[i]);
      ASSERT_FALSE(HasFatalFailure());
    }
    const std::string what = "T=" + std::to_string(T);
    expect_matches_reference(p, hw, {}, hidden, runs[0], T, what);
    for (int i = 1; i < 3; ++i)
      EXPECT_EQ(std::memcmp(runs[i].out.data(), runs[0].out.data(), runs[0].out.size() * 2), 0)
          << what << ": max_sms = " << limits[i] << " differs from all SMs";
  }
  LayerOptions bad;
  bad.max_sms = -2;
  std::unique_ptr<MoeLayer> none;
  const Status st = MoeLayer::create_dummy(p, seed, bad, &none);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("max_sms = -2"), std::string::npos) << st.message();
  LayerOptions bad_path;
  bad_path.path = static_cast<KernelPath>(7);  // (a cast integer)
  const Status st_path = MoeLayer::create_dummy(p, seed, bad_path, &none);
  EXPECT_EQ(st_path.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st_path.message().find("path = 7"), std::string::npos) << st_path.message();
}

TEST(MoeGpu, ForwardRejectsBadArgumentsBeforeLaunching) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &p));
  p = scaled_preset(p, 8);
  p.max_tokens = 16;
  std::unique_ptr<MoeLayer> layer;
  ASSERT_OK(MoeLayer::create_dummy(p, 5, {}, &layer));
  DeviceBuffer<char> ws(layer->workspace_bytes());
  DeviceBuffer<uint16_t> hidden(32 * p.hidden_size), out(32 * p.hidden_size);
  DeviceBuffer<float> logits(32 * p.num_experts());
  auto good = [&] {
    ForwardArgs a;
    a.hidden = hidden.get();
    a.router_logits = logits.get();
    a.num_tokens = 4;
    a.out = out.get();
    return a;
  };
  auto expect_error = [&](ForwardArgs a, const std::string& needle, size_t ws_bytes, const void* wsp) {
    Status s = layer->forward(a, const_cast<void*>(wsp), ws_bytes, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << "'" << s.message() << "' lacks '" << needle << "'";
  };
  ForwardArgs a = good();
  a.num_tokens = 17;
  expect_error(a, "num_tokens = 17", ws.size(), ws.get());
  a = good();
  a.num_tokens = -1;
  expect_error(a, "num_tokens = -1", ws.size(), ws.get());
  a = good();
  a.hidden = hidden.get() + 1;
  expect_error(a, "hidden = ", ws.size(), ws.get());
  a = good();
  a.out = nullptr;
  expect_error(a, "out is null", ws.size(), ws.get());
  a = good();
  expect_error(a, "workspace_bytes = 100", 100, ws.get());
  expect_error(a, "workspace is null", ws.size(), nullptr);
  a.topk_ids = reinterpret_cast<const int32_t*>(logits.get());
  expect_error(a, "not both", ws.size(), ws.get());
  a = good();
  a.router_logits = nullptr;
  expect_error(a, "not neither", ws.size(), ws.get());
  // Buffers the layer writes must not overlap those it reads (in place is not supported).
  a = good();
  a.out = hidden.get();
  expect_error(a, "overlaps hidden", ws.size(), ws.get());
  a = good();
  a.out = hidden.get() + 3 * p.hidden_size;  // the last of the 4 rows
  expect_error(a, "overlaps hidden", ws.size(), ws.get());
  a = good();
  a.out = hidden.get() + 4 * p.hidden_size;  // just past them: fine
  EXPECT_OK(layer->validate(a, ws.get(), ws.size()));
  a = good();
  a.hidden = reinterpret_cast<const uint16_t*>(ws.get() + 1024);
  expect_error(a, "workspace = ", ws.size(), ws.get());
  a = good();
  a.out = reinterpret_cast<uint16_t*>(ws.get() + 256);  // (its 4 rows within the workspace)
  ASSERT_GT(ws.size(), 256 + 4 * size_t(p.hidden_size) * 2);
  expect_error(a, "overlaps the workspace", ws.size(), ws.get());
  CUDA_ASSERT(cudaDeviceSynchronize());
}

// Buffers the GPU cannot dereference are refused by name before any launch (a kernel faulting on one
// would end the CUDA context); pinned host memory works in place, and the check is legal while a
// stream is being captured in global mode.
TEST(MoeGpu, ForwardRefusesBuffersTheGpuCannotReach) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &p));
  p = scaled_preset(p, 8);
  p.max_tokens = 16;
  std::unique_ptr<MoeLayer> layer;
  ASSERT_OK(MoeLayer::create_dummy(p, 11, {}, &layer));
  const int64_t T = 5, H = p.hidden_size, k = p.top_k();
  auto rng = make_rng(1234);
  std::vector<uint16_t> hidden = testing::random_bf16(rng, size_t(T * H));
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<float> w(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int32_t((i * 7 + i / k) % p.num_experts());  // distinct within a token (k <= 8, 7 coprime to E)
    w[i] = 0.125f + 0.0625f * float(i % 4);
  }
  GpuRun want;
  run_forward(*layer, hidden, {}, T, &want, &ids, &w);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GT(testing::l2_norm(testing::bf16_to_floats(want.out)), 0.0);

  DeviceBuffer<char> ws(layer->workspace_bytes());
  DeviceBuffer<uint16_t> dh(hidden), dout(size_t(T * H));
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dw(w);
  auto good = [&] {
    ForwardArgs a;
    a.hidden = dh.get();
    a.topk_ids = dids.get();
    a.topk_weights = dw.get();
    a.num_tokens = T;
    a.out = dout.get();
    return a;
  };
  int pageable = 0;
  CUDA_ASSERT(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
  std::printf("[ info ] device 0 %s pageable host memory\n", pageable ? "can access" : "cannot access");

  // Pageable host memory (aligned like device memory, so only its kind is wrong).
  struct FreeDeleter {
    void operator()(void* q) const { std::free(q); }
  };
  const size_t host_bytes = (std::max(size_t(T * H) * 2, layer->workspace_bytes()) + 255) / 256 * 256;
  std::unique_ptr<void, FreeDeleter> host(std::aligned_alloc(256, host_bytes));
  ASSERT_TRUE(host);
  std::memcpy(host.get(), hidden.data(), hidden.size() * 2);
  for (const char* which : {"hidden", "out", "topk_ids", "workspace"}) {
    ForwardArgs a = good();
    void* wsp = ws.get();
    if (!std::strcmp(which, "hidden")) a.hidden = static_cast<const uint16_t*>(host.get());
    if (!std::strcmp(which, "out")) a.out = static_cast<uint16_t*>(host.get());
    if (!std::strcmp(which, "topk_ids")) a.topk_ids = static_cast<const int32_t*>(host.get());
    if (!std::strcmp(which, "workspace")) wsp = host.get();
    const Status s = layer->validate(a, wsp, ws.size());
    if (pageable) {
      EXPECT_TRUE(s.ok()) << which << ": " << s.to_string();  // (HMM / ATS: the device reads pageable memory)
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << which << ": " << s.to_string();
      EXPECT_NE(s.message().find(std::string(which) + " = "), std::string::npos) << s.to_string();
      EXPECT_NE(s.message().find("not registered with CUDA"), std::string::npos) << s.to_string();
      const Status f = layer->forward(a, wsp, ws.size(), nullptr);
      EXPECT_EQ(f.code(), StatusCode::kInvalidArgument) << which << ": " << f.to_string();
    }
  }
  // Nothing faulted: the context still runs a forward, and it gives the same bits.
  dout.poison();
  ASSERT_OK(layer->forward(good(), ws.get(), ws.size(), nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(dout.download(), want.out);

  // Pinned host memory is mapped into the device's address space: the routing read from there in place.
  int32_t* pinned_ids = nullptr;
  float* pinned_w = nullptr;
  CUDA_ASSERT(cudaMallocHost(reinterpret_cast<void**>(&pinned_ids), ids.size() * sizeof(int32_t)));
  CUDA_ASSERT(cudaMallocHost(reinterpret_cast<void**>(&pinned_w), w.size() * sizeof(float)));
  std::copy(ids.begin(), ids.end(), pinned_ids);
  std::copy(w.begin(), w.end(), pinned_w);
  ForwardArgs a = good();
  a.topk_ids = pinned_ids;
  a.topk_weights = pinned_w;
  dout.poison();
  ASSERT_OK(layer->forward(a, ws.get(), ws.size(), nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(dout.download(), want.out);
  CUDA_ASSERT(cudaFreeHost(pinned_ids));
  CUDA_ASSERT(cudaFreeHost(pinned_w));

  // Captured in global mode (the strictest): the pointer checks do not break the capture.
  cudaStream_t stream = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status captured = layer->forward(good(), ws.get(), ws.size(), stream);
  CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  ASSERT_OK(captured);
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  dout.poison();
  CUDA_ASSERT(cudaDeviceSynchronize());
  CUDA_ASSERT(cudaGraphLaunch(exec, stream));
  CUDA_ASSERT(cudaStreamSynchronize(stream));
  EXPECT_EQ(dout.download(), want.out);
  CUDA_ASSERT(cudaGraphExecDestroy(exec));
  CUDA_ASSERT(cudaGraphDestroy(graph));
  CUDA_ASSERT(cudaStreamDestroy(stream));
}

TEST(MoeGpu, OutOfRangeExpertIdsAreSkippedAndReported) {
  FP4MOE_REQUIRE_GPU();
  MoeProblem p;
  ASSERT_OK(get_preset("mixtral-8x7b", &p));
  p = scaled_preset(p, 32);
  p.max_tokens = 8;
  std::unique_ptr<MoeLayer> layer;
  const uint64_t seed = 9;
  ASSERT_OK(MoeLayer::create_dummy(p, seed, {}, &layer));
  std::vector<int32_t> ids = {0, 1, 2, 99, -1, 3, 4, 5};
  std::vector<float> w(ids.size(), 0.5f);
  EXPECT_NE(validate_topk_ids(p, ids.data(), 4).message().find("topk_ids[1][1] = 99"), std::string::npos);
  EXPECT_NE(validate_topk_ids(p, ids.data(), -1).message().find("num_tokens = -1"), std::string::npos);
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dw(w);
  auto rng = make_rng(testing::test_seed() + 97);
  const std::vector<uint16_t> host_hidden = testing::random_hidden(rng, 4, p.hidden_size);
  DeviceBuffer<uint16_t> hidden(host_hidden), out(4 * p.hidden_size);
  CUDA_ASSERT(cudaMemset(out.get(), 0xff, out.size() * 2));  // poisoned: NaN where nothing is written
  DeviceBuffer<char> ws(layer->workspace_bytes());
  ForwardArgs a;
  a.hidden = hidden.get();
  a.topk_ids = dids.get();
  a.topk_weights = dw.get();
  a.num_tokens = 4;
  a.out = out.get();
  ASSERT_OK(layer->forward(a, ws.get(), ws.size(), nullptr));
  Status s = layer->check_device_errors(ws.get(), nullptr);
  EXPECT_NE(s.message().find("2 routed expert ids"), std::string::npos) << s.to_string();
  // The skipped pairs add nothing, and every row is written.
  GpuRun run;
  run.out = out.download();
  run.ids = ids;
  run.weights = w;
  zero_out_of_range_pairs(&run, p.num_experts());
  expect_matches_reference(p, make_random_weights(p, seed), {}, host_hidden, run, 4, "out-of-range ids skipped");
}

}  // namespace
}  // namespace fp4moe
