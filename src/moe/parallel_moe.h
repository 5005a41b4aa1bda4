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
// layer over device memory (NcclCommunicator). Tokens travel as records of [hidden (bf16, H) | top-k
// ids (i32) | top-k weights (f32)], so routing goes with its token and one collective moves all three.
// CUDA graphs: Args::padded_tokens selects a mode without host waits and with fixed exchange sizes;
// the communicators must then be created with CommOptions::wait_each_op off. Streams: the backend and
// the communicators must work on one stream (the GPU backend's and NCCL's), since a copy that follows
// an enqueued collective relies on stream order.
// NOTE: in w4a4 mode the records still carry bf16 tokens (not NVFP4 as the seed sends them): the
// per-expert input scales of w4a4 would make a single pre-dispatch quantization change the numerics.
//
// Determinism: with LocalCommunicator, partial outputs are summed in ascending world-rank order (alltoall:
// in ascending order of the ranks that computed them, the others contributing exact zeros), so a
// forward is bit-reproducible and equal to a serial sum of the ranks' partial outputs in that order.
#pragma once

#include <memory>

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
};

// The fp64 reference (ref::moe_forward_routed) on this rank's shard of `full` weights, host memory, f32
// output. `full` holds all experts with the full intermediate size (make_random_weights).
Status make_cpu_reference_backend(const MoeProblem& problem, const HostMoeWeights& full, const RankLayout& layout,
                                  const ref::ReferenceOptions& options, std::unique_ptr<ExpertBackend>* out);

#if FP4MOE_HAS_CUDA
// The GPU layer (MoeLayer) on this rank's shard, device memory on `stream`, bf16 output (partial outputs
// are reduced in bf16, as vLLM does). Weights: `host_weights` (all experts, full intermediate size: the
// layer reads its shard) or, when null, MoeLayer::create_dummy(dummy_seed). problem.max_tokens is the most
// tokens one rank passes; the layer is sized for max_expert_tokens(config, strategy, ...).
// STATUS: compiled only, not yet run on a GPU.
Status make_gpu_backend(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy,
                        const RankLayout& layout, const MoeWeightsView* host_weights, uint64_t dummy_seed,
                        cudaStream_t stream, std::unique_ptr<ExpertBackend>* out);
#endif

// The most tokens the experts of one rank can be handed in one step, given at most max_tokens_per_rank
// tokens on every rank: sizes a GPU layer's workspace (its problem.max_tokens).
int64_t max_expert_tokens(const ParallelConfig& config, Strategy strategy, int64_t max_tokens_per_rank);

struct ParallelMoeOptions {
  // Check that the ranks which must hold the same tokens (a DP group's TP ranks) pass the same count:
  // one small all-gather per step. Off for CUDA-graph capture.
  bool check_token_counts = true;
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
    // CUDA-graph mode when >= 0 (strategies none, tp-allreduce and allgather-reducescatter; alltoall
    // has none): the forward waits on nothing on the host, and allgather-reducescatter exchanges
    // exactly padded_tokens token rows per rank (num_tokens real ones, then filler rows whose router
    // weights are 0 and whose outputs are dropped), so no rank needs the others' counts. Every rank
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
  // Collective. On an error the world communicator is aborted (the peers fail fast instead of waiting).
  Status forward(const Args& args, StepTimes* times = nullptr);
  // Waits, with the communicators' deadline, for the collectives a graph-mode forward enqueued on the
  // layer's stream (or a graph replayed on it; after a replay on another stream, make the layer's
  // stream wait for that one first): on an error or timeout, aborts every group of this rank.
  Status synchronize();

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
