#include "src/gemm/sm90/launch.cuh"

namespace fp4moe::sm90 {

Status launch_gemm1(const MoeGemmParams& p, const Sm90Config& cfg, int num_sms, cudaStream_t stream) {
  return dispatch<true>(p, cfg, num_sms, stream);
}

int bound_experiment() { return FP4MOE_BOUND_EXPERIMENT; }

}  // namespace fp4moe::sm90
