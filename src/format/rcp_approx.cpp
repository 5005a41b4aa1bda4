#include "src/format/rcp_approx.h"

// The table is linked in as raw bytes (an .incbin of FP4MOE_RCP_DELTA_FILE, set by CMake).
extern "C" const uint8_t fp4moe_rcp_delta_begin[];
extern "C" const uint8_t fp4moe_rcp_delta_end[];
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global fp4moe_rcp_delta_begin\n"
        "fp4moe_rcp_delta_begin:\n"
        ".incbin \"" FP4MOE_RCP_DELTA_FILE "\"\n"
        ".global fp4moe_rcp_delta_end\n"
        "fp4moe_rcp_delta_end:\n"
        ".previous\n");

namespace fp4moe {
namespace detail {

const uint8_t* const kRcpDelta = fp4moe_rcp_delta_begin;
const size_t kRcpDeltaBytes = size_t(fp4moe_rcp_delta_end - fp4moe_rcp_delta_begin);

}  // namespace detail

float rcp_approx_ftz_host(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return bits_float(0x7fffffffu);  // canonical NaN, as the hardware returns
  if (a == 0x7f800000u) return bits_float(sign);         // 1/inf = 0
  if (a < 0x00800000u) return bits_float(sign | 0x7f800000u);  // zero or subnormal (ftz) -> inf
  const uint32_t m = a & 0x7fffffu;
  const int e = int(a >> 23) - 127;
  uint32_t r = detail::rcp_base_bits(m);
  if (detail::kRcpDeltaBytes == (size_t(1) << 21)) {
    const uint32_t d = (detail::kRcpDelta[m >> 2] >> (2 * (m & 3))) & 3;
    r = d == 1 ? r + 1 : d == 2 ? r - 1 : r;
  }
  const int result_exp = int((r >> 23) & 0xff) - e;
  if (result_exp <= 0) return bits_float(sign);  // result below the normal range: flushed
  return bits_float(sign | (uint32_t(result_exp) << 23) | (r & 0x7fffffu));
}

}  // namespace fp4moe
