// A stand-in for libnvidia-ml.so.1 with the five functions tools/gpu_clocks.h uses, for
// tests/test_gpu_clocks.cpp: one GPU at PCI bus 0000:3B:00.0 whose SM clock reads 1755 MHz and whose
// energy counter grows at 700 W of wall time. Return codes as NVML's: 0 success, 2 invalid argument,
// 6 not found.
#include <chrono>
#include <cstring>

namespace {
char g_device;  // the handle's target
const auto g_t0 = std::chrono::steady_clock::now();
}  // namespace

extern "C" {
int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  if (!bus || !device) return 2;
  if (std::strcmp(bus, "0000:3B:00.0") != 0) return 6;
  *device = &g_device;
  return 0;
}
int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  if (device != &g_device || type != 1 || !mhz) return 2;  // 1: NVML_CLOCK_SM
  *mhz = 1755;
  return 0;
}
int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* millijoules) {
  if (device != &g_device || !millijoules) return 2;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_t0).count();
  *millijoules = static_cast<unsigned long long>(1e6 + s * 700e3);  // 700 W
  return 0;
}
}
