// Host emulation of PTX rcp.approx.ftz.f32 (used by the NVFP4 `kernel` recipe).
//
// The hardware reciprocal depends only on the significand of its input: rcp(1.m * 2^e) =
// rcp(1.m) * 2^-e, flushed to zero when that leaves the normal range. We start from the correctly
// rounded reciprocal of 1.m (rcp_base, computed in double precision, identical on host and device)
// and correct it with a 2-bit table over all 2^23 significands (0: equal, 1: one ulp above, 2: one
// ulp below), measured on an H200 (sm_90) by the GPU test RcpApprox.MatchesHardware, which re-checks
// it on every run. The hardware differs from the correctly rounded result on about 13% of inputs, so
// the table is dense: 2 MiB, embedded from src/format/rcp_approx_delta.bin.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp4moe/numerics.h"

namespace fp4moe::detail {

// Correctly rounded fp32 bits of 1 / (1 + m * 2^-23), m in [0, 2^23).
FP4MOE_HD uint32_t rcp_base_bits(uint32_t m) {
  const double x = 1.0 + double(m) * (1.0 / 8388608.0);
  return float_bits(float(1.0 / x));
}

// The measured table (kRcpDeltaBytes = 2^21 when present; 0 before it was measured, in which case
// the host emulation is the correctly rounded reciprocal and the GPU test fails, saying so).
extern const uint8_t* const kRcpDelta;
extern const size_t kRcpDeltaBytes;

}  // namespace fp4moe::detail
