#include <cstdio>
#include <mutex>
#include <vector>

#include "src/common/cuda_utils.h"

namespace fp4moe {

Status cuda_status(cudaError_t err, const char* expr, const char* file, int line) {
  // The failed call also left its error pending in the thread: take it, so that it is reported
  // once, here, and not again by the next launch check (a sticky error keeps coming back anyway).
  cudaGetLastError();
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

Status check_device_accessible(const char* what, const char* name, const void* p, int device) {
  if (!p) return Status::Ok();
  const char* sep = what[0] ? ": " : "";
  // A pointer query is no stream work, but global capture mode refuses calls it does not know to be
  // safe; relaxed mode for this thread alone, restored afterwards.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  FP4MOE_CUDA_RETURN(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  FP4MOE_CUDA_RETURN(cudaThreadExchangeStreamCaptureMode(&mode));
  if (err != cudaSuccess) {
    cudaGetLastError();  // (not sticky: clear it so that the next launch check does not report it)
    return invalid_argument(what, sep, name, " = ", p, ": CUDA cannot say where this memory is (",
                            cudaGetErrorName(err), ")");
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      if (attr.device == device) return Status::Ok();
      return invalid_argument(what, sep, name, " = ", p, " is memory of device ", attr.device,
                              "; this runs on device ", device);
    case cudaMemoryTypeManaged:
      return Status::Ok();
    case cudaMemoryTypeHost:
      if (attr.devicePointer == p) return Status::Ok();
      return invalid_argument(what, sep, name, " = ", p, " is pinned host memory that device ", device,
                              attr.devicePointer ? " reaches only at another address" : " cannot reach",
                              " (its device pointer is ", attr.devicePointer, ")");
    case cudaMemoryTypeUnregistered:
    default: {
      int pageable = 0;
      FP4MOE_CUDA_RETURN(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device));
      if (pageable) return Status::Ok();
      return invalid_argument(what, sep, name, " = ", p, " is host memory not registered with CUDA, which device ",
                              device, " cannot access; pass device (or pinned host) memory");
    }
  }
}

Status check_stream_device(const char* what, const char* name, cudaStream_t stream, int device) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return Status::Ok();
  const char* sep = what[0] ? ": " : "";
  auto not_a_stream = [&](cudaError_t err) {
    cudaGetLastError();  // (not sticky)
    return invalid_argument(what, sep, name, " = ", static_cast<const void*>(stream),
                            " is not a CUDA stream this process knows (", cudaGetErrorName(err), ")");
  };
  // cudaStreamGetDevice on a stream being captured fails (cudaErrorStreamCaptureUnsupported) and
  // invalidates the capture, in relaxed mode too (measured on an H200, CUDA 13.0): a capturing stream
  // is not queried. (A capture into another device's stream fails at its own launches.)
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t capture_err = cudaStreamIsCapturing(stream, &capture);
  if (capture_err != cudaSuccess) return not_a_stream(capture_err);
  if (capture != cudaStreamCaptureStatusNone) return Status::Ok();
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  FP4MOE_CUDA_RETURN(cudaThreadExchangeStreamCaptureMode(&mode));
  int stream_device = -1;
  const cudaError_t err = cudaStreamGetDevice(stream, &stream_device);
  FP4MOE_CUDA_RETURN(cudaThreadExchangeStreamCaptureMode(&mode));
  if (err != cudaSuccess) return not_a_stream(err);
  if (stream_device != device)
    return invalid_argument(what, sep, name, " = ", static_cast<const void*>(stream), " is a stream of device ",
                            stream_device, "; this runs on device ", device);
  return Status::Ok();
}

Status check_reachable(const char* what, cudaStream_t stream,
                       std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  int device = 0;
  FP4MOE_CUDA_RETURN(cudaGetDevice(&device));
  FP4MOE_RETURN_IF_ERROR(check_stream_device(what, "stream", stream, device));
  for (const auto& [name, ptr] : ptrs) FP4MOE_RETURN_IF_ERROR(check_device_accessible(what, name, ptr, device));
  return Status::Ok();
}

}  // namespace fp4moe
