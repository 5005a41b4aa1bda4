// tools/gpu_clocks.h: the statistics fp4moe-bench --clocks reports, and the sampler's behaviour
// where NVML cannot be used (as on the CI machines, which have no NVIDIA driver).
#include "tools/gpu_clocks.h"

#include <gtest/gtest.h>

namespace fp4moe::bench {
namespace {

TEST(GpuClocks, StatsOfSamples) {
  const ClockStats s = clock_stats({1755, 1980, 1410, 1755}, {650000, 700000});
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.sm_mhz_mean, (1755.0 + 1980 + 1410 + 1755) / 4);
  EXPECT_DOUBLE_EQ(s.sm_mhz_min, 1410);
  EXPECT_DOUBLE_EQ(s.sm_mhz_max, 1980);
  EXPECT_DOUBLE_EQ(s.power_w_mean, 675);
}

TEST(GpuClocks, NoSamplesIsEmpty) {
  const ClockStats s = clock_stats({}, {});
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(s.sm_mhz_mean, 0);
  EXPECT_EQ(s.power_w_mean, 0);
}

TEST(GpuClocks, SamplerWithoutDeviceSaysWhy) {
  // A PCI bus id no GPU has: either NVML is missing or it has no such device; never ok, always a reason,
  // and start/stop sample nothing.
  ClockSampler sampler("FFFF:FF:1F.7", 1);
  EXPECT_FALSE(sampler.ok());
  EXPECT_FALSE(sampler.why_not().empty());
  sampler.start();
  EXPECT_EQ(sampler.stop().samples, 0);
}

}  // namespace
}  // namespace fp4moe::bench
