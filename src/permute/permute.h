// Routing plan, permutation (with w4a4 activation quantization fused) and the final combine.
//
//   plan:     one CTA counts the pairs routed to each local expert, lays out 8-row-aligned expert
//             segments and the token-tile (and tail-tile) prefixes, and gives each local pair its
//             row (pair_row, row_pair);
//   permute:  a CTA per routed (token, slot), or per pair and column range for few pairs, copies the
//             token's row into its expert's segment of the tiled activation buffer (scaled by the
//             router weight for Llama-4, NVFP4 fake-quantized in w4a4 mode; copied unchanged when
//             the rows are prequantized), zeroes the K padding, and copies the pair's router
//             weight to its row (row_weight, for GEMM2's epilogue);
//   finalize: out[t] = sum over slots, in slot order, of the weighted expert outputs y.
// No host synchronization; all sizes come from device memory.
#pragma once

#include <cuda_runtime_api.h>

#include "fp4moe/status.h"
#include "src/moe/workspace.h"

namespace fp4moe {

struct PermuteParams {
  const uint16_t* hidden = nullptr;  // [T, H]
  int64_t num_tokens = 0;
  int64_t hidden_size = 0;
  int top_k = 0;
  int num_experts = 0;       // global E
  int expert_begin = 0;      // global id of local expert 0
  int num_local_experts = 0;
  int64_t inter_local = 0;
  int tile_tokens = 0;       // token tile (BN) of the GEMMs for this forward
  // Tail tiles (0: none): an expert with more than tile_tokens rows whose last tile would hold at most
  // tail_rows of them has that tile cut off (tile_start) and numbered in tail_start instead, for a
  // narrower launch (MoeGemmParams::tail_of). tail_rows < tile_tokens.
  int tail_rows = 0;
  bool w4a4 = false;
  bool weight_on_input = false;
  // w4a4: hidden rows are already the quantized GEMM1 input (e2m1 code x e4m3 block scale, router
  // weight applied; ForwardArgs::hidden_prequantized): the permute copies them unchanged.
  bool prequantized = false;
  const float* a1_gs = nullptr;  // [E_local]
  // No routing kernel ran before the plan (precomputed routing): the plan is the forward's first
  // kernel and is launched without programmatic dependent launch. Either way the first kernel waits
  // for the caller's stream, so the later kernels may read the forward's inputs (hidden) before
  // their pdl_wait().
  bool plan_is_first = false;
  // Direct GEMM1 (MoeGemmParams::direct_ids) reads the token's row in place: no GEMM1 input rows
  // (ws.x) to write. The fused plan-and-permute then runs as one CTA (the plan, every pair's row and
  // router weight, the intermediate's K padding), leaving the other SMs to GEMM1.
  bool plan_only = false;
  WorkspaceLayout layout;
  WorkspacePtrs ws;
};

Status launch_plan(const PermuteParams& p, cudaStream_t stream);
Status launch_permute(const PermuteParams& p, cudaStream_t stream);
// The plan then the permute; for at most kPlanPermuteMaxPairs routed pairs (decode) both in one
// kernel, whose rows within an expert's segment follow the pair order. launch_permute alone does
// nothing for T = 0.
constexpr int64_t kPlanPermuteMaxPairs = 128;
Status launch_plan_and_permute(const PermuteParams& p, cudaStream_t stream);
Status launch_finalize(const PermuteParams& p, uint16_t* out, cudaStream_t stream);

}  // namespace fp4moe
