// Instantiation and launch of the sm90 kernels for the configs of compiled_configs.h (included by the two
// translation units sm90_gemm1.cu and sm90_gemm2.cu, one per GEMM, to halve the compile's critical path).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "src/common/cuda_utils.h"
#include "src/gemm/sm90/compiled_configs.h"
#include "src/gemm/sm90/moe_gemm_sm90.cuh"
#include "src/gemm/sm90/moe_gemm_sm90.h"

namespace fp4moe::sm90 {

// The indexed entries of compiled_configs.h (config.h's kTailConfig and kNarrowDecodeConfig).
static_assert(kCompiledConfigs[kTailConfig].tail && kCompiledConfigs[kTailConfig].tile_tokens == kTailRows &&
                  kCompiledConfigs[kTailConfig].consumers == 4,
              "kTailConfig must name the 4-consumer BN32 tail kernels");
static_assert(kCompiledConfigs[kNarrowDecodeConfig].tile_tokens == 16 &&
                  kCompiledConfigs[kNarrowDecodeConfig].consumers == 2 && !kCompiledConfigs[kNarrowDecodeConfig].tail,
              "kNarrowDecodeConfig must name the 2-consumer BN16");

// The launch of one instantiation (kDirect: direct GEMM1, MoeGemmParams::direct_ids; kRanged: GEMM2
// over canonical K ranges, consumer.cuh's consume_tile).
template <class T, bool kDirect, bool kRanged = false>
Status launch_kernel(const MoeGemmParams& p, unsigned grid, cudaStream_t stream) {
  auto* kernel = moe_gemm_sm90_kernel<T, kDirect, kRanged>;
  // The shared-memory opt-in is a per-device attribute: set it once for each device this process
  // launches on (one process may drive several GPUs, one thread each). Bit d of attr_set: done on
  // device d (a later cudaDeviceReset would need it again; fp4moe never resets a device).
  static std::mutex mu;
  static std::atomic<uint64_t> attr_set{0};
  int device = 0;
  FP4MOE_CUDA_RETURN(cudaGetDevice(&device));
  if (device >= 64) return internal_error("sm90: device ordinal ", device, " >= 64");
  const uint64_t bit = uint64_t(1) << device;
  if (!(attr_set.load(std::memory_order_acquire) & bit)) {
    std::lock_guard<std::mutex> lock(mu);
    if (!(attr_set.load(std::memory_order_relaxed) & bit)) {
      FP4MOE_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
      attr_set.fetch_or(bit, std::memory_order_release);
    }
  }
  return launch_pdl(kernel, dim3(grid), dim3(T::kThreads), T::kSmemBytes, stream, p);
}

template <class T>
Status launch_traits(const MoeGemmParams& p, int num_sms, cudaStream_t stream) {
  const layout::GemmWeightShape& g = T::kGemm1 ? p.g1 : p.g2;
  const int64_t m_blocks = (g.m_units() + T::kConsumers - 1) / T::kConsumers;
  const int split = T::kGemm1 ? p.split_k1 : p.split_k2;
  if (split < 1 || (split > 1 && (T::kBN != 16 || split > g.k_units())))
    return internal_error("sm90: split-K ", split, " for config BN", T::kBN, " over ", g.k_units(), " K chunks");
  // GEMM2 over canonical K ranges (workspace.h) splits into all of them or none.
  const bool ranged = !T::kGemm1 && gemm2_has_ranges(p.inter_local);
  const int64_t num_ranges = k_range_count(g.k_units());
  if (ranged && split != 1 && split != num_ranges)
    return internal_error("sm90: split-K ", split, " of a GEMM2 over ", num_ranges, " K ranges (", g.k_units(),
                          " chunks)");
  if (p.tail_of > 0 && (!T::kRunsTails || split > 1))
    return internal_error("sm90: config BN", T::kBN, "_C", T::kConsumers, " cannot run tail tiles (split-K ", split,
                          ")");
  // (A GEMM2 that waits per token tile needs a GEMM1 that counts: both must be overlap kernels. The
  // split partials' slots are one GEMM's at a time: a GEMM1 beside GEMM2 must not split.)
  if (p.overlap && (!T::kOverlaps || p.split_k1 > 1 || p.tail_of > 0))
    return internal_error("sm90: config BN", T::kBN, "_C", T::kConsumers, " cannot overlap GEMM1 and GEMM2 (split-K ",
                          split, ", tail_of ", p.tail_of, ")");
  const int64_t max_tiles = p.max_tiles * m_blocks * split;
  if (max_tiles == 0) return Status::Ok();
  const unsigned grid = unsigned(std::min<int64_t>(int64_t(num_sms) * T::kCtasPerSm, max_tiles));
  MoeGemmParams q = p;  // (with this config's divisors)
  q.div_split = FastDiv(uint32_t(split));
  q.div_m_blocks = FastDiv(uint32_t(m_blocks));
  if (ranged) q.k_range_chunks = int(k_range_chunks(g.k_units())), q.k_ranges = int(num_ranges);
  if (max_tiles >= (int64_t(1) << 31))
    return internal_error("sm90: ", max_tiles, " work units do not fit the kernels' 32-bit tile arithmetic");
  if (ranged && int64_t(grid) > p.layout.range_ctas)
    return internal_error("sm90: GEMM2 over K ranges with ", grid, " CTAs, the workspace has slots for ",
                          p.layout.range_ctas);
  if (p.direct_ids) {
    // (MoeLayer::forward sets it only where it applies; a bad combination is a bug, not bad input.)
    if constexpr (T::kGemm1 && T::kBN == 16 && !T::kRunsTails) {
      if (split > 1 || p.tail_of > 0 || p.w4a4 || p.weight_on_input || !p.direct_x ||
          (reinterpret_cast<uintptr_t>(p.direct_x) & 15) != 0 || p.hidden % layout::kUnitK != 0 || p.top_k < 1 ||
          p.top_k > kDirectMaxK)
        return internal_error("sm90: direct GEMM1 with split-K ", split, ", tail_of ", p.tail_of, ", w4a4 ", p.w4a4,
                              ", weight on input ", p.weight_on_input, ", H ", p.hidden, ", top_k ", p.top_k);
      return launch_kernel<T, true>(q, grid, stream);
    } else {
      return internal_error("sm90: no direct GEMM1 for config BN", T::kBN, "_C", T::kConsumers, " (GEMM",
                            T::kGemm1 ? 1 : 2, ")");
    }
  }
  if constexpr (!T::kGemm1) {
    if (ranged) return launch_kernel<T, false, true>(q, grid, stream);
  }
  return launch_kernel<T, false>(q, grid, stream);
}

template <class T>
bool traits_match(const Sm90Config& c) {
  return c.tile_tokens == T::kBN && c.consumers == T::kConsumers && c.stages == T::kStages &&
         c.ctas_per_sm == T::kCtasPerSm && c.double_buffer == T::kDoubleBuffer && c.chunks_per_stage == T::kChunks &&
         c.tail == T::kRunsTails;
}

// The instantiations: one per entry of kCompiledConfigs (compiled_configs.h), same order.
template <bool kGemm1, int I>
using CompiledTraitsAt =
    Sm90Traits<kCompiledConfigs[I].tile_tokens, kCompiledConfigs[I].consumers, kCompiledConfigs[I].stages,
               kCompiledConfigs[I].ctas_per_sm, kGemm1, kCompiledConfigs[I].double_buffer,
               kCompiledConfigs[I].chunks_per_stage, kCompiledConfigs[I].tail>;
template <bool kGemm1, int... I>
std::tuple<CompiledTraitsAt<kGemm1, I>...>* compiled_traits(std::integer_sequence<int, I...>);
template <bool kGemm1>
using CompiledTraits =
    std::remove_pointer_t<decltype(compiled_traits<kGemm1>(std::make_integer_sequence<int, kNumCompiledConfigs>{}))>;

template <class T, class... Rest>
Status launch_matching(const MoeGemmParams& p, const Sm90Config& c, int num_sms, cudaStream_t stream) {
  if (traits_match<T>(c)) return launch_traits<T>(p, num_sms, stream);
  if constexpr (sizeof...(Rest) > 0) return launch_matching<Rest...>(p, c, num_sms, stream);
  return internal_error("sm90: no kernel instantiated for config ", c.name());
}

template <class... T>
Status launch_among(std::tuple<T...>*, const MoeGemmParams& p, const Sm90Config& c, int num_sms, cudaStream_t stream) {
  return launch_matching<T...>(p, c, num_sms, stream);
}

// The one dispatch from a runtime config to an instantiation; anything else fails loudly.
template <bool kGemm1>
Status dispatch(const MoeGemmParams& p, const Sm90Config& c, int num_sms, cudaStream_t stream) {
  if (p.tile_tokens != c.tile_tokens)
    return internal_error("sm90: params tile_tokens ", p.tile_tokens, " != config ", c.tile_tokens);
  return launch_among(static_cast<CompiledTraits<kGemm1>*>(nullptr), p, c, num_sms, stream);
}

}  // namespace fp4moe::sm90
