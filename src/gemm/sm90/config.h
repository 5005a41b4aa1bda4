// Config choice for the sm90 grouped GEMMs: a pure function of the problem and the device, with named
// regimes. A config changes speed, never results: every config computes each output element with the
// same sequence of k16 MMAs over K (for a GEMM2 over more than one canonical K range, workspace.h's
// k_range_chunks, the same sequence in each range and the same sum of the ranges).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fp4moe::sm90 {

struct Sm90Config {
  int tile_tokens = 8;    // BN: tokens (routed rows) per tile, the wgmma N
  int consumers = 2;      // consumer warpgroups; each owns one 64-row weight unit of the tile
  int stages = 8;         // shared-memory pipeline depth (stages of chunks_per_stage K chunks of 64)
  int ctas_per_sm = 2;    // persistent CTAs per SM
  const char* regime = "";
  bool double_buffer = false;  // double-buffered A fragments (name suffix "_db")
  int chunks_per_stage = 1;    // K chunks per pipeline stage (N > 1: name suffix "_cN")
  // The tail launches' kernels (select_tail, name suffix "_tail"): a static schedule and no GEMM1/
  // GEMM2 overlap, which a tail launch cannot share with its main launch. Runs as a main config too
  // (MoeLayer::force_sm90_config, fp4moe-bench --tune / --tune-only, a tune file), as the BN32
  // kernels did before they took dynamic units and the overlap (session 40).
  bool tail = false;
  std::string name() const;
};

struct ConfigInput {
  int64_t num_tokens = 0;
  int top_k = 1;
  int num_local_experts = 1;
  int num_experts = 0;       // E over every rank (0: num_local_experts, no expert parallelism)
  // Every token has at least one of its top_k ids among the local experts (an expert-parallel
  // all-to-all dispatch sends a rank only such tokens; LayerOptions::tokens_routed_here).
  bool tokens_routed_here = false;
  int64_t hidden = 0;        // H
  int64_t inter_local = 0;   // I per rank
  int num_sms = 132;
};

// The average routed rows per local expert (T * K / E over all E experts, rows_per_local_expert)
// decide the token tile (all 1 CTA per SM, the producer's registers handed to the consumers with
// setmaxnreg):
//   decode  <= 10 rows per expert -> BN 16, 4 consumer warpgroups, 4 stages of 4 K chunks (bandwidth-bound)
//   small   <= 24                -> BN 32, 4 consumers, 5 stages of 2 chunks
//   medium  <= 40                -> BN 48, 4 consumers, 5 stages of 2 chunks
//   medium  <= 56                -> BN 64, 4 consumers, 4 stages of 2 chunks
//   large   <= 64                -> BN 80, 4 consumers, 9 stages
//   large   <= 80                -> BN 96, 4 consumers, 6 stages
//   prefill >  80                -> BN 128, 4 consumers (a 256-row weight tile), 5 stages
// BN16/32/48 (4 consumers), BN16 with 2 and the 2-consumer BN128 and BN256 double-buffer their A
// fragments (name suffix "_db"); BN16 puts four K chunks in a pipeline stage (suffix "_c4"),
// BN32/48/64 two ("_c2", not to be confused with "_C2", 2 consumers).
// BN 128 with 2 consumers and BN 256 (2 consumers) are compiled as tuning candidates only; BN 16
// with 2 consumers serves decode over few tiles (narrow_for_few_tiles); the BN32 tail kernels
// (Sm90Config::tail) serve the tail launches and are a tuning candidate too.
// (thresholds measured with fp4moe-bench --tune on an H200: see config.cpp)
// Only BN 128 with 2 consumers buckets its tiles' wgmma N: each bucket is another inlined K loop, and
// elsewhere ptxas ran out of registers and serialized every wgmma (C7512; scripts/ptxas-check.sh).
Sm90Config select_config(const ConfigInput& in);

// The chance that one token's routing picks a given local expert, for uniform routing: K / E, E over
// every rank (ConfigInput::num_experts; the local experts where it is 0); with tokens_routed_here,
// given that the token picks at least one of the L local experts: K / (E * P), P = 1 - C(E-L, K) /
// C(E, K).
double local_pick_probability(const ConfigInput& in);
// The average routed rows per local expert that select_config and the tune table's buckets go by:
// ceil(T * local_pick_probability).
int64_t rows_per_local_expert(const ConfigInput& in);

// An upper bound on the tiles of one GEMM (m_units weight units of 64 rows) with config c, from the
// token count: at most min(T*K, floor((T*K + (BN - 1) * min(T*K, experts)) / BN)) token tiles times the
// m-blocks.
int64_t max_gemm_tiles(const ConfigInput& in, const Sm90Config& c, int64_t m_units);

// Decode with few tiles (the default path; not where split-K splits, not for a tuned or forced config): where
// the default decode config (BN16, 4 consumers) would give at most half the SMs a tile of this GEMM,
// its 2-consumer build (compiled_configs()[kNarrowDecodeConfig]: half the weight rows per tile)
// spreads the GEMM over twice as many SMs. The same tile tokens, so both GEMMs of a forward may differ
// in it; the same bits (a config changes speed, never results).
Sm90Config narrow_for_few_tiles(const ConfigInput& in, const Sm90Config& c, int64_t m_units);
constexpr int kNarrowDecodeConfig = 8;

// Split-K ranges for one GEMM of a forward with LayerOptions::split_k (1: none): only configs with a
// 16-token tile, only when at most half the SMs would have a tile. Tiles are bounded from the token
// count (max_gemm_tiles); each SM then gets a K range, up to 8 ranges of at least 4 chunks, at most
// kMaxSplitUnits work units.
// A split in two needs ranges of at least kMinTwoWaySplitChunks chunks.
int select_split_k(const ConfigInput& in, const Sm90Config& c, int64_t m_units, int64_t k_units);
constexpr int64_t kMinTwoWaySplitChunks = 20;

// The default split of a GEMM2 over canonical K ranges (k_units > kRangeChunks, workspace.h): every
// GEMM2 kernel of such a layer sums K range by range, so a split into one work unit per range gives
// the same bits (batch-invariant, unlike select_split_k's). Returns the number of ranges where config
// c has 16-token tiles, at most kMaxSplitUnits units by the tile bound (max_gemm_tiles, what the
// workspace holds), and fewer chunks a SM in rounds of range-long units than in rounds of whole
// tiles; else 1. The tiles that decide: with two ranges (Llama-4) the bound, with more (Mixtral-
// 8x7B's four) those expected under uniform random routing (expected_gemm_tiles). That choice is
// measured, not modelled (H200, session 30,
// bench/results/2026-12-02_h200_s30_run2_range-rule_2b57c7c.txt): with four ranges the expected
// count decided all eight points (T = 1-5 split, -10.5 / -11.2% at T = 4 / 5 against no split;
// T = 8 / 16 / 32 not, where a split lost 1.6-3.7%), the bound four of them wrong (T = 4 / 5 / 16
// / 32); with two the bound decided nine of ten points where a split was compared with none (not
// Scout T=6, whose split won 9%), the expected count (a tie split) six wrong (Scout T = 4 / 12 / 32
// split lost 3.0 / 4.8 / 4.5%, Maverick T = 4 / 12 / 24 2.6-3.3%). No count of tiles explains
// Llama-4's points: Scout T = 12 and 16 had 8 experts, 160 tiles each, and the split lost 4.8% at
// one and won 4.8% at the other (GEMM2's units wait on the GEMM1 tiles they overlap). E.g.
// Llama-4-Scout T=1 (40 tiles of 128 chunks: 80 units of 64 on 132 SMs), Mixtral-8x7B T=1 (64 tiles
// of 224: 256 units of 56 in two rounds).
int select_range_split(const ConfigInput& in, const Sm90Config& c, int64_t m_units, int64_t k_units);

// The tiles of config c over a GEMM of m_units weight units expected when each token picks top_k of
// num_experts experts uniformly at random (an expert's rows binomial): at most max_gemm_tiles.
double expected_gemm_tiles(const ConfigInput& in, const Sm90Config& c, int64_t m_units);

// The config of a GEMM2 over canonical K ranges that splits at them by default (LayerOptions::
// range_split): narrow_for_few_tiles(c), unless c splits at its ranges (select_range_split) and the
// narrowed config would not. Llama-4 / Mixtral-8x7B at T=2: the narrowed tiles fill the SMs once
// (a round of 128 / 224 chunks), the 4-consumer ones split take one round of 64-chunk units / two
// of 56 (with Mixtral's ranges of 64 then, the split measured 6-7% / 15% faster on an H200, session
// 25).
Sm90Config select_ranged_gemm2(const ConfigInput& in, const Sm90Config& c, int64_t m_units, int64_t k_units);

// Tail tiles (LayerOptions::tail_tiles): with a main token tile of 128 or more, an expert whose rows
// run at most kTailRows past a multiple of the tile (more than one tile's worth) would otherwise spend
// a whole main-width tile, all of its weights decoded and multiplied again, on those few rows: with
// uniform routing at 256 rows per expert (DeepSeek-R1 T=8192) half the experts do, and 20% of the
// main tiles hold at most 32 rows. The plan cuts those tails off, and a second launch of the BN32 tail
// config (compiled_configs()[kTailConfig], Sm90Config::tail) runs them, one tile per such expert.
// Returns that config, or nothing where the main config keeps its tails. Bits do not change (a
// config changes speed, never results). Measured on an H200 against the same build without tails:
// DeepSeek-R1 T=4096 -13.2%, T=8192 -6.9%, T=3072 +0.1%; Llama-4-Maverick T=16384 -14.5%; gpt-oss-120b T=8192 -6.6%
// (bench/results/2026-11-30_h200_s7_run1_tail-tiles_a59e4b7.txt). The tail launch re-reads those
// experts' weights; with tiles narrower than 128 too few experts overflow a tile to repay that
// (reasoning from simulated tile counts, not measured).
std::optional<Sm90Config> select_tail(const Sm90Config& main);
constexpr int kTailConfig = 10;
constexpr int kTailRows = 32;  // the tail config's tile tokens

// GEMM1/GEMM2 overlap (LayerOptions::gemm_overlap, MoeGemmParams::overlap): GEMM2 starts a token
// tile as soon as GEMM1 has finished it, on the SMs that GEMM1's last, partial round of tiles leaves
// idle. Chosen wherever GEMM1 runs 16- or 32-token tiles other than the tail kernels (the decode
// and small configs, the only ones that compile it); the caller excludes split-K and tail launches.
// The 32-token tiles since session 40: a trace of gpt-oss-20b at T=128 (BN32, 5.6 rounds of GEMM1
// tiles on a static schedule) had GEMM1's CTAs ending 27 us apart and GEMM2 waiting for the last.
// With the overlap and dynamic GEMM2 units, A/B against the static BN32 on one H200 (3 repetitions,
// bench/results/2026-12-03_h200_s40_run5_bn32-overlap-ab_9fb9b52.txt): faster at all eight points,
// -1.0 to -3.9% (DeepSeek-R1 T = 512 / 768 -2.2 / -1.2%, gpt-oss-120b T=512 -2.5%, gpt-oss-20b T =
// 96 / 128 -1.9 / -1.3%, Llama-4-Scout T=256 -1.9%, Mixtral T=64 -1.0%, Qwen3-30B T=256 -3.9%).
// Until session 22 it was limited to at most 5.5 expected rounds of GEMM1 tiles: with each GEMM1
// consumer warpgroup waiting for a gpu-scope release of its count after every tile, the overlap lost
// above that (session 9: Qwen3-30B T=64 +1.4%, Llama-4-Scout T=128 +1.6%, gpt-oss-120b T=16 +3.2%;
// session 6, on every forward: +3.6% / +4.5% at T=128 for gpt-oss-120b and Qwen3-30B). The count
// moved to the producer warpgroup (e298a8d); measured on one H200 since, the same build with the
// overlap everywhere against the 5.5-round limit (bench/results/2026-11-30_h200_s22_run2_overlap-
// any_1fce17b.txt; expected rounds in brackets):
//   gains: gpt-oss-120b T=16 -4.8% (8.9), T=32 -2.2% (14.2); Llama-4-Scout T=32 -4.5% (6.8);
//          gpt-oss-20b T=64 -2.3% (5.6);
//   noise (-1.5% to +0.6%): DeepSeek-R1 T = 8, 16, 32, 128 (7.0-30.5), Qwen3-30B T = 64 / 128,
//          Qwen3-235B T = 16, 32, 128, Llama-4-Maverick T = 16, 32, 128 (7.3-39.3), Scout T = 64 /
//          128, gpt-oss-120b T=128;
//   losses: Mixtral-8x7B T = 8 / 16 / 32 +1.1 / +0.8 / +0.5% (6.1-6.8), about the spread of the
//          repetitions.
bool select_gemm_overlap(const ConfigInput& in, const Sm90Config& gemm1);

// Whether a config's kernels compile the overlap (Sm90Traits::kOverlaps, which is this, and what
// select_gemm_overlap requires): the 16- and 32-token tiles, not the tail kernels.
constexpr bool compiles_gemm_overlap(int tile_tokens, bool tail) {
  return (tile_tokens == 16 || tile_tokens == 32) && !tail;
}

// Whether a GEMM's kernels of this tile width take their work units dynamically (scheduler.cuh's
// schedule_units and traits.cuh's Sm90Traits::kTileHandoff, which is this): the decode and small GEMM2s (16 and
// 32 tokens) and both GEMMs' tiles of 48 tokens or more, never the tail kernels (Sm90Config::tail).
// The others run a static schedule (unit blockIdx.x, then every gridDim.x-th).
constexpr bool takes_dynamic_units(int tile_tokens, bool gemm1, bool tail = false) {
  return !tail && ((tile_tokens <= 32 && !gemm1) || tile_tokens >= 48);
}

// The tile sizes instantiated (a dispatch default fails loudly for anything else).
constexpr int kSupportedTileTokens[] = {16, 32, 48, 64, 80, 96, 128, 256};

}  // namespace fp4moe::sm90
