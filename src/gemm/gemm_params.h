// Arguments shared by the grouped-GEMM kernels of every path (SIMT, sm90).
//
// GEMM1: for each local expert e and each of its rows (routed pairs), h = act(alpha1[e] * W13_e x
//        + b13) over the gate/up interleaved units, written to the tiled intermediate buffer
//        (bf16, or NVFP4 fake-quantized with a2_gs[e] in w4a4 mode).
// GEMM2: y = weight * (alpha2[e] * W2_e h + b2), bf16 row-major [rows_cap, H], weight = the pair's
//        router weight (1 when it was applied to the input).
// Token tiles: expert e's rows are cut into tiles of `tile_tokens`; tile_start (from the plan kernel)
// numbers them across experts. With tail tiles (PermuteParams::tail_rows), an expert whose last tile
// would hold at most tail_rows rows past a full one loses that tile: its last full tile stops at a
// multiple of tile_tokens, and a second launch of a narrower config (tail_of = the first launch's
// tile_tokens) runs those rows, one tile per such expert, numbered by tail_start.
#pragma once

#include <cstdint>

#include "fp4moe/moe.h"
#include "src/moe/weight_layout.h"
#include "src/moe/workspace.h"

namespace fp4moe {

// Division of 0 <= n < 2^31 by a fixed 1 <= d < 2^31 as a multiply-high, an add and a shift (the
// round-up method: m = floor(2^32 (2^s - d) / d) + 1 with 2^s >= d; umulhi(n, m) < n keeps the sum
// below 2^32). Made on the host: a 64-bit division in a kernel is a ~70-instruction routine.
struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((uint64_t(1) << s) < d) ++s;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
  }
#if defined(__CUDA_ARCH__)
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
#else
  uint32_t div(uint32_t n) const { return (uint32_t((uint64_t(n) * m) >> 32) + n) >> s; }
#endif
};

struct MoeGemmParams {
  WorkspaceLayout layout;
  WorkspacePtrs ws;
  layout::GemmWeightShape g1, g2;
  const uint8_t* w13 = nullptr;
  const uint8_t* w2 = nullptr;
  const float* alpha1 = nullptr;
  const float* alpha2 = nullptr;
  const float* a2_gs = nullptr;
  const float* w13_bias = nullptr;
  const float* w2_bias = nullptr;
  bool mxfp4 = false;  // scale codes of MXFP4 (else NVFP4) weights: layout::scale_codec
  int num_local_experts = 0;
  int64_t hidden = 0;
  int64_t inter_local = 0;
  int top_k = 0;
  Activation activation = Activation::kSwiGLU;
  bool w4a4 = false;
  bool weight_on_input = false;
  int tile_tokens = 0;
  int64_t max_tiles = 0;  // upper bound of the token tiles of any routing (grid sizing)
  // Split-K (sm90 BN16 only): each tile's K chunks cut into split_k1 (GEMM1) / split_k2 (GEMM2)
  // ranges, run as separate work units; the last unit of a tile to finish sums the fp32 partials in
  // range order and runs the epilogue. 1: off.
  int split_k1 = 1, split_k2 = 1;
  // (sm90 GEMM2 over canonical K ranges, set by the launch) its range length and number of ranges
  // (k_range_chunks, k_range_count: workspace.h)
  int k_range_chunks = 0, k_ranges = 1;
  // (sm90, set by the launch for its config) the kernel's divisors: its split (split_k1 or split_k2)
  // and its m-blocks (weight units over the config's consumers)
  FastDiv div_split, div_m_blocks;
  // Tail launch (sm90): 0, or the tile_tokens of the main launch whose experts' tails this one runs
  // (their rows from the last multiple of tail_of on; tiles numbered by ws.tail_start).
  int tail_of = 0;
  // GEMM1/GEMM2 overlap (sm90, LayerOptions::gemm_overlap; never with tails or a split GEMM1): GEMM1
  // counts its finished weight units per token tile in ws.tile_done, and GEMM2, which then does not
  // wait for GEMM1 as a whole, starts a token tile's rows once all of GEMM1's units of it are in.
  bool overlap = false;
  // Direct GEMM1 (sm90 BN16, moe_gemm_sm90_kernel<T, true>; set by MoeLayer::forward for a one-token
  // forward with precomputed routing in w4a16 without input weighting, split-K or tails, and H a
  // multiple of 64): GEMM1 makes the tile table from the routed ids itself (as the plan would, also
  // for ids out of range or repeated) and reads the token's hidden row in place, so it waits for
  // neither the plan nor the permute. The permute does not run (PermuteParams::plan_only); the plan
  // runs in one CTA, for GEMM2 and the finalize. GEMM1 still completes after the plan, and with the
  // overlap lets GEMM2 be scheduled only after it.
  const int32_t* direct_ids = nullptr;  // [top_k], the user's routed ids
  const uint16_t* direct_x = nullptr;   // [hidden] bf16, 16-byte aligned
  int num_experts = 0;                  // global expert count, and the first local expert's id
  int expert_begin = 0;
};

// Which expert and rows a token tile covers (tile numbering from the plan kernel's tile_start).
struct TileCoord {
  int expert;    // local expert, -1: past the last tile
  int32_t row0;  // first row of the tile
  int32_t rows;  // valid rows in the tile (<= tile_tokens)
};

#if defined(__CUDACC__)
// tile_start: the plan's table (tile_start, or tail_start for a tail launch), in global memory or a
// shared-memory copy of it. kTails: the kernel may run a tail launch (compiled only where it can: the
// extra code made ptxas spill the 4-consumer BN128 kernel).
// The local expert e of a tile below tile_start[E_local]: tile_start[e] <= tile < tile_start[e + 1].
__device__ __forceinline__ int tile_expert(const MoeGemmParams& p, const int32_t* tile_start, int64_t tile) {
  int lo = 0, hi = p.num_local_experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tile_start[mid] <= tile) lo = mid;
    else hi = mid;
  }
  return lo;
}

template <bool kTails = false>
__device__ __forceinline__ TileCoord find_tile(const MoeGemmParams& p, const int32_t* tile_start, int64_t tile) {
  if (tile >= tile_start[p.num_local_experts]) return {-1, 0, 0};
  const int lo = tile_expert(p, tile_start, tile);
  // (Through L2, ld.cg: with MoeGemmParams::overlap, GEMM2 reads the plan's tables without having
  // waited on its predecessor.)
  if (kTails && p.tail_of > 0) {  // the one tail tile of expert lo: its rows past the last multiple of tail_of
    const int32_t count = __ldcg(&p.ws.counts[lo]);
    return {lo, __ldcg(&p.ws.seg_start[lo]) + count / p.tail_of * p.tail_of, count % p.tail_of};
  }
  const int32_t within = int32_t(tile - tile_start[lo]);
  const int32_t rows = __ldcg(&p.ws.counts[lo]) - within * p.tile_tokens;
  return {lo, __ldcg(&p.ws.seg_start[lo]) + within * p.tile_tokens, rows < p.tile_tokens ? rows : p.tile_tokens};
}
#endif

// Activation in fp32, shared by every GPU path.
FP4MOE_HD float activation_f32(Activation act, float gate, float up) {
  if (act == Activation::kSwiGLU) return gate / (1.0f + expf(-gate)) * up;
  const float g = fminf(gate, 7.0f);
  const float l = fminf(fmaxf(up, -7.0f), 7.0f);
  return g / (1.0f + expf(-1.702f * g)) * (l + 1.0f);
}

}  // namespace fp4moe
