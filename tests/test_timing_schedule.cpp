// tools/timing_schedule.h: fp4moe-bench's order of timed launches over its input sets.
#include "tools/timing_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace fp4moe {
namespace {

struct Launch {
  bool graph;
  int set;
};

// The schedule as fp4moe-bench's run_tokens walks it: blocks of stream launches then graph replays,
// launch i of a block at schedule position start + i, set position % num_sets.
std::vector<Launch> schedule(int iters, int num_sets) {
  std::vector<Launch> out;
  const int total = tools::timed_launches(iters, num_sets), block = tools::timing_block(num_sets);
  for (int done = 0; done < total; done += block) {
    const int n = std::min(block, total - done);
    for (int i = 0; i < n; ++i) out.push_back({false, (tools::stream_block_start(done) + i) % num_sets});
    for (int i = 0; i < n; ++i) out.push_back({true, (tools::graph_block_start(done, n) + i) % num_sets});
  }
  return out;
}

TEST(TimingSchedule, EachKindRunsEverySetEquallyOften) {
  for (int num_sets = 1; num_sets <= 8; ++num_sets) {
    const int block = tools::timing_block(num_sets);
    EXPECT_EQ(block % num_sets, 0) << num_sets << " sets";
    EXPECT_GE(block, tools::kMinTimingBlock) << num_sets << " sets";
    EXPECT_LT(block, tools::kMinTimingBlock + num_sets) << num_sets << " sets";
    for (int iters : {1, 7, 10, 50, 99, 400}) {
      const std::vector<Launch> s = schedule(iters, num_sets);
      std::vector<int> stream(size_t(num_sets), 0), graph(size_t(num_sets), 0);
      for (const Launch& l : s) ++(l.graph ? graph : stream)[size_t(l.set)];
      const int each = tools::timed_launches(iters, num_sets) / num_sets;
      EXPECT_GE(each * num_sets, iters);
      for (int k = 0; k < num_sets; ++k) {
        EXPECT_EQ(stream[size_t(k)], each) << num_sets << " sets, " << iters << " iters, set " << k;
        EXPECT_EQ(graph[size_t(k)], each) << num_sets << " sets, " << iters << " iters, set " << k;
      }
    }
  }
}

TEST(TimingSchedule, ASetComesBackOnlyAfterEveryOtherSet) {
  // One rotation across both kinds: a set's next launch, of either kind, is num_sets launches later.
  for (int num_sets = 2; num_sets <= 8; ++num_sets) {
    for (int iters : {1, 10, 50, 400}) {
      const std::vector<Launch> s = schedule(iters, num_sets);
      std::vector<int> last(size_t(num_sets), -1);
      for (int j = 0; j < int(s.size()); ++j) {
        const int k = s[size_t(j)].set;
        if (last[size_t(k)] >= 0) {
          EXPECT_EQ(j - last[size_t(k)], num_sets) << num_sets << " sets, " << iters << " iters, launch " << j;
        }
        last[size_t(k)] = j;
      }
    }
  }
}

}  // namespace
}  // namespace fp4moe
