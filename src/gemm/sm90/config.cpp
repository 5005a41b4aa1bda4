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
  // The smallest compiled tile holding the average expert's rows. A tile much wider than its rows
  // wastes MMA time, which decode cannot afford: streaming 4 units (9 KB) per SM per K chunk at HBM
  // rate leaves ~500 cycles, and the chunk's sixteen m64nNk16 MMAs take about 8 N cycles.
  // An expert with more rows than the tile is read once per tile, so it must not be too narrow.
  const auto& c = compiled_configs();
  if (per_expert <= 16) return c[0];
  if (per_expert <= 32) return c[1];
  if (per_expert <= 64) return c[2];
  if (per_expert <= 128) return c[3];
  return c[4];
}

}  // namespace fp4moe::sm90
