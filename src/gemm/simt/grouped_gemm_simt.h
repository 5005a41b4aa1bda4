#pragma once

#include <cuda_runtime_api.h>

#include "fp4moe/status.h"
#include "src/gemm/gemm_params.h"

namespace fp4moe {

constexpr int kSimtTileTokens = 16;

Status launch_gemm1_simt(const MoeGemmParams& p, cudaStream_t stream);
Status launch_gemm2_simt(const MoeGemmParams& p, cudaStream_t stream);

}  // namespace fp4moe
