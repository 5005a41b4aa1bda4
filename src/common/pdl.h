// Programmatic dependent launch (sm_90): a kernel launched with launch_pdl() may start while its
// predecessor in the stream is still running; it runs its prologue (barrier set-up, constant
// tables) and then calls pdl_wait() before touching anything the predecessor writes. pdl_wait()
// returns once the predecessor grid has completed and its memory is visible. Captured into CUDA
// graphs as programmatic edges. The first kernel of a forward is launched normally, so nothing of
// the caller's stream is overlapped.
#pragma once

#include <cuda_runtime.h>

#include "src/common/cuda_utils.h"

namespace fp4moe {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream be scheduled now (it still waits in its pdl_wait()).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` on `stream`, with programmatic dependent launch when `pdl` is true (the first
// kernel of a forward passes false).
template <typename... KernelArgs, typename... Args>
Status launch_maybe_pdl(bool pdl, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                        cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  FP4MOE_CUDA_RETURN(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  return Status::Ok();
}

template <typename... KernelArgs, typename... Args>
Status launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                  Args&&... args) {
  return launch_maybe_pdl(true, kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
}

}  // namespace fp4moe
