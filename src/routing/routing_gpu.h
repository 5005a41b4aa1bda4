// route_gpu with the forward's kernel-trace words (src/common/trace.h; used in trace builds only).
#pragma once

#include <cuda_runtime_api.h>

#include "fp4moe/routing.h"

namespace fp4moe {

Status route_gpu(const RoutingConfig& config, const RoutingArgs& args, cudaStream_t stream,
                 unsigned long long* trace);

}  // namespace fp4moe
