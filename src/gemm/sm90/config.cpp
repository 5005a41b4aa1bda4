#include "src/gemm/sm90/config.h"

#include "src/gemm/sm90/tune.h"

namespace fp4moe::sm90 {

std::string Sm90Config::name() const {
  return "BN" + std::to_string(tile_tokens) + "_C" + std::to_string(consumers) + "_S" + std::to_string(stages) +
         "_x" + std::to_string(ctas_per_sm) + (double_buffer ? "_db" : "");
}

Sm90Config select_config(const ConfigInput& in) {
  const int64_t rows = in.num_tokens * in.top_k;
  const int64_t per_expert = in.num_local_experts > 0 ? (rows + in.num_local_experts - 1) / in.num_local_experts : rows;
  // Thresholds from `fp4moe-bench --tune` on an H200, DeepSeek-R1 with uniform random routing
  // (bench/results/2026-11-29_h200_deepseek-r1_tune_v2.txt, graph-replay ms per config):
  //   T=1    (1 row/expert):  BN16 0.135  BN32 0.135  BN64 0.147
  //   T=128  (4 rows/expert): BN16 2.94   BN32 3.15   BN64 3.76
  //   T=512  (16):            BN16 4.26   BN32 3.24   BN64 3.90
  //   T=2048 (64):            BN64 5.70   BN128 5.32  BN256 9.10
  //   T=8192 (256):           BN128 14.54 BN256 14.17
  // Decode wants narrow tiles (MMA time grows with the tile width, the weights are read once either
  // way), until the busiest experts overflow the tile and their weights are read once per tile: at 16
  // rows on average many experts hold more than 16, so BN32 wins there. Between the measured points
  // (8, 24-48, 128-160 rows) the thresholds are interpolated, not measured; BN64 won at no measured
  // point and keeps the 25-40 row range between BN32's and BN128's wins.
  const auto& c = compiled_configs();
  if (per_expert <= 8) return c[0];
  if (per_expert <= 24) return c[1];
  if (per_expert <= 40) return c[2];
  if (per_expert <= 160) return c[3];
  return c[4];
}

}  // namespace fp4moe::sm90
