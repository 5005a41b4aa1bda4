// Thin wrappers over the sm90 instructions the grouped GEMMs use: mbarriers, bulk async copies,
// register reallocation, and the bf16x2 FMA of the FP4 decode. wgmma itself comes from CuTe's GMMA
// atoms (cute/arch/mma_sm90_gmma.hpp).
#pragma once

#include <cstdint>

#include "fp4moe/numerics.h"

namespace fp4moe::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A value ptxas cannot see through (so it keeps it in a register instead of recomputing it).
__device__ __forceinline__ uint32_t opaque_u32(uint32_t v) {
  uint32_t r;
  asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}

__device__ __forceinline__ uint64_t opaque_u64(uint64_t v) {
  uint64_t r;
  asm volatile("mov.b64 %0, %1;" : "=l"(r) : "l"(v));
  return r;
}

// Shared-memory loads by 32-bit shared address. Volatile with a memory clobber: they must stay after
// the mbarrier wait (itself volatile, with a memory clobber) that makes the stage's bytes visible.
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint2 lds_u32x2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 lds_u32x4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes initialized barriers visible to the async proxy (the bulk-copy engine).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred ready;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n"
      "@!ready bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy (bulk copy)
// accesses of the same memory.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// *p += v with release semantics at GPU scope: this thread's earlier memory operations, and those it
// has observed (through a barrier), are visible to whoever acquires the new value. One instruction
// in place of a full fence and an atomic (__threadfence() is a sequentially consistent fence that
// also invalidates the L1).
__device__ __forceinline__ void red_release_gpu_add(int32_t* p, int32_t v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Returns *p and adds v, with acquire and release semantics at GPU scope: this thread's earlier
// memory operations, and those it has observed (through a barrier), are visible to whoever acquires
// the new value, and what the releases of earlier values ordered is visible to this thread's later
// ones (and, through a barrier after it, to those it synchronizes with). One instruction in place of
// a fence, an atomic and a fence (__threadfence() twice: two sequentially consistent fences).
__device__ __forceinline__ int32_t atom_acq_rel_gpu_add(int32_t* p, int32_t v) {
  int32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// a + b in fp32, rounded to nearest even, subnormal inputs and results flushed to sign-preserving
// zero: the add of red_add_f32x4 below (red.add.f32 on global memory flushes them; its .noftz needs
// PTX ISA 9.4), so that sums done in registers and in L2 agree to the bit.
__device__ __forceinline__ float add_rn_ftz(float a, float b) {
  float r;
  asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// p[0..3] += {a, b, c, d} in L2 (16-byte aligned; relaxed, GPU scope; no result, so the thread does
// not wait for it). Each word's add as add_rn_ftz. This thread's later accesses of the same words
// see it (same-address program order).
__device__ __forceinline__ void red_add_f32x4(float* p, float a, float b, float c, float d) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}

// Orders generic-proxy global accesses (another kernel's stores, acquired through a flag) before this
// thread's later async-proxy (bulk copy) reads of them.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Global -> shared bulk copy completing on `bar` (bytes and addresses multiples of 16).
__device__ __forceinline__ void bulk_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar,
                                         uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(smem_addr(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// Global -> L2 bulk prefetch (bytes and address multiples of 16): nothing to wait for.
__device__ __forceinline__ void bulk_prefetch_l2(const void* gmem_src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(gmem_src), "r"(bytes) : "memory");
}

// L2 policies: weights are read once per token tile (evict first), activations by every weight tile.
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

template <uint32_t kRegs>
__device__ __forceinline__ void regs_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void regs_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// Named barrier over `threads` threads (a warpgroup's epilogue).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Four 8x8 b16 matrices stored transposed (stmatrix .trans): register i holds matrix i's fragment
// in the mma accumulator layout (a thread's elements of row lane / 4, columns 2 (lane % 4) and + 1,
// the lower column in the low half); lane l gives the shared address (16-byte aligned) of row l % 8
// of matrix l / 8 as stored, i.e. of column l % 8 of the fragment.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// The transpose of an 8 x 8 matrix of 16-bit values held by a warp, in registers. Lane l passes
// row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (low, high half), and gets the same positions of
// the transpose: column l / 4 of the input, its rows 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
  return d;
}

// {float_to_bf16(lo), float_to_bf16(hi)} packed (lo in the low half): one cvt for the pair, the
// software conversion only for NaN inputs (whose quiet, sign-kept result the hardware's canonical
// NaN would not match), so the bits are float_to_bf16's for every input.
__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  if (lo != lo || hi != hi) d = uint32_t(float_to_bf16(lo)) | (uint32_t(float_to_bf16(hi)) << 16);
  return d;
}

// a * b + (-0) on bf16x2: an exact product here, with subnormal inputs honoured (no flush).
// a * {h, h} for the half h (0: low, 1: high) of s: ptxas folds the broadcast into the multiply's
// operand (HMUL2 ... R.H0_H0 / R.H1_H1), no extra instruction.
template <int kHalf>
__device__ __forceinline__ uint32_t bf16x2_mul_half(uint32_t a, uint32_t s) {
  static_assert(kHalf == 0 || kHalf == 1, "half 0 or 1");
  uint32_t d;
  if constexpr (kHalf == 0)
    asm("{.reg .b16 lo, hi; .reg .b32 ss;\n\tmov.b32 {lo, hi}, %2;\n\tmov.b32 ss, {lo, lo};\n\t"
        "fma.rn.bf16x2 %0, %1, ss, %3;}" : "=r"(d) : "r"(a), "r"(s), "r"(0x80008000u));
  else
    asm("{.reg .b16 lo, hi; .reg .b32 ss;\n\tmov.b32 {lo, hi}, %2;\n\tmov.b32 ss, {hi, hi};\n\t"
        "fma.rn.bf16x2 %0, %1, ss, %3;}" : "=r"(d) : "r"(a), "r"(s), "r"(0x80008000u));
  return d;
}

// Shared-memory matrix descriptor of a K-major bf16 tile with the 128-byte swizzle: rows of 128 bytes,
// 8-row atoms 1024 bytes apart (SBO), the tile 1024-byte aligned.
__device__ __forceinline__ uint64_t smem_desc_k128(uint32_t smem_byte_addr) {
  uint64_t desc = 0;
  desc |= uint64_t((smem_byte_addr & 0x3ffff) >> 4);  // start address
  desc |= uint64_t(1) << 16;                            // leading byte offset (unused for this layout)
  desc |= uint64_t(1024 >> 4) << 32;                    // stride byte offset: next 8-row atom
  desc |= uint64_t(1) << 62;                            // layout: 128-byte swizzle
  return desc;
}

}  // namespace fp4moe::sm90
