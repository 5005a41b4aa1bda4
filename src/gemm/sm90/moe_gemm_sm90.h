// Host entry of the sm90 grouped GEMMs (the kernel in moe_gemm_sm90.cuh, its parts beside it).
#pragma once

#include <cuda_runtime_api.h>

#include "fp4moe/status.h"
#include "src/gemm/gemm_params.h"
#include "src/gemm/sm90/config.h"

namespace fp4moe::sm90 {

// GEMM1 (gate/up + activation) and GEMM2 (down + router weight) for one forward. `cfg` must be a
// compiled config (compiled_configs.h: what select_config, the narrowing, the tail launches, a tune
// file or a forced name give); anything else is rejected (kInternal) rather than silently remapped.
Status launch_gemm1(const MoeGemmParams& p, const Sm90Config& cfg, int num_sms, cudaStream_t stream);
Status launch_gemm2(const MoeGemmParams& p, const Sm90Config& cfg, int num_sms, cudaStream_t stream);

// The build's FP4MOE_BOUND_EXPERIMENT (CMakeLists.txt; moe_gemm_sm90.cuh): 0 unless the GEMMs were built
// to copy less than they read, for timing only.
int bound_experiment();

}  // namespace fp4moe::sm90
