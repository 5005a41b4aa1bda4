// fp4moe-bench --clocks: the SM clock and board power while a timing loop runs, sampled from NVML on
// a host thread. The library is opened at run time (libnvidia-ml.so.1 comes with the driver, not the
// toolkit), so the benchmark builds and runs without it and reports the clocks as unavailable.
//
// Why: an H200's clock follows its power state. The layer's graph replays run back to back after a
// warm-up (sustained), profilers run each kernel from idle, and two H200s differ by several percent
// for the same binary; the clock under which a row was timed tells those apart.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace fp4moe::bench {

// Statistics of one sampled interval (samples == 0: nothing sampled, the other fields are 0).
struct ClockStats {
  int samples = 0;
  double sm_mhz_mean = 0, sm_mhz_min = 0, sm_mhz_max = 0;
  double power_w_mean = 0;  // NVML's power reading (the driver averages it over its own window)
};

inline ClockStats clock_stats(const std::vector<unsigned>& mhz, const std::vector<unsigned>& milliwatts) {
  ClockStats s;
  if (mhz.empty()) return s;
  s.samples = int(mhz.size());
  double sum = 0;
  for (unsigned v : mhz) sum += v;
  s.sm_mhz_mean = sum / double(mhz.size());
  s.sm_mhz_min = *std::min_element(mhz.begin(), mhz.end());
  s.sm_mhz_max = *std::max_element(mhz.begin(), mhz.end());
  double psum = 0;
  for (unsigned v : milliwatts) psum += v;
  s.power_w_mean = milliwatts.empty() ? 0 : psum / double(milliwatts.size()) / 1e3;
  return s;
}

class ClockSampler {
 public:
  // pci_bus_id: the CUDA device's (cudaDeviceGetPCIBusId), which names the same GPU for NVML whatever
  // CUDA_VISIBLE_DEVICES does to the indices. period_ms: the sampling period.
  ClockSampler(const std::string& pci_bus_id, int period_ms) : period_ms_(period_ms) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_ = "libnvidia-ml.so.1 not found";
      return;
    }
    auto sym = [&](const char* name) { return dlsym(lib_, name); };
    auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
    power_ = reinterpret_cast<int (*)(void*, unsigned*)>(sym("nvmlDeviceGetPowerUsage"));
    shutdown_ = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
    if (!init || !by_bus || !clock_ || !power_ || !shutdown_) {
      why_ = "libnvidia-ml.so.1 lacks a needed function";
      return;
    }
    if (init() != 0) {
      why_ = "nvmlInit failed";
      return;
    }
    initialized_ = true;
    if (by_bus(pci_bus_id.c_str(), &device_) != 0) {
      why_ = "NVML has no device at PCI bus " + pci_bus_id;
      return;
    }
    unsigned probe = 0;
    if (clock_(device_, kClockSm, &probe) != 0) {
      why_ = "NVML cannot read the SM clock";
      return;
    }
    ok_ = true;
  }
  ~ClockSampler() {
    stop();
    if (initialized_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  bool ok() const { return ok_; }
  const std::string& why_not() const { return why_; }

  // Samples on a host thread from start() until stop(), which returns the interval's statistics.
  void start() {
    if (!ok_ || running_.load()) return;
    mhz_.clear();
    mw_.clear();
    running_ = true;
    thread_ = std::thread([this] {
      while (running_.load()) {
        unsigned v = 0, p = 0;
        if (clock_(device_, kClockSm, &v) == 0) mhz_.push_back(v);
        if (power_(device_, &p) == 0) mw_.push_back(p);
        std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
      }
    });
  }
  ClockStats stop() {
    if (!running_.load()) return {};
    running_ = false;
    thread_.join();
    return clock_stats(mhz_, mw_);
  }

 private:
  static constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  void* lib_ = nullptr;
  void* device_ = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*shutdown_)() = nullptr;
  bool initialized_ = false, ok_ = false;
  std::string why_;
  int period_ms_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::vector<unsigned> mhz_, mw_;
};

}  // namespace fp4moe::bench
