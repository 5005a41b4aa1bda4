// route_gpu as the forward's first kernel (src/moe/forward.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "fp4moe/routing.h"

namespace fp4moe {

// route_gpu, and with start_dependents the kernel lets the next kernel of the stream (the forward's
// plan, launched with programmatic dependent launch) be scheduled at its start; trace: the forward's
// kernel-trace words (src/common/trace.h, trace builds), or null.
Status route_gpu_in_forward(const RoutingConfig& config, const RoutingArgs& args, cudaStream_t stream,
                            bool start_dependents, unsigned long long* trace);

}  // namespace fp4moe
