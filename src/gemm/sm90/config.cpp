#include "src/gemm/sm90/config.h"

#include <algorithm>
#include <cmath>

#include "src/gemm/sm90/tune.h"
#include "src/moe/workspace.h"

namespace fp4moe::sm90 {

std::string Sm90Config::name() const {
  return "BN" + std::to_string(tile_tokens) + "_C" + std::to_string(consumers) + "_S" + std::to_string(stages) +
         "_x" + std::to_string(ctas_per_sm) + (double_buffer ? "_db" : "") +
         (chunks_per_stage != 1 ? "_c" + std::to_string(chunks_per_stage) : "") + (tail ? "_tail" : "");
}

int64_t max_gemm_tiles(const ConfigInput& in, const Sm90Config& c, int64_t m_units) {
  if (in.num_tokens <= 0 || c.consumers <= 0 || c.tile_tokens <= 0) return 0;
  const int64_t pairs = in.num_tokens * in.top_k;
  const int64_t nonempty_experts = std::min<int64_t>(pairs, in.num_local_experts);
  // An expert of c rows has ceil(c / BN) <= (c + BN - 1) / BN tiles: summed over the nonempty ones,
  // at most (pairs + (BN - 1) * nonempty) / BN, rounded down (a sum of integers).
  const int64_t token_tiles =
      std::min<int64_t>(pairs, (pairs + (c.tile_tokens - 1) * nonempty_experts) / c.tile_tokens);
  return token_tiles * ((m_units + c.consumers - 1) / c.consumers);
}

Sm90Config narrow_for_few_tiles(const ConfigInput& in, const Sm90Config& c, int64_t m_units) {
  const Sm90Config& narrow = compiled_configs()[kNarrowDecodeConfig];
  if (c.name() != compiled_configs()[0].name()) return c;
  const int64_t tiles = max_gemm_tiles(in, c, m_units);
  if (tiles <= 0 || 2 * tiles > in.num_sms) return c;
  return narrow;
}

std::optional<Sm90Config> select_tail(const Sm90Config& main) {
  if (main.tile_tokens < 128) return std::nullopt;
  Sm90Config t = compiled_configs()[kTailConfig];
  t.regime = "tail: <= 32 rows past a full tile";
  return t;
}

bool select_gemm_overlap(const ConfigInput& in, const Sm90Config& gemm1) {
  return compiles_gemm_overlap(gemm1.tile_tokens, gemm1.tail) && in.num_tokens > 0 && in.num_local_experts > 0 &&
         in.top_k > 0;
}

int select_split_k(const ConfigInput& in, const Sm90Config& c, int64_t m_units, int64_t k_units) {
  if (c.tile_tokens != 16) return 1;
  const int64_t tiles = max_gemm_tiles(in, c, m_units);
  if (tiles <= 0 || 2 * tiles > in.num_sms) return 1;
  int64_t s = std::min<int64_t>({in.num_sms / tiles, 8, k_units / 4, kMaxSplitUnits / tiles});
  // Two ranges only double the SMs, which the narrow decode config (narrow_for_few_tiles) also does,
  // without partial sums; on an H200 (session 10, runs 7-8) two-way splits won with long ranges
  // (Llama-4-Scout GEMM1, 40 chunks each; gpt-oss-120b GEMM2, 22-23) and lost with short ones
  // (Qwen3-30B, 16 and 6), all at T=1.
  if (s == 2 && k_units / 2 < kMinTwoWaySplitChunks) return 1;
  return s > 1 ? int(s) : 1;
}

double expected_gemm_tiles(const ConfigInput& in, const Sm90Config& c, int64_t m_units) {
  if (in.num_tokens <= 0 || in.top_k <= 0 || in.num_local_experts <= 0 || c.consumers <= 0 || c.tile_tokens <= 0) {
    return 0;
  }
  const double p = local_pick_probability(in);  // a token picks a given local expert
  const int64_t t = in.num_tokens;
  // E[ceil(rows / BN)] with rows ~ Binomial(t, p): the pmf from its mode (in logs, no underflow)
  // outwards by the ratio of neighbours, to where it falls below 1e-30 of the mode's (the pmf falls
  // monotonically away from its mode).
  auto tiles_of = [&](int64_t rows) { return double((rows + c.tile_tokens - 1) / c.tile_tokens); };
  double token_tiles = 0;
  if (p >= 1) {
    token_tiles = tiles_of(t);
  } else {
    const double q = 1 - p;
    const int64_t mode = std::min<int64_t>(t, int64_t(double(t + 1) * p));
    // log C(t, mode) as a sum of logs (std::lgamma writes the global signgam: forwards on several
    // host threads select configs at once).
    double log_choose = 0;
    const int64_t k = std::min(mode, t - mode);
    for (int64_t i = 1; i <= k; ++i) log_choose += std::log(double(t - k + i) / double(i));
    const double at_mode = std::exp(log_choose + double(mode) * std::log(p) + double(t - mode) * std::log1p(-p));
    token_tiles = at_mode * tiles_of(mode);
    double pmf = at_mode;
    for (int64_t r = mode; r < t && pmf > 1e-30 * at_mode; ++r) {
      pmf *= double(t - r) / double(r + 1) * p / q;
      token_tiles += pmf * tiles_of(r + 1);
    }
    pmf = at_mode;
    for (int64_t r = mode; r > 0 && pmf > 1e-30 * at_mode; --r) {
      pmf *= double(r) / double(t - r + 1) * q / p;
      token_tiles += pmf * tiles_of(r - 1);
    }
  }
  const double tiles = token_tiles * in.num_local_experts * double((m_units + c.consumers - 1) / c.consumers);
  return std::min(tiles, double(max_gemm_tiles(in, c, m_units)));
}

int select_range_split(const ConfigInput& in, const Sm90Config& c, int64_t m_units, int64_t k_units) {
  if (c.tile_tokens != 16 || k_units <= kRangeChunks || in.num_sms <= 0) return 1;
  const int64_t ranges = k_range_count(k_units);
  const int64_t bound = max_gemm_tiles(in, c, m_units);
  if (bound <= 0 || bound * ranges > kMaxSplitUnits) return 1;
  // The tiles that decide: the bound with two ranges, the expected count with more (config.h).
  const double tiles = ranges > 2 ? expected_gemm_tiles(in, c, m_units) : double(bound);
  auto rounds = [&](double units) { return int64_t(std::ceil(units / double(in.num_sms) - 1e-9)); };
  return rounds(tiles * double(ranges)) * k_range_chunks(k_units) < rounds(tiles) * k_units ? int(ranges) : 1;
}

Sm90Config select_ranged_gemm2(const ConfigInput& in, const Sm90Config& c, int64_t m_units, int64_t k_units) {
  const Sm90Config narrow = narrow_for_few_tiles(in, c, m_units);
  if (narrow.name() == c.name() || select_range_split(in, narrow, m_units, k_units) > 1) return narrow;
  return select_range_split(in, c, m_units, k_units) > 1 ? c : narrow;
}

namespace {

// E over every rank (the local experts where num_experts is 0, no expert parallelism).
int all_experts(const ConfigInput& in) { return in.num_experts > 0 ? in.num_experts : in.num_local_experts; }

// Tokens filtered to this shard's experts (an all-to-all dispatch), where that changes the count.
bool routed_here_only(const ConfigInput& in) {
  return in.tokens_routed_here && in.num_local_experts > 0 && in.num_local_experts < all_experts(in);
}

}  // namespace

double local_pick_probability(const ConfigInput& in) {
  // Each token's top_k ids spread over all E experts; a rank holds L of them and skips the other
  // ranks' ids, so its experts see T * K / E rows each on average, as without expert parallelism
  // (an all-gather dispatch). An all-to-all dispatch sends a rank only the tokens with a local id,
  // a share P of them: K / (E * P) each. (Until session 45 this was K / L: ep_size times too many
  // rows after an all-gather, e.g. 80 instead of 10 at DeepSeek-R1 EP=8 over 320 gathered tokens,
  // which chose BN96 for BN16's regime.)
  const int experts = all_experts(in), local = in.num_local_experts;
  if (experts <= 0 || in.top_k <= 0) return 1;
  const double p = double(in.top_k) / experts;
  if (!routed_here_only(in)) return std::min(1.0, p);
  double none_local = 1;  // C(E - L, K) / C(E, K): K distinct picks, all elsewhere
  for (int i = 0; i < in.top_k; ++i) none_local *= double(std::max(experts - local - i, 0)) / double(experts - i);
  return std::min(1.0, p / (1 - none_local));
}

int64_t rows_per_local_expert(const ConfigInput& in) {
  if (!routed_here_only(in) || in.top_k <= 0) {  // (exact: ceil(T * K / E) in integers)
    const int64_t experts = all_experts(in), rows = in.num_tokens * in.top_k;
    return experts > 0 ? (rows + experts - 1) / experts : rows;
  }
  return int64_t(std::ceil(double(in.num_tokens) * local_pick_probability(in) - 1e-9));
}

Sm90Config select_config(const ConfigInput& in) {
  const int64_t per_expert = rows_per_local_expert(in);
  // Thresholds from `fp4moe-bench --tune` on an H200 with uniform random routing, graph-replay ms per
  // config (bench/results/2026-11-29_h200_tune_v3.txt; "db" = double-buffered A fragments; BN16/32/64
  // have since moved to two chunks a stage, 1-4% faster at T <= 512, which left the choice between
  // them unchanged: bench/results/2026-11-29_h200_tune_c2.txt):
  //   DeepSeek-R1 T=1    (1 row/expert):  BN16db 0.117  BN32db 0.122  BN64 0.134
  //               T=128  (4 rows/expert): BN16db 2.53   BN32db 2.74   BN64 3.38
  //               T=512  (16):            BN16db 3.69   BN32db 2.87   BN64 3.51
  //               T=2048 (64):            BN64 5.12     BN128db 4.88  BN256db 8.95
  //               T=8192 (256):           BN128db 13.39 BN256db 14.04
  //   Qwen3-30B   T=512  (32):            BN32db 0.278  BN64 0.231    BN128db 0.290
  //               T=2048 (128):           BN64 0.567    BN128db 0.538 BN256db 0.608
  //               T=8192 (512):           BN128db 1.727 BN256db 1.564
  // Decode wants narrow tiles (MMA time grows with the tile width, the weights are read once either
  // way), until the busiest experts overflow the tile and their weights are read once per tile: at 16
  // rows on average many experts hold more than 16, so BN32 wins there. Between the measured points
  // (8 | 16-32 | 64-256 | 512 rows) the thresholds are interpolated, not measured.
  // Since then (bench/results/2026-11-29_h200_tune_prefill.txt, graph-replay ms):
  //   Qwen3-30B    T=2048 (128): BN128_C4 0.459  BN64c2 0.510   BN128db 0.519  BN256db 0.606
  //                T=8192 (512): BN128_C4 1.446  BN128db 1.583  BN256db 1.599
  //                T=16384 (1024): BN128_C4 2.829 BN256db 3.040 BN128db 3.228
  //   gpt-oss-120b T=2048 (64):  BN64c2 1.238    BN128db 1.318  BN128_C4 1.363
  //                T=8192 (256): BN128_C4 3.554  BN128db 3.830  BN256db 4.115
  // so the 4-consumer BN128 took every tile size above 96 rows per expert, and BN256 became a tuning
  // candidate only.
  // Session 5 (bench/results/2026-11-30_h200_tune_bn96.txt, graph-replay ms; BN96 = BN96_C4_S6_x1):
  //   DeepSeek-R1  T=1024 (32):  BN64c2 3.141   BN32db 3.437   BN128db 3.558  BN96 3.904
  //                T=2048 (64):  BN96 4.004     BN128db 4.494  BN64c2 4.519   BN128_C4 4.696
  //                T=4096 (128): BN128_C4 7.066 BN128db 7.176  BN64c2 7.616   BN96 7.875
  //   gpt-oss-120b T=2048 (64):  BN96 1.077     BN64c2 1.200   BN128db 1.300  BN128_C4 1.325
  //   Qwen3-30B    T=1024 (64):  BN96 0.260     BN128_C4 0.296 BN64c2 0.303   BN128db 0.321
  //   Qwen3-235B   T=1024 (64):  BN96 0.806     BN64c2 0.912   BN128db 0.964  BN128_C4 0.978
  // so BN96 takes 41-80 rows per expert (the 80 between the measured 64 and 128 is interpolated: at
  // 80 on average some experts overflow 96 rows and read their weights twice), and BN128 with 2
  // consumers is a tuning candidate only.
  //   DeepSeek-R1  T=768 (24):   BN32db 2.464   BN48db 2.749   BN64c2 3.095
  //                T=1024 (32):  BN48db 2.783   BN64c2 3.171   BN32db 3.341
  //                T=1280 (40):  BN48db 2.989   BN64c2 3.208   BN128db 3.621  BN96 3.955
  //   Qwen3-30B    T=512 (32):   BN48db 0.186   BN64c2 0.202   BN32db 0.230
  //   gpt-oss-120b T=1024 (32):  BN48db 0.734   BN64c2 0.835   BN32db 0.916
  // (bench/results/2026-11-30_h200_tune_bn48.txt, BN48db = BN48_C4_S5_x1_db_c2), so BN48 takes
  // 25-40 rows per expert.
  // Session 6 (bench/results/2026-11-30_h200_tune_bn80.txt; BN80 = BN80_C4_S6_x1, BN64c2 =
  // BN64_C4_S4_x1_c2):
  //   DeepSeek-R1  T=1536 (48):  BN64c2 3.261   BN80 3.628    BN128db 3.699  BN96 3.973  BN48db 4.090
  //   Qwen3-30B    T=768 (48):   BN64c2 0.217   BN80 0.233    BN96 0.250     BN48db 0.267
  //                T=1024 (64):  BN80 0.247     BN96 0.262    BN128_C4 0.302 BN64c2 0.304
  //                T=1536 (96):  BN128_C4 0.328 BN112 0.335   BN96 0.383     BN80 0.450
  //   gpt-oss-120b T=2048 (64):  BN80 1.026     BN96 1.115    BN112 1.137    BN128db 1.264
  // and with BN64 the default at 41-56 rows and BN80 at 57-72 (same file, run 4, another H200):
  //   DeepSeek-R1  T=1792 (56):  BN64c2 3.517   BN80 3.523    BN128db 3.770  BN96 3.869
  //                T=2048 (64):  BN80 3.590 (run 4's bench row, 2026-11-30_h200_run4_2364131.txt;
  //                              BN96 4.023 in run 3's --tune on another H200)
  //   Qwen3-30B    T=896 (56):   BN80 0.239     BN64c2 0.244   BN96 0.256
  //                T=1152 (72):  BN96 0.269     BN80 0.288     BN128_C4 0.309
  //                T=1280 (80):  BN96 0.278     BN128_C4 0.316 BN80 0.350
  // so BN64 takes 41-56 rows per expert (a tie with BN80 at 56), BN80 57-64 and BN96 65-80 (the
  // boundary between the measured 64 and 72 is interpolated).
  // (All of the above was measured before tail tiles (session 7), which make BN128 and BN256 cheaper
  // at 129-160 and 257-288 rows per expert; the thresholds above 80 rows were not measured again.)
  // Session 40 (bench/results/2026-12-03_h200_s40_run{6,7}_tune-*.txt, one H200, graph-replay ms; BN32
  // now with the GEMM overlap and dynamic GEMM2 units, BN16 = BN16_C4_S4_x1_db_c4):
  //   rows/expert:     8              10             12             16
  //   Qwen3-30B     0.1155 / 0.1311  0.1258 / 0.1333 0.1329 / 0.1391 0.1622 / 0.1443   (BN16 / BN32)
  //   gpt-oss-20b   -                0.1567 / 0.1649 0.1612 / 0.1704 0.2054 / 0.1756
  //   DeepSeek-R1   1.8002 / 1.9535  1.9898 / 2.0874 2.1553 / 2.1438 2.7343 / 2.2714
  //   gpt-oss-120b  0.5336 / 0.5746  0.5845 / 0.6113 0.6268 / 0.6286 0.8069 / 0.6587
  //   Mixtral-8x7B  -                0.2656 / 0.2760 0.2887 / 0.2798 0.3759 / 0.2972
  //   Llama-4-Scout -                0.3750 / 0.3927 0.4012 / 0.4009 0.5057 / 0.4313
  // BN16 wins at 10 rows on all six (3.8-5.6%), 12 is mixed (Qwen3-30B and gpt-oss-20b BN16 by ~5%,
  // Mixtral BN32 by 3%, the rest within 0.8%), 16 is BN32's everywhere: BN16 up to 10 rows (was 8).
  const auto& c = compiled_configs();
  if (per_expert <= 10) return c[0];  // BN16
  if (per_expert <= 24) return c[1];  // BN32
  if (per_expert <= 40) return c[7];  // BN48
  if (per_expert <= 56) return c[2];  // BN64
  if (per_expert <= 64) return c[9];  // BN80
  if (per_expert <= 80) return c[6];  // BN96
  return c[4];                        // BN128 x 4 consumers
}

}  // namespace fp4moe::sm90
