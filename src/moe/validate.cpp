#include <cmath>
#include <limits>

#include "fp4moe/moe.h"

namespace fp4moe {

Status validate(const MoeProblem& p) {
  // K of both GEMMs (H for GEMM1, I for GEMM2) must hold whole scale blocks of either format.
  constexpr int64_t kKMultiple = 32;
  if (p.hidden_size <= 0 || p.hidden_size % kKMultiple != 0)
    return invalid_argument("hidden_size = ", p.hidden_size, " must be a positive multiple of ", kKMultiple);
  if (p.intermediate_size <= 0 || p.intermediate_size % kKMultiple != 0)
    return invalid_argument("intermediate_size = ", p.intermediate_size, " must be a positive multiple of ",
                            kKMultiple);
  // Bounds that keep every size product (an expert's H x 2I weights times the experts, tokens times H)
  // far from int64 overflow; real layers are two orders of magnitude below them.
  constexpr int64_t kMaxDim = int64_t(1) << 20;
  if (p.hidden_size > kMaxDim)
    return invalid_argument("hidden_size = ", p.hidden_size, " exceeds the ", kMaxDim, " this library sizes for");
  if (p.intermediate_size > kMaxDim)
    return invalid_argument("intermediate_size = ", p.intermediate_size, " exceeds the ", kMaxDim,
                            " this library sizes for");
  FP4MOE_RETURN_IF_ERROR(validate(p.routing));
  // (Enums from a cast integer: to_string would name another value than the one that runs.)
  if (p.mode != Mode::kW4A16 && p.mode != Mode::kW4A4) return invalid_argument("mode = ", int(p.mode), " is not a Mode");
  if (p.activation != Activation::kSwiGLU && p.activation != Activation::kGptOss)
    return invalid_argument("activation = ", int(p.activation), " is not an Activation");
  if (p.weight_format != WeightFormat::kNvfp4 && p.weight_format != WeightFormat::kMxfp4)
    return invalid_argument("weight_format = ", int(p.weight_format), " is not a WeightFormat");
  if (p.num_shared_experts < 0)
    return invalid_argument("num_shared_experts = ", p.num_shared_experts, " must be >= 0");
  if (p.max_tokens <= 0)
    return invalid_argument("max_tokens = ", p.max_tokens, " must be > 0");
  // (Divided, not multiplied: max_tokens * top_k can wrap around in int64 and pass.)
  if (p.max_tokens > std::numeric_limits<int32_t>::max() / 2 / p.top_k())
    return invalid_argument("max_tokens = ", p.max_tokens, " times top_k = ", p.top_k(),
                            " exceeds the 2^30 routed pairs the int32 indexing supports");
  if (p.mode == Mode::kW4A4 && p.weight_format != WeightFormat::kNvfp4)
    return unsupported("mode = w4a4 needs NVFP4 weights; weight_format = ", to_string(p.weight_format),
                       " runs in w4a16");
  if (p.apply_router_weight_on_input() && p.top_k() != 1)
    return invalid_argument("routing method llama4 applies the router weight to the input and needs top_k = 1, "
                            "got top_k = ", p.top_k());
  return Status::Ok();
}

Status validate_global_scales(const MoeProblem& p, const MoeWeightsView& w, int64_t num_experts) {
  auto check = [&](const char* name, const float* v, bool zero_ok) -> Status {
    if (!v) return Status::Ok();
    for (int64_t e = 0; e < num_experts; ++e)
      if (!std::isfinite(v[e]) || v[e] < 0.0f || (!zero_ok && v[e] == 0.0f))
        return invalid_argument("weights: ", name, "[", e, "] = ", v[e], " must be finite and ",
                                zero_ok ? ">= 0" : "> 0");
    return Status::Ok();
  };
  if (p.weight_format == WeightFormat::kNvfp4) {
    FP4MOE_RETURN_IF_ERROR(check("w13_scale_2", w.w13_scale_2, true));
    FP4MOE_RETURN_IF_ERROR(check("w2_scale_2", w.w2_scale_2, true));
  }
  if (p.mode == Mode::kW4A4) {
    FP4MOE_RETURN_IF_ERROR(check("a13_scale_2", w.a13_scale_2, false));
    FP4MOE_RETURN_IF_ERROR(check("a2_scale_2", w.a2_scale_2, false));
  }
  return Status::Ok();
}

}  // namespace fp4moe
