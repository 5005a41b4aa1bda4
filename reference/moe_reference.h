// The oracle: a plain C++ implementation of the whole MoE layer, against which every kernel and
// every parallel configuration is checked.
//
// Weights are dequantized exactly (e2m1 * block scale * global scale, in fp64) and every dot product
// accumulates in fp64. The only roundings are the ones that belong to the layer's numerics:
//   - w4a16: the intermediate (activation output) is rounded to bf16 when round_intermediate_to_bf16
//     (the kernels feed it to a bf16 GEMM; default on);
//   - w4a4: the GEMM1 input and the intermediate are quantized to NVFP4 with the `kernel` recipe and
//     per-expert global scales (encode gs = 1 / a*_scale_2), and used dequantized;
//   - Llama-4 (router weight on the input): x * w is rounded to bf16 before the experts.
// The output is the fp64 sum over the top-k in order, rounded to fp32.
#pragma once

#include <cstdint>

#include "fp4moe/moe.h"
#include "reference/sharding.h"

namespace fp4moe::ref {

struct ReferenceOptions {
  bool round_intermediate_to_bf16 = true;
  int num_threads = 0;  // 0: all hardware threads
  // w4a4 only: `hidden` already holds the quantized GEMM1 input, e2m1 code x e4m3 block scale per
  // element (exact in bf16), as the `kernel` recipe at encode gs = 1 / a13_scale_2 produces it, with
  // Llama-4's router weight already applied. Each row is used as is (divided by gs), not quantized
  // again, so it only equals the normal path when every local expert's a13_scale_2 is the scale the
  // rows were quantized with (NVFP4-quantized dispatch of the parallel layer: one shared scale).
  bool input_prequantized = false;
};

// Output of the layer, or with a non-trivial ShardSpec the partial output of that rank: the sum over
// its local experts of its TP slice. `weights` holds exactly the shard's experts and slice
// (shard_weights()). hidden is bf16 [T, H]; out is fp32 [T, H].
Status moe_forward_routed(const MoeProblem& problem, const MoeWeightsView& weights, const ShardSpec& shard,
                          const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                          int64_t num_tokens, float* out, const ReferenceOptions& options = {});

// Routing (route_cpu) followed by moe_forward_routed.
Status moe_forward(const MoeProblem& problem, const MoeWeightsView& weights, const ShardSpec& shard,
                   const uint16_t* hidden, const void* logits, LogitsType logits_type, int64_t num_tokens,
                   float* out, const ReferenceOptions& options = {});

// The activation on one (gate, up) pair, in fp64.
double activation_ref(Activation act, double gate, double up);

}  // namespace fp4moe::ref
