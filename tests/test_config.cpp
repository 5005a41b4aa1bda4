// select_config: a pure function of the problem, with named regimes, only instantiated configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/config.h"
#include "src/gemm/sm90/tune.h"
#include "src/moe/workspace.h"

namespace fp4moe::sm90 {
namespace {

ConfigInput deepseek(int64_t tokens) {
  ConfigInput in;
  in.num_tokens = tokens;
  in.top_k = 8;
  in.num_local_experts = 256;
  in.hidden = 7168;
  in.inter_local = 2048;
  return in;
}

// Llama-4-Scout (E=16, top-1; GEMM1 256 weight units, GEMM2 80 over 128 K chunks) and Mixtral-8x7B
// (E=8, top-2; GEMM2 64 weight units over 224 K chunks) on 132 SMs: what the split and narrowing
// choices read (their GEMMs' units and chunks are the tests' arguments).
ConfigInput llama4_scout(int64_t tokens) {
  ConfigInput in;
  in.num_tokens = tokens;
  in.top_k = 1;
  in.num_local_experts = 16;
  in.num_sms = 132;
  return in;
}

ConfigInput mixtral_8x7b(int64_t tokens) {
  ConfigInput in = llama4_scout(tokens);
  in.top_k = 2;
  in.num_local_experts = 8;
  return in;
}

// The kernels' tile arithmetic (FastDiv, made by the launch): n / d for every n below 2^31.
TEST(FastDiv, MatchesDivisionBelow2To31) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return uint32_t(state);
  };
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 8, 16, 28, 56, 112, 127, 1000, (1u << 20) + 7, (1u << 31) - 1};
  for (int i = 0; i < 64; ++i) divisors.push_back(1 + next() % ((1u << 31) - 1));
  for (uint32_t d : divisors) {
    const FastDiv f(d);
    // around 0, d and 2d, and the largest n the kernels may divide
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d};
    ns.insert(ns.end(), {(1u << 31) - 1, (1u << 31) - 2, (1u << 31) - d});
    for (int i = 0; i < 2000; ++i) ns.push_back(next() % (1u << 31));
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

TEST(SelectConfig, RegimesFollowRowsPerExpert) {
  // DeepSeek-R1: rows per expert = T * 8 / 256 = T / 32.
  EXPECT_EQ(select_config(deepseek(1)).tile_tokens, 16);
  EXPECT_EQ(select_config(deepseek(256)).tile_tokens, 16);    // 8 rows per expert
  EXPECT_EQ(select_config(deepseek(320)).tile_tokens, 16);    // 10 (session 40; 8 before)
  EXPECT_EQ(select_config(deepseek(321)).tile_tokens, 32);
  EXPECT_EQ(select_config(deepseek(512)).tile_tokens, 32);
  EXPECT_EQ(select_config(deepseek(768)).tile_tokens, 32);    // 24 rows per expert
  EXPECT_EQ(select_config(deepseek(769)).tile_tokens, 48);
  EXPECT_EQ(select_config(deepseek(1024)).tile_tokens, 48);   // 32
  EXPECT_EQ(select_config(deepseek(1280)).tile_tokens, 48);   // 40
  EXPECT_EQ(select_config(deepseek(1281)).tile_tokens, 64);
  EXPECT_EQ(select_config(deepseek(1536)).tile_tokens, 64);   // 48
  EXPECT_EQ(select_config(deepseek(1792)).tile_tokens, 64);   // 56
  EXPECT_EQ(select_config(deepseek(1793)).tile_tokens, 80);
  EXPECT_EQ(select_config(deepseek(2048)).tile_tokens, 80);   // 64
  EXPECT_EQ(select_config(deepseek(2048)).consumers, 4);
  EXPECT_EQ(select_config(deepseek(2049)).tile_tokens, 96);
  EXPECT_EQ(select_config(deepseek(2304)).tile_tokens, 96);   // 72
  EXPECT_EQ(select_config(deepseek(2560)).tile_tokens, 96);   // 80
  EXPECT_EQ(select_config(deepseek(2561)).tile_tokens, 128);
  EXPECT_EQ(select_config(deepseek(2561)).consumers, 4);
  EXPECT_EQ(select_config(deepseek(4096)).tile_tokens, 128);  // 128
  EXPECT_EQ(select_config(deepseek(8192)).tile_tokens, 128);  // 256
  EXPECT_EQ(select_config(deepseek(16384)).tile_tokens, 128);
  EXPECT_EQ(select_config(deepseek(16384)).consumers, 4);
  EXPECT_NE(std::string(select_config(deepseek(1)).regime).find("decode"), std::string::npos);
  EXPECT_EQ(select_config(deepseek(1)).consumers, 4);
  EXPECT_NE(std::string(select_config(deepseek(16384)).regime).find("prefill"), std::string::npos);
  // Expert parallelism: a rank's experts see T * K / E rows each (E over every rank), as without it:
  // each token's ids spread over all E, and the rank skips the other ranks'. (Divided by the local
  // experts, as until session 45, DeepSeek-R1 T=128 at EP=8 counted 32 rows and chose BN48.)
  ConfigInput ep = deepseek(128);
  ep.num_experts = 256;
  ep.num_local_experts = 32;
  EXPECT_EQ(rows_per_local_expert(ep), 4);
  EXPECT_EQ(select_config(ep).tile_tokens, select_config(deepseek(128)).tile_tokens);
  EXPECT_EQ(select_config(ep).tile_tokens, 16);
  ep.num_tokens = 1024;  // 32 rows per expert
  EXPECT_EQ(rows_per_local_expert(ep), 32);
  EXPECT_EQ(select_config(ep).tile_tokens, 48);
  // (num_experts 0: no expert parallelism, E = the local experts)
  ConfigInput local = deepseek(128);
  local.num_local_experts = 32;
  EXPECT_EQ(rows_per_local_expert(local), 32);
  // After an all-to-all dispatch (tokens_routed_here) a rank gets only the tokens with a local id:
  // Llama-4-Scout at EP=8 (top-1 of 16, 2 local experts) sends each received token to one of the
  // two, T / 2 rows each, not T / 16.
  ConfigInput a2a;
  a2a.num_tokens = 64;
  a2a.top_k = 1;
  a2a.num_experts = 16;
  a2a.num_local_experts = 2;
  EXPECT_EQ(rows_per_local_expert(a2a), 4);
  a2a.tokens_routed_here = true;
  EXPECT_DOUBLE_EQ(local_pick_probability(a2a), 0.5);
  EXPECT_EQ(rows_per_local_expert(a2a), 32);
  // DeepSeek-R1 at EP=8: P(a token has a local id) = 1 - C(224, 8) / C(256, 8), about 0.66.
  ConfigInput ds = deepseek(128);
  ds.num_experts = 256;
  ds.num_local_experts = 32;
  ds.tokens_routed_here = true;
  double none = 1;
  for (int i = 0; i < 8; ++i) none *= double(224 - i) / double(256 - i);
  EXPECT_NEAR(local_pick_probability(ds), 8.0 / 256 / (1 - none), 1e-12);
  EXPECT_EQ(rows_per_local_expert(ds), int64_t(std::ceil(128 * 8.0 / 256 / (1 - none))));
  // T=256 (test_gpu.py's test of the Python flag, on DeepSeek-R1 scaled by 16: H = 512, I = 128):
  // 8 rows a local expert (BN16) after an all-gather, 13 (BN32) after an all-to-all.
  ds.num_tokens = 256;
  ds.hidden = 512;  // (7168 / 16 = 448, rounded up to a multiple of 128)
  ds.inter_local = 128;
  EXPECT_EQ(rows_per_local_expert(ds), 13);
  EXPECT_EQ(select_config(ds).tile_tokens, 32);
  ds.tokens_routed_here = false;
  EXPECT_EQ(rows_per_local_expert(ds), 8);
  EXPECT_EQ(select_config(ds).tile_tokens, 16);
  // Without expert parallelism (or every expert local) the hint changes nothing.
  ConfigInput one = deepseek(128);
  one.num_experts = 256;
  one.tokens_routed_here = true;
  EXPECT_EQ(rows_per_local_expert(one), 4);
  EXPECT_EQ(select_config(one).name(), select_config(deepseek(128)).name());
}

TEST(SelectConfig, SplitKOnlyForFewDecodeTiles) {
  Sm90Config bn16;
  bn16.tile_tokens = 16;
  bn16.consumers = 4;
  Sm90Config bn128 = bn16;
  bn128.tile_tokens = 128;
  ConfigInput scout = llama4_scout(1);  // GEMM2 m_units 80, k_units 128
  EXPECT_EQ(select_split_k(scout, bn16, 80, 128), 6);   // 20 tiles -> 132 / 20
  EXPECT_EQ(select_split_k(scout, bn16, 256, 80), 2);   // GEMM1: 64 tiles, two ranges of 40 chunks
  EXPECT_EQ(select_split_k(scout, bn16, 256, 2 * kMinTwoWaySplitChunks), 2);
  EXPECT_EQ(select_split_k(scout, bn16, 256, 2 * kMinTwoWaySplitChunks - 1), 1);  // narrowed instead
  EXPECT_EQ(select_split_k(scout, bn128, 80, 128), 1);  // BN16 only
  EXPECT_EQ(select_split_k(scout, bn16, 80, 7), 1);     // ranges of at least 4 chunks
  EXPECT_EQ(select_split_k(scout, bn16, 80, 12), 3);
  scout.num_tokens = 0;
  EXPECT_EQ(select_split_k(scout, bn16, 80, 128), 1);
  // DeepSeek-R1 T=1: 8 experts x 28 m-blocks = 224 tiles, more than the SMs.
  EXPECT_EQ(select_split_k(deepseek(1), bn16, 112, 32), 1);
  // Tiny: 1 tile: at most 8 ranges.
  ConfigInput one = scout;
  one.num_tokens = 1;
  EXPECT_EQ(select_split_k(one, bn16, 4, 1000), 8);
  // Never more than kMaxSplitUnits work units, never a tile count past half the SMs.
  for (int64_t t : {1, 2, 3, 5, 8, 16, 64}) {
    for (int64_t m : {4, 16, 64, 256}) {
      ConfigInput in = scout;
      in.num_tokens = t;
      in.num_sms = 4096;  // enough SMs that kMaxSplitUnits, not the SMs, caps the split
      const int s = select_split_k(in, bn16, m, 256);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, 8);
      const int64_t tiles = max_gemm_tiles(in, bn16, m);
      if (s > 1) {
        EXPECT_LE(int64_t(s) * tiles, kMaxSplitUnits) << t << " " << m;
        EXPECT_LE(2 * tiles, in.num_sms) << t << " " << m;
      }
    }
  }
}

// The GEMM overlap: wherever GEMM1 runs 16-token tiles (both BN16 configs), at any number of rounds
// (session 22's measurements, quoted in config.h), and 32-token ones but the tail kernels (session
// 40); never with a wider tile or without work.
TEST(SelectConfig, OverlapsTheGemmsWhereverGemm1Has16Or32TokenTiles) {
  const Sm90Config bn16 = select_config(deepseek(1));
  ASSERT_EQ(bn16.tile_tokens, 16);
  const Sm90Config narrow = compiled_configs()[kNarrowDecodeConfig];
  ASSERT_EQ(narrow.tile_tokens, 16);
  // DeepSeek-R1 T=1 (1.0 expected rounds of GEMM1 tiles), T=8 (7.0: beyond session 9's limit of
  // 5.5), T=128 (30.5).
  for (int64_t t : {1, 8, 128}) {
    EXPECT_TRUE(select_gemm_overlap(deepseek(t), bn16)) << "T=" << t;
    EXPECT_TRUE(select_gemm_overlap(deepseek(t), narrow)) << "T=" << t;
  }
  // An expert shard with fewer local experts than picks.
  ConfigInput shard = deepseek(1);
  shard.num_local_experts = 4;
  EXPECT_TRUE(select_gemm_overlap(shard, bn16));
  // Nothing to overlap: no tokens, no local experts, no picks.
  EXPECT_FALSE(select_gemm_overlap(deepseek(0), bn16));
  shard.num_local_experts = 0;
  EXPECT_FALSE(select_gemm_overlap(shard, bn16));
  ConfigInput no_picks = deepseek(8);
  no_picks.top_k = 0;
  EXPECT_FALSE(select_gemm_overlap(no_picks, bn16));
  // 32-token tiles too (session 40), but never the tail kernels (a static schedule; they compile no
  // overlap) nor a wider token tile, whatever the tokens.
  int with = 0, without = 0;
  for (const Sm90Config& c : compiled_configs()) {
    const bool overlaps = (c.tile_tokens == 16 || c.tile_tokens == 32) && !c.tail;
    (overlaps ? with : without) += 1;
    EXPECT_EQ(select_gemm_overlap(deepseek(1), c), overlaps) << c.name();
    EXPECT_EQ(select_gemm_overlap(deepseek(512), c), overlaps) << c.name();
  }
  EXPECT_EQ(with, 3);  // BN16 with 4 and 2 consumers, BN32
  EXPECT_GT(without, 0);
  EXPECT_FALSE(select_gemm_overlap(deepseek(1), compiled_configs()[kTailConfig]));
}

// Dynamic work units (schedule_units): every GEMM2 and GEMM1's tiles of 48 tokens or more, never
// the tail kernels; GEMM1's decode and small tiles keep a static schedule (they count units for the
// overlap instead).
TEST(SelectConfig, DynamicUnitsForGemmTwoAndWideTilesButNeverTails) {
  for (int bn : kSupportedTileTokens) {
    EXPECT_TRUE(takes_dynamic_units(bn, false)) << bn;
    EXPECT_EQ(takes_dynamic_units(bn, true), bn >= 48) << bn;
    EXPECT_FALSE(takes_dynamic_units(bn, false, true)) << bn;
    EXPECT_FALSE(takes_dynamic_units(bn, true, true)) << bn;
  }
}

// max_gemm_tiles bounds the plan's token tiles (sum over experts of ceil(rows / BN)) for every way
// of spreading T*K pairs over the local experts, and some routing reaches it.
TEST(SelectConfig, TileBoundHoldsForEveryRouting) {
  std::mt19937 rng(20261201u);
  for (int iter = 0; iter < 4000; ++iter) {
    ConfigInput in;
    in.num_local_experts = 1 + int(rng() % 300);
    in.top_k = 1 + int(rng() % 8);
    in.num_tokens = 1 + int64_t(rng() % (iter % 2 ? 64 : 4096));
    Sm90Config c;
    c.consumers = 4;
    c.tile_tokens = std::array<int, 6>{16, 32, 48, 64, 80, 128}[rng() % 6];
    const int64_t pairs = in.num_tokens * in.top_k;
    const int64_t bound = max_gemm_tiles(in, c, 4);  // one m-block
    // A random routing (only the counts matter): each pair to an expert, all, or a few of them.
    const int used = 1 + int(rng() % uint32_t(in.num_local_experts));
    std::vector<int64_t> count(size_t(in.num_local_experts), 0);
    for (int64_t i = 0; i < pairs; ++i) ++count[rng() % uint32_t(used)];
    int64_t tiles = 0;
    for (int64_t n : count) tiles += (n + c.tile_tokens - 1) / c.tile_tokens;
    ASSERT_LE(tiles, bound) << "T " << in.num_tokens << " K " << in.top_k << " E " << in.num_local_experts << " BN "
                            << c.tile_tokens;
    // The worst routing: one row in each of min(pairs, E) experts, the rest in whole tiles of BN rows
    // (each BN rows more one tile more). The bound is its tile count.
    const int64_t nonempty = std::min<int64_t>(pairs, in.num_local_experts);
    const int64_t worst = nonempty + (pairs - nonempty) / c.tile_tokens;
    ASSERT_EQ(worst, bound) << "T " << in.num_tokens << " K " << in.top_k << " E " << in.num_local_experts << " BN "
                            << c.tile_tokens;
  }
}

// expected_gemm_tiles against routings drawn as a router draws them (each token top_k distinct
// experts, uniformly): the mean tile count of 3000 routings within 1% (and 0.05 tiles) of it; never
// above the bound.
TEST(SelectConfig, ExpectedTilesMatchRandomRoutings) {
  std::mt19937 rng(20261202u);
  struct Case {
    int64_t tokens;
    int top_k, experts, local, tile;
  };
  const Case cases[] = {{1, 1, 16, 16, 16},   {8, 1, 16, 16, 16},  {16, 1, 16, 16, 16},  {128, 1, 16, 16, 16},
                        {16, 1, 128, 128, 16}, {5, 2, 8, 8, 16},    {32, 2, 8, 8, 16},    {64, 2, 8, 8, 32},
                        {128, 8, 256, 256, 16}, {64, 8, 256, 32, 16}, {300, 4, 32, 32, 48}, {8, 8, 8, 8, 16}};
  for (const Case& k : cases) {
    ConfigInput in;
    in.num_tokens = k.tokens;
    in.top_k = k.top_k;
    in.num_experts = k.experts;
    in.num_local_experts = k.local;
    Sm90Config c;
    c.consumers = 4;
    c.tile_tokens = k.tile;
    const double expected = expected_gemm_tiles(in, c, 4);  // one m-block
    double sum = 0;
    const int draws = 3000;
    std::vector<int> perm(size_t(k.experts));
    for (int d = 0; d < draws; ++d) {
      std::vector<int64_t> count(size_t(k.experts), 0);
      for (int64_t t = 0; t < k.tokens; ++t) {
        for (int e = 0; e < k.experts; ++e) perm[size_t(e)] = e;
        for (int j = 0; j < k.top_k; ++j) {  // a partial Fisher-Yates shuffle: top_k distinct experts
          const int pick = j + int(rng() % uint32_t(k.experts - j));
          std::swap(perm[size_t(j)], perm[size_t(pick)]);
          ++count[size_t(perm[size_t(j)])];
        }
      }
      for (int e = 0; e < k.local; ++e) sum += double((count[size_t(e)] + k.tile - 1) / k.tile);
    }
    const double mean = sum / draws;
    EXPECT_NEAR(expected, mean, std::max(0.05, 0.01 * mean))
        << "T " << k.tokens << " top-" << k.top_k << " of " << k.experts << " (" << k.local << " local) BN " << k.tile;
    EXPECT_LE(expected, double(max_gemm_tiles(in, c, 4)) + 1e-9);
    EXPECT_GT(expected, 0);
  }
  ConfigInput none;
  none.num_tokens = 0;
  Sm90Config c;
  c.consumers = 4;
  c.tile_tokens = 16;
  EXPECT_EQ(expected_gemm_tiles(none, c, 4), 0);
}

TEST(SelectConfig, NarrowsTheDecodeConfigOnlyForFewTiles) {
  const Sm90Config bn16 = select_config(deepseek(1));
  ASSERT_EQ(bn16.name(), "BN16_C4_S4_x1_db_c4");
  const std::string narrow = compiled_configs()[kNarrowDecodeConfig].name();
  EXPECT_EQ(narrow, "BN16_C2_S4_x1_db_c4");
  // DeepSeek-R1 T=1: 8 experts x 16 (GEMM1) or 28 (GEMM2) m-blocks, more than half of 132 SMs.
  EXPECT_EQ(narrow_for_few_tiles(deepseek(1), bn16, 64).name(), bn16.name());
  EXPECT_EQ(narrow_for_few_tiles(deepseek(1), bn16, 112).name(), bn16.name());
  ConfigInput scout = llama4_scout(1);  // H=5120, I=8192: GEMM1 256 units, GEMM2 80
  EXPECT_EQ(narrow_for_few_tiles(scout, bn16, 256).name(), narrow);  // 64 tiles <= 66
  EXPECT_EQ(narrow_for_few_tiles(scout, bn16, 80).name(), narrow);   // 20 tiles
  EXPECT_EQ(max_gemm_tiles(scout, bn16, 256), 64);
  scout.num_tokens = 2;  // 2 token tiles: 128 tiles for GEMM1, 40 for GEMM2
  EXPECT_EQ(narrow_for_few_tiles(scout, bn16, 256).name(), bn16.name());
  EXPECT_EQ(narrow_for_few_tiles(scout, bn16, 80).name(), narrow);
  scout.num_tokens = 0;
  EXPECT_EQ(narrow_for_few_tiles(scout, bn16, 80).name(), bn16.name());
  // Only the default decode config is narrowed.
  scout.num_tokens = 1;
  const Sm90Config bn32 = compiled_configs()[1];
  EXPECT_EQ(narrow_for_few_tiles(scout, bn32, 80).name(), bn32.name());
  // DeepSeek-R1/16 (H 512, I 128: GEMM1 4 units, GEMM2 8) at T=6, as MoeGpu.EveryCompiledSm90Config-
  // GivesTheSameBits runs it: 48 pairs, 48 token tiles: GEMM1 narrowed, GEMM2 not.
  EXPECT_EQ(narrow_for_few_tiles(deepseek(6), bn16, 4).name(), narrow);
  EXPECT_EQ(narrow_for_few_tiles(deepseek(6), bn16, 8).name(), bn16.name());
  // The narrow config keeps the tile tokens (both GEMMs of a forward share the token tiles).
  EXPECT_EQ(compiled_configs()[kNarrowDecodeConfig].tile_tokens, bn16.tile_tokens);
}

TEST(SelectConfig, TailTilesOnlyBehindTilesOf128OrMore) {
  // The tail config's tile holds every tail the plan cuts off (tail_rows = its tile tokens).
  const Sm90Config& tail_cfg = compiled_configs()[kTailConfig];
  EXPECT_EQ(tail_cfg.tile_tokens, kTailRows);
  EXPECT_EQ(tail_cfg.name(), "BN32_C4_S5_x1_db_c2_tail");
  EXPECT_TRUE(tail_cfg.tail);
  // Its kernels are the small BN32's but for the schedule and the overlap (Sm90Config::tail).
  Sm90Config main_bn32 = tail_cfg;
  main_bn32.tail = false;
  EXPECT_EQ(main_bn32.name(), compiled_configs()[1].name());
  int tails = 0;
  for (const Sm90Config& c : compiled_configs()) tails += c.tail ? 1 : 0;
  EXPECT_EQ(tails, 1);
  for (const Sm90Config& c : compiled_configs()) {
    const auto tail = select_tail(c);
    if (c.tile_tokens >= 128) {
      ASSERT_TRUE(tail.has_value()) << c.name();
      EXPECT_EQ(tail->name(), tail_cfg.name()) << c.name();
      EXPECT_LT(tail->tile_tokens, c.tile_tokens) << c.name();
    } else {
      EXPECT_FALSE(tail.has_value()) << c.name();
    }
  }
  // DeepSeek-R1 prefill (BN128 x 4 consumers) has tails; decode does not.
  EXPECT_TRUE(select_tail(select_config(deepseek(8192))).has_value());
  EXPECT_FALSE(select_tail(select_config(deepseek(128))).has_value());
}

TEST(SelectConfig, SplitKWorkspaceOnlyWhenAskedFor) {
  const WorkspaceLayout off = WorkspaceLayout::make(64, 8, 256, 7168, 2048);
  const WorkspaceLayout on = WorkspaceLayout::make(64, 8, 256, 7168, 2048, true);
  EXPECT_EQ(off.split_counters, 0);
  EXPECT_EQ(on.split_counters, 2 * kSplitCounters);
  EXPECT_GE(on.total - off.total, size_t(4) * kMaxSplitUnits * kSplitUnitFloats + 4 * size_t(on.split_counters));
  EXPECT_EQ(on.y, off.y);  // the other regions do not move
  EXPECT_GE(on.split_count, on.split_partial + size_t(4) * kMaxSplitUnits * kSplitUnitFloats);
  EXPECT_LE(on.split_count + 4 * size_t(on.split_counters), on.total);
}

// The canonical K ranges: none up to kRangeChunks = 64 chunks, then as few as keep each at most
// kMaxRangeChunks = 64, at least two, of one length (a multiple of 4) but the last.
TEST(SelectConfig, CanonicalRangesAreFewOfOneLength) {
  struct Case {
    int64_t chunks, len, count;
  };
  for (const Case& c : {Case{1, 1, 1}, Case{45, 45, 1}, Case{64, 64, 1}, Case{65, 36, 2}, Case{128, 64, 2},
                        Case{134, 48, 3}, Case{224, 56, 4}, Case{256, 64, 4}, Case{257, 52, 5}, Case{262, 56, 5},
                        Case{1000, 64, 16}}) {
    EXPECT_EQ(k_range_chunks(c.chunks), c.len) << c.chunks;
    EXPECT_EQ(k_range_count(c.chunks), c.count) << c.chunks;
  }
  for (int64_t k = 1; k <= 2000; ++k) {
    const int64_t len = k_range_chunks(k), n = k_range_count(k);
    ASSERT_GE(len, 1) << k;
    ASSERT_LE(len, kMaxRangeChunks) << k;
    ASSERT_EQ(n > 1, k > kRangeChunks) << k;
    if (n == 1) continue;
    ASSERT_EQ(len % 4, 0) << k;                       // each range starts a four-chunk stage
    ASSERT_GT(k - (n - 1) * len, 0) << k;             // the last range is not empty ...
    ASSERT_LE(k - (n - 1) * len, len) << k;           // ... nor longer than the others
    // as few as keep each within kMaxRangeChunks, at least two (the length rounded up to 4 stays
    // within kMaxRangeChunks, a multiple of 4, so the count is exact)
    ASSERT_EQ(n, std::max<int64_t>(2, (k + kMaxRangeChunks - 1) / kMaxRangeChunks)) << k;
  }
  EXPECT_EQ(gemm2_has_ranges(14336), true);   // Mixtral-8x7B
  EXPECT_EQ(gemm2_has_ranges(8192), true);    // Llama-4
  EXPECT_EQ(gemm2_has_ranges(4096), false);   // 64 chunks
  EXPECT_EQ(gemm2_has_ranges(2880), false);   // gpt-oss
}

// GEMM2 over canonical K ranges (more than kRangeChunks = 64 K chunks): split into all its ranges
// where that takes fewer chunks a SM in rounds of range-long units than whole tiles take, by the tile
// bound with two ranges and by the tiles expected under uniform routing with more; with 16-token
// tiles only, at most kMaxSplitUnits units by the tile bound; never where K is one range.
TEST(SelectConfig, RangeSplitOnlyForFewDecodeTilesOverManyRanges) {
  Sm90Config bn16;
  bn16.tile_tokens = 16;
  bn16.consumers = 4;
  Sm90Config bn16_c2 = bn16;
  bn16_c2.consumers = 2;
  Sm90Config bn32 = bn16;
  bn32.tile_tokens = 32;
  ConfigInput scout = llama4_scout(1);  // GEMM2 m_units 80, k_units 128 (two ranges)
  EXPECT_EQ(select_range_split(scout, bn16_c2, 80, 128), 2);  // 40 tiles: 80 units of 64 in one round
  EXPECT_EQ(select_range_split(scout, bn16, 80, 128), 2);     // 20 tiles
  EXPECT_EQ(select_range_split(scout, bn32, 80, 128), 1);     // BN16 only
  EXPECT_EQ(select_range_split(scout, bn16_c2, 80, 64), 1);   // one range
  EXPECT_EQ(select_range_split(scout, bn16_c2, 80, 65), 2);   // 64 + 1
  scout.num_tokens = 0;
  EXPECT_EQ(select_range_split(scout, bn16_c2, 80, 128), 1);
  // T=2: 80 narrowed tiles: 160 units take two rounds of 64 chunks, no fewer than one of 128.
  scout.num_tokens = 2;
  EXPECT_EQ(select_range_split(scout, bn16_c2, 80, 128), 1);
  // T=8: at most 8 token tiles x 20 m-blocks: 320 units in three rounds of 64 chunks, against two of
  // 128; T=16: 640 units in five rounds against three; T=32: 17 token tiles, 680 units in six rounds,
  // no fewer chunks than three of 128 (though 279 tiles are expected: the bound decides); T=512: 47
  // token tiles, 1880 units, past kMaxSplitUnits.
  scout.num_tokens = 8;
  EXPECT_EQ(select_range_split(scout, bn16, 80, 128), 2);
  scout.num_tokens = 16;
  EXPECT_EQ(select_range_split(scout, bn16, 80, 128), 2);
  scout.num_tokens = 32;
  EXPECT_EQ(select_range_split(scout, bn16, 80, 128), 1);
  scout.num_tokens = 512;
  EXPECT_EQ(max_gemm_tiles(scout, bn16, 80), 940);
  EXPECT_EQ(select_range_split(scout, bn16, 80, 128), 1);
  // Mixtral-8x7B T=1 (E=8, top-2, GEMM2 m_units 64, k_units 224: four ranges of 56): 64 tiles
  // narrowed, 256 units in two rounds of 56 chunks against one round of 224.
  ConfigInput mixtral = mixtral_8x7b(1);
  EXPECT_EQ(select_range_split(mixtral, bn16_c2, 64, 224), 4);
  // T=2: 112 narrowed tiles expected: 448 units take four rounds of 56 chunks, no fewer than one of
  // 224, and four ranges do not split on a tie; the 4-consumer tile's 56 take two rounds.
  mixtral.num_tokens = 2;
  EXPECT_EQ(select_range_split(mixtral, bn16_c2, 64, 224), 1);
  EXPECT_EQ(select_range_split(mixtral, bn16, 64, 224), 4);
  // T=4: 87.5 tiles (bound 128): 350 units in three rounds; T = 8 / 16 / 32: 115 / 127 / 128 tiles
  // (bound 128 / 144 / 176), one round of 224 or four of 56.
  mixtral.num_tokens = 4;
  EXPECT_EQ(select_range_split(mixtral, bn16, 64, 224), 4);
  for (int64_t t : {8, 16, 32}) {
    mixtral.num_tokens = t;
    EXPECT_EQ(select_range_split(mixtral, bn16, 64, 224), 1) << t;
  }
  // Expert parallelism: 8 of 64 experts on this rank see an eighth of the pairs.
  ConfigInput shard = mixtral_8x7b(64);
  shard.num_experts = 64;
  EXPECT_NEAR(expected_gemm_tiles(shard, bn16, 64), 8 * 16 * (1 - std::pow(62.0 / 64, 64)), 1e-6);
  // Never more than kMaxSplitUnits units; a split always is every range.
  for (int64_t t : {1, 2, 3, 5, 8, 16, 64}) {
    for (int64_t k : {65, 128, 224, 1000}) {
      ConfigInput in = scout;
      in.num_tokens = t;
      const int s = select_range_split(in, bn16, 80, k);
      EXPECT_TRUE(s == 1 || s == k_range_count(k)) << t << " " << k << ": " << s;
      if (s > 1) {
        EXPECT_LE(max_gemm_tiles(in, bn16, 80) * s, kMaxSplitUnits) << t << " " << k;
      }
    }
  }
}

// A GEMM2 over K ranges is narrowed for few tiles unless that loses its split at the ranges.
TEST(SelectConfig, RangedGemmTwoKeepsTheWideTileWhereOnlyItSplits) {
  const Sm90Config wide = compiled_configs()[0];
  const Sm90Config narrow = compiled_configs()[kNarrowDecodeConfig];
  ASSERT_EQ(wide.tile_tokens, 16);
  ASSERT_EQ(wide.consumers, 4);
  ASSERT_EQ(narrow.consumers, 2);
  ConfigInput scout = llama4_scout(1);      // GEMM2 m_units 80, k_units 128 (two ranges)
  ConfigInput mixtral = mixtral_8x7b(1);  // GEMM2 m_units 64, k_units 224
  // T=1: the narrowed tiles split (Scout 40 tiles, 80 units; Mixtral 64 tiles, 256 units).
  EXPECT_EQ(select_ranged_gemm2(scout, wide, 80, 128).name(), narrow.name());
  EXPECT_EQ(select_ranged_gemm2(mixtral, wide, 64, 224).name(), narrow.name());
  // T=2: the narrowed tiles would not split (Scout 80 tiles in one round of 128 chunks, against two
  // of 64; Mixtral 112 tiles expected, one round of 224 against four of 56); the wide ones do (40
  // tiles, 80 units in one round; 56 tiles expected, 224 units in two).
  scout.num_tokens = mixtral.num_tokens = 2;
  EXPECT_EQ(select_range_split(scout, narrow, 80, 128), 1);
  EXPECT_EQ(select_ranged_gemm2(scout, wide, 80, 128).name(), wide.name());
  EXPECT_EQ(select_range_split(mixtral, narrow, 64, 224), 1);
  EXPECT_EQ(select_ranged_gemm2(mixtral, wide, 64, 224).name(), wide.name());
  // T=4 (Scout): narrow_for_few_tiles keeps the wide tile (80 at most, more than half the SMs).
  scout.num_tokens = 4;
  EXPECT_EQ(select_ranged_gemm2(scout, wide, 80, 128).name(), narrow_for_few_tiles(scout, wide, 80).name());
  EXPECT_EQ(select_ranged_gemm2(scout, wide, 80, 128).name(), wide.name());
  // A K of one range: narrow_for_few_tiles as for any GEMM; a config other than the default decode
  // one: not changed.
  scout.num_tokens = 2;
  EXPECT_EQ(select_ranged_gemm2(scout, wide, 80, 64).name(), narrow.name());
  const Sm90Config bn32 = compiled_configs()[1];
  ASSERT_NE(bn32.tile_tokens, 16);
  EXPECT_EQ(select_ranged_gemm2(scout, bn32, 80, 128).name(), bn32.name());
}

// A layer whose GEMM2 has K ranges gets the split's regions (its default split) and a range slot per
// CTA for the main and the tail launch, after every other region; others get none.
TEST(SelectConfig, RangeSlotsOnlyForGemmTwoOverRanges) {
  EXPECT_FALSE(gemm2_has_ranges(4096));
  EXPECT_TRUE(gemm2_has_ranges(4096 + 64));
  EXPECT_TRUE(gemm2_has_ranges(4097));  // 65 chunks, the last one partial
  const WorkspaceLayout plain = WorkspaceLayout::make(64, 1, 16, 5120, 4096, false, 132);
  EXPECT_EQ(plain.range_ctas, 0);
  EXPECT_EQ(plain.split_counters, 0);
  const WorkspaceLayout r = WorkspaceLayout::make(64, 1, 16, 5120, 8192, false, 132);
  EXPECT_EQ(r.range_ctas, 132);
  EXPECT_EQ(r.split_counters, 2 * kSplitCounters);
  EXPECT_GE(r.range_total, r.split_count + 4 * size_t(r.split_counters));
  EXPECT_EQ(r.range_total % 256, 0u);
  EXPECT_EQ(r.total, r.range_total + size_t(4) * 132 * kRangeSlotFloats);
  // (the regions before the slots do not move with the CTA count: the bench and tests read them
  // from a layout made without it)
  const WorkspaceLayout r0 = WorkspaceLayout::make(64, 1, 16, 5120, 8192);
  EXPECT_EQ(r0.range_total, r.range_total);
  EXPECT_EQ(r0.split_count, r.split_count);
}

TEST(SelectConfig, GemmTwoUnitCounterHasItsOwnWord) {
  // The decode GEMM2's unit counter (schedule_units) sits between tile_done and x, overlapping
  // neither, 256-byte aligned like every region.
  for (int64_t tokens : {1, 64, 16384}) {
    for (int experts : {1, 8, 256}) {
      const WorkspaceLayout l = WorkspaceLayout::make(tokens, 8, experts, 7168, 2048);
      EXPECT_GE(l.next_unit, l.tile_done + 4 * (size_t(l.max_pairs) + size_t(experts))) << tokens << " " << experts;
      EXPECT_GE(l.x, l.next_unit + 8) << tokens << " " << experts;
      EXPECT_EQ(l.next_unit % 256, 0u);
      EXPECT_LE(l.next_unit + 8, l.total);
    }
  }
}

TEST(SelectConfig, OnlyInstantiatedTilesAndSaneShapes) {
  for (int64_t t : {0, 1, 7, 127, 1000, 65536}) {
    for (int experts : {1, 8, 128, 256}) {
      ConfigInput in = deepseek(t);
      in.num_local_experts = experts;
      const Sm90Config c = select_config(in);
      EXPECT_NE(std::find(std::begin(kSupportedTileTokens), std::end(kSupportedTileTokens), c.tile_tokens),
                std::end(kSupportedTileTokens));
      EXPECT_GE(c.stages, 2);
      EXPECT_GE(c.consumers, 1);
      EXPECT_FALSE(c.name().empty());
      EXPECT_EQ(select_config(in).name(), c.name());  // pure
    }
  }
}

}  // namespace
}  // namespace fp4moe::sm90

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>


namespace fp4moe::sm90 {
namespace {

std::string temp_path(const char* name) { return std::string(::testing::TempDir()) + name; }

TEST(TuneTable, SelectConfigReturnsOnlyCompiledConfigs) {
  for (int64_t t : {1, 100, 1000, 100000}) {
    const Sm90Config c = select_config(deepseek(t));
    EXPECT_TRUE(config_by_name(c.name()).has_value()) << c.name();
  }
  EXPECT_FALSE(config_by_name("BN48_C2_S4_x1").has_value());
}

// launch.cuh instantiates the kernels and compiled_configs() lists them from one table
// (compiled_configs.h); scripts/ptxas-check.sh counts the kernels and the GPU tests launch each one.
// This pins the names and their order (select_config indexes them).
TEST(TuneTable, CompiledConfigNames) {
  std::vector<std::string> names;
  for (const auto& c : compiled_configs()) names.push_back(c.name());
  const std::vector<std::string> want = {"BN16_C4_S4_x1_db_c4", "BN32_C4_S5_x1_db_c2", "BN64_C4_S4_x1_c2",
                                         "BN128_C2_S6_x1_db",   "BN128_C4_S5_x1",      "BN256_C2_S4_x1_db",
                                         "BN96_C4_S6_x1",       "BN48_C4_S5_x1_db_c2", "BN16_C2_S4_x1_db_c4",
                                         "BN80_C4_S9_x1",       "BN32_C4_S5_x1_db_c2_tail"};
  EXPECT_EQ(names, want);
}

TEST(TuneTable, SavesLoadsAndLooksUpByRowsPerExpertBucket) {
  TuneTable t;
  t.set_device("NVIDIA H200");
  t.set(deepseek(128), compiled_configs()[2]);  // 4 rows per expert -> bucket 4
  const std::string path = temp_path("tune_ok.txt");
  ASSERT_TRUE(t.save(path).ok());
  TuneTable u;
  ASSERT_TRUE(u.load(path, "NVIDIA H200").ok());
  EXPECT_EQ(u.size(), 1u);
  auto hit = u.lookup(deepseek(100));  // 3.1 rows per expert: same bucket
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->name(), compiled_configs()[2].name());
  EXPECT_NE(std::string(hit->regime).find("tuned"), std::string::npos);
  EXPECT_FALSE(u.lookup(deepseek(1024)).has_value());  // 32 rows per expert: not measured
  // A CRLF line end or trailing blanks after the device name do not hide the entries.
  const std::string crlf = temp_path("tune_crlf.txt");
  std::ofstream(crlf) << "fp4moe-tune v3\r\ndevice NVIDIA H200 \r\n7168 2048 256 8 4 "
                      << compiled_configs()[2].name() << "\r\n";
  TuneTable w;
  ASSERT_TRUE(w.load(crlf, "NVIDIA H200").ok());
  EXPECT_EQ(w.size(), 1u);
  // Another GPU's table is read but not used.
  TuneTable other;
  ASSERT_TRUE(other.load(path, "NVIDIA H100 80GB HBM3").ok());
  EXPECT_EQ(other.size(), 0u);
}

TEST(TuneTable, RejectsMalformedFilesNamingTheLine) {
  auto write = [](const std::string& path, const std::string& text) { std::ofstream(path) << text; };
  TuneTable t;
  const std::string p1 = temp_path("tune_bad1.txt");
  write(p1, "not-a-tune-file\n");
  Status s = t.load(p1, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("line 1"), std::string::npos) << s.message();
  const std::string p2 = temp_path("tune_bad2.txt");
  write(p2, "fp4moe-tune v3\ndevice x\n7168 2048 256 8 4 BN48_C2_S4_x1\n");
  s = t.load(p2, "x");
  EXPECT_NE(s.message().find("line 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("BN48_C2_S4_x1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fp4moe-bench --tune"), std::string::npos) << s.message();
  const std::string p3 = temp_path("tune_bad3.txt");
  write(p3, "fp4moe-tune v3\n7168 2048 256\n");
  EXPECT_NE(t.load(p3, "x").message().find("line 2"), std::string::npos);
  // An entry before any device line would belong to no GPU: refused, naming the line.
  const std::string p6 = temp_path("tune_no_device.txt");
  write(p6, "fp4moe-tune v3\n7168 2048 256 8 4 BN16_C4_S4_x1_db_c4\n");
  s = t.load(p6, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("before any 'device"), std::string::npos) << s.message();
  EXPECT_EQ(t.load(temp_path("does_not_exist.txt"), "x").code(), StatusCode::kIoError);
  // Words after the config are refused (a comment is fine).
  const std::string p7 = temp_path("tune_trailing.txt");
  write(p7, "fp4moe-tune v3\ndevice x\n7168 2048 256 8 4 BN16_C4_S4_x1_db_c4 # measured\n"
            "7168 2048 256 8 16 BN16_C4_S4_x1_db_c4 BN32_C4_S6_x1\n");
  s = t.load(p7, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("line 4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unexpected 'BN32_C4_S6_x1'"), std::string::npos) << s.message();
  // Tables from before the configs were renamed say to measure again.
  const std::string p4 = temp_path("tune_v1.txt");
  write(p4, "fp4moe-tune v1\ndevice x\n7168 2048 256 8 4 BN16_C4_S12_x1\n");
  s = t.load(p4, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("fp4moe-bench --tune"), std::string::npos) << s.message();
  const std::string p5 = temp_path("tune_v2.txt");
  write(p5, "fp4moe-tune v2\ndevice x\n7168 2048 256 8 4 BN16_C4_S12_x1_db\n");
  s = t.load(p5, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("a v2 table"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fp4moe-bench --tune"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp4moe::sm90
