// sm_90a MoE GEMMs (src/gemm/sm90/moe_gemm_sm90.cuh): where a CTA's work comes from and when it may
// start. Stage release and the pipeline's position (PipeState), the lookup of a token tile in the
// plan's tables (find_tile_shared) or in direct GEMM1's own table (make_direct_table, direct_tile),
// GEMM1's count of finished weight units for an overlapping GEMM2 (count_gemm1_units) and GEMM2's
// wait on it (wait_gemm1_units), and the dynamic hand-out of work units (schedule_units). Device
// code only; the host side of these choices is src/gemm/sm90/config.h and src/moe/forward.cu.
#pragma once

#include <cstdint>

#include "src/common/pdl.h"
#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/ptx.cuh"
#include "src/gemm/sm90/traits.cuh"
#include "src/routing/det_math.h"

namespace fp4moe::sm90 {

// Releases a pipeline stage after this thread's reads of it: every consumer thread arrives (`empty`
// counts kConsumers * 128). An mbarrier arrive releases the arriving thread's own prior accesses
// only: one arrival per warp with no __syncwarp before it (the kernels until session 6) left the
// other lanes' reads formally unordered before the producer's next bulk copy into the stage. With a
// __syncwarp first it is correct by the PTX model, but compute-sanitizer's racecheck still reports
// lds against bulk_g2s on it, and nothing on this release (tests/test_pipeline_probe_gpu.cu).
__device__ __forceinline__ void release_stage(uint64_t* empty_bar) { mbar_arrive(empty_bar); }

// GEMM2 with MoeGemmParams::overlap (the scheduling thread for each unit it hands over, the producer
// for the CTA's first): waits until GEMM1 has counted `units` weight units of a token tile in
// (acquire), then orders those generic-proxy stores before the bulk copies (async proxy). After
// 2^26 polls (each an L2 round trip and a nanosleep of up to ~0.5 us: tens of seconds) the
// dependency is taken as broken: trap, a sticky CUDA error that ends the context, rather than a
// hang. (A counter, not clock64: the producer warpgroup runs on 24 registers; inline asm keeps
// ptxas from spilling around the loop.)
// Racecheck note: a token tile's bulk copy reads the rows its MMAs read (tile_mma_rows: whole 8-row
// blocks), past tc.rows into the next expert's rows, which GEMM1 may still be writing; those rows
// feed only output columns that the epilogue discards.
__device__ __forceinline__ void wait_gemm1_units(const int32_t* done, int32_t units) {
  asm volatile(
      "{\n"
      ".reg .pred more, late;\n"
      ".reg .b32 v, n;\n"
      "mov.b32 n, 0;\n"
      "WAIT_%=:\n"
      "ld.acquire.gpu.global.b32 v, [%0];\n"
      "setp.lt.s32 more, v, %1;\n"
      "@!more bra DONE_%=;\n"
      "nanosleep.u32 256;\n"
      "add.u32 n, n, 1;\n"
      "setp.gt.u32 late, n, 67108864;\n"
      "@late trap;\n"
      "bra WAIT_%=;\n"
      "DONE_%=:\n"
      "}\n" ::"l"(done),
      "r"(units)
      : "memory");
  fence_proxy_async_global();
}

// find_tile from the shared-memory copies of the plan's tables (Sm90Traits::kSharedTileTables):
// tables holds tile_start, counts and seg_start, kMaxLocalExperts + 1 words each. (No tail launch:
// those run 32-token tiles.)
__device__ __forceinline__ TileCoord find_tile_shared(const MoeGemmParams& p, const int32_t* tables, int64_t tile) {
  if (tile >= tables[p.num_local_experts]) return {-1, 0, 0};
  const int e = tile_expert(p, tables, tile);
  const int32_t within = int32_t(tile - tables[e]);
  const int32_t rows = tables[kMaxLocalExperts + 1 + e] - within * p.tile_tokens;
  const int32_t row0 = tables[2 * (kMaxLocalExperts + 1) + e] + within * p.tile_tokens;
  return {e, row0, rows < p.tile_tokens ? rows : p.tile_tokens};
}

// Shared-memory pipeline position, carried across tiles.
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance(int num_stages) {
    if (++stage == num_stages) stage = 0, phase ^= 1;
  }
};

// Direct GEMM1 (MoeGemmParams::direct_ids): the tile table of a one-token forward, made from the
// routed ids in place, in tile_start's shared memory: word 0 the tiles, then for tile t its local
// expert, first row and rows at 1 + t, 1 + kMaxK + t and 1 + 2 kMaxK + t. As the plan makes them:
// ids out of range or of other shards get no row, each local expert of the token one tile of its
// count of the token's ids (more than one only for a repeated id), tiles in expert order, each
// expert's rows from the sum of the earlier experts' counts rounded up to 8. scratch: 3 kMaxK words.
// Called by every thread of the CTA (it synchronizes).
constexpr int kDirectMaxK = routing::kMaxTopK;
__device__ __forceinline__ void make_direct_table(const MoeGemmParams& p, int32_t* table, int32_t* scratch) {
  int32_t* const ids = scratch;                    // the token's ids
  int32_t* const count = scratch + kDirectMaxK;    // k's first occurrence of a local expert: its count, else 0
  int32_t* const local = scratch + 2 * kDirectMaxK;
  const int k = threadIdx.x;
  if (k < p.top_k) ids[k] = __ldcg(p.direct_ids + k);
  __syncthreads();
  if (k < p.top_k) {
    const int32_t id = ids[k];
    int e;
    bool first = is_local_expert(id, p.num_experts, p.expert_begin, p.num_local_experts, &e);
    int32_t n = 0;
    for (int j = 0; j < p.top_k; ++j) {
      n += ids[j] == id;
      first &= !(j < k && ids[j] == id);
    }
    count[k] = first ? n : 0;
    local[k] = e;
  }
  __syncthreads();
  if (k < p.top_k && count[k] > 0) {
    int32_t tile = 0, row0 = 0;
    for (int j = 0; j < p.top_k; ++j) {
      if (count[j] > 0 && local[j] < local[k]) tile += 1, row0 += segment_rows(count[j]);
    }
    table[1 + tile] = local[k];
    table[1 + kDirectMaxK + tile] = row0;
    table[1 + 2 * kDirectMaxK + tile] = count[k];
  }
  if (k == 0) {
    int32_t tiles = 0;
    for (int j = 0; j < p.top_k; ++j) tiles += count[j] > 0;
    table[0] = tiles;
  }
}

__device__ __forceinline__ TileCoord direct_tile(const int32_t* table, int64_t tile) {
  if (tile >= table[0]) return {-1, 0, 0};
  return {table[1 + tile], table[1 + kDirectMaxK + tile], table[1 + 2 * kDirectMaxK + tile]};
}

// GEMM1 with MoeGemmParams::overlap: the producer warpgroup's thread 32 counts the weight units of
// each of the CTA's tiles into tile_done once every consumer thread has arrived on `counted` (its
// epilogue done), then completes a phase of `counted + 1` (`free`), which each consumer thread
// waits for before its next arrival: neither barrier can run a phase ahead of its waiters. There is
// no split-K with the overlap, so a work unit is a tile; 32-bit, as launch_traits keeps the work
// below 2^31.
template <int kConsumers>
__device__ __forceinline__ void count_gemm1_units(int32_t* tile_done, FastDiv div_m_blocks, uint64_t* counted,
                                                  uint32_t tiles, uint32_t m_blocks, int m_units) {
  uint32_t phase = 0;
  for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint32_t token_tile = div_m_blocks.div(t);
    const int mb = int(t - token_tile * m_blocks);
    mbar_wait(counted, phase);
    red_release_gpu_add(&tile_done[token_tile], min(kConsumers, m_units - mb * kConsumers));
    mbar_arrive(counted + 1);
    phase ^= 1;
  }
}

// The dynamically scheduled kernels (Sm90Traits::kTileHandoff): the producer warpgroup's thread 32
// takes the CTA's work units after its first (blockIdx.x) from the GEMM's ws.next_unit, one ahead
// of the producer: it puts each in `slot` and completes a phase of `ready`, and waits for the
// producer's arrival on `taken` before the next; a unit past the last ends both. (An atomic in the
// producer thread itself waited for its round trip at once: ptxas makes a single thread's atomic
// add the warp-aggregated form, whose shuffle needs the result.) Only where blockIdx.x < num_work:
// the producer then takes every unit up to the first past the last, so that none is taken and left.
// prepare(u) runs for each unit before it is handed over, while the producer still copies the
// previous one (GEMM2 with the overlap: the wait for its intermediate rows).
template <class Prepare>
__device__ __forceinline__ void schedule_units(int32_t* next, uint32_t* slot, uint64_t* ready, uint64_t* taken,
                                               uint32_t num_work, Prepare&& prepare) {
  for (uint32_t phase = 0;; phase ^= 1) {
    mbar_wait(taken, phase ^ 1);  // (first: the CTA's own unit; the atomic after it: one unit ahead, not two)
    const uint32_t u = gridDim.x + uint32_t(atomicAdd(next, 1));
    if (u < num_work) prepare(u);
    *reinterpret_cast<volatile uint32_t*>(slot) = u;
    mbar_arrive(ready);  // (a release at CTA scope: the slot's store)
    if (u >= num_work) return;
  }
}

}  // namespace fp4moe::sm90
