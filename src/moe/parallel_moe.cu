// The GPU expert backend of the parallel MoE: MoeLayer on this rank's shard, plus the small kernels
// dispatch/combine need in device memory (gather token records by index; add partial-output rows into
// the output by index; NVFP4-quantize token rows for quantized dispatch and expand them again). Any
// sm_90a device; checked against the CPU backend's semantics (parallel_moe.cpp: CpuReferenceBackend::
// gather_rows / scatter_add_rows / quantize_rows_nvfp4 / dequantize_rows_nvfp4; the NVFP4 blocks are
// src/moe/dispatch_codec.h, shared by both).
//
// Ran on 2 H200s (test_parallel_gpu, the Python ParallelMoE tests, fp4moe-bench-parallel): bf16 and
// NVFP4 dispatch, dummy and host weights (bench/results/README.md, third session, run 9).
// No NCCL here (STYLE.md: kernel code never includes it); the communicator shares the stream.
#include <algorithm>
#include <climits>
#include <cmath>

#include "fp4moe/moe_gpu.h"
#include "fp4moe/numerics.h"
#include "reference/sharding.h"
#include "src/common/cuda_utils.h"
#include "src/moe/dispatch_codec.h"
#include "src/moe/dummy_weights.h"
#include "src/moe/parallel_moe.h"

namespace fp4moe {

namespace {

constexpr int kRowThreads = 128;

// dst row i = src row index[i]; rows are words_per_row 32-bit words (token records are multiples of 8
// bytes: bf16 rows or NVFP4 rows padded to 16, then 8 bytes per top-k slot).
__global__ void gather_rows_kernel(const uint32_t* __restrict__ src, const int32_t* __restrict__ index,
                                   int64_t words_per_row, uint32_t* __restrict__ dst) {
  const int64_t i = blockIdx.x;
  const uint32_t* s = src + int64_t(index[i]) * words_per_row;
  uint32_t* d = dst + i * words_per_row;
  for (int64_t w = threadIdx.x; w < words_per_row; w += blockDim.x) d[w] = s[w];
}

// acc row index[i] += src row i, bf16 in and out, the add in fp32 (one rounding per call). The index
// entries of one launch are distinct (one destination rank's tokens), so rows never race.
__global__ void scatter_add_bf16_kernel(const uint16_t* __restrict__ src, const int32_t* __restrict__ index,
                                        int64_t hidden, uint16_t* __restrict__ acc) {
  const int64_t i = blockIdx.x;
  const uint16_t* s = src + i * hidden;
  uint16_t* a = acc + int64_t(index[i]) * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) a[c] = float_to_bf16(bf16_to_float(a[c]) + bf16_to_float(s[c]));
}

// Quantized dispatch, sender: one CTA per row, each thread quantizes whole 16-element blocks of it
// (dispatch_codec.h: codes at dst row + 8b, the block's scale byte at dst row + H/2 + b).
__global__ void quantize_rows_nvfp4_kernel(const uint16_t* __restrict__ hidden, const float* __restrict__ row_weights,
                                           int64_t hidden_size, float gs, uint8_t* __restrict__ dst, int64_t pitch) {
  const int64_t r = blockIdx.x;
  const uint16_t* x = hidden + r * hidden_size;
  uint8_t* codes = dst + r * pitch;
  uint8_t* scales = codes + hidden_size / 2;
  const bool weighted = row_weights != nullptr;
  const float w = weighted ? row_weights[r] : 1.0f;
  for (int64_t b = threadIdx.x; b < hidden_size / kNvfp4BlockSize; b += blockDim.x) {
    uint16_t v[kNvfp4BlockSize];
    for (int i = 0; i < kNvfp4BlockSize; ++i) v[i] = x[b * kNvfp4BlockSize + i];
    uint8_t packed[kNvfp4BlockSize / 2];
    scales[b] = detail::quantize_dispatch_block(v, weighted, w, gs, packed);
    for (int i = 0; i < kNvfp4BlockSize / 2; ++i) codes[b * (kNvfp4BlockSize / 2) + i] = packed[i];
  }
}

// Quantized dispatch, receiver: one CTA per row, bf16 code x block scale per element.
__global__ void dequantize_rows_nvfp4_kernel(const uint8_t* __restrict__ src, int64_t pitch, int64_t hidden_size,
                                             uint16_t* __restrict__ dst) {
  const int64_t r = blockIdx.x;
  const uint8_t* codes = src + r * pitch;
  const uint8_t* scales = codes + hidden_size / 2;
  uint16_t* y = dst + r * hidden_size;
  for (int64_t b = threadIdx.x; b < hidden_size / kNvfp4BlockSize; b += blockDim.x) {
    uint8_t packed[kNvfp4BlockSize / 2];
    for (int i = 0; i < kNvfp4BlockSize / 2; ++i) packed[i] = codes[b * (kNvfp4BlockSize / 2) + i];
    uint16_t v[kNvfp4BlockSize];
    detail::dequantize_dispatch_block(packed, scales[b], v);
    for (int i = 0; i < kNvfp4BlockSize; ++i) y[b * kNvfp4BlockSize + i] = v[i];
  }
}

class GpuLayerBackend final : public ExpertBackend {
 public:
  ~GpuLayerBackend() override {
    if (workspace_) cudaFree(workspace_);
    if (index_) cudaFree(index_);
    if (routing_bias_) cudaFree(routing_bias_);
  }

  static Status create(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy,
                       const RankLayout& layout, const MoeWeightsView* host_weights, uint64_t dummy_seed,
                       cudaStream_t stream, std::unique_ptr<ExpertBackend>* out) {
    auto b = std::unique_ptr<GpuLayerBackend>(new GpuLayerBackend());
    b->problem_ = problem;
    b->spec_ = {layout.moe_ep_rank, layout.moe_ep_size, layout.moe_tp_rank, layout.moe_tp_size};
    b->stream_ = stream;
    FP4MOE_CUDA_RETURN(cudaGetDevice(&b->device_));
    FP4MOE_RETURN_IF_ERROR(check_stream_device("the GPU expert backend", "stream", stream, b->device_));
    MoeProblem sized = problem;
    sized.max_tokens = std::max<int64_t>(1, max_expert_tokens(config, strategy, problem.max_tokens));
    LayerOptions lo;
    lo.ep_rank = layout.moe_ep_rank;
    lo.ep_size = layout.moe_ep_size;
    lo.tp_rank = layout.moe_tp_rank;
    lo.tp_size = layout.moe_tp_size;
    lo.tokens_routed_here = strategy == Strategy::kAllToAll;  // (the config choice's row estimate)
    std::vector<float> bias;
    if (host_weights) {
      // MoeLayer::create takes exactly its shard (its experts, its intermediate slice): cut it out of
      // the full weights first.
      const ref::ShardSpec spec{layout.moe_ep_rank, layout.moe_ep_size, layout.moe_tp_rank, layout.moe_tp_size};
      HostMoeWeights shard;
      FP4MOE_RETURN_IF_ERROR(ref::shard_weights(problem, *host_weights, spec, &shard));
      FP4MOE_RETURN_IF_ERROR(MoeLayer::create(sized, shard.view(), lo, &b->layer_));
      if (host_weights->routing_bias) bias.assign(host_weights->routing_bias, host_weights->routing_bias + problem.num_experts());
      b->a13_scale_2_ = shard.a13_scale_2;
    } else {
      FP4MOE_RETURN_IF_ERROR(MoeLayer::create_dummy(sized, dummy_seed, lo, &b->layer_));
      // The dummy layer's correction bias is make_random_weights(problem, seed)'s; no expert is needed for it.
      bias = make_random_weights_subset(problem, dummy_seed, {}).routing_bias;
      if (problem.mode == Mode::kW4A4) {
        const ref::ExpertRange ex = ref::local_experts(problem.num_experts(), layout.moe_ep_rank, layout.moe_ep_size);
        for (int e = ex.begin; e < ex.end; ++e)
          b->a13_scale_2_.push_back(detail::dummy_a13_scale_2(dummy_seed, uint64_t(e)));
      }
    }
    if (!bias.empty()) {
      FP4MOE_CUDA_RETURN(cudaMalloc(&b->routing_bias_, bias.size() * sizeof(float)));
      FP4MOE_CUDA_RETURN(cudaMemcpy(b->routing_bias_, bias.data(), bias.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    b->workspace_bytes_ = b->layer_->workspace_bytes();
    FP4MOE_CUDA_RETURN(cudaMalloc(&b->workspace_, std::max<size_t>(b->workspace_bytes_, 256)));
    // Index rows: alltoall gathers at most max_tokens * min(k, world) records in one call.
    b->index_capacity_ = size_t(std::max<int64_t>(1, problem.max_tokens)) *
                         size_t(std::max(1, std::min(problem.top_k(), config.world_size())));
    FP4MOE_CUDA_RETURN(cudaMalloc(&b->index_, b->index_capacity_ * sizeof(int32_t)));
    *out = std::move(b);
    return Status::Ok();
  }

  comm::MemorySpace memory_space() const override { return comm::MemorySpace::kDevice; }
  const MoeProblem& built_problem() const override { return problem_; }
  ref::ShardSpec built_shard() const override { return spec_; }
  comm::DataType output_type() const override { return comm::DataType::kBF16; }

  Status route(const void* logits, LogitsType logits_type, int64_t n, int32_t* ids, float* weights) override {
    RoutingArgs a;
    a.logits = logits;
    a.logits_type = logits_type;
    a.correction_bias = routing_bias_;
    a.num_tokens = n;
    a.topk_ids = ids;
    a.topk_weights = weights;
    return route_gpu(problem_.routing, a, stream_);
  }

  Status run_experts(const uint16_t* hidden, const int32_t* ids, const float* weights, int64_t n, void* out) override {
    ran_ = n > 0;  // (check_device_errors reads what this run's plan wrote; none without a run)
    if (n == 0) return Status::Ok();
    ForwardArgs a;
    a.hidden = hidden;
    a.topk_ids = ids;
    a.topk_weights = weights;
    a.num_tokens = n;
    a.out = static_cast<uint16_t*>(out);
    a.hidden_prequantized = prequantized_;
    return layer_->forward(a, workspace_, workspace_bytes_, stream_);
  }

  Status allocate(size_t bytes, void** out) override {
    FP4MOE_CUDA_RETURN(cudaMalloc(out, std::max<size_t>(bytes, 256)));
    return Status::Ok();
  }
  void release(void* p) override { cudaFree(p); }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return Status::Ok();
    FP4MOE_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    FP4MOE_CUDA_RETURN(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  Status copy_from_host(void* dst, const void* src, size_t bytes) override {
    // NOTE: from pageable memory cudaMemcpyAsync returns only once `src` has been staged, so the caller
    // may reuse it (a stack variable) right away.
    if (bytes) FP4MOE_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    return Status::Ok();
  }
  Status copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) override {
    if (rows && width)
      FP4MOE_CUDA_RETURN(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, stream_));
    return Status::Ok();
  }
  Status gather_rows(const void* src, const int32_t* host_index, int64_t n, size_t row_bytes, void* dst) override {
    if (n == 0) return Status::Ok();
    if (row_bytes % 4) return internal_error("gather_rows: row_bytes = ", row_bytes, " is not a multiple of 4");
    FP4MOE_RETURN_IF_ERROR(upload_index(host_index, n));
    gather_rows_kernel<<<unsigned(n), kRowThreads, 0, stream_>>>(static_cast<const uint32_t*>(src), index_,
                                                                int64_t(row_bytes / 4), static_cast<uint32_t*>(dst));
    FP4MOE_CUDA_LAUNCH_CHECK(gather_rows_kernel);
    return Status::Ok();
  }
  Status scatter_add_rows(const void* src, const int32_t* host_index, int64_t n, void* acc) override {
    if (n == 0) return Status::Ok();
    FP4MOE_RETURN_IF_ERROR(upload_index(host_index, n));
    scatter_add_bf16_kernel<<<unsigned(n), kRowThreads, 0, stream_>>>(static_cast<const uint16_t*>(src), index_,
                                                                     problem_.hidden_size, static_cast<uint16_t*>(acc));
    FP4MOE_CUDA_LAUNCH_CHECK(scatter_add_bf16_kernel);
    return Status::Ok();
  }
  Status zero(void* dst, size_t bytes) override {
    if (bytes) FP4MOE_CUDA_RETURN(cudaMemsetAsync(dst, 0, bytes, stream_));
    return Status::Ok();
  }
  Status check_device_errors() override {
    if (!ran_) return Status::Ok();
    return layer_->check_device_errors(workspace_, stream_);
  }
  Status check_caller_buffer(const char* name, const void* p) const override {
    return check_device_accessible("ParallelMoe::forward", name, p, device_);
  }
  Status synchronize() override {
    FP4MOE_CUDA_RETURN(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status max_input_scale_2(float* out) override {
    if (problem_.mode != Mode::kW4A4 || a13_scale_2_.empty())
      return invalid_argument("max_input_scale_2: mode ", to_string(problem_.mode), " has no GEMM1 input scales");
    return max_positive_scale(a13_scale_2_, out);
  }
  Status use_prequantized_input(float input_scale_2) override {
    FP4MOE_RETURN_IF_ERROR(layer_->set_input_scale_2(input_scale_2));
    prequantized_ = true;
    return Status::Ok();
  }
  Status quantize_rows_nvfp4(const uint16_t* hidden, const float* row_weights, int64_t n, float gs, void* dst,
                             size_t dst_pitch) override {
    FP4MOE_RETURN_IF_ERROR(check_nvfp4_rows("quantize_rows_nvfp4", n, gs, dst_pitch));
    if (n == 0) return Status::Ok();
    if (!hidden || !dst) return invalid_argument("quantize_rows_nvfp4: hidden or dst is null with n = ", n);
    quantize_rows_nvfp4_kernel<<<unsigned(n), kRowThreads, 0, stream_>>>(
        hidden, row_weights, problem_.hidden_size, gs, static_cast<uint8_t*>(dst), int64_t(dst_pitch));
    FP4MOE_CUDA_LAUNCH_CHECK(quantize_rows_nvfp4_kernel);
    return Status::Ok();
  }
  Status dequantize_rows_nvfp4(const void* src, size_t src_pitch, int64_t n, uint16_t* dst) override {
    FP4MOE_RETURN_IF_ERROR(check_nvfp4_rows("dequantize_rows_nvfp4", n, 1.0f, src_pitch));
    if (n == 0) return Status::Ok();
    if (!src || !dst) return invalid_argument("dequantize_rows_nvfp4: src or dst is null with n = ", n);
    dequantize_rows_nvfp4_kernel<<<unsigned(n), kRowThreads, 0, stream_>>>(
        static_cast<const uint8_t*>(src), int64_t(src_pitch), problem_.hidden_size, dst);
    FP4MOE_CUDA_LAUNCH_CHECK(dequantize_rows_nvfp4_kernel);
    return Status::Ok();
  }

 private:
  // Arguments of the NVFP4 row kernels, checked before anything is launched.
  Status check_nvfp4_rows(const char* op, int64_t n, float gs, size_t pitch) const {
    if (n < 0 || n > INT_MAX) return invalid_argument(op, ": n = ", n, " must be in [0, ", INT_MAX, "]");
    if (!(gs > 0.0f) || !std::isfinite(gs)) return invalid_argument(op, ": gs = ", gs, " must be finite and > 0");
    if (problem_.hidden_size % kNvfp4BlockSize)
      return invalid_argument(op, ": hidden_size = ", problem_.hidden_size, " is not a multiple of ", kNvfp4BlockSize);
    if (pitch < size_t(detail::dispatch_row_bytes(problem_.hidden_size)))
      return invalid_argument(op, ": pitch = ", pitch, " is less than a row's ",
                              detail::dispatch_row_bytes(problem_.hidden_size), " bytes");
    return Status::Ok();
  }
  GpuLayerBackend() = default;
  Status upload_index(const int32_t* host_index, int64_t n) {
    if (size_t(n) > index_capacity_)
      return internal_error("parallel GPU backend: ", n, " index rows exceed the capacity of ", index_capacity_);
    // Stream order keeps the previous kernel's reads of index_ before this overwrite.
    FP4MOE_CUDA_RETURN(cudaMemcpyAsync(index_, host_index, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    return Status::Ok();
  }

  MoeProblem problem_;
  ref::ShardSpec spec_;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;  // current when the backend was made (the layer's device)
  std::unique_ptr<MoeLayer> layer_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool ran_ = false;  // the last run_experts ran the layer (its workspace holds that run's counts)
  int32_t* index_ = nullptr;
  size_t index_capacity_ = 0;
  float* routing_bias_ = nullptr;
  std::vector<float> a13_scale_2_;  // w4a4: the local experts' GEMM1 input scales (host)
  bool prequantized_ = false;       // use_prequantized_input was called
};

}  // namespace

Status make_gpu_backend(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy,
                        const RankLayout& layout, const MoeWeightsView* host_weights, uint64_t dummy_seed,
                        cudaStream_t stream, std::unique_ptr<ExpertBackend>* out) {
  if (!out) return invalid_argument("make_gpu_backend: out is null");
  return GpuLayerBackend::create(problem, config, strategy, layout, host_weights, dummy_seed, stream, out);
}

}  // namespace fp4moe
