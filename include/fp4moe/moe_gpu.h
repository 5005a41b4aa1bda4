// The MoE layer on one GPU: owns the repacked expert weights and runs the forward pass.
//
//   MoeLayer::create(problem, host weights)  repacks checkpoint-layout weights onto the device once;
//   MoeLayer::create_dummy(problem, seed)    random valid weights generated on the device;
//   layer->workspace_bytes()                 scratch the caller allocates (sized for max_tokens);
//   layer->forward(args, workspace, workspace_bytes, stream)
//                                            asynchronous, no host synchronization, CUDA-graph safe.
//
// Every argument is validated before anything is launched; errors name the argument and its value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe {

// This build's device code is compiled for sm_90a alone (CMakeLists.txt): layers are created on
// Hopper GPUs (compute capability 9.0) only, and on any other device creation returns Unsupported.
enum class KernelPath {
  kAuto,  // the fastest path: sm90
  kSm90,  // FP4-dequant grouped GEMMs on wgmma (sm_90a)
  kSimt,  // plain CUDA cores: slow, simple; the path the fast one is checked against
};
const char* to_string(KernelPath path);
Status parse_kernel_path(std::string_view name, KernelPath* out);

struct LayerOptions {
  KernelPath path = KernelPath::kAuto;
  // Expert / tensor parallel shard this layer holds (see reference/sharding.h for the semantics).
  int ep_rank = 0, ep_size = 1;
  int tp_rank = 0, tp_size = 1;
  // Config choices measured by `fp4moe-bench --tune FILE` on this GPU (empty: the built-in heuristic).
  std::string tune_file;
  // Split-K for decode where a GEMM's tiles would fill at most half the SMs (a token or two on a few experts, e.g. Llama-4
  // top-1 at T=1): the sm90 decode config (16-token tiles) cuts each tile's K into up to 8 ranges on
  // otherwise idle SMs and sums their fp32 partials in a fixed order. Deterministic run to run, but
  // not bit-identical to the unsplit forward, and the split depends on the batch's token count (and on
  // the SMs the GEMMs launch on: the device's, or max_sms), so a token's output bits then depend on
  // how many tokens share its batch. Off by default.
  bool split_k = false;
  // Tail tiles (sm90, prefill): where the token tile is 128 or more, an expert's last tile holding at
  // most 32 rows past full ones runs in a narrower launch (one more per GEMM) instead of a whole
  // main-width tile.
  // Same bits either way; off only to measure it.
  bool tail_tiles = true;
  // GEMM2 split at its K ranges (sm90): where the local intermediate size spans more than 64 K chunks
  // of 64 (Llama-4: 128, Mixtral-8x7B: 224), every GEMM2 kernel sums K in ranges of at most 64
  // chunks, at least two, of one length, the last not longer (Llama-4: two of 64, Mixtral: four of 56), each
  // range's sum added to a running total in order; where GEMM2 has few 16-token tiles
  // (sm90::select_range_split), each range then runs as its own work unit on another SM and the
  // ranges' sums are added in the same order. Same bits either way (unlike split_k, and for such a
  // GEMM2 it replaces split_k's split); off only to measure it.
  bool range_split = true;
  // GEMM1/GEMM2 overlap (sm90, decode and small batches): where GEMM1 runs 16- or 32-token tiles
  // (sm90::select_gemm_overlap; not the tail kernels' config, never with tail tiles or a split
  // GEMM1), GEMM2 starts a token tile as soon as GEMM1 has finished it, on the SMs GEMM1's last round
  // leaves idle. Same bits either way; off only to measure it.
  bool gemm_overlap = true;
  // Direct GEMM1 (sm90, one token, precomputed routing, w4a16 without input weighting, H a multiple
  // of 64, top_k <= 16, a 16-token (BN16) decode config without split-K): GEMM1 reads the token's
  // routed ids and hidden row in place instead of waiting for the plan and the permute. The permute
  // does not run; the plan runs beside GEMM1 in one CTA, for GEMM2 and the combine. Same bits either
  // way (also for ids out of range or repeated); off only to measure it. KernelInfo::gemm1 says
  // ", direct with precomputed routing" where it applies.
  bool direct_gemm1 = true;
  // The most CTAs of each sm90 GEMM launch, one an SM (0: one per SM of the device): the GEMMs' grids
  // are persistent, so a limit leaves SMs to kernels that run beside the layer on other streams
  // (communication, attention); it enters the config choice as the SM count. Per launch, not for
  // the layer: with programmatic dependent launch GEMM2's CTAs may become resident (waiting, or
  // with the GEMM1/GEMM2 overlap working) while GEMM1's still run, so the layer can hold up to
  // twice as many SMs for a while; hard isolation needs green contexts or MPS. The plan, permute
  // and finalize kernels are short and keep their own grids. Same bits either way, but with split_k
  // (whose split follows the SM count).
  int max_sms = 0;
  // Every token of a forward has at least one of its top_k ids among this shard's experts, as after
  // an expert-parallel all-to-all dispatch, which sends a rank only such tokens (ParallelMoe sets it
  // for its alltoall strategy). Only the config choice reads it: it then expects more rows per local
  // expert than T * K / E (uniform routing given a local pick). Speed only, the same bits either way.
  bool tokens_routed_here = false;
};

struct ForwardArgs {
  const uint16_t* hidden = nullptr;  // [num_tokens, H] bf16, device, 16-byte aligned
  // Routing input, one of:
  const void* router_logits = nullptr;  // [num_tokens, E] fp32 or bf16, device
  LogitsType logits_type = LogitsType::kF32;
  const int32_t* topk_ids = nullptr;    // [num_tokens, top_k] precomputed routing (with topk_weights)
  const float* topk_weights = nullptr;  // [num_tokens, top_k]
  int64_t num_tokens = 0;               // 0 <= num_tokens <= problem.max_tokens
  uint16_t* out = nullptr;              // [num_tokens, H] bf16, device, 16-byte aligned; it and the
                                        // workspace may not overlap the inputs nor each other (no
                                        // in-place forward: validate() refuses it by name)
  // w4a4 only, after set_input_scale_2(s): `hidden` already holds the quantized GEMM1 input, each
  // element an e2m1 code times its e4m3 block scale (exact in bf16), as the NVFP4 `kernel` recipe
  // produces it at encode global scale 1/s, with Llama-4's router weight already applied (the
  // parallel layer's NVFP4 dispatch sends such rows). The permute copies the rows unchanged instead
  // of weighting and quantizing them: the output equals this layer's for the original bf16 rows.
  bool hidden_prequantized = false;
};

// What ran, for --verbose, the JSON and the Python binding.
struct KernelInfo {
  KernelPath path = KernelPath::kSimt;
  std::string gemm1;  // kernel and config names (", split-K N" when LayerOptions::split_k splits it,
                      // ", tail CONFIG" where LayerOptions::tail_tiles runs tails in a launch of
                      // their own: a main tile of 128 or more, more rows than one tile; in gemm2,
                      // ", K in N ranges" for a GEMM2 over canonical K ranges, with ", split at
                      // them" where LayerOptions::range_split splits it, ", overlaps GEMM1" where
                      // LayerOptions::gemm_overlap applies, ", dynamic units" where tiles are taken
                      // from a counter: GEMM2's 16- and 32-token tiles, both GEMMs' tiles of 48
                      // or more, never the tail kernels)
  std::string gemm2;
  std::string regime; // e.g. "decode: <= 10 rows per expert"
};

class MoeLayer {
 public:
  static Status create(const MoeProblem& problem, const MoeWeightsView& host_weights, const LayerOptions& options,
                       std::unique_ptr<MoeLayer>* out);
  // Weights identical to make_random_weights(problem, seed) (sharded per options), generated on the
  // device without a host copy.
  static Status create_dummy(const MoeProblem& problem, uint64_t seed, const LayerOptions& options,
                             std::unique_ptr<MoeLayer>* out);
  ~MoeLayer();

  const MoeProblem& problem() const;
  const LayerOptions& options() const;
  int num_local_experts() const;
  int64_t local_intermediate_size() const;
  // Bytes of scratch memory forward() needs for up to problem().max_tokens tokens (256-byte aligned).
  size_t workspace_bytes() const;
  // Bytes of repacked weights held on the device.
  size_t weight_bytes() const;

  // Checks args against the problem (shapes, pointers, alignment, token count) without launching,
  // and that every buffer is memory the layer's device can dereference: its own device memory,
  // managed memory or mapped pinned host memory (pageable host memory only on systems where the
  // device reads it, HMM or ATS). One driver query per buffer (cudaPointerGetAttributes; legal while
  // a CUDA graph is being captured). fp4moe-bench's JSON gives this call's host time (`validate_us`).
  Status validate(const ForwardArgs& args, const void* workspace, size_t workspace_bytes) const;
  // Runs validate(), then the layer on `stream`: a stream of the layer's device (null: the legacy
  // default stream). A stream of another device is refused by name before anything is launched
  // (not while the stream is being captured: CUDA cannot say a capturing stream's device).
  Status forward(const ForwardArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream) const;
  // Which kernels forward() runs for num_tokens tokens.
  KernelInfo kernel_info(int64_t num_tokens) const;

  // Tuning hooks (fp4moe-bench --tune): the names of the compiled sm90 configs, and forcing one of
  // them for every token count ("" restores the normal choice). A config changes speed, never results.
  static std::vector<std::string> sm90_config_names();
  Status force_sm90_config(const std::string& name);

  // w4a4: replaces every local expert's GEMM1 input global scale (a13_scale_2, decode convention)
  // by `input_scale_2` (finite, > 0): the layer then computes exactly what a layer created with
  // a13_scale_2[e] = input_scale_2 for every e computes, and accepts ForwardArgs::hidden_prequantized
  // rows quantized with it. One shared scale lets a token be quantized once for all its experts.
  // Synchronous, set-up time: not while a forward of this layer is in flight or captured.
  Status set_input_scale_2(float input_scale_2);
  // The scale set_input_scale_2 set, or 0 (the weights' own per-expert scales).
  float input_scale_2() const;

  // Device-side errors of the most recent forward on this workspace: expert ids outside [0, E) in
  // precomputed routing are skipped (their slot contributes nothing) and counted. Synchronizes. Call
  // it after a forward on this workspace (before any, the count is whatever the memory held).
  Status check_device_errors(const void* workspace, cudaStream_t stream) const;

  struct Impl;

 private:
  explicit MoeLayer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Host-side check of host-resident expert ids (names the first bad index and value).
Status validate_topk_ids(const MoeProblem& problem, const int32_t* host_ids, int64_t num_tokens);

}  // namespace fp4moe
