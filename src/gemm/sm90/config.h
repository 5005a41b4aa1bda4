// Config choice for the sm90 grouped GEMMs: a pure function of the problem and the device, with named
// regimes. A config changes speed, never results: every config computes each output element with the
// same sequence of k16 MMAs over K.
#pragma once

#include <cstdint>
#include <string>

namespace fp4moe::sm90 {

struct Sm90Config {
  int tile_tokens = 8;    // BN: tokens (routed rows) per tile, the wgmma N
  int consumers = 2;      // consumer warpgroups; each owns one 64-row weight unit of the tile
  int stages = 8;         // shared-memory pipeline depth (K chunks of 64)
  int ctas_per_sm = 2;    // persistent CTAs per SM
  const char* regime = "";
  std::string name() const;
};

struct ConfigInput {
  int64_t num_tokens = 0;
  int top_k = 1;
  int num_local_experts = 1;
  int64_t hidden = 0;        // H
  int64_t inter_local = 0;   // I per rank
  int num_sms = 132;
};

// Average routed rows per local expert decides the token tile:
//   decode/small <= 64 rows per expert -> BN 64, 4 consumer warpgroups (bandwidth: weights streamed
//                                         once; measured faster than a BN 16 / 3 CTAs-per-SM config)
//   medium       <= 128                -> BN 128 (1 CTA/SM, tensor-core bound from here on)
//   prefill      >  128                -> BN 256
// Inside a config, each tile's wgmma N is the smallest power-of-two bucket holding its tokens.
Sm90Config select_config(const ConfigInput& in);

// The tile sizes instantiated (a dispatch default fails loudly for anything else).
constexpr int kSupportedTileTokens[] = {16, 64, 128, 256};  // 16: tuning candidate only

}  // namespace fp4moe::sm90
