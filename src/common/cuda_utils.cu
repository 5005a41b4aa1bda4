#include <cstdio>
#include <mutex>
#include <vector>

#include "src/common/cuda_utils.h"

namespace fp4moe {

Status cuda_status(cudaError_t err, const char* expr, const char* file, int line) {
  return Status(StatusCode::kCudaError, detail::concat(expr, " failed: ", cudaGetErrorName(err), " (",
                                                       cudaGetErrorString(err), ") at ", file, ":", line));
}

Status current_device_info(DeviceInfo* out) {
  static std::mutex mu;
  static std::vector<DeviceInfo> cache;
  int dev = 0;
  FP4MOE_CUDA_RETURN(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& d : cache) {
    if (d.device == dev) {
      *out = d;
      return Status::Ok();
    }
  }
  cudaDeviceProp prop;
  FP4MOE_CUDA_RETURN(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo info;
  info.device = dev;
  info.num_sms = prop.multiProcessorCount;
  info.major = prop.major;
  info.minor = prop.minor;
  info.l2_bytes = prop.l2CacheSize;
  info.smem_optin_bytes = prop.sharedMemPerBlockOptin;
  std::snprintf(info.name, sizeof(info.name), "%s", prop.name);
  cache.push_back(info);
  *out = info;
  return Status::Ok();
}

}  // namespace fp4moe
