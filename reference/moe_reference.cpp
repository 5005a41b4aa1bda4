#include "reference/moe_reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "fp4moe/numerics.h"
#include "src/format/block_codec.h"

namespace fp4moe::ref {

double activation_ref(Activation act, double gate, double up) {
  if (act == Activation::kSwiGLU) return gate / (1.0 + std::exp(-gate)) * up;
  const double g = std::min(gate, 7.0);
  const double l = std::clamp(up, -7.0, 7.0);
  return g / (1.0 + std::exp(-1.702 * g)) * (l + 1.0);
}

namespace {

// Dequantize one weight row of `cols` elements to fp64.
void dequant_row(const MoeProblem& p, const uint8_t* codes, const uint8_t* scales, double global, int64_t cols,
                 double* out) {
  const bool mx = p.weight_format == WeightFormat::kMxfp4;
  const int bs = p.block_size();
  for (int64_t c = 0; c < cols; ++c) {
    const uint8_t byte = codes[c / 2];
    const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xf);
    const double s = mx ? double(e8m0_to_float(scales[c / bs])) : double(e4m3_to_float(scales[c / bs]));
    out[c] = double(e2m1_to_float(code)) * s * global;
  }
}

// NVFP4 `kernel` recipe quantize-dequantize of a row (w4a4 activations), gs in the encode convention.
void fake_quant_kernel_recipe(const float* x, int64_t n, float gs, double* out) {
  float block[kNvfp4BlockSize];
  for (int64_t b = 0; b < n; b += kNvfp4BlockSize) {
    std::copy(x + b, x + b + kNvfp4BlockSize, block);
    detail::fake_quantize_nvfp4_block_kernel(block, gs);  // e2m1 * scale, exact
    for (int i = 0; i < kNvfp4BlockSize; ++i) out[b + i] = double(block[i]) / double(gs);
  }
}

Status check_weights(const MoeProblem& p, const MoeWeightsView& w) {
  if (!w.w13 || !w.w13_scale || !w.w2 || !w.w2_scale) return invalid_argument("reference: weights missing");
  if (p.weight_format == WeightFormat::kNvfp4 && (!w.w13_scale_2 || !w.w2_scale_2))
    return invalid_argument("reference: NVFP4 weights need w13_scale_2 and w2_scale_2");
  if (p.has_bias && (!w.w13_bias || !w.w2_bias)) return invalid_argument("reference: has_bias needs biases");
  if (p.mode == Mode::kW4A4 && (!w.a13_scale_2 || !w.a2_scale_2))
    return invalid_argument("reference: w4a4 needs a13_scale_2 and a2_scale_2");
  return Status::Ok();
}

}  // namespace

Status moe_forward_routed(const MoeProblem& p, const MoeWeightsView& w, const ShardSpec& shard,
                          const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                          int64_t T, float* out, const ReferenceOptions& opt) {
  FP4MOE_RETURN_IF_ERROR(validate(p));
  FP4MOE_RETURN_IF_ERROR(validate_shard(p, shard));
  FP4MOE_RETURN_IF_ERROR(check_weights(p, w));
  if (T < 0) return invalid_argument("num_tokens = ", T, " must be >= 0");
  if (T > 0 && (!hidden || !topk_ids || !topk_weights || !out))
    return invalid_argument("reference: null input or output pointer");
  const int K = p.top_k();
  const int E = p.num_experts();
  const int64_t H = p.hidden_size;
  const ExpertRange experts = local_experts(E, shard.ep_rank, shard.ep_size);
  const int64_t Il = p.intermediate_size / shard.tp_size;
  for (int64_t i = 0; i < T * K; ++i)
    if (topk_ids[i] < 0 || topk_ids[i] >= E)
      return invalid_argument("topk_ids[", i, "] = ", topk_ids[i], " is outside [0, num_experts = ", E, ")");

  // Pairs grouped by local expert, in (token, slot) order inside each expert.
  std::vector<std::vector<int64_t>> pairs_of(experts.size());
  for (int64_t i = 0; i < T * K; ++i)
    if (experts.contains(topk_ids[i])) pairs_of[topk_ids[i] - experts.begin].push_back(i);

  std::vector<double> y(size_t(T) * K * H, 0.0);  // per pair, weighted expert output
  std::atomic<int> next_expert{0};
  auto worker = [&] {
    std::vector<double> row(std::max(H, Il)), xin, hmid, acc;
    std::vector<float> tmp;
    for (int le; (le = next_expert.fetch_add(1)) < experts.size();) {
      const auto& pairs = pairs_of[le];
      if (pairs.empty()) continue;
      const int64_t np = pairs.size();
      const int bs = p.block_size();
      // GEMM1 inputs, one row of H per pair.
      xin.assign(np * H, 0.0);
      tmp.resize(H);
      const bool prequantized = p.mode == Mode::kW4A4 && opt.input_prequantized;
      for (int64_t j = 0; j < np; ++j) {
        const int64_t t = pairs[j] / K;
        if (prequantized) {
          // The rows hold what fake_quant_kernel_recipe's block holds before its division by gs.
          const double gs = double(1.0f / w.a13_scale_2[le]);
          for (int64_t c = 0; c < H; ++c) xin[j * H + c] = double(bf16_to_float(hidden[t * H + c])) / gs;
          continue;
        }
        for (int64_t c = 0; c < H; ++c) {
          float v = bf16_to_float(hidden[t * H + c]);
          if (p.apply_router_weight_on_input()) v = bf16_to_float(float_to_bf16(v * topk_weights[pairs[j]]));
          tmp[c] = v;
        }
        if (p.mode == Mode::kW4A4) {
          fake_quant_kernel_recipe(tmp.data(), H, 1.0f / w.a13_scale_2[le], &xin[j * H]);
        } else {
          for (int64_t c = 0; c < H; ++c) xin[j * H + c] = tmp[c];
        }
      }
      // GEMM1 (+ bias): acc[pair][row], rows 0..Il-1 gate, Il..2Il-1 up.
      acc.assign(np * 2 * Il, 0.0);
      const double g13 = p.weight_format == WeightFormat::kNvfp4 ? double(w.w13_scale_2[le]) : 1.0;
      for (int64_t r = 0; r < 2 * Il; ++r) {
        const int64_t grow = int64_t(le) * 2 * Il + r;
        dequant_row(p, w.w13 + grow * H / 2, w.w13_scale + grow * H / bs, g13, H, row.data());
        const double bias = p.has_bias ? double(w.w13_bias[grow]) : 0.0;
        for (int64_t j = 0; j < np; ++j) {
          const double* x = &xin[j * H];
          double s = 0.0;
          for (int64_t c = 0; c < H; ++c) s += row[c] * x[c];
          acc[j * 2 * Il + r] = s + bias;
        }
      }
      // Activation, then the intermediate's rounding (bf16) or quantization (w4a4).
      hmid.assign(np * Il, 0.0);
      tmp.resize(Il);
      for (int64_t j = 0; j < np; ++j) {
        for (int64_t r = 0; r < Il; ++r) {
          const double h = activation_ref(p.activation, acc[j * 2 * Il + r], acc[j * 2 * Il + Il + r]);
          tmp[r] = float(h);
          hmid[j * Il + r] = h;
        }
        if (p.mode == Mode::kW4A4) {
          fake_quant_kernel_recipe(tmp.data(), Il, 1.0f / w.a2_scale_2[le], &hmid[j * Il]);
        } else if (opt.round_intermediate_to_bf16) {
          for (int64_t r = 0; r < Il; ++r) hmid[j * Il + r] = bf16_to_float(float_to_bf16(tmp[r]));
        }
      }
      // GEMM2 (+ bias), weighted into the pair's slot.
      const double g2 = p.weight_format == WeightFormat::kNvfp4 ? double(w.w2_scale_2[le]) : 1.0;
      for (int64_t r = 0; r < H; ++r) {
        const int64_t grow = int64_t(le) * H + r;
        dequant_row(p, w.w2 + grow * Il / 2, w.w2_scale + grow * Il / bs, g2, Il, row.data());
        const double bias = p.has_bias ? double(w.w2_bias[grow]) : 0.0;
        for (int64_t j = 0; j < np; ++j) {
          const double* h = &hmid[j * Il];
          double s = 0.0;
          for (int64_t c = 0; c < Il; ++c) s += row[c] * h[c];
          const double weight = p.apply_router_weight_on_input() ? 1.0 : double(topk_weights[pairs[j]]);
          y[size_t(pairs[j]) * H + r] = weight * (s + bias);
        }
      }
    }
  };
  int num_threads = opt.num_threads > 0 ? opt.num_threads : int(std::thread::hardware_concurrency());
  num_threads = std::max(1, std::min(num_threads, std::max(1, experts.size())));
  std::vector<std::thread> threads;
  for (int i = 1; i < num_threads; ++i) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();

  // Combine in slot order: deterministic regardless of the thread schedule.
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < H; ++c) {
      double s = 0.0;
      for (int k = 0; k < K; ++k) s += y[(size_t(t) * K + k) * H + c];
      out[t * H + c] = float(s);
    }
  }
  return Status::Ok();
}

Status moe_forward(const MoeProblem& p, const MoeWeightsView& w, const ShardSpec& shard, const uint16_t* hidden,
                   const void* logits, LogitsType logits_type, int64_t T, float* out,
                   const ReferenceOptions& opt) {
  FP4MOE_RETURN_IF_ERROR(validate(p));
  std::vector<int32_t> ids(size_t(std::max<int64_t>(T, 0)) * p.top_k());
  std::vector<float> weights(ids.size());
  RoutingArgs args;
  args.logits = logits;
  args.logits_type = logits_type;
  args.correction_bias = w.routing_bias;
  args.num_tokens = T;
  args.topk_ids = ids.data();
  args.topk_weights = weights.data();
  FP4MOE_RETURN_IF_ERROR(route_cpu(p.routing, args));
  return moe_forward_routed(p, w, shard, hidden, ids.data(), weights.data(), T, out, opt);
}

}  // namespace fp4moe::ref
