// tools/routing_file.h: the routing file fp4moe-bench --dump-routing writes for bench/peers_torch.py
// (read by bench/routing_file.py, tested in tests/python/test_bench_tools.py).
#include "tools/routing_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>


namespace fp4moe {
namespace {

std::vector<char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(RoutingFile, HeaderLineThenIdsThenWeights) {
  const std::string dir = ::testing::TempDir();
  const std::string path = tools::routing_file_path(dir, "deepseek-r1", 3);
  EXPECT_EQ(path, dir + "/deepseek-r1_T3.routing");
  // Set 0 keeps the name older dumps have; the other timed sets are numbered.
  EXPECT_EQ(tools::routing_file_path(dir, "deepseek-r1", 3, 0), path);
  EXPECT_EQ(tools::routing_file_path(dir, "llama4-scout", 8, 7), dir + "/llama4-scout_T8_set7.routing");
  const std::vector<int32_t> ids = {5, 0, 255, 7, 1, 2};
  const std::vector<float> w = {0.25f, 0.75f, 1.0f, 0.0f, -0.5f, 3.5f};
  ASSERT_TRUE(tools::write_routing_file(path, 3, 2, 256, ids, w));
  const std::vector<char> bytes = read_all(path);
  const std::string header = "fp4moe-routing v1 T=3 K=2 E=256\n";
  ASSERT_EQ(bytes.size(), header.size() + 8 * ids.size());
  EXPECT_EQ(std::string(bytes.data(), header.size()), header);
  std::vector<int32_t> got_ids(ids.size());
  std::vector<float> got_w(w.size());
  std::memcpy(got_ids.data(), bytes.data() + header.size(), 4 * ids.size());
  std::memcpy(got_w.data(), bytes.data() + header.size() + 4 * ids.size(), 4 * w.size());
  EXPECT_EQ(got_ids, ids);
  EXPECT_EQ(got_w, w);
}

TEST(RoutingFile, RefusesMismatchedSizesAndUnwritablePaths) {
  const std::string dir = ::testing::TempDir();
  EXPECT_FALSE(tools::write_routing_file(dir + "/a.routing", 2, 2, 8, {1, 2, 3}, {1, 1, 1}));
  EXPECT_FALSE(tools::write_routing_file(dir + "/b.routing", 1, 2, 8, {1, 2}, {1}));
  EXPECT_FALSE(tools::write_routing_file(dir + "/no/such/dir/c.routing", 1, 1, 8, {1}, {1}));
  // Zero tokens: a header and nothing else.
  ASSERT_TRUE(tools::write_routing_file(dir + "/d.routing", 0, 8, 256, {}, {}));
  EXPECT_EQ(read_all(dir + "/d.routing").size(), std::string("fp4moe-routing v1 T=0 K=8 E=256\n").size());
}

}  // namespace
}  // namespace fp4moe
