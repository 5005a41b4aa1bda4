#include "src/format/rcp_approx.h"

#include <algorithm>

namespace fp4moe {
namespace detail {

const RcpCorrection kRcpCorrections[] = {
#include "src/format/rcp_approx_table.inc"
    {0xffffffffu, 0u}  // sentinel (never matches a 23-bit significand)
};
const uint32_t kNumRcpCorrections = sizeof(kRcpCorrections) / sizeof(kRcpCorrections[0]) - 1;

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
  const auto* end = detail::kRcpCorrections + detail::kNumRcpCorrections;
  const auto* it = std::lower_bound(detail::kRcpCorrections, end, m,
                                    [](const detail::RcpCorrection& c, uint32_t v) { return c.significand < v; });
  if (it != end && it->significand == m) r = it->result_bits;
  const int result_exp = int((r >> 23) & 0xff) - e;
  if (result_exp <= 0) return bits_float(sign);  // result below the normal range: flushed
  return bits_float(sign | (uint32_t(result_exp) << 23) | (r & 0x7fffffu));
}

}  // namespace fp4moe
