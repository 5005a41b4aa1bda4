// The MoE layer across ranks: prepare (dispatch per strategy) -> local experts -> finalize (combine).
//
//   ParallelMoe::create(problem, config, strategy, world, backend)   collective over `world`: checks that
//       every rank was given the same problem/config/strategy, validates them, splits the DP and TP
//       groups, sizes every buffer once from problem.max_tokens (the most tokens one rank passes).
//   layer->forward(args)                                             collective: every rank calls it
//       once per step, a rank with 0 tokens included.
//
// The strategies are those of fp4moe/parallel.h. The experts run behind ExpertBackend, so the same
// dispatch/combine code drives the fp64 reference over host memory (CI, LocalCommunicator) and the GPU
// layer over device memory (NcclCommunicator). Tokens travel as records of [hidden | top-k ids (i32) |
// top-k weights (f32)], so routing goes with its token and one collective moves all three. The hidden
// part is bf16 (2H bytes) or, with NVFP4-quantized dispatch (w4a4, see ParallelMoeOptions), the
// token's GEMM1 input already quantized: H/2 bytes of e2m1 codes and H/16 e4m3 block scales.
// CUDA graphs: Args::padded_tokens selects a mode without host waits and with fixed exchange sizes;
// the communicators must then be created with CommOptions::wait_each_op off. Streams: the backend and
// the communicators must work on one stream (the GPU backend's and NCCL's), since a copy that follows
// an enqueued collective relies on stream order.
//
// NVFP4-quantized dispatch (w4a4). The single-rank w4a4 layer quantizes a token's GEMM1 input once per
// expert, with that expert's global scale a13_scale_2[e]; a token quantized once before dispatch can
// use only one. So quantized dispatch uses one shared scale for the whole layer, the largest decode
// scale over ALL experts (no expert's range saturates): each rank takes the max over the experts its
// backend holds and create() all-gathers those over the world, so every rank has the same value
// whatever its shard. The sender quantizes each token (router weight applied first for Llama-4) with
// the `kernel` recipe at encode scale 1 / shared; the receiver expands the codes and block scales into
// bf16 rows of code x block scale (exact) which the experts use as they are (no second quantization),
// and every expert's GEMM1 uses the shared scale in its alpha. The output is therefore bit for bit
// (up to the strategy's reduction order) that of the single-rank w4a4 layer whose a13_scale_2[e] are
// all replaced by the shared scale; where the weights' a13_scale_2 are all equal, that is the plain
// w4a4 layer. tp-allreduce and none send no tokens, so there is nothing to quantize.
//
// Determinism: with LocalCommunicator, partial outputs are summed in ascending world-rank order (alltoall:
// in ascending order of the ranks that computed them, the others contributing exact zeros), so a
// forward is bit-reproducible and equal to a serial sum of the ranks' partial outputs in that order.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/parallel.h"
#include "reference/moe_reference.h"
#include "src/comm/communicator.h"

#if FP4MOE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp4moe {

// What one rank's experts run on, and the few memory operations dispatch/combine need in its memory.
class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;

  virtual comm::MemorySpace memory_space() const = 0;
  // The problem and the expert / intermediate shard the backend was made for: ParallelMoe::create
  // checks both against its own (it sizes its buffers from its problem, and each rank must hold its
  // own layout's shard).
  virtual const MoeProblem& built_problem() const = 0;
  virtual ref::ShardSpec built_shard() const = 0;
  // Type of the partial outputs and of the layer output: f32 (CPU reference) or bf16 (GPU layer).
  virtual comm::DataType output_type() const = 0;
  // Routing of this rank's own tokens (DP: each rank routes its tokens; ids are global expert ids).
  virtual Status route(const void* logits, LogitsType logits_type, int64_t num_tokens, int32_t* topk_ids,
                       float* topk_weights) = 0;
  // This rank's partial output for num_tokens tokens with global routing: the sum over its experts and its
  // TP slice of the router-weighted expert outputs (zero for a token none of whose experts are here).
  // hidden [n, H] bf16, topk_* [n, k], out [n, H] output_type().
  virtual Status run_experts(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                             int64_t num_tokens, void* out) = 0;

  virtual Status allocate(size_t bytes, void** out) = 0;
  virtual void release(void* ptr) = 0;
  virtual Status copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual Status copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  // rows x width bytes from src (row pitch src_pitch) to dst (row pitch dst_pitch), inside this memory.
  virtual Status copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                         size_t rows) = 0;
  // dst row i = src row index[i] (rows of row_bytes), for i < num_rows. index is host memory.
  virtual Status gather_rows(const void* src, const int32_t* host_index, int64_t num_rows, size_t row_bytes,
                             void* dst) = 0;
  // acc row index[i] += src row i (rows of H output_type() elements). The index entries of one call are
  // distinct (a device may add the rows in parallel); successive calls add in call order.
  virtual Status scatter_add_rows(const void* src, const int32_t* host_index, int64_t num_rows, void* acc) = 0;
  virtual Status zero(void* dst, size_t bytes) = 0;
  // Waits for the backend's queued work (a stream); a no-op on the host.
  virtual Status synchronize() = 0;
  // What the device found in the last run_experts without failing it: the GPU layer skips routed ids
  // outside [0, num_experts) and counts them (MoeLayer::check_device_errors), an InvalidArgument
  // naming the count here. Waits for the backend's queued work. The host backend rejects such ids in
  // run_experts itself: Ok.
  virtual Status check_device_errors() { return Status::Ok(); }
  // Refuses, by name, a caller's buffer this backend cannot use in place: the GPU backend names a
  // pointer its device cannot reach (a kernel faulting on it would end the CUDA context). The host
  // backend reads host memory: Ok.
  virtual Status check_caller_buffer(const char* /*name*/, const void* /*p*/) const { return Status::Ok(); }

  // ---- NVFP4-quantized dispatch (w4a4; see the header comment) ----
  // The largest GEMM1 input global scale (a13_scale_2, decode convention) of the experts this backend
  // holds; an error outside w4a4.
  virtual Status max_input_scale_2(float* out) = 0;
  // The largest of `scales` (this rank's experts' a13_scale_2), which must all be finite and > 0 (the
  // backends' max_input_scale_2; an error names the first bad expert).
  static Status max_positive_scale(const std::vector<float>& scales, float* out) {
    if (scales.empty()) return invalid_argument("max_input_scale_2: no experts");
    float m = 0.0f;
    for (size_t e = 0; e < scales.size(); ++e) {
      if (!std::isfinite(scales[e]) || !(scales[e] > 0.0f))
        return invalid_argument("a13_scale_2 of local expert ", e, " = ", scales[e],
                                ": quantized dispatch needs every input scale finite and > 0");
      m = std::max(m, scales[e]);
    }
    *out = m;
    return Status::Ok();
  }
  // Set-up time, once: from now on every local expert's GEMM1 uses input_scale_2 as its input global
  // scale, and run_experts() takes prequantized `hidden` rows (what dequantize_rows_nvfp4 writes).
  virtual Status use_prequantized_input(float input_scale_2) = 0;
  // n rows of bf16 hidden [n, H] to NVFP4 with the `kernel` recipe at encode global scale gs, row i
  // at dst + i * dst_pitch: H/2 bytes of e2m1 codes (element 2j in the low nibble of byte j), then H/16
  // e4m3 block scales. row_weights (nullable, one per row): each element is first multiplied by its
  // row's weight and rounded to bf16 (Llama-4's router weight on the input, as the expert layer does).
  virtual Status quantize_rows_nvfp4(const uint16_t* hidden, const float* row_weights, int64_t n, float gs,
                                     void* dst, size_t dst_pitch) = 0;
  // The reverse layout: dst [n, H] bf16 row i, element j = e2m1 code j x its e4m3 block scale (exact).
  virtual Status dequantize_rows_nvfp4(const void* src, size_t src_pitch, int64_t n, uint16_t* dst) = 0;
};

// The fp64 reference (ref::moe_forward_routed) on this rank's shard of `full` weights, host memory, f32
// output. `full` holds all experts with the full intermediate size (make_random_weights).
Status make_cpu_reference_backend(const MoeProblem& problem, const HostMoeWeights& full, const RankLayout& layout,
                                  const ref::ReferenceOptions& options, std::unique_ptr<ExpertBackend>* out);

#if FP4MOE_HAS_CUDA
// The GPU layer (MoeLayer) on this rank's shard, device memory on `stream`, bf16 output (partial outputs
// are reduced in bf16, as vLLM does). Weights: `host_weights` (all experts, full intermediate size: the
// backend cuts out its shard, ref::shard_weights, and uploads that) or, when null,
// MoeLayer::create_dummy(dummy_seed). problem.max_tokens is the most tokens one rank passes; the layer
// is sized for max_expert_tokens(config, strategy, ...). Quantized dispatch: MoeLayer::set_input_scale_2
// and ForwardArgs::hidden_prequantized, and two row kernels (parallel_moe.cu).
// Ran on 2 H200s with dummy and host weights, bf16 and NVFP4 dispatch (test_parallel_gpu and the
// Python ParallelMoE tests).
Status make_gpu_backend(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy,
                        const RankLayout& layout, const MoeWeightsView* host_weights, uint64_t dummy_seed,
                        cudaStream_t stream, std::unique_ptr<ExpertBackend>* out);
#endif

// The most tokens the experts of one rank can be handed in one step, given at most max_tokens_per_rank
// tokens on every rank: sizes a GPU layer's workspace (its problem.max_tokens).
int64_t max_expert_tokens(const ParallelConfig& config, Strategy strategy, int64_t max_tokens_per_rank);

enum class QuantizedDispatch {
  kAuto,  // on for w4a4 with allgather-reducescatter, off otherwise
  kOff,   // bf16 token rows (2 bytes per element)
  kOn,    // NVFP4 token rows (0.5625 bytes per element); w4a4 with allgather-reducescatter or alltoall
};
// "auto", "off", "on".
const char* to_string(QuantizedDispatch q);
Status parse_quantized_dispatch(std::string_view name, QuantizedDispatch* out);

struct ParallelMoeOptions {
  // Check that the ranks which must hold the same tokens (a DP group's TP ranks) pass the same count:
  // one small all-gather per step. Off for CUDA-graph capture.
  bool check_token_counts = true;
  // NVFP4-quantized dispatch (header comment): the tokens travel as their w4a4 GEMM1 input, quantized
  // once with one shared input scale for all experts (numerics: the single-rank w4a4 layer with every
  // a13_scale_2 replaced by the largest). kOn in w4a16 mode, or with a strategy that sends no tokens
  // (none, tp-allreduce), is rejected by create(). Every rank must pass the same value (checked).
  QuantizedDispatch quantized_dispatch = QuantizedDispatch::kAuto;
};

// Per-step times in seconds (host clock, with a backend synchronize at each boundary when requested).
struct StepTimes {
  double dispatch_s = 0, experts_s = 0, combine_s = 0;
};

class ParallelMoe {
 public:
  struct Args {
    const uint16_t* hidden = nullptr;       // [num_tokens, H] bf16, in the backend's memory
    const void* router_logits = nullptr;    // [num_tokens, E], or the precomputed routing below
    LogitsType logits_type = LogitsType::kF32;
    const int32_t* topk_ids = nullptr;      // [num_tokens, k] global expert ids
    const float* topk_weights = nullptr;    // [num_tokens, k]
    int64_t num_tokens = 0;                 // 0 <= num_tokens <= problem.max_tokens
    void* out = nullptr;                    // [num_tokens, H] backend->output_type(): the full layer output
                                            // (may not overlap the inputs: refused by name)
    // CUDA-graph mode when >= 0 (strategies none, tp-allreduce and allgather-reducescatter; alltoall
    // has none): the forward waits on nothing on the host, and allgather-reducescatter exchanges
    // exactly padded_tokens token rows per rank (num_tokens real ones, then filler rows whose router
    // weights are 0 and whose outputs are dropped; zero hidden states, with quantized dispatch zero
    // codes and zero block scales), so no rank needs the others' counts. Every rank
    // of a DP group must pass the same padded_tokens (num_tokens <= padded_tokens <= max_tokens); with
    // options.check_token_counts on (not while capturing) that is checked, otherwise it is the
    // caller's contract, as is calling synchronize() (or waiting on the stream) after the step.
    // Outputs are bit-identical to the unpadded forward: every row is computed independently, and
    // the expert layer's configs (picked by its row count, which padding changes) give the same bits
    // (test_moe_gpu checks every sm90 config against the default). Do not pass StepTimes or keep
    // check_token_counts on while capturing: both wait on the host.
    int64_t padded_tokens = -1;
  };

  // `world` must outlive the layer; the layer owns the backend.
  static Status create(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy,
                       comm::Communicator* world, std::unique_ptr<ExpertBackend> backend,
                       const ParallelMoeOptions& options, std::unique_ptr<ParallelMoe>* out);
  ~ParallelMoe();

  const RankLayout& layout() const;
  ExpertBackend& backend() const;
  // Whether tokens are dispatched NVFP4-quantized (options.quantized_dispatch resolved).
  bool quantized_dispatch() const;
  // The shared GEMM1 input scale (decode convention) of quantized dispatch; 0 when off.
  float dispatch_input_scale_2() const;
  // Bytes of one dispatched token record: hidden (2H bf16, or H/2 + H/16 NVFP4) + top-k ids and weights.
  size_t dispatch_record_bytes() const;
  // Collective. On an error the world communicator is aborted (the peers fail fast instead of waiting).
  Status forward(const Args& args, StepTimes* times = nullptr);
  // Waits, with the communicators' deadline, for the collectives a graph-mode forward enqueued on the
  // layer's stream (or a graph replayed on it; after a replay on another stream, make the layer's
  // stream wait for that one first): on an error or timeout, aborts every group of this rank.
  Status synchronize();
  // Whether the last forward's expert layer on this rank skipped routed expert ids outside
  // [0, num_experts): the GPU backend skips and counts them, as MoeLayer::forward does (the output
  // then lacks those slots), and this returns InvalidArgument naming the count; the CPU backend and
  // strategy alltoall reject such ids before computing. Rank-local (each rank checks the ids it ran:
  // with allgather-reducescatter those of its whole DP group). Waits for the rank's queued expert
  // work: not while capturing a graph.
  Status check_device_errors();

  struct Impl;

 private:
  explicit ParallelMoe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Set-up check (used by create, exposed for tests and tools): all-gathers config_signature() over
// `world` and fails on every rank, naming the first rank whose text differs from rank 0's and the
// differing fields, when they do not all agree. Buffers come from `backend` (the communicator's memory).
Status check_same_config(comm::Communicator& world, ExpertBackend& backend, const std::string& signature);

}  // namespace fp4moe
