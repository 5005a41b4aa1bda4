// fp4moe-bench --clocks: the SM clock and board power while a timing loop runs, from NVML. The
// library is opened at run time (libnvidia-ml.so.1 comes with the driver, not the toolkit), so the
// benchmark builds without it; asked for clocks where it cannot be used, the benchmark says why and
// stops.
//
// Why: an H200's clock follows its power state. The benchmark times its launches after a warm-up
// (the sustained state), profilers run each kernel from idle, and two H200s differ by several
// percent for the same binary; the clock under which a row was timed tells those apart.
//
// How: a host thread reads the SM clock every period_ms (the first read at start()); the power is
// the board energy counter's difference over the interval divided by its wall time (NVML's power
// reading itself is a trailing one-second average on these GPUs, longer than most timed loops),
// given only for intervals of at least kMinPowerSeconds (the counter does not follow short ones).
// The thread's driver calls may perturb the timed launches slightly: compare with a run without
// --clocks before reading small differences into its rows.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace fp4moe::bench {

// Statistics of one sampled interval (samples == 0: no clock read; power_w < 0: no energy reading).
struct ClockStats {
  int samples = 0;
  double sm_mhz_mean = 0, sm_mhz_min = 0, sm_mhz_max = 0;
  double power_w = -1;  // mean board power over the interval, from the energy counter
};

// The shortest interval given a power figure. The energy counter does not follow short intervals:
// on an H200 (session 27, run 8) intervals of ~40-170 ms gave 773-1814 W on a 700 W board, energies
// that fit steps of ~65-70 J (an update every ~100 ms). Below this the row says "power n/a"; at it a
// figure can still be off by about one step over the interval (~10% at 1 s), so compare power only
// over loops of several seconds.
constexpr double kMinPowerSeconds = 1.0;

// mhz: the clock reads; energy_mj: the energy counter's increase over the interval (millijoules);
// seconds: the interval's wall time (energy_mj < 0 or seconds < kMinPowerSeconds: no power figure).
inline ClockStats clock_stats(const std::vector<unsigned>& mhz, double energy_mj, double seconds) {
  ClockStats s;
  if (!mhz.empty()) {
    s.samples = int(mhz.size());
    double sum = 0;
    for (unsigned v : mhz) sum += v;
    s.sm_mhz_mean = sum / double(mhz.size());
    s.sm_mhz_min = *std::min_element(mhz.begin(), mhz.end());
    s.sm_mhz_max = *std::max_element(mhz.begin(), mhz.end());
  }
  if (energy_mj >= 0 && seconds >= kMinPowerSeconds) s.power_w = energy_mj / 1e3 / seconds;
  return s;
}

class ClockSampler {
 public:
  // pci_bus_id: the CUDA device's (cudaDeviceGetPCIBusId), which names the same GPU for NVML whatever
  // CUDA_VISIBLE_DEVICES does to the indices. library: the NVML shared library (tests pass a stub).
  ClockSampler(const std::string& pci_bus_id, int period_ms, const char* library = "libnvidia-ml.so.1")
      : period_ms_(period_ms) {
    lib_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      const char* e = dlerror();
      why_ = std::string("cannot open ") + library + (e ? std::string(": ") + e : std::string());
      return;
    }
    auto sym = [&](const char* name) { return dlsym(lib_, name); };
    auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
    energy_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetTotalEnergyConsumption"));
    shutdown_ = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
    if (!init || !by_bus || !clock_ || !shutdown_) {
      why_ = std::string(library) + " lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, "
                                    "nvmlDeviceGetClockInfo or nvmlShutdown";
      return;
    }
    if (const int r = init(); r != 0) {
      why_ = "nvmlInit_v2 returned " + std::to_string(r);
      return;
    }
    initialized_ = true;
    if (const int r = by_bus(pci_bus_id.c_str(), &device_); r != 0) {
      why_ = "NVML has no device at PCI bus " + pci_bus_id + " (nvmlDeviceGetHandleByPciBusId_v2 returned " +
             std::to_string(r) + ")";
      return;
    }
    unsigned probe = 0;
    if (const int r = clock_(device_, kClockSm, &probe); r != 0) {
      why_ = "nvmlDeviceGetClockInfo returned " + std::to_string(r);
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

  // Samples from start() until stop(), which returns the interval's statistics (empty ones when the
  // sampler is not ok or was not started).
  void start() {
    if (!ok_ || running_.load()) return;
    mhz_.clear();
    energy0_ = read_energy();
    t0_ = std::chrono::steady_clock::now();
    running_ = true;
    thread_ = std::thread([this] {
      do {  // at least one read, however short the interval
        unsigned v = 0;
        if (clock_(device_, kClockSm, &v) == 0) mhz_.push_back(v);
        std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
      } while (running_.load());
    });
  }
  ClockStats stop() {
    if (!running_.load()) return {};
    running_ = false;
    thread_.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const long long e1 = read_energy();
    return clock_stats(mhz_, energy0_ >= 0 && e1 >= energy0_ ? double(e1 - energy0_) : -1.0, seconds);
  }

 private:
  static constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  long long read_energy() const {     // millijoules since the driver loaded, -1 if unavailable
    unsigned long long mj = 0;
    return energy_ && energy_(device_, &mj) == 0 ? static_cast<long long>(mj) : -1;
  }
  void* lib_ = nullptr;
  void* device_ = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*energy_)(void*, unsigned long long*) = nullptr;
  int (*shutdown_)() = nullptr;
  bool initialized_ = false, ok_ = false;
  std::string why_;
  int period_ms_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::vector<unsigned> mhz_;
  long long energy0_ = -1;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fp4moe::bench
