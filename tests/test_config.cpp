// select_config: a pure function of the problem, with named regimes, only instantiated configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>

#include "src/gemm/sm90/config.h"

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

TEST(SelectConfig, RegimesFollowRowsPerExpert) {
  // DeepSeek-R1: rows per expert = T * 8 / 256 = T / 32.
  EXPECT_EQ(select_config(deepseek(1)).tile_tokens, 16);
  EXPECT_EQ(select_config(deepseek(512)).tile_tokens, 16);    // 16 rows per expert
  EXPECT_EQ(select_config(deepseek(513)).tile_tokens, 64);
  EXPECT_EQ(select_config(deepseek(2048)).tile_tokens, 64);
  EXPECT_EQ(select_config(deepseek(4096)).tile_tokens, 128);
  EXPECT_EQ(select_config(deepseek(8192)).tile_tokens, 256);
  EXPECT_NE(std::string(select_config(deepseek(1)).regime).find("decode"), std::string::npos);
  EXPECT_NE(std::string(select_config(deepseek(8192)).regime).find("prefill"), std::string::npos);
  // Expert parallelism: fewer local experts, more rows each.
  ConfigInput ep = deepseek(128);
  ep.num_local_experts = 32;
  EXPECT_EQ(select_config(ep).tile_tokens, 64);
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
