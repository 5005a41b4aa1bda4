// MoeProblem presets, names, and host-side dummy weights.
#include <algorithm>
#include <cmath>

#include "fp4moe/moe.h"
#include "src/moe/dummy_weights.h"

namespace fp4moe {

const char* to_string(WeightFormat f) { return f == WeightFormat::kNvfp4 ? "nvfp4" : "mxfp4"; }
const char* to_string(Activation a) { return a == Activation::kSwiGLU ? "swiglu" : "gpt-oss"; }
const char* to_string(Mode m) { return m == Mode::kW4A16 ? "w4a16" : "w4a4"; }

Status parse_mode(std::string_view name, Mode* out) {
  if (name == "w4a16") *out = Mode::kW4A16;
  else if (name == "w4a4") *out = Mode::kW4A4;
  else return invalid_argument("mode = '", name, "' is not one of: w4a16, w4a4");
  return Status::Ok();
}

int64_t MoeProblem::expert_weight_bytes() const {
  const int64_t elems = 3 * hidden_size * intermediate_size;
  return elems / 2 + elems / block_size();
}

namespace {

struct PresetRow {
  const char* name;
  int64_t hidden, inter;
  int experts, top_k;
  RoutingMethod method;
  bool renormalize;
  int groups, topk_groups;
  float scaling;
  Activation activation;
  bool bias;
  WeightFormat format;
  int shared, layers;
};

// BRIEF section 5.
constexpr PresetRow kPresets[] = {
    {"deepseek-r1", 7168, 2048, 256, 8, RoutingMethod::kDeepSeekV3, true, 8, 4, 2.5f, Activation::kSwiGLU, false,
     WeightFormat::kNvfp4, 1, 58},
    {"qwen3-30b-a3b", 2048, 768, 128, 8, RoutingMethod::kSoftmaxTopK, true, 1, 1, 1.0f, Activation::kSwiGLU, false,
     WeightFormat::kNvfp4, 0, 48},
    {"qwen3-235b-a22b", 4096, 1536, 128, 8, RoutingMethod::kSoftmaxTopK, true, 1, 1, 1.0f, Activation::kSwiGLU,
     false, WeightFormat::kNvfp4, 0, 94},
    {"llama4-scout", 5120, 8192, 16, 1, RoutingMethod::kLlama4, false, 1, 1, 1.0f, Activation::kSwiGLU, false,
     WeightFormat::kNvfp4, 1, 48},
    {"llama4-maverick", 5120, 8192, 128, 1, RoutingMethod::kLlama4, false, 1, 1, 1.0f, Activation::kSwiGLU, false,
     WeightFormat::kNvfp4, 1, 24},
    {"mixtral-8x7b", 4096, 14336, 8, 2, RoutingMethod::kSoftmaxTopK, true, 1, 1, 1.0f, Activation::kSwiGLU, false,
     WeightFormat::kNvfp4, 0, 32},
    {"gpt-oss-120b", 2880, 2880, 128, 4, RoutingMethod::kTopKSoftmax, false, 1, 1, 1.0f, Activation::kGptOss, true,
     WeightFormat::kMxfp4, 0, 36},
    {"gpt-oss-20b", 2880, 2880, 32, 4, RoutingMethod::kTopKSoftmax, false, 1, 1, 1.0f, Activation::kGptOss, true,
     WeightFormat::kMxfp4, 0, 24},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Status get_preset(std::string_view name, MoeProblem* out) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    MoeProblem m;
    m.name = p.name;
    m.hidden_size = p.hidden;
    m.intermediate_size = p.inter;
    m.routing.method = p.method;
    m.routing.num_experts = p.experts;
    m.routing.top_k = p.top_k;
    m.routing.renormalize = p.renormalize;
    m.routing.num_groups = p.groups;
    m.routing.topk_groups = p.topk_groups;
    m.routing.routed_scaling_factor = p.scaling;
    m.activation = p.activation;
    m.has_bias = p.bias;
    m.weight_format = p.format;
    m.num_shared_experts = p.shared;
    m.num_moe_layers = p.layers;
    *out = m;
    return Status::Ok();
  }
  std::string all;
  for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
  return invalid_argument("preset = '", name, "' is unknown; presets: ", all);
}

MoeProblem scaled_preset(const MoeProblem& p, int factor) {
  MoeProblem s = p;
  factor = std::max(factor, 1);  // (a factor below 1 is taken as 1: no division by zero)
  auto shrink = [&](int64_t v) { return std::max<int64_t>(128, (v / factor + 127) / 128 * 128); };
  s.hidden_size = shrink(p.hidden_size);
  s.intermediate_size = shrink(p.intermediate_size);
  s.name = p.name + "/" + std::to_string(factor);
  return s;
}

MoeWeightsView HostMoeWeights::view() const {
  auto ptr = [](const auto& v) { return v.empty() ? nullptr : v.data(); };
  MoeWeightsView w;
  w.w13 = ptr(w13);
  w.w13_scale = ptr(w13_scale);
  w.w13_scale_2 = ptr(w13_scale_2);
  w.w2 = ptr(w2);
  w.w2_scale = ptr(w2_scale);
  w.w2_scale_2 = ptr(w2_scale_2);
  w.w13_bias = ptr(w13_bias);
  w.w2_bias = ptr(w2_bias);
  w.a13_scale_2 = ptr(a13_scale_2);
  w.a2_scale_2 = ptr(a2_scale_2);
  w.routing_bias = ptr(routing_bias);
  return w;
}

HostMoeWeights make_random_weights(const MoeProblem& p, uint64_t seed) {
  std::vector<int> all(p.num_experts());
  for (int e = 0; e < p.num_experts(); ++e) all[e] = e;
  return make_random_weights_subset(p, seed, all);
}

HostMoeWeights make_random_weights_subset(const MoeProblem& p, uint64_t seed, const std::vector<int>& experts) {
  using namespace detail;
  const int64_t H = p.hidden_size, I = p.intermediate_size;
  const int bs = p.block_size();
  const bool mx = p.weight_format == WeightFormat::kMxfp4;
  const int64_t n13 = 2 * I * H / 2, s13 = 2 * I * H / bs, n2 = H * I / 2, s2 = H * I / bs;
  HostMoeWeights w;
  w.num_experts = int(experts.size());
  w.intermediate = I;
  w.w13.resize(experts.size() * n13);
  w.w13_scale.resize(experts.size() * s13);
  w.w2.resize(experts.size() * n2);
  w.w2_scale.resize(experts.size() * s2);
  for (size_t j = 0; j < experts.size(); ++j) {
    const int64_t e = experts[j];  // indices are those of the full tensors
    for (int64_t i = 0; i < n13; ++i) w.w13[j * n13 + i] = dummy_code_byte(seed, kDummyW13, e * n13 + i);
    for (int64_t i = 0; i < s13; ++i) w.w13_scale[j * s13 + i] = dummy_scale_byte(seed, kDummyW13Scale, e * s13 + i, mx);
    for (int64_t i = 0; i < n2; ++i) w.w2[j * n2 + i] = dummy_code_byte(seed, kDummyW2, e * n2 + i);
    for (int64_t i = 0; i < s2; ++i) w.w2_scale[j * s2 + i] = dummy_scale_byte(seed, kDummyW2Scale, e * s2 + i, mx);
    if (!mx) {
      w.w13_scale_2.push_back(dummy_w13_scale_2(seed, e, H));
      w.w2_scale_2.push_back(dummy_scale_2(seed, kDummyW2Scale2, e, I));
    }
    if (p.has_bias) {
      for (int64_t i = 0; i < 2 * I; ++i)
        w.w13_bias.push_back(dummy_uniform(seed, kDummyW13Bias, e * 2 * I + i, -0.5f, 0.5f));
      for (int64_t i = 0; i < H; ++i) w.w2_bias.push_back(dummy_uniform(seed, kDummyW2Bias, e * H + i, -0.5f, 0.5f));
    }
    if (p.mode == Mode::kW4A4) {
      // Inputs are ~N(0,1) (amax ~5), the intermediate O(1) with amax ~10: global scales amax/2688.
      w.a13_scale_2.push_back(dummy_a13_scale_2(seed, e));
      w.a2_scale_2.push_back(dummy_uniform(seed, kDummyA2Scale2, e, 8.0f, 12.0f) / 2688.0f);
    }
  }
  if (p.routing.method == RoutingMethod::kDeepSeekV3) {
    w.routing_bias.resize(p.num_experts());
    for (int e = 0; e < p.num_experts(); ++e) w.routing_bias[e] = dummy_uniform(seed, kDummyRoutingBias, e, -0.1f, 0.1f);
  }
  return w;
}

}  // namespace fp4moe
