#include "src/gemm/sm90/launch.cuh"

namespace fp4moe::sm90 {

Status launch_gemm2(const MoeGemmParams& p, const Sm90Config& cfg, int num_sms, cudaStream_t stream) {
  return dispatch<false>(p, cfg, num_sms, stream);
}

}  // namespace fp4moe::sm90
