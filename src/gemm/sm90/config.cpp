#include "src/gemm/sm90/config.h"

namespace fp4moe::sm90 {

std::string Sm90Config::name() const {
  return "BN" + std::to_string(tile_tokens) + "_C" + std::to_string(consumers) + "_S" + std::to_string(stages) +
         "_x" + std::to_string(ctas_per_sm);
}

Sm90Config select_config(const ConfigInput& in) {
  const int64_t rows = in.num_tokens * in.top_k;
  const int64_t per_expert = in.num_local_experts > 0 ? (rows + in.num_local_experts - 1) / in.num_local_experts : rows;
  Sm90Config c;
  if (per_expert <= 16) {
    c = {16, 2, 8, 3, "decode: <= 16 rows per expert"};
  } else if (per_expert <= 64) {
    c = {64, 4, 8, 1, "small: <= 64 rows per expert"};
  } else if (per_expert <= 128) {
    c = {128, 2, 6, 1, "medium: <= 128 rows per expert"};
  } else {
    c = {256, 2, 4, 1, "prefill: > 128 rows per expert"};
  }
  return c;
}

}  // namespace fp4moe::sm90
