// Whether a buffer an operation writes overlaps one it reads, checked before launching anything: an
// in-place call the kernels do not support would otherwise give wrong results, silently.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "fp4moe/moe.h"
#include "fp4moe/routing.h"
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

// The bytes a layer forward reads of its caller's buffers (MoeLayer and ParallelMoe take the same
// inputs): hidden [T, H] bf16, router logits [T, E] fp32 or bf16, top-k ids and weights [T, k].
inline std::array<BufferRange, 4> forward_inputs(const MoeProblem& p, int64_t num_tokens, const void* hidden,
                                                 const void* router_logits, LogitsType logits_type,
                                                 const void* topk_ids, const void* topk_weights) {
  const size_t rows = size_t(num_tokens), K = size_t(p.top_k());
  return {{{"hidden", hidden, rows * size_t(p.hidden_size) * 2},
           {"router_logits", router_logits,
            rows * size_t(p.num_experts()) * (logits_type == LogitsType::kF32 ? 4 : 2)},
           {"topk_ids", topk_ids, rows * K * 4},
           {"topk_weights", topk_weights, rows * K * 4}}};
}

// invalid_argument naming both buffers where `written` overlaps one of `read`.
inline Status check_disjoint(const BufferRange& written, const std::array<BufferRange, 4>& read) {
  for (const BufferRange& r : read)
    if (overlaps(written, r))
      return invalid_argument(written.name, " = ", written.p, " (", written.bytes, " bytes) overlaps ", r.name, " = ",
                              r.p, " (", r.bytes, " bytes): ", written.name, " is written while ", r.name,
                              " is read (no in-place call); give separate buffers");
  return Status::Ok();
}

}  // namespace fp4moe
