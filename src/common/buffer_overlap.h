// Whether a buffer an operation writes overlaps one it reads, checked before launching anything: an
// in-place call the kernels do not support would otherwise give wrong results, silently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "fp4moe/status.h"

namespace fp4moe {

struct BufferRange {
  const char* name;
  const void* p;  // null: absent, overlaps nothing
  size_t bytes;
};

inline bool overlaps(const BufferRange& x, const BufferRange& y) {
  if (!x.p || !y.p || x.bytes == 0 || y.bytes == 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(x.p), b = reinterpret_cast<uintptr_t>(y.p);
  return a < b + y.bytes && b < a + x.bytes;
}

// invalid_argument naming both buffers where `written` overlaps one of `read`.
inline Status check_disjoint(const BufferRange& written, std::initializer_list<BufferRange> read) {
  for (const BufferRange& r : read)
    if (overlaps(written, r))
      return invalid_argument(written.name, " = ", written.p, " (", written.bytes, " bytes) overlaps ", r.name, " = ",
                              r.p, " (", r.bytes, " bytes): ", written.name, " is written while ", r.name,
                              " is read (no in-place call); give separate buffers");
  return Status::Ok();
}

}  // namespace fp4moe
