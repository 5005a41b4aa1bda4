// Routing: router logits [T, E] -> top-k expert ids [T, k] (int32) and weights [T, k] (fp32).
//
// Methods:
//   kSoftmaxTopK  - Mixtral, Qwen3-MoE: softmax over all E, take the top k, optionally renormalize the
//                   k weights to sum to 1 (Qwen3 norm_topk_prob).
//   kDeepSeekV3   - DeepSeek-V3/R1: s = sigmoid(logit); selection on s + correction_bias; experts are in
//                   num_groups groups, a group scores the sum of its top-2 biased scores, the best
//                   topk_groups groups are kept, top k experts inside them; weights are the unbiased s,
//                   renormalized (if `renormalize`), times routed_scaling_factor.
//   kLlama4       - Llama-4: top-1 on the raw logits, weight sigmoid(logit). The MoE applies the weight
//                   to the input before the experts (MoeProblem::apply_router_weight_on_input).
//   kTopKSoftmax  - gpt-oss: top k on the raw logits, softmax over those k.
//
// Determinism contract: ties in a selection are broken by the lowest expert id (-0 ties with +0; a NaN
// score ranks below -inf). Scores are computed with the same IEEE operations on the CPU and the GPU
// (a fixed exp implementation, no fast-math) and sums are taken in the same fixed order, so both pick
// the same ids and produce bit-identical weights, run after run. The k ids of a token are written in
// descending selection-score order (ties: ascending id); for kDeepSeekV3 that is the biased score.
// Non-finite logits are not errors: the weights follow IEEE arithmetic, the same on both sides (the
// special-value tests check it). A +inf logit under softmax gives its token NaN weights (inf - inf in
// the max-subtracted exponent), as torch.softmax does; the layer's output row for that token is then
// NaN. Check logits upstream where that matters.
#pragma once

#include <cstdint>

#include "fp4moe/status.h"

#if FP4MOE_HAS_CUDA || defined(__CUDACC__)
#include <cuda_runtime_api.h>
#endif

namespace fp4moe {

enum class RoutingMethod { kSoftmaxTopK, kDeepSeekV3, kLlama4, kTopKSoftmax };
enum class LogitsType { kF32, kBF16 };

const char* to_string(RoutingMethod method);

struct RoutingConfig {
  RoutingMethod method = RoutingMethod::kSoftmaxTopK;
  int num_experts = 0;
  int top_k = 1;
  bool renormalize = false;
  int num_groups = 1;                   // DeepSeek-V3 only
  int topk_groups = 1;                  // DeepSeek-V3 only
  float routed_scaling_factor = 1.0f;   // DeepSeek-V3 only
};

// Checks the configuration itself (top_k <= num_experts, group counts divide, method constraints).
// Supported limits: num_experts <= 512, top_k <= 16 (kUnsupported beyond). The DeepSeek-V3-only
// fields are checked only for that method and ignored by the others.
Status validate(const RoutingConfig& config);

struct RoutingArgs {
  const void* logits = nullptr;          // [num_tokens, num_experts]
  LogitsType logits_type = LogitsType::kF32;
  const float* correction_bias = nullptr;  // [num_experts]; DeepSeek-V3 only (required there)
  int64_t num_tokens = 0;
  int32_t* topk_ids = nullptr;           // [num_tokens, top_k] out
  float* topk_weights = nullptr;         // [num_tokens, top_k] out
};

// Host reference.
Status route_cpu(const RoutingConfig& config, const RoutingArgs& args);

#if FP4MOE_HAS_CUDA || defined(__CUDACC__)
// Device: pointers in RoutingArgs are device pointers; asynchronous on `stream`, no host sync. A
// buffer the current device cannot dereference, or a stream of another device (not being captured),
// is refused by name.
Status route_gpu(const RoutingConfig& config, const RoutingArgs& args, cudaStream_t stream);
#endif

}  // namespace fp4moe
