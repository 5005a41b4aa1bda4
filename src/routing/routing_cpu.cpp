// Routing host reference: validate(), to_string() and route_cpu() of include/fp4moe/routing.h.
//
// route_cpu is the oracle the kernels in routing_gpu.cu must match bit for bit, ids and weights. It
// follows the method definitions literally, one token at a time, with the shared deterministic
// pieces of det_math.h: exp_det/sigmoid_det for scores, order_key/make_rank for the selection order
// (ties to the lowest id, NaN last), sum_in_warp_order for the softmax denominator over all experts,
// and plain left-to-right sums over the k selected in output order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "fp4moe/numerics.h"
#include "fp4moe/routing.h"
#include "src/routing/det_math.h"

namespace fp4moe {

const char* to_string(RoutingMethod method) {
  switch (method) {
    case RoutingMethod::kSoftmaxTopK: return "SoftmaxTopK";
    case RoutingMethod::kDeepSeekV3: return "DeepSeekV3";
    case RoutingMethod::kLlama4: return "Llama4";
    case RoutingMethod::kTopKSoftmax: return "TopKSoftmax";
  }
  return "unknown RoutingMethod";
}

Status validate(const RoutingConfig& config) {
  const int method_value = static_cast<int>(config.method);
  switch (config.method) {
    case RoutingMethod::kSoftmaxTopK:
    case RoutingMethod::kDeepSeekV3:
    case RoutingMethod::kLlama4:
    case RoutingMethod::kTopKSoftmax:
      break;
    default:
      return invalid_argument("routing method = ", method_value, " is not a RoutingMethod");
  }
  if (config.num_experts <= 0) {
    return invalid_argument("num_experts = ", config.num_experts, " must be > 0");
  }
  if (config.num_experts > routing::kMaxExperts) {
    return unsupported("num_experts = ", config.num_experts, " exceeds the routing maximum of ",
                       routing::kMaxExperts);
  }
  if (config.top_k <= 0) return invalid_argument("top_k = ", config.top_k, " must be > 0");
  if (config.top_k > routing::kMaxTopK) {
    return unsupported("top_k = ", config.top_k, " exceeds the routing maximum of ", routing::kMaxTopK);
  }
  if (config.top_k > config.num_experts) {
    return invalid_argument("top_k = ", config.top_k, " must be <= num_experts = ", config.num_experts);
  }
  if (config.method == RoutingMethod::kLlama4 && config.top_k != 1) {
    return invalid_argument("top_k = ", config.top_k, " must be 1 for routing method Llama4");
  }
  // num_groups, topk_groups and routed_scaling_factor are documented as DeepSeek-V3 only; the other
  // methods ignore them, so they are not checked there.
  if (config.method == RoutingMethod::kDeepSeekV3) {
    if (config.num_groups <= 0) {
      return invalid_argument("num_groups = ", config.num_groups, " must be > 0");
    }
    if (config.num_experts % config.num_groups != 0) {
      return invalid_argument("num_groups = ", config.num_groups, " must divide num_experts = ",
                              config.num_experts);
    }
    if (config.topk_groups <= 0 || config.topk_groups > config.num_groups) {
      return invalid_argument("topk_groups = ", config.topk_groups, " must be in [1, num_groups = ",
                              config.num_groups, "]");
    }
    const int experts_per_group = config.num_experts / config.num_groups;
    if (config.top_k > config.topk_groups * experts_per_group) {
      return invalid_argument("top_k = ", config.top_k, " must be <= topk_groups * (num_experts / num_groups) = ",
                              config.topk_groups, " * ", experts_per_group, " = ",
                              config.topk_groups * experts_per_group);
    }
    if (!std::isfinite(config.routed_scaling_factor) || !(config.routed_scaling_factor > 0.0f)) {
      return invalid_argument("routed_scaling_factor = ", config.routed_scaling_factor,
                              " must be finite and > 0");
    }
  }
  return Status::Ok();
}

namespace routing {

// Argument checks shared with route_gpu (declared there): everything that can be rejected before
// touching memory. Null data pointers are accepted when there are no tokens.
Status validate_args(const RoutingConfig& config, const RoutingArgs& args) {
  FP4MOE_RETURN_IF_ERROR(validate(config));
  if (args.num_tokens < 0) {
    return invalid_argument("num_tokens = ", args.num_tokens, " must be >= 0");
  }
  if (args.logits_type != LogitsType::kF32 && args.logits_type != LogitsType::kBF16) {
    return invalid_argument("logits_type = ", static_cast<int>(args.logits_type), " is not a LogitsType");
  }
  if (config.method == RoutingMethod::kDeepSeekV3 && args.correction_bias == nullptr) {
    return invalid_argument("correction_bias = null is required by routing method DeepSeekV3");
  }
  if (args.num_tokens > 0) {
    if (args.logits == nullptr) return invalid_argument("logits = null with num_tokens = ", args.num_tokens);
    if (args.topk_ids == nullptr) return invalid_argument("topk_ids = null with num_tokens = ", args.num_tokens);
    if (args.topk_weights == nullptr) {
      return invalid_argument("topk_weights = null with num_tokens = ", args.num_tokens);
    }
  }
  const size_t logit_bytes = args.logits_type == LogitsType::kF32 ? sizeof(float) : sizeof(uint16_t);
  if (reinterpret_cast<uintptr_t>(args.logits) % logit_bytes != 0) {
    return invalid_argument("logits = ", args.logits, " is not aligned to its element size ", logit_bytes);
  }
  if (reinterpret_cast<uintptr_t>(args.correction_bias) % alignof(float) != 0) {
    return invalid_argument("correction_bias = ", static_cast<const void*>(args.correction_bias),
                            " is not 4-byte aligned");
  }
  if (reinterpret_cast<uintptr_t>(args.topk_ids) % alignof(int32_t) != 0) {
    return invalid_argument("topk_ids = ", static_cast<const void*>(args.topk_ids), " is not 4-byte aligned");
  }
  if (reinterpret_cast<uintptr_t>(args.topk_weights) % alignof(float) != 0) {
    return invalid_argument("topk_weights = ", static_cast<const void*>(args.topk_weights),
                            " is not 4-byte aligned");
  }
  return Status::Ok();
}

namespace {

// The `count` best ranks, best first. Ranks are unique, so the result does not depend on the sort.
std::vector<uint64_t> best_ranks(std::vector<uint64_t> ranks, int count) {
  std::partial_sort(ranks.begin(), ranks.begin() + count, ranks.end(), std::greater<uint64_t>());
  ranks.resize(count);
  return ranks;
}

// Left-to-right sum in output (rank) order, the order the kernels use for sums over the k selected.
float sum_in_rank_order(const std::vector<float>& values) {
  float sum = values[0];
  for (size_t i = 1; i < values.size(); ++i) sum = add_rn(sum, values[i]);
  return sum;
}

std::vector<int> ids_of(const std::vector<uint64_t>& ranks) {
  std::vector<int> ids;
  for (uint64_t rank : ranks) ids.push_back(rank_id(rank));
  return ids;
}

std::vector<uint64_t> logit_ranks(const std::vector<float>& logits) {
  std::vector<uint64_t> ranks(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) ranks[i] = make_rank(order_key(logits[i]), static_cast<int>(i));
  return ranks;
}

// Softmax over all E, top k of it. Selecting on the logits picks the same experts as selecting on
// the probabilities (exp is monotonic) without a tie created by exp rounding two logits together.
void route_softmax_topk(const RoutingConfig& config, const std::vector<float>& logits, int32_t* ids_out,
                        float* weights_out) {
  const int num_experts = config.num_experts;
  const std::vector<int> ids = ids_of(best_ranks(logit_ranks(logits), config.top_k));
  const float max_logit = logits[ids[0]];
  std::vector<float> exps(num_experts);
  for (int e = 0; e < num_experts; ++e) exps[e] = exp_det(add_rn(logits[e], -max_logit));
  const float denominator = sum_in_warp_order(exps.data(), num_experts);
  std::vector<float> probs(config.top_k);
  for (int r = 0; r < config.top_k; ++r) probs[r] = div_rn(exps[ids[r]], denominator);
  if (config.renormalize) {
    const float sum = sum_in_rank_order(probs);
    for (float& p : probs) p = div_rn(p, sum);
  }
  for (int r = 0; r < config.top_k; ++r) {
    ids_out[r] = ids[r];
    weights_out[r] = probs[r];
  }
}

// Top k of the logits, softmax over those k only.
void route_topk_softmax(const RoutingConfig& config, const std::vector<float>& logits, int32_t* ids_out,
                        float* weights_out) {
  const std::vector<int> ids = ids_of(best_ranks(logit_ranks(logits), config.top_k));
  const float max_logit = logits[ids[0]];
  std::vector<float> exps(config.top_k);
  for (int r = 0; r < config.top_k; ++r) exps[r] = exp_det(add_rn(logits[ids[r]], -max_logit));
  const float sum = sum_in_rank_order(exps);
  for (int r = 0; r < config.top_k; ++r) {
    ids_out[r] = ids[r];
    weights_out[r] = div_rn(exps[r], sum);
  }
}

void route_llama4(const std::vector<float>& logits, int32_t* ids_out, float* weights_out) {
  const int id = ids_of(best_ranks(logit_ranks(logits), 1))[0];
  ids_out[0] = id;
  weights_out[0] = sigmoid_det(logits[id]);
}

void route_deepseek_v3(const RoutingConfig& config, const std::vector<float>& logits, const float* bias,
                       int32_t* ids_out, float* weights_out) {
  const int num_experts = config.num_experts;
  const int experts_per_group = num_experts / config.num_groups;
  std::vector<float> scores(num_experts);
  std::vector<uint32_t> biased_keys(num_experts);
  for (int e = 0; e < num_experts; ++e) {
    scores[e] = sigmoid_det(logits[e]);
    biased_keys[e] = order_key(add_rn(scores[e], bias[e]));
  }

  // A group scores the sum of its two best biased scores (its only score if it has one expert).
  // Summing the key values (not the raw floats) differs at most in the sign of a zero sum, which
  // the group's own key then ignores.
  std::vector<uint64_t> group_ranks(config.num_groups);
  for (int g = 0; g < config.num_groups; ++g) {
    std::vector<uint32_t> keys(biased_keys.begin() + g * experts_per_group,
                               biased_keys.begin() + (g + 1) * experts_per_group);
    std::sort(keys.begin(), keys.end(), std::greater<uint32_t>());
    const float group_score =
        experts_per_group >= 2 ? add_rn(key_value(keys[0]), key_value(keys[1])) : key_value(keys[0]);
    group_ranks[g] = make_rank(order_key(group_score), g);
  }
  std::vector<bool> group_kept(config.num_groups, false);
  for (uint64_t rank : best_ranks(group_ranks, config.topk_groups)) group_kept[rank_id(rank)] = true;

  std::vector<uint64_t> expert_ranks;
  for (int e = 0; e < num_experts; ++e) {
    if (group_kept[e / experts_per_group]) expert_ranks.push_back(make_rank(biased_keys[e], e));
  }
  const std::vector<int> ids = ids_of(best_ranks(expert_ranks, config.top_k));

  // Weights are the unbiased scores: the bias only steers selection.
  std::vector<float> weights(config.top_k);
  for (int r = 0; r < config.top_k; ++r) weights[r] = scores[ids[r]];
  if (config.renormalize) {
    // NOTE: no epsilon in the denominator (vLLM's grouped_topk has none); it is 0 only when every
    // selected logit is below -103, and then the weights are NaN.
    const float sum = sum_in_rank_order(weights);
    for (float& w : weights) w = div_rn(w, sum);
  }
  for (int r = 0; r < config.top_k; ++r) {
    ids_out[r] = ids[r];
    weights_out[r] = mul_rn(weights[r], config.routed_scaling_factor);
  }
}

}  // namespace
}  // namespace routing

Status route_cpu(const RoutingConfig& config, const RoutingArgs& args) {
  FP4MOE_RETURN_IF_ERROR(routing::validate_args(config, args));
  const int num_experts = config.num_experts;
  const int top_k = config.top_k;
  std::vector<float> logits(num_experts);
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    // bf16 -> fp32 is exact, so both logit types go through the same fp32 math.
    if (args.logits_type == LogitsType::kF32) {
      const float* row = static_cast<const float*>(args.logits) + t * num_experts;
      std::copy(row, row + num_experts, logits.begin());
    } else {
      const uint16_t* row = static_cast<const uint16_t*>(args.logits) + t * num_experts;
      for (int e = 0; e < num_experts; ++e) logits[e] = bf16_to_float(row[e]);
    }
    int32_t* ids_out = args.topk_ids + t * top_k;
    float* weights_out = args.topk_weights + t * top_k;
    switch (config.method) {
      case RoutingMethod::kSoftmaxTopK:
        routing::route_softmax_topk(config, logits, ids_out, weights_out);
        break;
      case RoutingMethod::kTopKSoftmax:
        routing::route_topk_softmax(config, logits, ids_out, weights_out);
        break;
      case RoutingMethod::kLlama4:
        routing::route_llama4(logits, ids_out, weights_out);
        break;
      case RoutingMethod::kDeepSeekV3:
        routing::route_deepseek_v3(config, logits, args.correction_bias, ids_out, weights_out);
        break;
    }
  }
  return Status::Ok();
}

}  // namespace fp4moe
