// CUDA error handling: every runtime call is checked and turned into a Status carrying the call's
// text and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <initializer_list>
#include <utility>

#include "fp4moe/status.h"

namespace fp4moe {

Status cuda_status(cudaError_t err, const char* expr, const char* file, int line);

// Number of SMs and compute capability of the current device (cached per device).
struct DeviceInfo {
  int device = 0;
  int num_sms = 0;
  int major = 0, minor = 0;
  size_t l2_bytes = 0;
  size_t smem_optin_bytes = 0;
  char name[256] = {};
};
Status current_device_info(DeviceInfo* out);

// Refuses, by name, a pointer that GPU `device` cannot dereference, before a kernel faults on it
// (which would end the CUDA context): memory of another device, pinned host memory the device reaches
// only at another address, and host memory not registered with CUDA (malloc, the stack, a NumPy
// array) unless the device can access pageable memory (HMM or ATS systems). Device memory of
// `device`, managed memory and mapped pinned host memory pass; so does null (callers decide whether
// null is allowed). `what` prefixes the message ("" for none). One driver query per pointer, made
// legal during a stream capture (the thread's capture mode is relaxed around it).
Status check_device_accessible(const char* what, const char* name, const void* p, int device);

// Refuses, by name, a stream of another device than `device` (a launch into it would fail with an
// opaque "invalid resource handle", or a copy would run on the wrong device), and a handle CUDA does
// not know as a stream (where CUDA can tell: a destroyed stream, say); `what` prefixes the message.
// Null (the legacy default stream), cudaStreamLegacy and cudaStreamPerThread always pass: they are
// the current device's.
// One or two driver queries (cudaStreamIsCapturing, then cudaStreamGetDevice): a stream being
// captured is not checked (querying its device would end the capture).
Status check_stream_device(const char* what, const char* name, cudaStream_t stream, int device);

// A call's inputs against the current device: `stream` must be its (check_stream_device), then each
// named pointer memory it can reach (check_device_accessible; null passes). The free functions that
// take device buffers and a stream (the GPU codec, route_gpu) call it before launching.
Status check_reachable(const char* what, cudaStream_t stream,
                       std::initializer_list<std::pair<const char*, const void*>> ptrs);

}  // namespace fp4moe

#define FP4MOE_CUDA_RETURN(expr)                                                     \
  do {                                                                               \
    cudaError_t fp4moe_err_ = (expr);                                                \
    if (fp4moe_err_ != cudaSuccess)                                                  \
      return ::fp4moe::cuda_status(fp4moe_err_, #expr, __FILE__, __LINE__);          \
  } while (0)

// After a <<<>>> launch: launch-configuration errors surface here, not at the next sync. The error
// is taken (cudaGetLastError), not peeked at: a failure is reported once, so the caller's next call
// does not fail again on it (cuda_status, behind FP4MOE_CUDA_RETURN, takes it too). An error that
// other code left pending before the launch is reported here as well (the message says it may be).
#define FP4MOE_CUDA_LAUNCH_CHECK(kernel_name)                                                           \
  do {                                                                                                  \
    cudaError_t fp4moe_err_ = cudaGetLastError();                                                       \
    if (fp4moe_err_ != cudaSuccess)                                                                     \
      return ::fp4moe::cuda_status(                                                                     \
          fp4moe_err_, "the launch of " #kernel_name ", or CUDA work before it whose error was pending,", \
          __FILE__, __LINE__);                                                                          \
  } while (0)
