// fp4moe-bench's --check error measures (tools/fp4moe_bench.cpp): a sampled bf16 output against the
// fp32 values of the fp64 reference, n tokens x H columns, row-major.
#pragma once

#include "fp4moe/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace fp4moe::tools {

// How far a sampled output is from the reference (out bf16, ref fp32, both n x H).
struct CheckError {
  double rel = INFINITY;  // ||out - ref|| / ||ref||; infinite for a NaN in out or a zero ref
  // The worst column's rms error over the sampled tokens, over the reference's rms over every element:
  // a few wrong channels (a broken epilogue lane, a misplaced column) barely move the Frobenius ratio
  // at H = 2048-7168 columns, but stand out here.
  double worst_column = INFINITY;
  int64_t column = -1;  // the worst column
};

inline CheckError check_error_of(const std::vector<uint16_t>& out, const std::vector<float>& ref, int64_t H) {
  CheckError e;
  const int64_t n = int64_t(ref.size()) / H;
  std::vector<double> col(size_t(H), 0.0);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = bf16_to_float(out[i]), r = ref[i];
    if (std::isnan(g)) return e;
    num += (g - r) * (g - r);
    den += r * r;
    col[i % size_t(H)] += (g - r) * (g - r);
  }
  if (!(den > 0)) return e;
  e.rel = std::sqrt(num / den);
  const int64_t worst = int64_t(std::max_element(col.begin(), col.end()) - col.begin());
  e.worst_column = std::sqrt(col[size_t(worst)] / double(n)) / std::sqrt(den / double(ref.size()));
  e.column = worst;
  return e;
}

// The pass bounds: the Frobenius ratio at most `tol`, every column's at most kColumnTolerance * tol
// (the errors seen on H200s and H100s were 2.4e-3 at most in either mode, Frobenius).
inline constexpr double kColumnTolerance = 4;
inline double check_tolerance(bool w4a4) { return w4a4 ? 3e-2 : 8e-3; }
inline bool check_passes(const CheckError& e, double tol) {
  return e.rel <= tol && e.worst_column <= kColumnTolerance * tol;
}

}  // namespace fp4moe::tools
