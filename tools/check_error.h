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
  double rel = INFINITY;  // ||out - ref|| / ||ref||; infinite for a NaN in out, a zero ref or bad sizes
  // The worst column's rms error over the n sampled tokens, over the larger of that column's rms and
  // the whole reference's: a few wrong channels (a broken epilogue lane, a misplaced column) barely
  // move the Frobenius ratio at H = 2048-7168 columns, but stand out here; a column of large values
  // (an outlier channel) is held to its own scale.
  double worst_column = INFINITY;
  int64_t column = -1;  // the worst column
  int64_t tokens = 0;   // n
};

inline CheckError check_error_of(const std::vector<uint16_t>& out, const std::vector<float>& ref, int64_t H) {
  CheckError e;
  if (H <= 0 || ref.empty() || ref.size() % size_t(H) != 0 || out.size() < ref.size()) return e;
  e.tokens = int64_t(ref.size()) / H;
  std::vector<double> col_err(size_t(H), 0.0), col_ref(size_t(H), 0.0);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = bf16_to_float(out[i]), r = ref[i];
    if (std::isnan(g)) return e;
    num += (g - r) * (g - r);
    den += r * r;
    col_err[i % size_t(H)] += (g - r) * (g - r);
    col_ref[i % size_t(H)] += r * r;
  }
  if (!(den > 0)) return e;
  e.rel = std::sqrt(num / den);
  e.worst_column = 0;
  for (int64_t h = 0; h < H; ++h) {
    const double v = std::sqrt(col_err[size_t(h)] / std::max(col_ref[size_t(h)], den / double(H)));
    if (v > e.worst_column) e.worst_column = v, e.column = h;
  }
  return e;
}

// The pass bounds: the Frobenius ratio at most `tol`; every column's at most kColumnTolerance * tol,
// widened by sqrt(16 / n) below 16 sampled tokens (a column of one or a few elements is a noisy
// estimate: its largest of H values lies a few standard deviations out). The errors seen on H200s
// and H100s were 2.4e-3 at most in either mode, Frobenius.
inline constexpr double kColumnTolerance = 4;
inline double check_tolerance(bool w4a4) { return w4a4 ? 3e-2 : 8e-3; }
inline double column_tolerance(double tol, int64_t tokens) {
  return kColumnTolerance * tol * std::sqrt(std::max(1.0, 16.0 / double(std::max<int64_t>(tokens, 1))));
}
inline bool check_passes(const CheckError& e, double tol) {
  return e.rel <= tol && e.worst_column <= column_tolerance(tol, e.tokens);
}

}  // namespace fp4moe::tools
