// The fused MoE layer: problem description, presets, validation, weights and the forward pass.
//
//   hidden [T, H] bf16 + router logits [T, E]
//     -> route (top-k) -> permute tokens expert-major -> GEMM1 (gate|up, FP4 weights)
//     -> activation -> GEMM2 (down, FP4 weights) -> router-weighted combine -> out [T, H] bf16
//
// Layers: this header is framework-free (raw pointers in, Status out). Weights are given in the
// checkpoint ("linear") layout described by MoeWeightsView; the GPU layer (moe_gpu.h) repacks them
// once into the layout its kernels want.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp4moe/format.h"
#include "fp4moe/routing.h"
#include "fp4moe/status.h"

namespace fp4moe {

enum class WeightFormat { kNvfp4, kMxfp4 };
enum class Activation {
  kSwiGLU,  // silu(gate) * up
  kGptOss,  // g = min(gate, 7), l = clamp(up, -7, 7): g * sigmoid(1.702 g) * (l + 1)
};
enum class Mode {
  kW4A16,  // FP4 weights, bf16 activations (default)
  kW4A4,   // activations and the intermediate quantized to NVFP4 (kernel recipe, per-expert global
           // input scales): the numerics of Blackwell NVFP4 MoE, exact up to summation order
};

const char* to_string(WeightFormat f);
const char* to_string(Activation a);
const char* to_string(Mode m);
Status parse_mode(std::string_view name, Mode* out);

struct MoeProblem {
  std::string name;                 // preset name or "custom"
  int64_t hidden_size = 0;          // H
  int64_t intermediate_size = 0;    // I, per expert (the full size, before tensor parallelism)
  RoutingConfig routing;            // num_experts (E) and top_k live here
  Activation activation = Activation::kSwiGLU;
  bool has_bias = false;            // GEMM biases (gpt-oss)
  WeightFormat weight_format = WeightFormat::kNvfp4;
  Mode mode = Mode::kW4A16;
  int64_t max_tokens = 8192;        // capacity: sizes the workspace and CUDA-graph captures
  // Informational (not part of the routed layer): shared experts run as a dense MLP beside it.
  int num_shared_experts = 0;
  int num_moe_layers = 1;

  int num_experts() const { return routing.num_experts; }
  int top_k() const { return routing.top_k; }
  // Llama-4 multiplies the input of its single expert by the router weight instead of the output.
  bool apply_router_weight_on_input() const { return routing.method == RoutingMethod::kLlama4; }
  int block_size() const { return weight_format == WeightFormat::kNvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize; }
  // Bytes of one expert's FP4 weights and block scales (w13 and w2), as stored.
  int64_t expert_weight_bytes() const;
  // Multiply-adds per routed (token, expert) pair: 3 * H * I.
  int64_t flops_per_pair() const { return 2 * 3 * hidden_size * intermediate_size; }
};

// Presets (the MoE layer of each model): deepseek-r1, qwen3-30b-a3b, qwen3-235b-a22b,
// llama4-scout, llama4-maverick, mixtral-8x7b, gpt-oss-120b, gpt-oss-20b.
std::vector<std::string> preset_names();
Status get_preset(std::string_view name, MoeProblem* out);
// The same routing structure (E, top-k, groups, activation, format) with H and I divided by `factor`
// (rounded up to multiples of 128, at least 128): runs through the CPU reference in seconds. A factor
// below 1 is taken as 1.
MoeProblem scaled_preset(const MoeProblem& p, int factor);

// Checks the problem itself: sizes (H and I positive multiples of 32, so both formats' scale blocks
// fit whole, at most 2^20), the routing config, the enums, format/mode/activation combinations, the
// max_tokens bound. Names the bad field and its value.
Status validate(const MoeProblem& problem);

// ---- Weights ---------------------------------------------------------------------------------------
// One layer's routed experts, stacked over the experts this view holds (num_experts of the problem,
// or a shard: see reference/sharding.h). Linear (checkpoint) layout:
//   w13        [E, 2I, H/2]    u8, rows 0..I-1 gate, I..2I-1 up (a fused gate|up projection)
//   w13_scale  [E, 2I, H/bs]   e4m3 (NVFP4, bs=16) or e8m0 (MXFP4, bs=32), linear
//   w13_scale_2 [E]            f32, NVFP4 global scale in the decode convention (weight_scale_2);
//                               null for MXFP4
//   w2         [E, H, I/2]     u8
//   w2_scale   [E, H, I/bs]
//   w2_scale_2 [E]
//   w13_bias   [E, 2I] f32, w2_bias [E, H] f32: only with has_bias (gpt-oss)
//   a13_scale_2, a2_scale_2 [E] f32: w4a4 only, decode-convention global scales of the GEMM1 input
//                               and of the intermediate (ModelOpt input_scale)
//   routing_bias [E_global] f32: DeepSeek-V3 e_score_correction_bias (all experts, not sharded)
struct MoeWeightsView {
  const uint8_t* w13 = nullptr;
  const uint8_t* w13_scale = nullptr;
  const float* w13_scale_2 = nullptr;
  const uint8_t* w2 = nullptr;
  const uint8_t* w2_scale = nullptr;
  const float* w2_scale_2 = nullptr;
  const float* w13_bias = nullptr;
  const float* w2_bias = nullptr;
  const float* a13_scale_2 = nullptr;
  const float* a2_scale_2 = nullptr;
  const float* routing_bias = nullptr;
};

// The per-expert global scales of `num_experts` experts' weights, by value: NVFP4's w13_scale_2 and
// w2_scale_2 finite and >= 0 (0: an all-zero expert), and in w4a4 the input scales a13_scale_2 and
// a2_scale_2 finite and > 0 (the activations are quantized with their reciprocal). Null ones are not
// checked here (what must be present is the loaders' and upload's check). Names the first bad value.
Status validate_global_scales(const MoeProblem& problem, const MoeWeightsView& weights, int64_t num_experts);

// Host-owned weights in the linear layout (used by the reference, the tests and dummy weights).
struct HostMoeWeights {
  int num_experts = 0;       // experts held (a shard may hold fewer than the problem has)
  int64_t intermediate = 0;  // intermediate size held (a TP shard holds I / tp)
  std::vector<uint8_t> w13, w13_scale, w2, w2_scale;
  std::vector<float> w13_scale_2, w2_scale_2, w13_bias, w2_bias, a13_scale_2, a2_scale_2, routing_bias;
  MoeWeightsView view() const;
};

// Random valid weights for a problem (deterministic in `seed`): Gaussian rows quantized with the
// ModelOpt recipe (NVFP4) or the OCP rule (MXFP4), biases for gpt-oss, correction bias for DeepSeek,
// activation scales for w4a4 calibrated to unit-variance inputs.
HostMoeWeights make_random_weights(const MoeProblem& problem, uint64_t seed);
// The same weights for only the listed (global) experts, in that order: for reference checks of a
// large layer that touch few experts. routing_bias still covers all experts.
HostMoeWeights make_random_weights_subset(const MoeProblem& problem, uint64_t seed, const std::vector<int>& experts);

}  // namespace fp4moe
