// Device weights: repack from the linear (checkpoint) layout, or generate dummy weights in place,
// into the unit-tiled layout of weight_layout.h.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "src/common/cuda_utils.h"
#include "src/moe/dummy_weights.h"
#include "src/moe/weights.h"

namespace fp4moe {

void DeviceWeights::release() {
  for (void* p : allocations) cudaFree(p);
  allocations.clear();
  *this = DeviceWeights();
}

float gemm_alpha(float weight_scale_2, float act_global_scale_encode, bool w4a4) {
  double a = double(weight_scale_2) * double(1 << layout::kWeightPrescaleLog2);
  if (w4a4) a /= double(act_global_scale_encode);
  return float(a);
}

namespace {

constexpr int kThreads = 256;

// Source of linear-layout codes and scale bytes for one GEMM's weights, local coordinates.
struct LinearSource {
  const uint8_t* codes;   // [E_chunk, rows, K/2]
  const uint8_t* scales;  // [E_chunk, rows, K/bs]
  int64_t rows, k;
  int block;
  __device__ uint8_t code(int64_t e, int64_t row, int64_t col) const {
    const uint8_t byte = codes[(e * rows + row) * (k / 2) + col / 2];
    return (col & 1) ? (byte >> 4) : (byte & 0xf);
  }
  __device__ uint8_t scale(int64_t e, int64_t row, int64_t col) const {
    return scales[(e * rows + row) * (k / block) + col / block];
  }
};

// Dummy weights of the full layer (make_random_weights), seen through a shard.
struct DummySource {
  uint64_t seed;
  uint64_t code_tensor, scale_tensor;
  int64_t expert_begin;
  int64_t global_rows, global_k;  // of the full tensor
  int64_t inter, inter_begin, inter_local;
  bool is_w13;
  bool mxfp4;
  int block;
  // Local (row, col) -> global (row, col).
  __device__ void to_global(int64_t row, int64_t col, int64_t* grow, int64_t* gcol) const {
    if (is_w13) {
      const int64_t half = row / inter_local, i = row % inter_local;
      *grow = half * inter + inter_begin + i;
      *gcol = col;
    } else {
      *grow = row;
      *gcol = inter_begin + col;
    }
  }
  __device__ uint8_t code(int64_t e, int64_t row, int64_t col) const {
    int64_t gr, gc;
    to_global(row, col, &gr, &gc);
    const int64_t idx = ((expert_begin + e) * global_rows + gr) * global_k + gc;
    const uint8_t byte = detail::dummy_code_byte(seed, code_tensor, uint64_t(idx / 2));
    return (idx & 1) ? (byte >> 4) : (byte & 0xf);
  }
  __device__ uint8_t scale(int64_t e, int64_t row, int64_t col) const {
    int64_t gr, gc;
    to_global(row, col, &gr, &gc);
    const int64_t idx = ((expert_begin + e) * global_rows + gr) * (global_k / block) + gc / block;
    return detail::dummy_scale_byte(seed, scale_tensor, uint64_t(idx), mxfp4);
  }
};

// One thread per 32-bit code word of the unit-tiled layout, experts [0, num_experts) of `src`
// written at expert offset `expert_offset` of `out`. A code whose block scale is not a positive
// number is transformed as layout::repack_scale says (the products code * scale stay the same).
template <typename Source>
__global__ void repack_codes_kernel(Source src, layout::GemmWeightShape s, int64_t num_experts,
                                    int64_t expert_offset, bool mxfp4, uint8_t* out) {
  const int64_t words_per_unit = layout::kUnitCodeBytes / 4;  // 512 = 128 threads x 4 k16 steps
  const int64_t total = num_experts * s.m_units() * s.k_units() * words_per_unit;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t unit = idx / words_per_unit;
    const int w = int(idx % words_per_unit);
    const int thread = w / 4, j = w % 4;
    const int64_t e = unit / (s.m_units() * s.k_units());
    const int64_t mu = (unit / s.k_units()) % s.m_units();
    const int64_t ku = unit % s.k_units();
    uint32_t word = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const layout::FragmentCoord c = layout::fragment_coord(thread, j, q, half);
        const int64_t row = s.source_row(mu, c.row);
        const int64_t col = ku * layout::kUnitK + c.col;
        uint8_t code = 0;
        if (row >= 0 && col < s.k) {
          const layout::RepackedScale rs = layout::repack_scale(src.scale(e, row, col), mxfp4);
          code = rs.zero_codes ? 0 : uint8_t(src.code(e, row, col) ^ rs.code_xor);
        }
        word = layout::pack_code(word, q, half, code);
      }
    }
    *reinterpret_cast<uint32_t*>(out + s.unit_offset(expert_offset + e, mu, ku) + thread * 16 + j * 4) = word;
  }
}

template <typename Source>
__global__ void repack_scales_kernel(Source src, layout::GemmWeightShape s, int64_t num_experts,
                                     int64_t expert_offset, bool mxfp4, uint8_t* out) {
  const int64_t per_unit = layout::kUnitScaleBytes;  // 64 rows x 4 blocks
  const int64_t total = num_experts * s.m_units() * s.k_units() * per_unit;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t unit = idx / per_unit;
    const int ur = int(idx % per_unit) / 4, blk = int(idx % 4);
    const int64_t e = unit / (s.m_units() * s.k_units());
    const int64_t mu = (unit / s.k_units()) % s.m_units();
    const int64_t ku = unit % s.k_units();
    const int64_t row = s.source_row(mu, ur);
    const int64_t col = ku * layout::kUnitK + blk * 16;
    const uint8_t c = (row >= 0 && col < s.k) ? layout::repack_scale(src.scale(e, row, col), mxfp4).code : 0;
    out[s.unit_offset(expert_offset + e, mu, ku) + layout::kUnitCodeBytes + layout::scale_code_offset(ur, blk)] = c;
  }
}

unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)); }

template <typename Source>
Status launch_repack(const Source& src, const layout::GemmWeightShape& s, int64_t num_experts,
                     int64_t expert_offset, bool mxfp4, uint8_t* out) {
  if (num_experts == 0) return Status::Ok();
  const int64_t units = num_experts * s.m_units() * s.k_units();
  repack_codes_kernel<<<grid_for(units * 512), kThreads>>>(src, s, num_experts, expert_offset, mxfp4, out);
  FP4MOE_CUDA_LAUNCH_CHECK(repack_codes_kernel);
  repack_scales_kernel<<<grid_for(units * 256), kThreads>>>(src, s, num_experts, expert_offset, mxfp4, out);
  FP4MOE_CUDA_LAUNCH_CHECK(repack_scales_kernel);
  return Status::Ok();
}

template <typename T>
Status device_alloc(DeviceWeights* w, size_t count, T** out) {
  void* p = nullptr;
  if (count == 0) {
    *out = nullptr;
    return Status::Ok();
  }
  FP4MOE_CUDA_RETURN(cudaMalloc(&p, count * sizeof(T)));
  w->allocations.push_back(p);
  w->bytes += count * sizeof(T);
  *out = static_cast<T*>(p);
  return Status::Ok();
}

template <typename T>
Status upload(DeviceWeights* w, const std::vector<T>& host, T** out) {
  FP4MOE_RETURN_IF_ERROR(device_alloc(w, host.size(), out));
  if (!host.empty()) FP4MOE_CUDA_RETURN(cudaMemcpy(*out, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Status::Ok();
}

// Shapes, weight buffers and the per-expert constants from host-side scales.
Status init_common(const MoeProblem& p, const WeightShard& shard, const std::vector<float>& w13_s2,
                   const std::vector<float>& w2_s2, const std::vector<float>& a13_s2,
                   const std::vector<float>& a2_s2, DeviceWeights* w) {
  const bool w4a4 = p.mode == Mode::kW4A4;
  w->num_local_experts = shard.num_local_experts;
  w->expert_begin = shard.expert_begin;
  w->inter_local = shard.inter_local;
  w->mxfp4 = p.weight_format == WeightFormat::kMxfp4;
  w->g1 = {2 * shard.inter_local, p.hidden_size, true};
  w->g2 = {p.hidden_size, shard.inter_local, false};
  FP4MOE_RETURN_IF_ERROR(device_alloc(w, size_t(w->g1.expert_bytes() * shard.num_local_experts), &w->w13));
  FP4MOE_RETURN_IF_ERROR(device_alloc(w, size_t(w->g2.expert_bytes() * shard.num_local_experts), &w->w2));
  const int E = shard.num_local_experts;
  std::vector<float> alpha1(E), alpha2(E), a1_gs(E, 1.0f), a2_gs(E, 1.0f);
  for (int e = 0; e < E; ++e) {
    if (w4a4) {
      a1_gs[e] = 1.0f / a13_s2[e];
      a2_gs[e] = 1.0f / a2_s2[e];
    }
    alpha1[e] = gemm_alpha(w->mxfp4 ? 1.0f : w13_s2[e], a1_gs[e], w4a4);
    alpha2[e] = gemm_alpha(w->mxfp4 ? 1.0f : w2_s2[e], a2_gs[e], w4a4);
  }
  // alpha1 and a1_gs in one buffer, so MoeLayer::set_input_scale_2 replaces both with one copy.
  std::vector<float> gemm1_scales = alpha1;
  gemm1_scales.insert(gemm1_scales.end(), a1_gs.begin(), a1_gs.end());
  FP4MOE_RETURN_IF_ERROR(upload(w, gemm1_scales, &w->alpha1));
  w->a1_gs = E > 0 ? w->alpha1 + E : nullptr;
  FP4MOE_RETURN_IF_ERROR(upload(w, alpha2, &w->alpha2));
  FP4MOE_RETURN_IF_ERROR(upload(w, a2_gs, &w->a2_gs));
  return Status::Ok();
}

Status check_mxfp4_scales(const uint8_t* scales, size_t n, const char* tensor, int64_t per_expert) {
  for (size_t i = 0; i < n; ++i) {
    const int b = scales[i];
    if (b != 0xff && (b < layout::kMinE8m0 || b > layout::kMaxE8m0))
      return unsupported(tensor, " scale byte ", b, " (2^", b - 127, ") of expert ", int64_t(i) / per_expert,
                         " is outside the exactly representable range [", layout::kMinE8m0, ", ",
                         layout::kMaxE8m0, "] of the bf16 dequantization");
  }
  return Status::Ok();
}

}  // namespace

Status upload_weights(const MoeProblem& p, const MoeWeightsView& h, const WeightShard& shard, DeviceWeights* out) {
  FP4MOE_RETURN_IF_ERROR(validate(p));
  const int E = shard.num_local_experts;
  const int64_t H = p.hidden_size, Il = shard.inter_local;
  const int bs = p.block_size();
  const bool mx = p.weight_format == WeightFormat::kMxfp4;
  if (!h.w13 || !h.w13_scale || !h.w2 || !h.w2_scale) return invalid_argument("weights: w13/w2 or their scales are null");
  if (!mx && (!h.w13_scale_2 || !h.w2_scale_2))
    return invalid_argument("weights: NVFP4 needs w13_scale_2 and w2_scale_2");
  if (p.has_bias && (!h.w13_bias || !h.w2_bias)) return invalid_argument("weights: has_bias needs w13_bias and w2_bias");
  if (p.mode == Mode::kW4A4 && (!h.a13_scale_2 || !h.a2_scale_2))
    return invalid_argument("weights: mode w4a4 needs a13_scale_2 and a2_scale_2");
  if (p.routing.method == RoutingMethod::kDeepSeekV3 && !h.routing_bias)
    return invalid_argument("weights: routing method deepseek-v3 needs routing_bias (e_score_correction_bias)");
  // The view is read on the host (below, and by the callers' copies of the scales): device memory
  // there would crash the process, so it is refused by name first.
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"w13", h.w13}, {"w13_scale", h.w13_scale},
                                  {"w13_scale_2", h.w13_scale_2}, {"w2", h.w2}, {"w2_scale", h.w2_scale},
                                  {"w2_scale_2", h.w2_scale_2}, {"w13_bias", h.w13_bias}, {"w2_bias", h.w2_bias},
                                  {"a13_scale_2", h.a13_scale_2}, {"a2_scale_2", h.a2_scale_2},
                                  {"routing_bias", h.routing_bias}}) {
    if (!ptr) continue;
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      cudaGetLastError();  // (an unknown pointer: host memory the runtime has not seen)
      continue;
    }
    if (attr.type == cudaMemoryTypeDevice)
      return invalid_argument("weights: ", name, " = ", ptr, " is device memory (device ", attr.device,
                              "); MoeLayer::create reads the weights from host memory (pageable, pinned or managed)");
  }
  FP4MOE_RETURN_IF_ERROR(validate_global_scales(p, h, E));
  if (mx) {
    FP4MOE_RETURN_IF_ERROR(check_mxfp4_scales(h.w13_scale, size_t(E) * 2 * Il * H / bs, "w13", 2 * Il * H / bs));
    FP4MOE_RETURN_IF_ERROR(check_mxfp4_scales(h.w2_scale, size_t(E) * H * Il / bs, "w2", H * Il / bs));
  }
  auto vec = [&](const float* v, size_t n) { return v ? std::vector<float>(v, v + n) : std::vector<float>(); };
  DeviceWeights w;
  Status st = [&]() -> Status {
    FP4MOE_RETURN_IF_ERROR(init_common(p, shard, vec(h.w13_scale_2, E), vec(h.w2_scale_2, E), vec(h.a13_scale_2, E),
                                       vec(h.a2_scale_2, E), &w));
    // Stage a few experts at a time (at most ~256 MB of linear weights on the device at once).
    const int64_t bytes13 = 2 * Il * H / 2 + 2 * Il * H / bs, bytes2 = H * Il / 2 + H * Il / bs;
    const int64_t chunk = std::max<int64_t>(1, (int64_t(256) << 20) / std::max(bytes13, bytes2));
    uint8_t *codes = nullptr, *scales = nullptr;
    FP4MOE_CUDA_RETURN(cudaMalloc(&codes, size_t(chunk * std::max(2 * Il * H, H * Il) / 2)));
    if (const cudaError_t e = cudaMalloc(&scales, size_t(chunk * std::max(2 * Il * H, H * Il) / bs)); e != cudaSuccess) {
      cudaFree(codes);  // (the staging codes, not yet owned by anything)
      return cuda_status(e, "cudaMalloc(&scales, ...) (the repack's staging scales)", __FILE__, __LINE__);
    }
    Status inner = [&]() -> Status {
      for (int64_t e0 = 0; e0 < E; e0 += chunk) {
        const int64_t n = std::min<int64_t>(chunk, E - e0);
        FP4MOE_CUDA_RETURN(cudaMemcpy(codes, h.w13 + e0 * 2 * Il * H / 2, size_t(n * 2 * Il * H / 2), cudaMemcpyHostToDevice));
        FP4MOE_CUDA_RETURN(cudaMemcpy(scales, h.w13_scale + e0 * 2 * Il * H / bs, size_t(n * 2 * Il * H / bs),
                                      cudaMemcpyHostToDevice));
        FP4MOE_RETURN_IF_ERROR(launch_repack(LinearSource{codes, scales, 2 * Il, H, bs}, w.g1, n, e0, mx, w.w13));
        FP4MOE_CUDA_RETURN(cudaDeviceSynchronize());
        FP4MOE_CUDA_RETURN(cudaMemcpy(codes, h.w2 + e0 * H * Il / 2, size_t(n * H * Il / 2), cudaMemcpyHostToDevice));
        FP4MOE_CUDA_RETURN(cudaMemcpy(scales, h.w2_scale + e0 * H * Il / bs, size_t(n * H * Il / bs), cudaMemcpyHostToDevice));
        FP4MOE_RETURN_IF_ERROR(launch_repack(LinearSource{codes, scales, H, Il, bs}, w.g2, n, e0, mx, w.w2));
        FP4MOE_CUDA_RETURN(cudaDeviceSynchronize());
      }
      return Status::Ok();
    }();
    cudaFree(codes);
    cudaFree(scales);
    FP4MOE_RETURN_IF_ERROR(inner);
    if (p.has_bias) {
      FP4MOE_RETURN_IF_ERROR(upload(&w, vec(h.w13_bias, size_t(E) * 2 * Il), &w.w13_bias));
      std::vector<float> b2 = vec(h.w2_bias, size_t(E) * H);
      if (!shard.add_w2_bias) std::fill(b2.begin(), b2.end(), 0.0f);
      FP4MOE_RETURN_IF_ERROR(upload(&w, b2, &w.w2_bias));
    }
    if (h.routing_bias) FP4MOE_RETURN_IF_ERROR(upload(&w, vec(h.routing_bias, p.num_experts()), &w.routing_bias));
    return Status::Ok();
  }();
  if (!st.ok()) {
    w.release();
    return st;
  }
  *out = std::move(w);
  return Status::Ok();
}

Status make_dummy_weights(const MoeProblem& p, uint64_t seed, const WeightShard& shard, DeviceWeights* out) {
  using namespace detail;
  FP4MOE_RETURN_IF_ERROR(validate(p));
  const int E = shard.num_local_experts;
  const int64_t H = p.hidden_size, I = p.intermediate_size, Il = shard.inter_local;
  const bool mx = p.weight_format == WeightFormat::kMxfp4;
  std::vector<float> w13_s2(E), w2_s2(E), a13(E), a2(E);
  for (int e = 0; e < E; ++e) {
    const uint64_t ge = uint64_t(shard.expert_begin + e);
    w13_s2[e] = dummy_scale_2(seed, kDummyW13Scale2, ge, H);
    w2_s2[e] = dummy_scale_2(seed, kDummyW2Scale2, ge, I);
    a13[e] = dummy_uniform(seed, kDummyA13Scale2, ge, 4.0f, 6.0f) / 2688.0f;
    a2[e] = dummy_uniform(seed, kDummyA2Scale2, ge, 8.0f, 12.0f) / 2688.0f;
  }
  DeviceWeights w;
  Status st = [&]() -> Status {
    FP4MOE_RETURN_IF_ERROR(init_common(p, shard, w13_s2, w2_s2, a13, a2, &w));
    const int bs = p.block_size();
    DummySource s13{seed, kDummyW13, kDummyW13Scale, shard.expert_begin, 2 * I, H, I, shard.inter_begin, Il, true, mx, bs};
    DummySource s2{seed, kDummyW2, kDummyW2Scale, shard.expert_begin, H, I, I, shard.inter_begin, Il, false, mx, bs};
    FP4MOE_RETURN_IF_ERROR(launch_repack(s13, w.g1, E, 0, mx, w.w13));
    FP4MOE_RETURN_IF_ERROR(launch_repack(s2, w.g2, E, 0, mx, w.w2));
    FP4MOE_CUDA_RETURN(cudaDeviceSynchronize());
    if (p.has_bias) {
      std::vector<float> b13(size_t(E) * 2 * Il), b2(size_t(E) * H, 0.0f);
      for (int e = 0; e < E; ++e) {
        const int64_t ge = shard.expert_begin + e;
        for (int half = 0; half < 2; ++half)
          for (int64_t i = 0; i < Il; ++i)
            b13[(e * 2 + half) * Il + i] =
                dummy_uniform(seed, kDummyW13Bias, uint64_t((ge * 2 + half) * I + shard.inter_begin + i), -0.5f, 0.5f);
        if (shard.add_w2_bias)
          for (int64_t c = 0; c < H; ++c) b2[e * H + c] = dummy_uniform(seed, kDummyW2Bias, uint64_t(ge * H + c), -0.5f, 0.5f);
      }
      FP4MOE_RETURN_IF_ERROR(upload(&w, b13, &w.w13_bias));
      FP4MOE_RETURN_IF_ERROR(upload(&w, b2, &w.w2_bias));
    }
    if (p.routing.method == RoutingMethod::kDeepSeekV3) {
      std::vector<float> rb(p.num_experts());
      for (int e = 0; e < p.num_experts(); ++e) rb[e] = dummy_uniform(seed, kDummyRoutingBias, e, -0.1f, 0.1f);
      FP4MOE_RETURN_IF_ERROR(upload(&w, rb, &w.routing_bias));
    }
    return Status::Ok();
  }();
  if (!st.ok()) {
    w.release();
    return st;
  }
  *out = std::move(w);
  return Status::Ok();
}

}  // namespace fp4moe
