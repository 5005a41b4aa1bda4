// The sm90 configs with a compiled kernel, in one table: launch.cuh instantiates a GEMM1 and a
// GEMM2 kernel for each entry, in this order, and compiled_configs() (tune.cpp) is the runtime list
// that select_config, narrow_for_few_tiles and the tail launch index (kNarrowDecodeConfig,
// kTailConfig) and that --tune measures. Fields as Sm90Config: tile tokens, consumers, stages, CTAs
// per SM, regime, double-buffered A fragments, K chunks per stage, tail kernels. One entry a line:
// scripts/ptxas-check.sh counts the lines that open with "{<digits>," to know how many kernels the
// translation units must hold; tests/test_config.cpp pins the names.
#pragma once

#include "src/gemm/sm90/config.h"

namespace fp4moe::sm90 {

inline constexpr Sm90Config kCompiledConfigs[] = {
    // Double-buffered A fragments: in the H200 tuning run (bench/results/2026-11-29_h200_tune_v3.txt)
    // they were faster at most points and within 0.5% at the rest (BN256 and BN32 at T=2048/8192);
    // BN64 has no double-buffered build (ptxas serialized or spilled it). Two K chunks per stage
    // ("_c2") for BN16/32/64 (BN16 now has four: below): 1-4% faster than one at every DeepSeek-R1
    // and Qwen3 point T = 8..512 where they were the candidates (bench/results/2026-11-29_h200_tune_c2.txt),
    // the same chunk slots (stages x chunks) as the one-chunk builds they replaced.
    // The decode tile takes four K chunks a stage ("_c4", 4 stages: 16 chunk slots, 12 with two):
    // the K loop's barrier wait, release and stage arithmetic come once per four chunks. Against two,
    // DeepSeek-R1 T = 8 / 32 / 128: GEMM1 alone -6.4 / -6.6 / -6.1% (ncu), the layer -2.1 / -4.2 /
    // -4.1%; T = 1 / 512, gpt-oss-120b and Qwen3-30B within the spreads but gpt-oss-120b T=128
    // -1.6% (bench/results/2026-11-30_h200_s17_run{1,2}_*). GEMM1's kernels keep two values in a
    // small stack frame outside the K loop (scripts/ptxas-check.sh).
    {16, 4, 4, 1, "decode: <= 10 rows per expert", true, 4},
    {32, 4, 5, 1, "small: <= 24 rows per expert", true, 2},
    {64, 4, 4, 1, "medium: 41-56 rows per expert", false, 2},
    {128, 2, 6, 1, "BN128 x 2 consumers (tuning candidate)", true},
    // 4 consumers: a 256-row weight tile, half the activation bytes per MMA of BN128_C2 (single-
    // buffered fragments, 112 registers a consumer; no N = 64 size for small tiles, which made
    // ptxas spill and serialize). Faster than BN128_C2 and BN256 at every Qwen3-30B (128-1024 rows
    // per expert) and gpt-oss-120b (256) point (bench/results/2026-11-29_h200_tune_prefill.txt).
    {128, 4, 5, 1, "prefill: > 80 rows per expert"},
    // Tuning candidate only (slower than BN128_C4 wherever both were measured).
    {256, 2, 4, 1, "prefill, BN256 (tuning candidate)", true},
    // A 96-token tile of the 4-consumer kind for about 64 rows per expert, where BN128 ran most
    // experts' single tile at N = 128 for 65-90 rows: 10-12% faster than the best other config at
    // 64 rows per expert for DeepSeek-R1, gpt-oss-120b, Qwen3-30B and Qwen3-235B, 6-12% slower at 128
    // (bench/results/2026-11-30_h200_tune_bn96.txt). Single-buffered: double buffering serialized.
    {96, 4, 6, 1, "large: 65-80 rows per expert"},
    // A 48-token tile (double-buffered, two chunks a stage): 7-12% faster than BN64 at 32-40 rows
    // per expert on DeepSeek-R1, Qwen3-30B and gpt-oss-120b (bench/results/2026-11-30_h200_tune_bn48.txt).
    {48, 4, 5, 1, "medium: 25-40 rows per expert", true, 2},
    // Decode over few tiles (narrow_for_few_tiles, per GEMM): 2 consumers, 4 stages of 4 chunks.
    // Against 8 stages of 2 (bench/results/2026-11-30_h200_s17_run3_*): T=1 Llama-4-Scout -21%,
    // Mixtral -15%, gpt-oss-120b -7%, Qwen3-30B -5%; Llama-4-Scout T=2 -14%; gpt-oss-120b T=2 and
    // Qwen3-30B T = 2 / 4 within the spreads. With few tiles each SM streams a long K range through
    // its two consumers, whose per-stage work it cuts.
    {16, 2, 4, 1, "decode, few tiles: 2 consumers", true, 4},
    // An 80-token tile of the BN96 kind: 5-8% faster than BN96 at 64 rows per expert on Qwen3-30B and
    // gpt-oss-120b in one run (bench/results/2026-11-30_h200_tune_bn80.txt); DeepSeek-R1 T=2048 took
    // 3.59 ms with it against BN96's 4.02 in another run, on another H200. A BN112 of the same kind
    // was 2% slower than BN128_C4 at 96 rows per expert (Qwen3-30B) and was not kept.
    // 9 stages, the most that fit (6 until session 8): at DeepSeek-R1 T=2048 the consumers' waits on
    // a full stage were 8% of GEMM1's stall samples. A/B against 6 (one H200, 2 repetitions):
    // DeepSeek-R1 T=2048 -0.7%, gpt-oss-120b T=2048 -0.4%, Qwen3-30B T=1024 -2.8%. BN96 with 8
    // stages measured +1.4% at DeepSeek-R1 T=2304 in the same run and keeps 6
    // (bench/results/2026-11-30_h200_s8_run7_stages_8e1b50f.txt).
    {80, 4, 9, 1, "large: 57-64 rows per expert"},
    // The tail launches' kernels (select_tail, kTailConfig): the small BN32 entry's parameters with a
    // static schedule and no overlap (Sm90Config::tail), which that entry's kernels had until session
    // 40 gave them dynamic GEMM2 units and the GEMM1/GEMM2 overlap. Also a tuning candidate: --tune
    // sets the two against each other.
    {32, 4, 5, 1, "tail: <= 32 rows past a full tile", true, 2, true},
};
inline constexpr int kNumCompiledConfigs = int(sizeof(kCompiledConfigs) / sizeof(kCompiledConfigs[0]));

}  // namespace fp4moe::sm90
