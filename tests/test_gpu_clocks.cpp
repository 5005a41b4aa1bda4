// tools/gpu_clocks.h: the statistics fp4moe-bench --clocks reports, and the sampler against a stub NVML
// (tests/fake_nvml.cpp: one GPU, 1755 MHz, 700 W) and where NVML cannot be used.
#include "tools/gpu_clocks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#ifndef FP4MOE_FAKE_NVML
#error "FP4MOE_FAKE_NVML: the path of the stub library (tests/CMakeLists.txt)"
#endif

namespace fp4moe::bench {
namespace {

// The stub beside this test's executable (a build tree, or scripts/stage-gpu.sh's gpubin/bin on the
// GPU machine, where the build's absolute path does not exist), else where the build put it.
std::string fake_nvml() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path built = FP4MOE_FAKE_NVML;
  if (!ec) {
    const fs::path beside = self.parent_path() / built.filename();
    if (fs::exists(beside, ec)) return beside.string();
  }
  return built.string();
}

TEST(GpuClocks, StatsOfSamples) {
  const ClockStats s = clock_stats({1755, 1980, 1410, 1755}, 1400.0, 2.0);
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.sm_mhz_mean, (1755.0 + 1980 + 1410 + 1755) / 4);
  EXPECT_DOUBLE_EQ(s.sm_mhz_min, 1410);
  EXPECT_DOUBLE_EQ(s.sm_mhz_max, 1980);
  EXPECT_DOUBLE_EQ(s.power_w, 0.7);  // 1400 mJ over 2 s
}

TEST(GpuClocks, NoPowerFigureForAShortInterval) {
  // (the energy counter advances in steps: 40-170 ms intervals gave 773-1814 W on a 700 W H200)
  const ClockStats s = clock_stats({1890}, 70.0, 0.04);
  EXPECT_EQ(s.samples, 1);
  EXPECT_LT(s.power_w, 0);
  EXPECT_DOUBLE_EQ(clock_stats({1890}, 700.0, kMinPowerSeconds).power_w, 0.7 / kMinPowerSeconds);
}

TEST(GpuClocks, NoSamplesNoEnergy) {
  const ClockStats s = clock_stats({}, -1.0, 1.0);
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(s.sm_mhz_mean, 0);
  EXPECT_LT(s.power_w, 0);
}

TEST(GpuClocks, SamplesTheStub) {
  ClockSampler sampler("0000:3B:00.0", 1, fake_nvml().c_str());
  ASSERT_TRUE(sampler.ok()) << sampler.why_not();
  EXPECT_EQ(sampler.stop().samples, 0);  // not started
  sampler.start();
  sampler.start();  // a second start while running does nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const ClockStats s = sampler.stop();
  EXPECT_GE(s.samples, 2);
  EXPECT_DOUBLE_EQ(s.sm_mhz_mean, 1755);
  EXPECT_DOUBLE_EQ(s.sm_mhz_min, 1755);
  EXPECT_DOUBLE_EQ(s.sm_mhz_max, 1755);
  EXPECT_LT(s.power_w, 0);  // 30 ms: shorter than kMinPowerSeconds, no power figure
  EXPECT_EQ(sampler.stop().samples, 0);  // stopped twice
  sampler.start();
  std::this_thread::sleep_for(std::chrono::duration<double>(kMinPowerSeconds + 0.05));
  EXPECT_NEAR(sampler.stop().power_w, 700, 35);  // the stub's 700 W
  sampler.start();                       // and again: an interval as short as the thread allows
  EXPECT_GE(sampler.stop().samples, 1);
}

TEST(GpuClocks, SaysWhyItCannot) {
  ClockSampler no_device("0000:01:00.0", 1, fake_nvml().c_str());
  EXPECT_FALSE(no_device.ok());
  EXPECT_NE(no_device.why_not().find("no device at PCI bus 0000:01:00.0"), std::string::npos) << no_device.why_not();
  no_device.start();
  EXPECT_EQ(no_device.stop().samples, 0);
  ClockSampler no_library("0000:3B:00.0", 1, "libfp4moe-no-such-library.so");
  EXPECT_FALSE(no_library.ok());
  EXPECT_NE(no_library.why_not().find("cannot open libfp4moe-no-such-library.so"), std::string::npos);
  ClockSampler not_nvml("0000:3B:00.0", 1, "libm.so.6");
  EXPECT_FALSE(not_nvml.ok());
  EXPECT_NE(not_nvml.why_not().find("lacks"), std::string::npos) << not_nvml.why_not();
}

}  // namespace
}  // namespace fp4moe::bench
