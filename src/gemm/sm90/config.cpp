#include "src/gemm/sm90/config.h"

#include "src/gemm/sm90/tune.h"

namespace fp4moe::sm90 {

std::string Sm90Config::name() const {
  return "BN" + std::to_string(tile_tokens) + "_C" + std::to_string(consumers) + "_S" + std::to_string(stages) +
         "_x" + std::to_string(ctas_per_sm);
}

Sm90Config select_config(const ConfigInput& in) {
  const int64_t rows = in.num_tokens * in.top_k;
  const int64_t per_expert = in.num_local_experts > 0 ? (rows + in.num_local_experts - 1) / in.num_local_experts : rows;
  // compiled_configs()[0] (BN16, 3 CTAs/SM) stays a tuning candidate: measured on an H200
  // (bench/results/2026-11-29_h200_deepseek-r1_tune.txt), BN64 with 4 consumers beat it at 1 and at
  // 128 tokens of DeepSeek-R1 (0.145 vs 0.205 ms, 3.47 vs 3.53 ms).
  const auto& c = compiled_configs();
  if (per_expert <= 64) return c[1];
  if (per_expert <= 128) return c[2];
  return c[3];
}

}  // namespace fp4moe::sm90
