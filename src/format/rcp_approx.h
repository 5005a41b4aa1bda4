// Host emulation of PTX rcp.approx.ftz.f32 (used by the NVFP4 `kernel` recipe).
//
// The hardware reciprocal depends only on the significand of its input: rcp(1.m * 2^e) =
// rcp(1.m) * 2^-e, flushed to zero when that leaves the normal range. We start from the correctly
// rounded reciprocal of 1.m (rcp_base, computed in double precision, identical on host and device)
// and correct it with a table of the significands where the hardware answer differs. The table was
// measured on an H200 (sm_90) by the GPU test RcpApprox.MatchesHardware, which also re-checks it.
#pragma once

#include <cstdint>

#include "fp4moe/numerics.h"

namespace fp4moe::detail {

// Correctly rounded fp32 bits of 1 / (1 + m * 2^-23), m in [0, 2^23).
FP4MOE_HD uint32_t rcp_base_bits(uint32_t m) {
  const double x = 1.0 + double(m) * (1.0 / 8388608.0);
  return float_bits(float(1.0 / x));
}

struct RcpCorrection {
  uint32_t significand;  // m of the input 1.m
  uint32_t result_bits;  // the hardware's fp32 result for input 1.m
};

// The measured corrections, sorted by significand.
extern const RcpCorrection kRcpCorrections[];
extern const uint32_t kNumRcpCorrections;

}  // namespace fp4moe::detail
