// fp4moe._ext: the binding layer between Python and the C++ API. It only converts and checks:
//   - arrays arrive through DLPack (nanobind ndarray, no copies); dtype, device, shape, contiguity and
//     device agreement are checked here and a failure names the argument and what it got;
//   - strings become enums (recipes, layouts, routing methods, modes, kernel paths);
//   - a non-ok Status becomes fp4moe.Fp4moeError (or its subclass for the code) with the same message.
// Outputs are allocated by the Python layer (python/fp4moe/__init__.py) with the caller's framework,
// so nothing here allocates per call and a CUDA forward can be captured in a CUDA graph. The layer
// object allocates its workspace once, at creation. No framework headers: NumPy, PyTorch, CuPy or
// JAX arrays all cross as DLPack tensors.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "binding_args.h"
#include "fp4moe/checkpoint.h"
#include "fp4moe/format.h"
#include "fp4moe/moe.h"
#include "fp4moe/numerics.h"
#include "fp4moe/routing.h"
#include "fp4moe/status.h"
#include "reference/moe_reference.h"
#include "reference/sharding.h"
#include "fp4moe/parallel.h"
#include "src/comm/local_comm.h"
#if FP4MOE_HAS_CUDA
#include "src/common/cuda_utils.h"
#endif
#include "src/moe/parallel_moe.h"

#if FP4MOE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "fp4moe/moe_gpu.h"
#endif

#if FP4MOE_PY_HAS_NCCL
#include "src/comm/nccl_comm.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace fp4moe::py {
namespace {

// ---- Codec ---------------------------------------------------------------------------------------

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The [rows, cols] view of an array with cols = last dimension and rows = the product of the others.
struct Rows {
  int64_t rows = 1;
  int64_t cols = 0;
  std::vector<Dim> lead;  // the leading dimensions, to build the expected shapes of the other arrays
};

template <typename A>
Rows rows_of(const char* name, const A& a, int block, const char* format) {
  if (a.ndim() < 1) fail_invalid(name, " is a 0-d array; expected [rows, cols] (or [..., cols])");
  Rows r;
  for (size_t i = 0; i + 1 < a.ndim(); ++i) {
    r.rows *= int64_t(a.shape(i));
    r.lead.push_back({"", int64_t(a.shape(i))});
  }
  r.cols = int64_t(a.shape(a.ndim() - 1));
  if (r.cols <= 0 || r.cols % block != 0)
    fail_invalid(name, ": last dimension = ", r.cols, " must be a positive multiple of ", block, " (the ", format,
                 " block size)");
  return r;
}

std::vector<Dim> with_last(const std::vector<Dim>& lead, const char* name, int64_t last) {
  std::vector<Dim> d = lead;
  for (Dim& x : d) x.name = "dim";
  d.push_back({name, last});
  return d;
}

// Expected shape of an NVFP4 scale tensor: linear [..., cols/16]; swizzled [pad128(rows), pad4(cols/16)].
std::vector<Dim> nvfp4_scale_dims(const Rows& r, ScaleLayout layout) {
  const int64_t num_sf = r.cols / kNvfp4BlockSize;
  if (layout == ScaleLayout::kLinear) return with_last(r.lead, "cols/16", num_sf);
  return {{"round_up(rows, 128)", round_up(r.rows, 128)}, {"round_up(cols/16, 4)", round_up(num_sf, 4)}};
}

void quantize_nvfp4(InArray x, OutArray packed, OutArray scales, float global_scale, const std::string& convention,
                    const std::string& recipe, const std::string& layout_name, uintptr_t stream) {
  Nvfp4QuantizeParams params;
  params.recipe = parse_recipe_name(recipe);
  params.global_scale = {global_scale, parse_convention(convention)};
  params.layout = parse_layout(layout_name);
  const Rows r = rows_of("x", x, kNvfp4BlockSize, "NVFP4");
  if (params.layout == ScaleLayout::kSwizzled128x4 && x.ndim() != 2)
    fail_invalid("x has shape ", shape_str(x), "; the swizzled layout needs a 2-d [rows, cols] array");
  params.rows = r.rows;
  params.cols = r.cols;
  const Place px = check_array("x", x, {kF32, kBF16}, with_last(r.lead, "cols", r.cols));
  check_same_place("packed", check_array("packed", packed, {kU8}, with_last(r.lead, "cols/2", r.cols / 2)), "x", px);
  check_same_place("scales", check_array("scales", scales, {kU8, kE4M3}, nvfp4_scale_dims(r, params.layout)), "x", px);
  const InputType type = x.dtype() == kF32 ? InputType::kF32 : InputType::kBF16;
  auto* q = static_cast<uint8_t*>(packed.data());
  auto* s = static_cast<uint8_t*>(scales.data());
  if (!px.cuda) {
    nb::gil_scoped_release release;
    check(quantize_nvfp4_cpu(params, x.data(), type, q, s));
    return;
  }
#if FP4MOE_HAS_CUDA
  DeviceGuard guard(px.device_id);
  check(quantize_nvfp4_gpu(params, x.data(), type, q, s, as_stream(stream)));
#else
  fail_no_cuda("quantize_nvfp4");
#endif
}

void dequantize_nvfp4(InArray packed, InArray scales, OutArray out, float global_scale, const std::string& convention,
                      const std::string& layout_name, uintptr_t stream) {
  const GlobalScale g{global_scale, parse_convention(convention)};
  const ScaleLayout layout = parse_layout(layout_name);
  const Rows r = rows_of("out", out, kNvfp4BlockSize, "NVFP4");
  if (layout == ScaleLayout::kSwizzled128x4 && out.ndim() != 2)
    fail_invalid("out has shape ", shape_str(out), "; the swizzled layout needs a 2-d [rows, cols] array");
  const Place pp = check_array("packed", packed, {kU8}, with_last(r.lead, "cols/2", r.cols / 2));
  check_same_place("scales", check_array("scales", scales, {kU8, kE4M3}, nvfp4_scale_dims(r, layout)), "packed", pp);
  check_same_place("out", check_array("out", out, {kF32}, with_last(r.lead, "cols", r.cols)), "packed", pp);
  const auto* q = static_cast<const uint8_t*>(packed.data());
  const auto* s = static_cast<const uint8_t*>(scales.data());
  auto* y = static_cast<float*>(out.data());
  if (!pp.cuda) {
    nb::gil_scoped_release release;
    check(dequantize_nvfp4_cpu(r.rows, r.cols, q, s, layout, g, y));
    return;
  }
#if FP4MOE_HAS_CUDA
  DeviceGuard guard(pp.device_id);
  check(dequantize_nvfp4_gpu(r.rows, r.cols, q, s, layout, g, y, as_stream(stream)));
#else
  fail_no_cuda("dequantize_nvfp4");
#endif
}

void quantize_mxfp4(InArray x, OutArray packed, OutArray scales, uintptr_t stream) {
  const Rows r = rows_of("x", x, kMxfp4BlockSize, "MXFP4");
  const Place px = check_array("x", x, {kF32, kBF16}, with_last(r.lead, "cols", r.cols));
  check_same_place("packed", check_array("packed", packed, {kU8}, with_last(r.lead, "cols/2", r.cols / 2)), "x", px);
  check_same_place("scales", check_array("scales", scales, {kU8, kE8M0}, with_last(r.lead, "cols/32", r.cols / 32)),
                   "x", px);
  const InputType type = x.dtype() == kF32 ? InputType::kF32 : InputType::kBF16;
  auto* q = static_cast<uint8_t*>(packed.data());
  auto* s = static_cast<uint8_t*>(scales.data());
  if (!px.cuda) {
    nb::gil_scoped_release release;
    check(quantize_mxfp4_cpu(r.rows, r.cols, x.data(), type, q, s));
    return;
  }
#if FP4MOE_HAS_CUDA
  DeviceGuard guard(px.device_id);
  check(quantize_mxfp4_gpu(r.rows, r.cols, x.data(), type, q, s, as_stream(stream)));
#else
  fail_no_cuda("quantize_mxfp4");
#endif
}

void dequantize_mxfp4(InArray packed, InArray scales, OutArray out, uintptr_t stream) {
  const Rows r = rows_of("out", out, kMxfp4BlockSize, "MXFP4");
  const Place pp = check_array("packed", packed, {kU8}, with_last(r.lead, "cols/2", r.cols / 2));
  check_same_place("scales", check_array("scales", scales, {kU8, kE8M0}, with_last(r.lead, "cols/32", r.cols / 32)),
                   "packed", pp);
  check_same_place("out", check_array("out", out, {kF32}, with_last(r.lead, "cols", r.cols)), "packed", pp);
  const auto* q = static_cast<const uint8_t*>(packed.data());
  const auto* s = static_cast<const uint8_t*>(scales.data());
  auto* y = static_cast<float*>(out.data());
  if (!pp.cuda) {
    nb::gil_scoped_release release;
    check(dequantize_mxfp4_cpu(r.rows, r.cols, q, s, y));
    return;
  }
#if FP4MOE_HAS_CUDA
  DeviceGuard guard(pp.device_id);
  check(dequantize_mxfp4_gpu(r.rows, r.cols, q, s, y, as_stream(stream)));
#else
  fail_no_cuda("dequantize_mxfp4");
#endif
}

// linear [rows, num_scale_cols] <-> swizzled [round_up(rows, 128), round_up(num_scale_cols, 4)]
void convert_scales(bool to_swizzled, InArray src, OutArray dst, uintptr_t stream) {
  const char* linear_name = to_swizzled ? "linear" : "out";
  const char* swizzled_name = to_swizzled ? "out" : "swizzled";
  const size_t lin_ndim = to_swizzled ? src.ndim() : dst.ndim();
  if (lin_ndim != 2)
    fail_invalid(linear_name, " has shape ", to_swizzled ? shape_str(src) : shape_str(dst),
                 "; expected [rows, num_scale_cols]");
  const int64_t rows = int64_t(to_swizzled ? src.shape(0) : dst.shape(0));
  const int64_t ncols = int64_t(to_swizzled ? src.shape(1) : dst.shape(1));
  if (ncols <= 0) fail_invalid(linear_name, ": num_scale_cols = ", ncols, " must be > 0");
  const std::vector<Dim> lin_dims{{"rows", rows}, {"num_scale_cols", ncols}};
  const std::vector<Dim> swz_dims{{"round_up(rows, 128)", round_up(rows, 128)},
                                  {"round_up(num_scale_cols, 4)", round_up(ncols, 4)}};
  const char* src_name = to_swizzled ? linear_name : swizzled_name;
  const char* dst_name = to_swizzled ? swizzled_name : linear_name;
  const Place ps = check_array(src_name, src, {kU8, kE4M3}, to_swizzled ? lin_dims : swz_dims);
  check_same_place(dst_name, check_array(dst_name, dst, {kU8, kE4M3}, to_swizzled ? swz_dims : lin_dims), src_name, ps);
  const auto* a = static_cast<const uint8_t*>(src.data());
  auto* b = static_cast<uint8_t*>(dst.data());
  if (!ps.cuda) {
    check(to_swizzled ? swizzle_scales_cpu(rows, ncols, a, b) : unswizzle_scales_cpu(rows, ncols, a, b));
    return;
  }
#if FP4MOE_HAS_CUDA
  DeviceGuard guard(ps.device_id);
  check(to_swizzled ? swizzle_scales_gpu(rows, ncols, a, b, as_stream(stream))
                    : unswizzle_scales_gpu(rows, ncols, a, b, as_stream(stream)));
#else
  fail_no_cuda(to_swizzled ? "swizzle_scales" : "unswizzle_scales");
#endif
}

// ---- Routing -------------------------------------------------------------------------------------

void route(const RoutingConfig& config, InArray logits, std::optional<InArray> correction_bias, OutArray topk_ids,
           OutArray topk_weights, uintptr_t stream) {
  check(validate(config));
  if (logits.ndim() != 2)
    fail_invalid("router_logits has shape ", shape_str(logits),
                 "; expected [num_tokens, num_experts = ", config.num_experts, "]");
  const int64_t T = int64_t(logits.shape(0));
  const int E = config.num_experts, K = config.top_k;
  const Place pl = check_array("router_logits", logits, {kF32, kBF16}, {{"num_tokens", T}, {"num_experts", E}});
  check_same_place("topk_ids", check_array("topk_ids", topk_ids, {kI32}, {{"num_tokens", T}, {"top_k", K}}),
                   "router_logits", pl);
  check_same_place("topk_weights", check_array("topk_weights", topk_weights, {kF32}, {{"num_tokens", T}, {"top_k", K}}),
                   "router_logits", pl);
  RoutingArgs args;
  if (correction_bias) {
    if (config.method != RoutingMethod::kDeepSeekV3)
      fail_invalid("correction_bias is only used by routing method deepseek_v3, not ", method_name(config.method));
    check_same_place("correction_bias", check_array("correction_bias", *correction_bias, {kF32}, {{"num_experts", E}}),
                     "router_logits", pl);
    args.correction_bias = static_cast<const float*>(correction_bias->data());
  } else if (config.method == RoutingMethod::kDeepSeekV3) {
    fail_invalid("routing method deepseek_v3 needs correction_bias (e_score_correction_bias), got None");
  }
  args.logits = logits.data();
  args.logits_type = logits.dtype() == kF32 ? LogitsType::kF32 : LogitsType::kBF16;
  args.num_tokens = T;
  args.topk_ids = static_cast<int32_t*>(topk_ids.data());
  args.topk_weights = static_cast<float*>(topk_weights.data());
  if (!pl.cuda) {
    nb::gil_scoped_release release;
    check(route_cpu(config, args));
    return;
  }
#if FP4MOE_HAS_CUDA
  DeviceGuard guard(pl.device_id);
  check(route_gpu(config, args, as_stream(stream)));
#else
  fail_no_cuda("route");
#endif
}

// ---- Host buffers --------------------------------------------------------------------------------

// Host-side bytes of an array: its own memory when on the CPU, a synchronous copy when on a GPU
// (weights are read once, at layer creation).
// A weight's bytes on the host: the array's own memory, kept alive by `owner` (an array imported
// from a DLPack capsule owns the exporter's tensor: a temporary such as a converted float32 scale
// tensor would be freed with the last InArray, and `data` left dangling), or a copy of a device array.
struct HostBytes {
  const void* data = nullptr;
  InArray owner;
  std::vector<uint8_t> copy;
};

HostBytes host_bytes(const char* name, const InArray& a, const Place& place) {
  HostBytes h;
  if (!place.cuda) {
    h.owner = a;
    h.data = a.data();
    return h;
  }
#if FP4MOE_HAS_CUDA
  h.copy.resize(a.nbytes());
  DeviceGuard guard(place.device_id);
  // NOTE: the producer may have written the array on any stream (a non-blocking one does not order
  // with cudaMemcpy's legacy stream): wait for the whole device. Creation only, never in a forward.
  FP4MOE_PY_CUDA(cudaDeviceSynchronize());
  FP4MOE_PY_CUDA(cudaMemcpy(h.copy.data(), a.data(), a.nbytes(), cudaMemcpyDeviceToHost));
  h.data = h.copy.data();
  return h;
#else
  fail_no_cuda(name);
#endif
}

// A numpy array that owns a std::vector.
template <typename T>
nb::object numpy_from(std::vector<T>&& v, std::vector<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner));
}

// ---- Weights -------------------------------------------------------------------------------------

struct ShardDims {
  int num_local_experts = 0;
  int64_t inter_local = 0;
};

ShardDims shard_dims(const MoeProblem& p, const ref::ShardSpec& shard) {
  check(ref::validate_shard(p, shard));
  return {ref::local_experts(p.num_experts(), shard.ep_rank, shard.ep_size).size(),
          ref::tp_slice(p.intermediate_size, shard.tp_rank, shard.tp_size).size()};
}

// Checked host copies (or views) of the weight arrays, in the shard's shapes.
struct WeightArrays {
  std::vector<std::string> names;
  std::vector<HostBytes> bytes;
  MoeWeightsView view;
};

WeightArrays read_weights(const MoeProblem& p, const ShardDims& sd, nb::dict weights) {
  const int64_t El = sd.num_local_experts, Il = sd.inter_local, H = p.hidden_size;
  const int bs = p.block_size();
  const bool mx = p.weight_format == WeightFormat::kMxfp4;
  const dl::dtype scale_type = mx ? kE8M0 : kE4M3;
  // When a weight is needed; a weight given where the problem has no use for it is an error (it
  // would be silently ignored), except activation scales, which ModelOpt checkpoints always carry.
  enum class Need { kAlways, kNvfp4, kBias, kW4A4, kDeepSeek };
  enum class Kind { kCodes, kScales, kF32 };
  struct Spec {
    const char* name;
    Kind kind;
    Need need;
    std::vector<Dim> dims;
  };
  const std::vector<Spec> specs = {
      {"w13", Kind::kCodes, Need::kAlways, {{"experts", El}, {"2*intermediate", 2 * Il}, {"hidden/2", H / 2}}},
      {"w13_scale",
       Kind::kScales,
       Need::kAlways,
       {{"experts", El}, {"2*intermediate", 2 * Il}, {"hidden/block", H / bs}}},
      {"w13_scale_2", Kind::kF32, Need::kNvfp4, {{"experts", El}}},
      {"w2", Kind::kCodes, Need::kAlways, {{"experts", El}, {"hidden", H}, {"intermediate/2", Il / 2}}},
      {"w2_scale", Kind::kScales, Need::kAlways, {{"experts", El}, {"hidden", H}, {"intermediate/block", Il / bs}}},
      {"w2_scale_2", Kind::kF32, Need::kNvfp4, {{"experts", El}}},
      {"w13_bias", Kind::kF32, Need::kBias, {{"experts", El}, {"2*intermediate", 2 * Il}}},
      {"w2_bias", Kind::kF32, Need::kBias, {{"experts", El}, {"hidden", H}}},
      {"a13_scale_2", Kind::kF32, Need::kW4A4, {{"experts", El}}},
      {"a2_scale_2", Kind::kF32, Need::kW4A4, {{"experts", El}}},
      {"routing_bias", Kind::kF32, Need::kDeepSeek, {{"num_experts", p.num_experts()}}},
  };
  for (auto [key, value] : weights) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    bool known = false;
    for (const Spec& s : specs) known |= k == s.name;
    if (!known) {
      std::string all;
      for (const Spec& s : specs) all += (all.empty() ? "" : ", ") + std::string(s.name);
      fail_invalid("weights['", k, "'] is not a weight name; expected one of: ", all);
    }
  }
  auto needed = [&](Need n) {
    switch (n) {
      case Need::kAlways: return true;
      case Need::kNvfp4: return !mx;
      case Need::kBias: return p.has_bias;
      case Need::kW4A4: return p.mode == Mode::kW4A4;
      case Need::kDeepSeek: return p.routing.method == RoutingMethod::kDeepSeekV3;
    }
    return false;
  };
  auto why_needed = [&](Need n) -> std::string {
    switch (n) {
      case Need::kAlways: return "every layer needs its expert weights and block scales";
      case Need::kNvfp4: return "NVFP4 weights need their global scale (weight_scale_2, or 1/weight_global_scale)";
      case Need::kBias: return "problem.has_bias is True";
      case Need::kW4A4: return "mode w4a4 needs the activation global scales (input_scale, or 1/input_global_scale)";
      case Need::kDeepSeek: return "routing method deepseek_v3 needs e_score_correction_bias";
    }
    return "";
  };
  auto why_unused = [&](Need n) -> std::string {
    switch (n) {
      case Need::kNvfp4: return "MXFP4 weights have no global scale";
      case Need::kBias: return "problem.has_bias is False";
      case Need::kDeepSeek:
        return std::string("routing method ") + method_name(p.routing.method) +
               " takes no correction bias (only deepseek_v3)";
      default: return "";
    }
  };
  WeightArrays out;
  out.bytes.reserve(specs.size());
  std::optional<Place> first_place;
  const char* first_name = nullptr;
  for (const Spec& s : specs) {
    const bool given = weights.contains(s.name) && !weights[s.name].is_none();
    if (!given) {
      if (needed(s.need)) fail_invalid("weights['", s.name, "'] is missing: ", why_needed(s.need));
      continue;
    }
    if (!needed(s.need) && s.need != Need::kW4A4)
      fail_invalid("weights['", s.name, "'] is given but ", why_unused(s.need));
    InArray a;
    const std::string label = std::string("weights['") + s.name + "']";
    try {
      a = nb::cast<InArray>(weights[s.name]);
    } catch (const nb::cast_error&) {
      fail_not_array(label, weights[s.name]);
    }
    const Place place = s.kind == Kind::kCodes    ? check_array(label.c_str(), a, {kU8}, s.dims)
                        : s.kind == Kind::kScales ? check_array(label.c_str(), a, {kU8, scale_type}, s.dims)
                                                  : check_array(label.c_str(), a, {kF32}, s.dims);
    if (first_place && !(place == *first_place))
      fail_invalid(label, " is on ", place.str(), " but ", first_name, " is on ", first_place->str());
    if (!first_place) {
      first_place = place;
      first_name = s.name;
    }
    out.names.push_back(s.name);
    out.bytes.push_back(host_bytes(label.c_str(), a, place));
    const void* d = out.bytes.back().data;
    const std::string n = s.name;
    if (n == "w13") out.view.w13 = static_cast<const uint8_t*>(d);
    else if (n == "w13_scale") out.view.w13_scale = static_cast<const uint8_t*>(d);
    else if (n == "w13_scale_2") out.view.w13_scale_2 = static_cast<const float*>(d);
    else if (n == "w2") out.view.w2 = static_cast<const uint8_t*>(d);
    else if (n == "w2_scale") out.view.w2_scale = static_cast<const uint8_t*>(d);
    else if (n == "w2_scale_2") out.view.w2_scale_2 = static_cast<const float*>(d);
    else if (n == "w13_bias") out.view.w13_bias = static_cast<const float*>(d);
    else if (n == "w2_bias") out.view.w2_bias = static_cast<const float*>(d);
    else if (n == "a13_scale_2") out.view.a13_scale_2 = static_cast<const float*>(d);
    else if (n == "a2_scale_2") out.view.a2_scale_2 = static_cast<const float*>(d);
    else if (n == "routing_bias") out.view.routing_bias = static_cast<const float*>(d);
  }
  return out;
}

// Owned host copy of a checked weight view (the CPU layer keeps its weights).
HostMoeWeights copy_weights(const MoeProblem& p, const ShardDims& sd, const MoeWeightsView& v) {
  const int64_t El = sd.num_local_experts, Il = sd.inter_local, H = p.hidden_size;
  const int bs = p.block_size();
  HostMoeWeights w;
  w.num_experts = int(El);
  w.intermediate = Il;
  auto take = [](auto* dst, const auto* src, int64_t n) {
    if (src) dst->assign(src, src + n);
  };
  take(&w.w13, v.w13, El * 2 * Il * H / 2);
  take(&w.w13_scale, v.w13_scale, El * 2 * Il * H / bs);
  take(&w.w13_scale_2, v.w13_scale_2, El);
  take(&w.w2, v.w2, El * H * Il / 2);
  take(&w.w2_scale, v.w2_scale, El * H * Il / bs);
  take(&w.w2_scale_2, v.w2_scale_2, El);
  take(&w.w13_bias, v.w13_bias, El * 2 * Il);
  take(&w.w2_bias, v.w2_bias, El * H);
  take(&w.a13_scale_2, v.a13_scale_2, El);
  take(&w.a2_scale_2, v.a2_scale_2, El);
  take(&w.routing_bias, v.routing_bias, p.num_experts());
  return w;
}

nb::dict weights_to_numpy(const MoeProblem& p, HostMoeWeights&& w) {
  const size_t El = size_t(w.num_experts), Il = size_t(w.intermediate), H = size_t(p.hidden_size);
  const size_t bs = size_t(p.block_size());
  nb::dict d;
  d["w13"] = numpy_from(std::move(w.w13), {El, 2 * Il, H / 2});
  d["w13_scale"] = numpy_from(std::move(w.w13_scale), {El, 2 * Il, H / bs});
  d["w2"] = numpy_from(std::move(w.w2), {El, H, Il / 2});
  d["w2_scale"] = numpy_from(std::move(w.w2_scale), {El, H, Il / bs});
  if (!w.w13_scale_2.empty()) d["w13_scale_2"] = numpy_from(std::move(w.w13_scale_2), {El});
  if (!w.w2_scale_2.empty()) d["w2_scale_2"] = numpy_from(std::move(w.w2_scale_2), {El});
  if (!w.w13_bias.empty()) d["w13_bias"] = numpy_from(std::move(w.w13_bias), {El, 2 * Il});
  if (!w.w2_bias.empty()) d["w2_bias"] = numpy_from(std::move(w.w2_bias), {El, H});
  if (!w.a13_scale_2.empty()) d["a13_scale_2"] = numpy_from(std::move(w.a13_scale_2), {El});
  if (!w.a2_scale_2.empty()) d["a2_scale_2"] = numpy_from(std::move(w.a2_scale_2), {El});
  if (!w.routing_bias.empty()) d["routing_bias"] = numpy_from(std::move(w.routing_bias), {size_t(p.num_experts())});
  return d;
}

// make_random_weights, sharded like a layer with these options would hold them.
nb::dict random_weights(const MoeProblem& p, uint64_t seed, int ep_rank, int ep_size, int tp_rank, int tp_size) {
  check(validate(p));
  const ref::ShardSpec shard{ep_rank, ep_size, tp_rank, tp_size};
  shard_dims(p, shard);
  HostMoeWeights full = make_random_weights(p, seed);
  if (ep_size == 1 && tp_size == 1) return weights_to_numpy(p, std::move(full));
  HostMoeWeights part;
  check(ref::shard_weights(p, full, shard, &part));
  return weights_to_numpy(p, std::move(part));
}

// ---- Layer ---------------------------------------------------------------------------------------

// One MoE layer on the CPU (the fp64 reference over owned host weights) or on one GPU (MoeLayer and
// its workspace, allocated once here).
class Layer {
 public:
  static std::unique_ptr<Layer> from_weights(const MoeProblem& problem, nb::dict weights, const std::string& device,
                                             int device_id, int ep_rank, int ep_size, int tp_rank, int tp_size,
                                             const std::string& path, const std::string& tune_file, bool split_k,
                                             int max_sms, bool tokens_routed_here) {
    auto layer = prepare(problem, device, device_id, ep_rank, ep_size, tp_rank, tp_size, path, tune_file, split_k,
                         max_sms, tokens_routed_here);
    const WeightArrays arrays = read_weights(problem, layer->dims_, weights);
    if (!layer->place_.cuda) {
      check(validate_global_scales(problem, arrays.view, layer->dims_.num_local_experts));
      layer->host_ = copy_weights(problem, layer->dims_, arrays.view);
      return layer;
    }
#if FP4MOE_HAS_CUDA
    layer->create_gpu([&](const LayerOptions& o, std::unique_ptr<MoeLayer>* out) {
      return MoeLayer::create(problem, arrays.view, o, out);
    });
#endif
    return layer;
  }

  static std::unique_ptr<Layer> dummy(const MoeProblem& problem, uint64_t seed, const std::string& device,
                                      int device_id, int ep_rank, int ep_size, int tp_rank, int tp_size,
                                      const std::string& path, const std::string& tune_file, bool split_k,
                                      int max_sms, bool tokens_routed_here) {
    auto layer = prepare(problem, device, device_id, ep_rank, ep_size, tp_rank, tp_size, path, tune_file, split_k,
                         max_sms, tokens_routed_here);
    if (!layer->place_.cuda) {
      nb::gil_scoped_release release;
      HostMoeWeights full = make_random_weights(problem, seed);
      if (ep_size == 1 && tp_size == 1) {
        layer->host_ = std::move(full);
      } else {
        check(ref::shard_weights(problem, full, layer->shard_, &layer->host_));
      }
      return layer;
    }
#if FP4MOE_HAS_CUDA
    layer->create_gpu([&](const LayerOptions& o, std::unique_ptr<MoeLayer>* out) {
      return MoeLayer::create_dummy(problem, seed, o, out);
    });
#endif
    return layer;
  }

  ~Layer() {
#if FP4MOE_HAS_CUDA
    if (workspace_) {
      int previous = 0;
      if (cudaGetDevice(&previous) == cudaSuccess) {
        cudaSetDevice(place_.device_id);
        cudaFree(workspace_);
        cudaSetDevice(previous);
      }
    }
#endif
  }

  // hidden [T, H]; either router_logits [T, E] or topk_ids / topk_weights [T, k]; out [T, H].
  void forward(InArray hidden, std::optional<InArray> logits, std::optional<InArray> topk_ids,
               std::optional<InArray> topk_weights, OutArray out, uintptr_t stream) const {
    const MoeProblem& p = problem_;
    const int64_t H = p.hidden_size;
    const int E = p.num_experts(), K = p.top_k();
    if (hidden.ndim() != 2)
      fail_invalid("hidden_states has shape ", shape_str(hidden), "; expected [num_tokens, hidden_size = ", H, "]");
    const int64_t T = int64_t(hidden.shape(0));
    const Place ph = place_of("hidden_states", hidden);
    if (!(ph == place_)) {
      if (place_.cuda)
        fail_invalid("hidden_states is on ", ph.str(), " but this MoE lives on ", place_.str(),
                     "; move the inputs there, or create the MoE with device='cpu' to run the CPU reference");
      fail_invalid("hidden_states is on ", ph.str(),
                   " but this MoE lives on cpu (the CPU reference); "
                   "create it with device='cuda' to run on the GPU");
    }
    // The GPU layer reads bf16; the CPU reference also takes float32 (rounded to bf16 first) and
    // writes its fp32 sum.
    const dl::dtype act = place_.cuda ? kBF16 : kF32;
    if (place_.cuda) check_array("hidden_states", hidden, {kBF16}, {{"num_tokens", T}, {"hidden_size", H}});
    else check_array("hidden_states", hidden, {kF32, kBF16}, {{"num_tokens", T}, {"hidden_size", H}});
    // The GPU layer's own check (MoeLayer::validate), on both devices: the CPU reference needs no
    // workspace, but a layer sized for max_tokens takes at most that many tokens wherever it runs.
    if (T > p.max_tokens)
      fail_invalid("hidden_states: num_tokens = ", T, " must be in [0, max_tokens = ", p.max_tokens,
                   "] (the problem.max_tokens the layer was created with)");
    check_same_place("out", check_array("out", out, {act}, {{"num_tokens", T}, {"hidden_size", H}}), "hidden_states",
                     ph);
    if (logits && (topk_ids || topk_weights))
      fail_invalid("give router_logits or (topk_ids and topk_weights), not both");
    if (!logits && !(topk_ids && topk_weights))
      fail_invalid(topk_ids       ? "topk_ids given without topk_weights"
                   : topk_weights ? "topk_weights given without topk_ids"
                                  : "give router_logits or (topk_ids and topk_weights); got neither");
    if (logits)
      check_same_place("router_logits",
                       check_array("router_logits", *logits, {kF32, kBF16}, {{"num_tokens", T}, {"num_experts", E}}),
                       "hidden_states", ph);
    if (topk_ids) {
      check_same_place("topk_ids", check_array("topk_ids", *topk_ids, {kI32}, {{"num_tokens", T}, {"top_k", K}}),
                       "hidden_states", ph);
      check_same_place("topk_weights",
                       check_array("topk_weights", *topk_weights, {kF32}, {{"num_tokens", T}, {"top_k", K}}),
                       "hidden_states", ph);
    }
    const LogitsType logits_type = logits && logits->dtype() == kBF16 ? LogitsType::kBF16 : LogitsType::kF32;
    if (!place_.cuda) {
      forward_cpu(hidden, logits ? logits->data() : nullptr, logits_type,
                  topk_ids ? static_cast<const int32_t*>(topk_ids->data()) : nullptr,
                  topk_weights ? static_cast<const float*>(topk_weights->data()) : nullptr, T,
                  static_cast<float*>(out.data()));
      return;
    }
#if FP4MOE_HAS_CUDA
    ForwardArgs a;
    a.hidden = static_cast<const uint16_t*>(hidden.data());
    a.router_logits = logits ? logits->data() : nullptr;
    a.logits_type = logits_type;
    a.topk_ids = topk_ids ? static_cast<const int32_t*>(topk_ids->data()) : nullptr;
    a.topk_weights = topk_weights ? static_cast<const float*>(topk_weights->data()) : nullptr;
    a.num_tokens = T;
    a.out = static_cast<uint16_t*>(out.data());
    DeviceGuard guard(place_.device_id);
    check(gpu_->forward(a, workspace_, workspace_bytes_, as_stream(stream)));
#endif
  }

  nb::dict kernel_info(int64_t num_tokens) const {
    nb::dict d;
    if (!place_.cuda) {
      d["path"] = "reference";
      d["gemm1"] = "ref::moe_forward_routed (fp64 dot products over exactly dequantized weights, CPU threads)";
      d["gemm2"] = "ref::moe_forward_routed";
      d["regime"] = "cpu: the C++ reference of reference/moe_reference.h";
      return d;
    }
#if FP4MOE_HAS_CUDA
    const KernelInfo k = gpu_->kernel_info(num_tokens);
    d["path"] = to_string(k.path);
    d["gemm1"] = k.gemm1;
    d["gemm2"] = k.gemm2;
    d["regime"] = k.regime;
#endif
    return d;
  }

  void check_device_errors(uintptr_t stream) const {
    if (!place_.cuda) return;  // the CPU reference rejects bad ids before computing
#if FP4MOE_HAS_CUDA
    DeviceGuard guard(place_.device_id);
    check(gpu_->check_device_errors(workspace_, as_stream(stream)));
#endif
  }

  const MoeProblem& problem() const { return problem_; }
  std::string device() const { return place_.str(); }
  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t weight_bytes() const {
#if FP4MOE_HAS_CUDA
    if (gpu_) return gpu_->weight_bytes();
#endif
    return host_.w13.size() + host_.w13_scale.size() + host_.w2.size() + host_.w2_scale.size();
  }
  int num_local_experts() const { return dims_.num_local_experts; }
  int64_t local_intermediate_size() const { return dims_.inter_local; }
  nb::dict parallel() const {
    nb::dict d;
    d["ep_rank"] = shard_.ep_rank;
    d["ep_size"] = shard_.ep_size;
    d["tp_rank"] = shard_.tp_rank;
    d["tp_size"] = shard_.tp_size;
    return d;
  }

 private:
  static std::unique_ptr<Layer> prepare(const MoeProblem& problem, const std::string& device, int device_id,
                                        int ep_rank, int ep_size, int tp_rank, int tp_size, const std::string& path,
                                        const std::string& tune_file, bool split_k, int max_sms,
                                        bool tokens_routed_here) {
    check(validate(problem));
    if (max_sms < 0) fail_invalid("max_sms = ", max_sms, " must be >= 0 (0: every SM)");
    auto layer = std::unique_ptr<Layer>(new Layer());
    layer->problem_ = problem;
    layer->shard_ = {ep_rank, ep_size, tp_rank, tp_size};
    layer->dims_ = shard_dims(problem, layer->shard_);
    if (device == "cpu") {
      if (path != "auto" && path != "reference")
        fail_invalid("path = '", path,
                     "' is a GPU kernel path; a CPU MoE runs the reference (path 'auto' or "
                     "'reference')");
      if (!tune_file.empty())
        fail_invalid("tune_file = '", tune_file, "' tunes the GPU kernels; a CPU MoE runs the reference");
      if (split_k) fail_invalid("split_k = True is a GPU kernel option; a CPU MoE runs the reference");
      if (max_sms != 0)
        fail_invalid("max_sms = ", max_sms, " is a GPU kernel option; a CPU MoE runs the reference");
      if (tokens_routed_here)
        fail_invalid("tokens_routed_here = True informs the GPU kernels' config choice; a CPU MoE runs the "
                     "reference");
      return layer;
    }
    if (device != "cuda") fail_invalid("device = '", device, "' is not one of: cpu, cuda");
#if FP4MOE_HAS_CUDA
    check(parse_kernel_path(path, &layer->path_));
    layer->tune_file_ = tune_file;
    layer->split_k_ = split_k;
    layer->max_sms_ = max_sms;
    layer->tokens_routed_here_ = tokens_routed_here;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      fail_unsupported("device = 'cuda' but no CUDA device is visible; use device='cpu' for the CPU reference");
    if (device_id < 0) FP4MOE_PY_CUDA(cudaGetDevice(&device_id));
    if (device_id >= count)
      fail_invalid("device_id = ", device_id, " is not a visible CUDA device (", count, " visible)");
    layer->place_ = {true, device_id};
    return layer;
#else
    fail_no_cuda("MoE(device='cuda')");
#endif
  }

#if FP4MOE_HAS_CUDA
  template <typename Create>
  void create_gpu(Create&& create) {
    DeviceGuard guard(place_.device_id);
    LayerOptions o;
    o.path = path_;
    o.ep_rank = shard_.ep_rank;
    o.ep_size = shard_.ep_size;
    o.tp_rank = shard_.tp_rank;
    o.tp_size = shard_.tp_size;
    o.tune_file = tune_file_;
    o.split_k = split_k_;
    o.max_sms = max_sms_;
    o.tokens_routed_here = tokens_routed_here_;
    {
      nb::gil_scoped_release release;
      check(create(o, &gpu_));
    }
    workspace_bytes_ = gpu_->workspace_bytes();
    FP4MOE_PY_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
  }
#endif

  void forward_cpu(const InArray& hidden, const void* logits, LogitsType logits_type, const int32_t* ids,
                   const float* weights, int64_t T, float* out) const {
    const int64_t H = problem_.hidden_size;
    // The layer's input is bf16: float32 hidden states are rounded to it (RNE) first.
    std::vector<uint16_t> rounded;
    const uint16_t* x = static_cast<const uint16_t*>(hidden.data());
    const bool is_f32 = hidden.dtype() == kF32;
    nb::gil_scoped_release release;
    if (is_f32) {
      const auto* f = static_cast<const float*>(hidden.data());
      rounded.resize(size_t(T * H));
      for (int64_t i = 0; i < T * H; ++i) rounded[i] = float_to_bf16(f[i]);
      x = rounded.data();
    }
    const MoeWeightsView view = host_.view();
    if (logits) {
      check(ref::moe_forward(problem_, view, shard_, x, logits, logits_type, T, out));
    } else {
      check(ref::moe_forward_routed(problem_, view, shard_, x, ids, weights, T, out));
    }
  }

  Layer() = default;

  MoeProblem problem_;
  ref::ShardSpec shard_;
  ShardDims dims_;
  Place place_;
  HostMoeWeights host_;  // CPU layer only
  size_t workspace_bytes_ = 0;
#if FP4MOE_HAS_CUDA
  KernelPath path_ = KernelPath::kAuto;
  std::string tune_file_;
  bool split_k_ = false;
  int max_sms_ = 0;
  bool tokens_routed_here_ = false;
  std::unique_ptr<MoeLayer> gpu_;
  void* workspace_ = nullptr;
#endif
};

// ---- Device buffers for frameworks without an allocator here ---------------------------------------

// An uninitialized CUDA array owned by the returned object (freed with it): outputs for device
// arrays that are not PyTorch tensors (the Python layer allocates those with torch). cudaMalloc is
// not stream-ordered and not capturable: inside a CUDA graph pass `out=` instead.
nb::object device_empty(std::vector<size_t> shape, const std::string& dtype, int device_id) {
#if FP4MOE_HAS_CUDA
  dl::dtype t;
  if (dtype == "uint8") t = kU8;
  else if (dtype == "float32") t = kF32;
  else if (dtype == "bfloat16") t = kBF16;
  else if (dtype == "int32") t = kI32;
  else fail_invalid("dtype = '", dtype, "' is not one of: uint8, float32, bfloat16, int32");
  size_t n = 1;
  for (size_t s : shape) n *= s;
  const size_t bytes = std::max<size_t>(1, n * t.bits / 8);
  void* ptr = nullptr;
  {
    DeviceGuard guard(device_id);
    FP4MOE_PY_CUDA(cudaMalloc(&ptr, bytes));
  }
  struct Owner {
    void* ptr;
    int device;
  };
  auto* owner = new Owner{ptr, device_id};
  nb::capsule cap(owner, [](void* p) noexcept {
    auto* o = static_cast<Owner*>(p);
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess) {
      cudaSetDevice(o->device);
      cudaFree(o->ptr);
      cudaSetDevice(previous);
    }
    delete o;
  });
  return nb::cast(nb::ndarray<>(ptr, shape.size(), shape.data(), cap, nullptr, t, nb::device::cuda::value, device_id));
#else
  fail_no_cuda("device_empty");
#endif
}

int cuda_device_count() {
#if FP4MOE_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

// ---- Checkpoints ---------------------------------------------------------------------------------

// A checkpoint directory opened once (config + every shard header); layers load into NumPy arrays.
class CheckpointHandle {
 public:
  explicit CheckpointHandle(const std::string& directory) {
    nb::gil_scoped_release release;
    check(Checkpoint::open(directory, &ckpt_));
  }

  nb::dict info() const {
    const CheckpointInfo& i = ckpt_->info();
    nb::dict d;
    d["directory"] = i.directory;
    d["architecture"] = i.architecture;
    d["model_type"] = i.model_type;
    d["convention"] = to_string(i.convention);
    d["num_layers"] = i.num_layers;
    d["moe_layers"] = i.moe_layers;
    d["num_shards"] = ckpt_->num_shards();
    d["num_tensors"] = ckpt_->num_tensors();
    d["total_bytes"] = ckpt_->total_bytes();
    return d;
  }
  MoeProblem problem() const { return ckpt_->problem(); }
  std::vector<std::string> warnings() const { return ckpt_->warnings(); }

  // (weights in the linear layout as NumPy arrays, load report)
  nb::tuple load_layer(int layer, int ep_rank, int ep_size, int tp_rank, int tp_size) const {
    ShardOptions shard;
    shard.ep_rank = ep_rank;
    shard.ep_size = ep_size;
    shard.tp_rank = tp_rank;
    shard.tp_size = tp_size;
    HostMoeWeights w;
    LoadReport report;
    {
      nb::gil_scoped_release release;
      check(ckpt_->load_moe_layer(layer, shard, &w, &report));
    }
    nb::dict r;
    r["expert_layout"] = report.expert_layout;
    r["num_tensors_read"] = report.num_tensors_read;
    r["bytes_read"] = report.bytes_read;
    r["has_input_scales"] = report.has_input_scales;
    r["warnings"] = report.warnings;
    return nb::make_tuple(weights_to_numpy(ckpt_->problem(), std::move(w)), r);
  }

 private:
  std::unique_ptr<Checkpoint> ckpt_;
};

// ---- Problem fields ------------------------------------------------------------------------------

// One table drives the Problem properties, its keyword constructor and its dict view.
struct Field {
  const char* name;
  std::function<nb::object(const MoeProblem&)> get;
  std::function<void(MoeProblem&, nb::handle)> set;  // null: read-only
};

template <typename T>
T cast_field(const char* name, nb::handle v) {
  try {
    return nb::cast<T>(v);
  } catch (const nb::cast_error&) {
    fail_invalid(name, " = ", nb::cast<std::string>(nb::repr(v)), " has the wrong type");
  }
}

const std::vector<Field>& problem_fields() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> f;
#define FP4MOE_FIELD(NAME, TYPE, EXPR)                                            \
  f.push_back({#NAME, [](const MoeProblem& p) { return nb::cast(TYPE(p.EXPR)); }, \
               [](MoeProblem& p, nb::handle v) { p.EXPR = cast_field<TYPE>(#NAME, v); }})
    FP4MOE_FIELD(name, std::string, name);
    FP4MOE_FIELD(hidden_size, int64_t, hidden_size);
    FP4MOE_FIELD(intermediate_size, int64_t, intermediate_size);
    FP4MOE_FIELD(num_experts, int, routing.num_experts);
    FP4MOE_FIELD(top_k, int, routing.top_k);
    f.push_back({"routing_method", [](const MoeProblem& p) { return nb::cast(method_name(p.routing.method)); },
                 [](MoeProblem& p, nb::handle v) {
                   p.routing.method = parse_method(cast_field<std::string>("routing_method", v));
                 }});
    FP4MOE_FIELD(renormalize, bool, routing.renormalize);
    FP4MOE_FIELD(num_groups, int, routing.num_groups);
    FP4MOE_FIELD(topk_groups, int, routing.topk_groups);
    FP4MOE_FIELD(routed_scaling_factor, float, routing.routed_scaling_factor);
    f.push_back({"activation", [](const MoeProblem& p) { return nb::cast(to_string(p.activation)); },
                 [](MoeProblem& p, nb::handle v) {
                   p.activation = parse_activation(cast_field<std::string>("activation", v));
                 }});
    FP4MOE_FIELD(has_bias, bool, has_bias);
    f.push_back({"weight_format", [](const MoeProblem& p) { return nb::cast(to_string(p.weight_format)); },
                 [](MoeProblem& p, nb::handle v) {
                   p.weight_format = parse_format(cast_field<std::string>("weight_format", v));
                 }});
    f.push_back({"mode", [](const MoeProblem& p) { return nb::cast(to_string(p.mode)); },
                 [](MoeProblem& p, nb::handle v) { p.mode = parse_mode_name(cast_field<std::string>("mode", v)); }});
    FP4MOE_FIELD(max_tokens, int64_t, max_tokens);
    FP4MOE_FIELD(num_shared_experts, int, num_shared_experts);
    FP4MOE_FIELD(num_moe_layers, int, num_moe_layers);
#undef FP4MOE_FIELD
    return f;
  }();
  return fields;
}

const Field& find_field(const std::string& key) {
  for (const Field& f : problem_fields())
    if (key == f.name) return f;
  std::string all;
  for (const Field& f : problem_fields()) all += (all.empty() ? "" : ", ") + std::string(f.name);
  throw nb::key_error(detail::concat("Problem has no field '", key, "'; fields: ", all).c_str());
}

nb::dict problem_dict(const MoeProblem& p) {
  nb::dict d;
  for (const Field& f : problem_fields()) d[f.name] = f.get(p);
  return d;
}

void set_problem_fields(MoeProblem& p, nb::kwargs kwargs) {
  for (auto [k, v] : kwargs) {
    const std::string key = nb::cast<std::string>(k);
    bool found = false;
    for (const Field& f : problem_fields())
      if (key == f.name) {
        f.set(p, v);
        found = true;
      }
    if (!found) {
      std::string all;
      for (const Field& f : problem_fields()) all += (all.empty() ? "" : ", ") + std::string(f.name);
      fail_invalid("Problem has no field '", key, "'; fields: ", all);
    }
  }
}

std::string problem_repr(const MoeProblem& p) {
  std::ostringstream os;
  os << "Problem(";
  bool first = true;
  for (const Field& f : problem_fields()) {
    os << (first ? "" : ", ") << f.name << "=" << nb::cast<std::string>(nb::repr(f.get(p)));
    first = false;
  }
  os << ")";
  return os.str();
}

std::string routing_repr(const RoutingConfig& c) {
  return detail::concat("RoutingConfig(method='", method_name(c.method), "', num_experts=", c.num_experts,
                        ", top_k=", c.top_k, ", renormalize=", c.renormalize ? "True" : "False",
                        ", num_groups=", c.num_groups, ", topk_groups=", c.topk_groups,
                        ", routed_scaling_factor=", c.routed_scaling_factor, ")");
}

// ---- Parallel ------------------------------------------------------------------------------------

Strategy parse_strategy_name(const std::string& name) {
  Strategy s;
  check(parse_strategy(name, &s));
  return s;
}

std::string parallel_config_repr(const ParallelConfig& c) {
  return detail::concat("ParallelConfig(dp=", c.dp, ", tp=", c.tp, ", ep=", c.ep, ")");
}

nb::dict parallel_config_dict(const ParallelConfig& c) {
  nb::dict d;
  d["dp"] = c.dp;
  d["tp"] = c.tp;
  d["ep"] = c.ep;
  return d;
}

nb::dict layout_dict(const RankLayout& l) {
  nb::dict d;
  d["rank"] = l.rank;
  d["dp_rank"] = l.dp_rank;
  d["tp_rank"] = l.tp_rank;
  d["moe_ep_rank"] = l.moe_ep_rank;
  d["moe_ep_size"] = l.moe_ep_size;
  d["moe_tp_rank"] = l.moe_tp_rank;
  d["moe_tp_size"] = l.moe_tp_size;
  return d;
}

nb::dict launch_dict(const LaunchInfo& i) {
  nb::dict d;
  d["launcher"] = i.launcher;
  d["rank"] = i.rank;
  d["world_size"] = i.world_size;
  d["local_rank"] = i.local_rank;
  d["local_world_size"] = i.local_world_size;
  d["master_addr"] = i.master_addr;
  d["master_port"] = i.master_port;
  d["nccl_comm_id"] = i.nccl_comm_id;
  return d;
}

// parse_launch_env over `env` (a str -> str mapping) or, when None, launch_info_from_environment.
nb::dict launch_info(std::optional<nb::dict> env) {
  LaunchInfo info;
  if (env) {
    std::map<std::string, std::string> m;
    for (auto [k, v] : *env) m[nb::cast<std::string>(nb::str(k))] = nb::cast<std::string>(nb::str(v));
    check(parse_launch_env(m, &info));
  } else {
    check(launch_info_from_environment(&info));
  }
  return launch_dict(info);
}

// The longest deadline a parallel layer's communicators take (about 115 days).
constexpr double kMaxTimeoutSeconds = 1e7;

// A parallel layer's `timeout` in seconds: > 0, and at most kMaxTimeoutSeconds (a deadline past that
// would overflow the clock arithmetic).
void check_timeout(double timeout_s) {
  if (!(timeout_s > 0) || !(timeout_s <= kMaxTimeoutSeconds))
    fail_invalid("timeout = ", timeout_s, " must be > 0 and at most ", kMaxTimeoutSeconds, " seconds");
}

// The config's own rules (those of validate() that need no problem), for calls without a problem.
void check_config_shape(const ParallelConfig& c) {
  check(check_config_bounds(c));
  if (c.ep != 1 && c.ep != c.world_size())
    fail_invalid("ep = ", c.ep, " must be 1 (expert parallelism off) or dp * tp = ", c.world_size());
}

nb::dict rank_layout_of(const ParallelConfig& c, int rank) {
  check_config_shape(c);
  if (rank < 0 || rank >= c.world_size())
    fail_invalid("rank = ", rank, " is not in [0, dp * tp = ", c.world_size(), ")");
  return layout_dict(rank_layout(c, rank));
}

std::vector<std::string> strategy_names(const ParallelConfig& c) {
  std::vector<std::string> out;
  for (Strategy s : applicable_strategies(c)) out.push_back(to_string(s));
  return out;
}

std::vector<ParallelConfig> valid_parallel_configs(const MoeProblem& p, int world_size) {
  check(validate(p));
  if (world_size < 1 || world_size > kMaxWorldSize)
    fail_invalid("world_size = ", world_size, " must be in [1, ", kMaxWorldSize, "]");
  return valid_configs(p, world_size);
}

// validate() and check_strategy() together: the set-up checks every parallel layer starts with.
Strategy check_parallel_setup(const MoeProblem& p, const ParallelConfig& c, const std::string& strategy,
                              int world_size) {
  check(validate(p));
  const Strategy s = parse_strategy_name(strategy);
  check(validate(c, p, world_size));
  check(check_strategy(c, s));
  return s;
}

// ParallelMoeOptions::quantized_dispatch from its name ("auto", "off", "on"); the error names the value.
QuantizedDispatch parse_quantized_dispatch_name(const std::string& name) {
  QuantizedDispatch q;
  check(parse_quantized_dispatch(name, &q));
  return q;
}

// The mode/strategy rule ParallelMoe::create applies to quantized_dispatch (resolve_quantized_dispatch
// in src/moe/parallel_moe.cpp, same wording), checked here too so that ParallelMoE refuses a bad
// option before it selects a GPU and bootstraps NCCL. create() still checks it (the authority).
void check_quantized_dispatch(const MoeProblem& p, Strategy strategy, QuantizedDispatch q) {
  if (q != QuantizedDispatch::kOn) return;
  if (p.mode != Mode::kW4A4)
    fail_invalid("quantized_dispatch = on needs mode w4a4 (NVFP4 tokens are the w4a4 layer's GEMM1 input); mode = ",
                 to_string(p.mode), " dispatches bf16 tokens (use auto or off)");
  if (strategy != Strategy::kAllGatherReduceScatter && strategy != Strategy::kAllToAll)
    fail_invalid("quantized_dispatch = on needs a strategy that dispatches tokens (allgather-reducescatter or "
                 "alltoall); strategy ",
                 to_string(strategy), " sends none (use auto or off)");
}

// The full (all experts, full intermediate size) host weights of a parallel layer, checked.
WeightArrays read_full_weights(const MoeProblem& p, nb::dict weights) {
  return read_weights(p, ShardDims{p.num_experts(), p.intermediate_size}, weights);
}

// The root cause among the ranks' statuses: a rank's own error rather than the aborts it caused in its
// peers (kNcclError), prefixed with the rank where the message does not start with it.
Status first_failure(const std::vector<Status>& st) {
  int pick = -1;
  for (size_t r = 0; r < st.size(); ++r)
    if (!st[r].ok() && (pick < 0 || (st[pick].code() == StatusCode::kNcclError &&
                                     st[r].code() != StatusCode::kNcclError)))
      pick = int(r);
  if (pick < 0) return Status::Ok();
  const std::string& m = st[pick].message();
  if (m.rfind("rank ", 0) == 0) return st[pick];  // the communicator's messages name the rank already
  return Status(st[pick].code(), detail::concat("rank ", pick, ": ", m));
}

template <typename A>
A list_item(const char* name, size_t i, nb::handle item) {
  try {
    return nb::cast<A>(item);
  } catch (const nb::cast_error&) {
    fail_not_array(detail::concat(name, "[", i, "]"), item);
  }
}

// fp4moe.parallel.run_local: the parallel layer on config.world_size() in-process ranks (LocalCommunicator,
// one thread each) with the CPU reference backend, as tests/test_parallel.cpp runs it.
// Input lists hold one entry per rank (length dp * tp) or one per DP group (length dp; the group's TP
// ranks all get it); outputs one float32 [T_rank, H] array per rank.
void parallel_run_local(const MoeProblem& problem, const ParallelConfig& config, const std::string& strategy_name,
                        std::optional<nb::dict> weights, uint64_t seed, nb::list hidden, std::optional<nb::list> logits,
                        std::optional<nb::list> topk_ids, std::optional<nb::list> topk_weights, nb::list outs,
                        double timeout_s, int threads_per_rank, std::optional<int64_t> padded_tokens,
                        const std::string& quantized_dispatch) {
  const int n = config.world_size();
  const Strategy strategy = check_parallel_setup(problem, config, strategy_name, n);
  // Only the name here: the mode/strategy rule is left to ParallelMoe::create on every rank (so this
  // runs the C++ check itself; its error comes back prefixed with the rank).
  ParallelMoeOptions options;
  options.quantized_dispatch = parse_quantized_dispatch_name(quantized_dispatch);
  check_timeout(timeout_s);
  if (threads_per_rank < 1) fail_invalid("threads_per_rank = ", threads_per_rank, " must be >= 1");
  const int64_t H = problem.hidden_size;
  const int E = problem.num_experts(), K = problem.top_k();
  const size_t num_inputs = nb::len(hidden);
  if (num_inputs != size_t(n) && num_inputs != size_t(config.dp))
    fail_invalid("hidden_states has ", num_inputs, " entries; expected one per rank (dp * tp = ", n,
                 ") or one per DP group (dp = ", config.dp, ")");
  const bool per_rank = num_inputs == size_t(n);
  if (logits && (topk_ids || topk_weights))
    fail_invalid("give router_logits or (topk_ids and topk_weights), not both");
  if (!logits && !(topk_ids && topk_weights))
    fail_invalid(topk_ids       ? "topk_ids given without topk_weights"
                 : topk_weights ? "topk_weights given without topk_ids"
                                : "give router_logits or (topk_ids and topk_weights); got neither");
  auto check_len = [&](const char* name, const nb::list& l) {
    if (nb::len(l) != num_inputs)
      fail_invalid(name, " has ", nb::len(l), " entries but hidden_states has ", num_inputs);
  };
  if (logits) check_len("router_logits", *logits);
  if (topk_ids) check_len("topk_ids", *topk_ids);
  if (topk_weights) check_len("topk_weights", *topk_weights);
  if (nb::len(outs) != size_t(n)) fail_invalid("out has ", nb::len(outs), " entries; expected one per rank (", n, ")");

  // Every input, checked and converted once (bf16 hidden states; the arrays stay alive in the lists).
  struct Input {
    int64_t num_tokens = 0;
    std::vector<uint16_t> hidden;
    const void* logits = nullptr;
    LogitsType logits_type = LogitsType::kF32;
    const int32_t* ids = nullptr;
    const float* weights = nullptr;
  };
  std::vector<Input> inputs(num_inputs);
  // The checked array handles, held for the whole call (the pointers above point into them).
  std::vector<InArray> held;
  std::vector<OutArray> held_out;
  auto host_only = [](const std::string& label, const Place& p) {
    if (p.cuda)
      fail_invalid(label, " is on ", p.str(), "; run_local runs the CPU reference: pass host arrays");
  };
  int64_t most_tokens = 0;
  for (size_t i = 0; i < num_inputs; ++i) {
    const std::string hn = detail::concat("hidden_states[", i, "]");
    const InArray h = held.emplace_back(list_item<InArray>("hidden_states", i, hidden[i]));
    if (h.ndim() != 2)
      fail_invalid(hn, " has shape ", shape_str(h), "; expected [num_tokens, hidden_size = ", H, "]");
    const int64_t T = int64_t(h.shape(0));
    host_only(hn, check_array(hn.c_str(), h, {kF32, kBF16}, {{"num_tokens", T}, {"hidden_size", H}}));
    Input& in = inputs[i];
    in.num_tokens = T;
    most_tokens = std::max(most_tokens, T);
    in.hidden.resize(size_t(T * H));
    if (h.dtype() == kF32) {
      const auto* f = static_cast<const float*>(h.data());
      for (int64_t j = 0; j < T * H; ++j) in.hidden[j] = float_to_bf16(f[j]);
    } else if (T * H > 0) {
      std::memcpy(in.hidden.data(), h.data(), size_t(T * H) * 2);
    }
    if (logits) {
      const std::string ln = detail::concat("router_logits[", i, "]");
      const InArray l = held.emplace_back(list_item<InArray>("router_logits", i, (*logits)[i]));
      host_only(ln, check_array(ln.c_str(), l, {kF32, kBF16}, {{"num_tokens", T}, {"num_experts", E}}));
      in.logits = l.data();
      in.logits_type = l.dtype() == kBF16 ? LogitsType::kBF16 : LogitsType::kF32;
    } else {
      const std::string idn = detail::concat("topk_ids[", i, "]"), wn = detail::concat("topk_weights[", i, "]");
      const InArray ids = held.emplace_back(list_item<InArray>("topk_ids", i, (*topk_ids)[i]));
      const InArray w = held.emplace_back(list_item<InArray>("topk_weights", i, (*topk_weights)[i]));
      host_only(idn, check_array(idn.c_str(), ids, {kI32}, {{"num_tokens", T}, {"top_k", K}}));
      host_only(wn, check_array(wn.c_str(), w, {kF32}, {{"num_tokens", T}, {"top_k", K}}));
      in.ids = static_cast<const int32_t*>(ids.data());
      in.weights = static_cast<const float*>(w.data());
    }
  }
  // The TP ranks of one DP group compute slices of the same tokens, and their partial outputs are summed:
  // per-rank inputs must agree within a group (else every output row mixes different tokens' sums).
  if (per_rank && config.tp > 1) {
    auto same_bytes = [](const void* x, const void* y, size_t bytes) {
      return bytes == 0 || x == y || std::memcmp(x, y, bytes) == 0;
    };
    for (int r = 0; r < n; ++r) {
      const int dp = rank_layout(config, r).dp_rank;
      int first = 0;
      while (rank_layout(config, first).dp_rank != dp) ++first;
      if (first == r) continue;
      const Input &a = inputs[size_t(first)], &b = inputs[size_t(r)];
      const size_t T = size_t(a.num_tokens), logit_bytes = a.logits_type == LogitsType::kF32 ? 4 : 2;
      const char* what = nullptr;
      if (a.num_tokens != b.num_tokens) what = "token count differs";
      else if (a.hidden != b.hidden) what = "hidden_states differ";
      else if (a.logits && (a.logits_type != b.logits_type || !same_bytes(a.logits, b.logits, T * E * logit_bytes)))
        what = "router_logits differ";
      else if (a.ids && !same_bytes(a.ids, b.ids, T * K * 4)) what = "topk_ids differ";
      else if (a.weights && !same_bytes(a.weights, b.weights, T * K * 4)) what = "topk_weights differ";
      if (what)
        fail_invalid("rank ", r, "'s ", what, " from rank ", first, "'s: the TP ranks of DP group ", dp,
                     " (tp = ", config.tp, ") must get the same tokens; pass one entry per DP group to share them");
    }
  }
  std::vector<float*> out_ptrs(static_cast<size_t>(n), nullptr);
  for (int r = 0; r < n; ++r) {
    const Input& in = inputs[per_rank ? size_t(r) : size_t(rank_layout(config, r).dp_rank)];
    const std::string on = detail::concat("out[", r, "]");
    const OutArray o = held_out.emplace_back(list_item<OutArray>("out", size_t(r), outs[r]));
    host_only(on, check_array(on.c_str(), o, {kF32}, {{"num_tokens", in.num_tokens}, {"hidden_size", H}}));
    out_ptrs[r] = static_cast<float*>(o.data());
  }
  // padded_tokens against the caller's max_tokens, before the shrink below would put the largest input's
  // count in the ranks' message (alltoall: the ranks' own check says it has no graph mode).
  if (padded_tokens && strategy != Strategy::kAllToAll &&
      (*padded_tokens < most_tokens || *padded_tokens > problem.max_tokens))
    fail_invalid("padded_tokens = ", *padded_tokens, " must be in [num_tokens = ", most_tokens,
                 " (the largest input), max_tokens = ", problem.max_tokens, "]");
  // Buffers sized for the largest input rather than problem.max_tokens (8192 by default), unless an input
  // exceeds it: then the layer's own check reports it.
  MoeProblem p = problem;
  const int64_t need = std::max<int64_t>(most_tokens, padded_tokens.value_or(0));
  if (need <= p.max_tokens) p.max_tokens = std::max<int64_t>(1, need);

  HostMoeWeights full;
  if (weights) {
    const WeightArrays arrays = read_full_weights(problem, *weights);
    // The global scales by value, as MoE(device='cpu') checks them (0 would zero an expert, NaN, inf
    // or < 0 poison it).
    check(validate_global_scales(problem, arrays.view, E));
    full = copy_weights(problem, ShardDims{E, problem.intermediate_size}, arrays.view);
  }
  std::vector<Status> statuses;
  {
    nb::gil_scoped_release release;
    if (!weights) full = make_random_weights(problem, seed);
    comm::CommOptions co;
    co.timeout = std::chrono::milliseconds(int64_t(std::ceil(timeout_s * 1000.0)));
    auto world = comm::LocalWorld::create(n, co);
    statuses = comm::run_local_ranks(world, [&](int rank, comm::Communicator& comm) -> Status {
      const RankLayout layout = rank_layout(config, rank);
      ref::ReferenceOptions ro;
      ro.num_threads = threads_per_rank;
      std::unique_ptr<ExpertBackend> backend;
      FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, full, layout, ro, &backend));
      std::unique_ptr<ParallelMoe> layer;
      FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, config, strategy, &comm, std::move(backend), options, &layer));
      const Input& in = inputs[per_rank ? size_t(rank) : size_t(layout.dp_rank)];
      ParallelMoe::Args a;
      a.hidden = in.hidden.data();
      a.router_logits = in.logits;
      a.logits_type = in.logits_type;
      a.topk_ids = in.ids;
      a.topk_weights = in.weights;
      a.num_tokens = in.num_tokens;
      a.out = out_ptrs[size_t(rank)];
      a.padded_tokens = padded_tokens.value_or(-1);
      FP4MOE_RETURN_IF_ERROR(layer->forward(a));
      return layer->synchronize();
    });
  }
  check(first_failure(statuses));
}

// Argument checks of ParallelMoE.forward (a GPU layer on `place`), shared with the tests: routing
// inputs first, then every array. Returns the token count.
int64_t check_parallel_forward_args(const MoeProblem& p, const Place& place, const InArray& hidden,
                                    const std::optional<InArray>& logits, const std::optional<InArray>& topk_ids,
                                    const std::optional<InArray>& topk_weights, const OutArray& out) {
  const int64_t H = p.hidden_size;
  const int E = p.num_experts(), K = p.top_k();
  if (logits && (topk_ids || topk_weights))
    fail_invalid("give router_logits or (topk_ids and topk_weights), not both");
  if (!logits && !(topk_ids && topk_weights))
    fail_invalid(topk_ids       ? "topk_ids given without topk_weights"
                 : topk_weights ? "topk_weights given without topk_ids"
                                : "give router_logits or (topk_ids and topk_weights); got neither");
  if (hidden.ndim() != 2)
    fail_invalid("hidden_states has shape ", shape_str(hidden), "; expected [num_tokens, hidden_size = ", H, "]");
  const int64_t T = int64_t(hidden.shape(0));
  const Place ph = place_of("hidden_states", hidden);
  if (!(ph == place))
    fail_invalid("hidden_states is on ", ph.str(), " but this ParallelMoE lives on ", place.str(),
                 " (LOCAL_RANK's GPU); for the CPU reference use fp4moe.parallel.run_local");
  check_array("hidden_states", hidden, {kBF16}, {{"num_tokens", T}, {"hidden_size", H}});
  if (T > p.max_tokens)
    fail_invalid("hidden_states has ", T, " tokens but the layer was sized for problem.max_tokens = ", p.max_tokens);
  check_same_place("out", check_array("out", out, {kBF16}, {{"num_tokens", T}, {"hidden_size", H}}), "hidden_states",
                   ph);
  if (logits)
    check_same_place("router_logits",
                     check_array("router_logits", *logits, {kF32, kBF16}, {{"num_tokens", T}, {"num_experts", E}}),
                     "hidden_states", ph);
  if (topk_ids) {
    check_same_place("topk_ids", check_array("topk_ids", *topk_ids, {kI32}, {{"num_tokens", T}, {"top_k", K}}),
                     "hidden_states", ph);
    check_same_place("topk_weights",
                     check_array("topk_weights", *topk_weights, {kF32}, {{"num_tokens", T}, {"top_k", K}}),
                     "hidden_states", ph);
  }
  return T;
}

// fp4moe.ParallelMoE: one rank of the parallel layer on this process's GPU (LOCAL_RANK) over NCCL, the
// world communicator bootstrapped from the launcher's variables (create_nccl_world). The layer runs on
// its own stream, ordered after the caller's stream by an event and before it by another.
class ParallelGpuLayer {
 public:
  static std::unique_ptr<ParallelGpuLayer> create(const MoeProblem& problem, const ParallelConfig& config,
                                                  const std::string& strategy_name, std::optional<nb::dict> weights,
                                                  uint64_t seed, double timeout_s, bool check_token_counts,
                                                  const std::string& quantized_dispatch) {
    check_timeout(timeout_s);
    const QuantizedDispatch qd = parse_quantized_dispatch_name(quantized_dispatch);
    LaunchInfo info;
    check(launch_info_from_environment(&info));
    const Strategy strategy = check_parallel_setup(problem, config, strategy_name, info.world_size);
    check_quantized_dispatch(problem, strategy, qd);
    std::optional<WeightArrays> arrays;
    if (weights) arrays.emplace(read_full_weights(problem, *weights));
    auto layer = std::unique_ptr<ParallelGpuLayer>(new ParallelGpuLayer());
    layer->problem_ = problem;
    layer->config_ = config;
    layer->strategy_ = strategy;
    layer->info_ = info;
#if FP4MOE_PY_HAS_NCCL
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      fail_unsupported("ParallelMoE runs one rank per CUDA GPU but no CUDA device is visible; "
                       "fp4moe.parallel.run_local runs the layer on in-process CPU ranks");
    if (info.local_rank >= count)
      fail_invalid("local_rank = ", info.local_rank, " (", info.launcher, ") but this node has ", count,
                   " visible GPUs (one process per GPU)");
    layer->place_ = {true, info.local_rank};
    DeviceGuard guard(info.local_rank);
    FP4MOE_PY_CUDA(cudaStreamCreateWithFlags(&layer->stream_, cudaStreamNonBlocking));
    FP4MOE_PY_CUDA(cudaEventCreateWithFlags(&layer->before_, cudaEventDisableTiming));
    FP4MOE_PY_CUDA(cudaEventCreateWithFlags(&layer->after_, cudaEventDisableTiming));
    comm::CommOptions co;
    co.timeout = std::chrono::milliseconds(int64_t(std::ceil(timeout_s * 1000.0)));
    co.wait_each_op = false;  // collectives only enqueue (capturable); the forward or synchronize() waits
    ParallelMoeOptions po;
    po.check_token_counts = check_token_counts;
    po.quantized_dispatch = qd;
    {
      nb::gil_scoped_release release;
      check(comm::create_nccl_world(info, layer->stream_, co, &layer->world_));
      std::unique_ptr<ExpertBackend> backend;
      check(make_gpu_backend(problem, config, strategy, rank_layout(config, info.rank),
                             arrays ? &arrays->view : nullptr, seed, layer->stream_, &backend));
      check(ParallelMoe::create(problem, config, strategy, layer->world_.get(), std::move(backend), po,
                                &layer->layer_));
    }
    layer->quantized_dispatch_ = layer->layer_->quantized_dispatch();
    layer->dispatch_input_scale_2_ = layer->layer_->dispatch_input_scale_2();
    return layer;
#else
    (void)seed;
    (void)check_token_counts;
    fail_unsupported("ParallelMoE: this fp4moe build has no CUDA/NCCL support (FP4MOE_ENABLE_CUDA=OFF or NCCL "
                     "not found at build time); fp4moe.parallel.run_local runs the layer on CPU ranks");
#endif
  }

  ~ParallelGpuLayer() { close(); }

  void forward(InArray hidden, std::optional<InArray> logits, std::optional<InArray> topk_ids,
               std::optional<InArray> topk_weights, OutArray out, uintptr_t stream,
               std::optional<int64_t> padded_tokens) {
    if (closed_) fail_invalid("this ParallelMoE is closed");
    const int64_t T = check_parallel_forward_args(problem_, place_, hidden, logits, topk_ids, topk_weights, out);
#if FP4MOE_PY_HAS_NCCL
    ParallelMoe::Args a;
    a.hidden = static_cast<const uint16_t*>(hidden.data());
    a.router_logits = logits ? logits->data() : nullptr;
    a.logits_type = logits && logits->dtype() == kBF16 ? LogitsType::kBF16 : LogitsType::kF32;
    a.topk_ids = topk_ids ? static_cast<const int32_t*>(topk_ids->data()) : nullptr;
    a.topk_weights = topk_weights ? static_cast<const float*>(topk_weights->data()) : nullptr;
    a.num_tokens = T;
    a.out = out.data();
    a.padded_tokens = padded_tokens.value_or(-1);
    DeviceGuard guard(place_.device_id);
    const cudaStream_t caller = as_stream(stream);
    check(check_stream_device("ParallelMoE.forward", "stream", caller, place_.device_id));
    FP4MOE_PY_CUDA(cudaEventRecord(before_, caller));
    FP4MOE_PY_CUDA(cudaStreamWaitEvent(stream_, before_, 0));
    Status s;
    {
      nb::gil_scoped_release release;
      s = layer_->forward(a);
    }
    check(s);
    FP4MOE_PY_CUDA(cudaEventRecord(after_, stream_));
    FP4MOE_PY_CUDA(cudaStreamWaitEvent(caller, after_, 0));
#else
    (void)T;
    (void)padded_tokens;
#endif
  }

  // Waits (with the deadline) for the collectives of graph-mode forwards, and for everything queued
  // on `stream` so far (a graph replayed there): the layer's stream first waits for that stream.
  void synchronize(uintptr_t stream) {
    if (closed_) fail_invalid("this ParallelMoE is closed");
#if FP4MOE_PY_HAS_NCCL
    DeviceGuard guard(place_.device_id);
    const cudaStream_t caller = as_stream(stream);
    check(check_stream_device("ParallelMoE.synchronize", "stream", caller, place_.device_id));
    if (caller != stream_) {
      FP4MOE_PY_CUDA(cudaEventRecord(before_, caller));
      FP4MOE_PY_CUDA(cudaStreamWaitEvent(stream_, before_, 0));
    }
    Status s;
    {
      nb::gil_scoped_release release;
      s = layer_->synchronize();
    }
    check(s);
#else
    (void)stream;
#endif
  }

  // Whether the last forward's expert layer on this rank skipped routed ids outside [0, num_experts)
  // (ParallelMoe::check_device_errors): waits for the layer's stream.
  void check_device_errors() {
    if (closed_) fail_invalid("this ParallelMoE is closed");
#if FP4MOE_PY_HAS_NCCL
    DeviceGuard guard(place_.device_id);
    Status s;
    {
      nb::gil_scoped_release release;
      s = layer_->check_device_errors();
    }
    check(s);
#endif
  }

  void close() {
    if (closed_) return;
    closed_ = true;
#if FP4MOE_PY_HAS_NCCL
    int previous = -1;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    if (place_.cuda) cudaSetDevice(place_.device_id);
    {
      // NOTE: destroying an NCCL communicator may wait for its peers: without the GIL.
      nb::gil_scoped_release release;
      if (stream_) cudaStreamSynchronize(stream_);
      layer_.reset();  // before the communicator it uses
      world_.reset();
    }
    if (before_) cudaEventDestroy(before_);
    if (after_) cudaEventDestroy(after_);
    if (stream_) cudaStreamDestroy(stream_);
    before_ = after_ = nullptr;
    stream_ = nullptr;
    if (restore) cudaSetDevice(previous);
#endif
  }

  bool closed() const { return closed_; }
  const MoeProblem& problem() const { return problem_; }
  const ParallelConfig& config() const { return config_; }
  std::string strategy() const { return to_string(strategy_); }
  std::string device() const { return place_.str(); }
  bool quantized_dispatch() const { return quantized_dispatch_; }
  float dispatch_input_scale_2() const { return dispatch_input_scale_2_; }
  nb::dict layout() const { return layout_dict(rank_layout(config_, info_.rank)); }
  nb::dict launch() const { return launch_dict(info_); }
  uintptr_t stream() const {
#if FP4MOE_PY_HAS_NCCL
    return reinterpret_cast<uintptr_t>(stream_);
#else
    return 0;
#endif
  }

 private:
  ParallelGpuLayer() = default;

  MoeProblem problem_;
  ParallelConfig config_;
  Strategy strategy_ = Strategy::kNone;
  LaunchInfo info_;
  Place place_;
  bool closed_ = false;
  // ParallelMoe::quantized_dispatch() / dispatch_input_scale_2() at create (kept after close()).
  bool quantized_dispatch_ = false;
  float dispatch_input_scale_2_ = 0.0f;
#if FP4MOE_PY_HAS_NCCL
  cudaStream_t stream_ = nullptr;
  cudaEvent_t before_ = nullptr, after_ = nullptr;
  std::unique_ptr<comm::NcclCommunicator> world_;
  std::unique_ptr<ParallelMoe> layer_;
#endif
};

}  // namespace
}  // namespace fp4moe::py

NB_MODULE(_ext, m) {
  using namespace fp4moe;
  using namespace fp4moe::py;
  m.doc() = "fp4moe C++ binding (use the fp4moe package, not this module directly)";
  // NOTE: torch.compile caches and other interpreter-lifetime holders may still own layers when the
  // interpreter exits; nanobind would report those as leaks on every such run.
  nb::set_leak_warnings(false);

  // ---- Exceptions ----
  g_error = PyErr_NewExceptionWithDoc("fp4moe.Fp4moeError",
                                      "An fp4moe call failed; the message is the C++ Status message and `code` "
                                      "its status code name.",
                                      PyExc_RuntimeError, nullptr);
  PyObject* invalid_bases = PyTuple_Pack(2, g_error, PyExc_ValueError);
  g_invalid_argument = PyErr_NewExceptionWithDoc("fp4moe.InvalidArgumentError",
                                                 "A caller-supplied value is wrong (shape, dtype, device, range).",
                                                 invalid_bases, nullptr);
  Py_DECREF(invalid_bases);
  PyObject* unsupported_bases = PyTuple_Pack(2, g_error, PyExc_NotImplementedError);
  g_unsupported = PyErr_NewExceptionWithDoc(
      "fp4moe.UnsupportedError", "A valid request this build or device cannot serve.", unsupported_bases, nullptr);
  Py_DECREF(unsupported_bases);
  g_cuda_error = PyErr_NewExceptionWithDoc("fp4moe.CudaError", "A CUDA runtime call failed.", g_error, nullptr);
  g_io_error = PyErr_NewExceptionWithDoc("fp4moe.IoError", "A file system or file format problem (checkpoints).",
                                         g_error, nullptr);
  m.attr("Fp4moeError") = nb::handle(g_error);
  m.attr("InvalidArgumentError") = nb::handle(g_invalid_argument);
  m.attr("UnsupportedError") = nb::handle(g_unsupported);
  m.attr("CudaError") = nb::handle(g_cuda_error);
  m.attr("IoError") = nb::handle(g_io_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      raise_status(e.status);
    }
  });

  m.attr("has_cuda") = bool(FP4MOE_HAS_CUDA);
  m.attr("block_size_nvfp4") = kNvfp4BlockSize;
  m.attr("block_size_mxfp4") = kMxfp4BlockSize;
  m.def("cuda_device_count", &cuda_device_count);
  m.def("device_empty", &device_empty, "shape"_a, "dtype"_a, "device_id"_a);

  // ---- Formats ----
  m.def("quantize_nvfp4", &quantize_nvfp4, "x"_a, "packed"_a, "scales"_a, "global_scale"_a, "convention"_a, "recipe"_a,
        "layout"_a, "stream"_a);
  m.def("dequantize_nvfp4", &dequantize_nvfp4, "packed"_a, "scales"_a, "out"_a, "global_scale"_a, "convention"_a,
        "layout"_a, "stream"_a);
  m.def("quantize_mxfp4", &quantize_mxfp4, "x"_a, "packed"_a, "scales"_a, "stream"_a);
  m.def("dequantize_mxfp4", &dequantize_mxfp4, "packed"_a, "scales"_a, "out"_a, "stream"_a);
  m.def(
      "swizzle_scales",
      [](InArray linear, OutArray out, uintptr_t stream) { convert_scales(true, linear, out, stream); }, "linear"_a,
      "out"_a, "stream"_a);
  m.def(
      "unswizzle_scales",
      [](InArray swizzled, OutArray out, uintptr_t stream) { convert_scales(false, swizzled, out, stream); },
      "swizzled"_a, "out"_a, "stream"_a);
  m.def(
      "global_scale_from_amax",
      [](float amax, const std::string& convention) {
        if (!(amax >= 0.0f) || !std::isfinite(amax)) fail_invalid("amax = ", amax, " must be finite and >= 0");
        const float gs = GlobalScale::from_amax(amax, parse_convention(convention)).value;
        // (a denormal amax overflows 2688/amax, and its decode scale underflows: no usable fp32 scale)
        if (!(gs > 0.0f) || !std::isfinite(gs))
          fail_invalid("amax = ", amax, " gives the ", convention, " global scale ", gs,
                       ", not finite and > 0: too small an amax for an fp32 global scale");
        return gs;
      },
      "amax"_a, "convention"_a);
  m.def(
      "swizzled_scale_offset",
      [](int64_t row, int64_t col, int64_t num_scale_cols) { return swizzled_scale_offset(row, col, num_scale_cols); },
      "row"_a, "col"_a, "num_scale_cols"_a);

  // ---- Routing ----
  nb::class_<RoutingConfig>(m, "RoutingConfig")
      .def(
          "__init__",
          [](RoutingConfig* c, const std::string& method, int num_experts, int top_k, bool renormalize, int num_groups,
             int topk_groups, float routed_scaling_factor) {
            new (c) RoutingConfig();
            c->method = parse_method(method);
            c->num_experts = num_experts;
            c->top_k = top_k;
            c->renormalize = renormalize;
            c->num_groups = num_groups;
            c->topk_groups = topk_groups;
            c->routed_scaling_factor = routed_scaling_factor;
          },
          "method"_a = "softmax_topk", "num_experts"_a = 0, "top_k"_a = 1, "renormalize"_a = false, "num_groups"_a = 1,
          "topk_groups"_a = 1, "routed_scaling_factor"_a = 1.0f)
      .def_prop_rw(
          "method", [](const RoutingConfig& c) { return std::string(method_name(c.method)); },
          [](RoutingConfig& c, const std::string& s) { c.method = parse_method(s); })
      .def_rw("num_experts", &RoutingConfig::num_experts)
      .def_rw("top_k", &RoutingConfig::top_k)
      .def_rw("renormalize", &RoutingConfig::renormalize)
      .def_rw("num_groups", &RoutingConfig::num_groups)
      .def_rw("topk_groups", &RoutingConfig::topk_groups)
      .def_rw("routed_scaling_factor", &RoutingConfig::routed_scaling_factor)
      .def("validate", [](const RoutingConfig& c) { check(validate(c)); })
      .def("__repr__", &routing_repr);
  m.def("route", &route, "config"_a, "router_logits"_a, "correction_bias"_a.none(), "topk_ids"_a, "topk_weights"_a,
        "stream"_a);

  // ---- Problem ----
  auto problem = nb::class_<MoeProblem>(m, "Problem");
  problem
      .def("__init__",
           [](MoeProblem* p, nb::kwargs kwargs) {
             MoeProblem q;
             q.name = "custom";
             set_problem_fields(q, kwargs);
             new (p) MoeProblem(std::move(q));
           })
      .def_rw("routing", &MoeProblem::routing)
      .def("validate", [](const MoeProblem& p) { check(validate(p)); })
      .def(
          "scaled",
          [](const MoeProblem& p, int factor) {
            if (factor < 1) fail_invalid("factor = ", factor, " must be >= 1");
            return scaled_preset(p, factor);
          },
          "factor"_a)
      .def("copy", [](const MoeProblem& p) { return p; })
      .def("replace",
           [](const MoeProblem& p, nb::kwargs kwargs) {
             MoeProblem q = p;
             set_problem_fields(q, kwargs);
             return q;
           })
      .def_prop_ro("block_size", &MoeProblem::block_size)
      .def_prop_ro("apply_router_weight_on_input", &MoeProblem::apply_router_weight_on_input)
      .def_prop_ro("expert_weight_bytes", &MoeProblem::expert_weight_bytes)
      .def_prop_ro("flops_per_pair", &MoeProblem::flops_per_pair)
      .def("to_dict", &problem_dict)
      .def("keys",
           [](const MoeProblem&) {
             std::vector<std::string> k;
             for (const Field& f : problem_fields()) k.push_back(f.name);
             return k;
           })
      .def("__getitem__", [](const MoeProblem& p, const std::string& key) { return find_field(key).get(p); })
      .def("__setitem__", [](MoeProblem& p, const std::string& key, nb::handle v) { find_field(key).set(p, v); })
      // Another type compares unequal (NotImplemented, not a TypeError). Problems are mutable and
      // compare by value: unhashable, as Python's mutable values are (__hash__ = None below).
      .def(
          "__eq__", [](const MoeProblem& a, const MoeProblem& b) { return problem_dict(a).equal(problem_dict(b)); },
          nb::is_operator())
      .def("__repr__", &problem_repr);
  problem.attr("__hash__") = nb::none();
  for (const Field& f : problem_fields()) {
    const Field* fp = &f;
    problem.def_prop_rw(
        f.name, [fp](const MoeProblem& p) { return fp->get(p); }, [fp](MoeProblem& p, nb::handle v) { fp->set(p, v); });
  }
  m.def("preset_names", &preset_names);
  m.def(
      "preset",
      [](const std::string& name) {
        MoeProblem p;
        check(get_preset(name, &p));
        return p;
      },
      "name"_a);
  m.def("random_weights", &random_weights, "problem"_a, "seed"_a, "ep_rank"_a = 0, "ep_size"_a = 1, "tp_rank"_a = 0,
        "tp_size"_a = 1);

  // ---- Layer ----
  nb::class_<Layer>(m, "Layer")
      .def_static("from_weights", &Layer::from_weights, "problem"_a, "weights"_a, "device"_a, "device_id"_a,
                  "ep_rank"_a, "ep_size"_a, "tp_rank"_a, "tp_size"_a, "path"_a, "tune_file"_a, "split_k"_a,
                  "max_sms"_a, "tokens_routed_here"_a)
      .def_static("dummy", &Layer::dummy, "problem"_a, "seed"_a, "device"_a, "device_id"_a, "ep_rank"_a, "ep_size"_a,
                  "tp_rank"_a, "tp_size"_a, "path"_a, "tune_file"_a, "split_k"_a,
                  "max_sms"_a, "tokens_routed_here"_a)
      .def("forward", &Layer::forward, "hidden_states"_a, "router_logits"_a.none(), "topk_ids"_a.none(),
           "topk_weights"_a.none(), "out"_a, "stream"_a)
      .def("kernel_info", &Layer::kernel_info, "num_tokens"_a)
      .def("check_device_errors", &Layer::check_device_errors, "stream"_a)
      .def_prop_ro("problem", [](const Layer& l) { return l.problem(); })
      .def_prop_ro("device", &Layer::device)
      .def_prop_ro("workspace_bytes", &Layer::workspace_bytes)
      .def_prop_ro("weight_bytes", &Layer::weight_bytes)
      .def_prop_ro("num_local_experts", &Layer::num_local_experts)
      .def_prop_ro("local_intermediate_size", &Layer::local_intermediate_size)
      .def_prop_ro("parallel", &Layer::parallel);

  // ---- Checkpoints ----
  nb::class_<CheckpointHandle>(m, "Checkpoint")
      .def(
          "__init__",
          [](CheckpointHandle* c, nb::handle directory) { new (c) CheckpointHandle(fs_path("directory", directory)); },
          "directory"_a)
      .def_prop_ro("info", &CheckpointHandle::info)
      .def_prop_ro("problem", &CheckpointHandle::problem)
      .def_prop_ro("warnings", &CheckpointHandle::warnings)
      .def("load_layer", &CheckpointHandle::load_layer, "layer"_a, "ep_rank"_a = 0, "ep_size"_a = 1, "tp_rank"_a = 0,
           "tp_size"_a = 1);

  // ---- Parallel ----
  m.attr("has_nccl") = bool(FP4MOE_PY_HAS_NCCL);
  auto parallel_config = nb::class_<ParallelConfig>(m, "ParallelConfig");
  parallel_config
      .def(
          "__init__",
          [](ParallelConfig* c, int dp, int tp, int ep) { new (c) ParallelConfig{dp, tp, ep}; }, "dp"_a = 1,
          "tp"_a = 1, "ep"_a = 1)
      .def_rw("dp", &ParallelConfig::dp)
      .def_rw("tp", &ParallelConfig::tp)
      .def_rw("ep", &ParallelConfig::ep)
      .def_prop_ro("world_size", [](const ParallelConfig& c) { return int64_t(c.dp) * c.tp; })  // (no int wrap)
      .def_prop_ro("name",
                   [](const ParallelConfig& c) { return detail::concat("dp", c.dp, "tp", c.tp, "ep", c.ep); })
      .def(
          "validate",
          [](const ParallelConfig& c, const MoeProblem& p, std::optional<int> world_size) {
            check(validate(c, p, world_size ? *world_size : c.world_size()));
          },
          "problem"_a, "world_size"_a.none() = nb::none())
      .def(
          "check_strategy",
          [](const ParallelConfig& c, const std::string& s) { check(check_strategy(c, parse_strategy_name(s))); },
          "strategy"_a)
      .def("to_dict", &parallel_config_dict)
      .def("keys", [](const ParallelConfig&) { return std::vector<std::string>{"dp", "tp", "ep"}; })
      .def("__getitem__",
           [](const ParallelConfig& c, const std::string& k) {
             if (k == "dp") return c.dp;
             if (k == "tp") return c.tp;
             if (k == "ep") return c.ep;
             throw nb::key_error(detail::concat("ParallelConfig has no field '", k, "'; fields: dp, tp, ep").c_str());
           })
      // As Problem: NotImplemented for another type; mutable (dp, tp, ep are writable), so unhashable.
      .def(
          "__eq__",
          [](const ParallelConfig& a, const ParallelConfig& b) { return a.dp == b.dp && a.tp == b.tp && a.ep == b.ep; },
          nb::is_operator())
      .def("__repr__", &parallel_config_repr);
  parallel_config.attr("__hash__") = nb::none();
  m.def("strategy_names", [] {
    std::vector<std::string> out;
    for (Strategy s : {Strategy::kNone, Strategy::kTpAllReduce, Strategy::kAllGatherReduceScatter, Strategy::kAllToAll})
      out.push_back(to_string(s));
    return out;
  });
  m.def("parse_strategy", [](const std::string& s) { return std::string(to_string(parse_strategy_name(s))); },
        "name"_a);
  m.def("valid_parallel_configs", &valid_parallel_configs, "problem"_a, "world_size"_a);
  m.def("applicable_strategies", &strategy_names, "config"_a);
  m.def("rank_layout", &rank_layout_of, "config"_a, "rank"_a);
  m.def("launch_info", &launch_info, "env"_a.none() = nb::none());
  m.def("parallel_run_local", &parallel_run_local, "problem"_a, "config"_a, "strategy"_a, "weights"_a.none(),
        "seed"_a, "hidden_states"_a, "router_logits"_a.none(), "topk_ids"_a.none(), "topk_weights"_a.none(), "out"_a,
        "timeout"_a, "threads_per_rank"_a, "padded_tokens"_a.none(), "quantized_dispatch"_a);
  m.def(
      "check_parallel_forward_args",
      [](const MoeProblem& p, int device_id, InArray hidden, std::optional<InArray> logits,
         std::optional<InArray> topk_ids, std::optional<InArray> topk_weights, OutArray out) {
        return check_parallel_forward_args(p, Place{true, device_id}, hidden, logits, topk_ids, topk_weights, out);
      },
      "problem"_a, "device_id"_a, "hidden_states"_a, "router_logits"_a.none(), "topk_ids"_a.none(),
      "topk_weights"_a.none(), "out"_a);
  nb::class_<ParallelGpuLayer>(m, "ParallelLayer")
      .def_static("create", &ParallelGpuLayer::create, "problem"_a, "config"_a, "strategy"_a, "weights"_a.none(),
                  "seed"_a, "timeout"_a, "check_token_counts"_a, "quantized_dispatch"_a)
      .def("forward", &ParallelGpuLayer::forward, "hidden_states"_a, "router_logits"_a.none(), "topk_ids"_a.none(),
           "topk_weights"_a.none(), "out"_a, "stream"_a, "padded_tokens"_a.none())
      .def("synchronize", &ParallelGpuLayer::synchronize, "stream"_a)
      .def("check_device_errors", &ParallelGpuLayer::check_device_errors)
      .def("close", &ParallelGpuLayer::close)
      .def_prop_ro("closed", &ParallelGpuLayer::closed)
      .def_prop_ro("problem", [](const ParallelGpuLayer& l) { return l.problem(); })
      .def_prop_ro("config", [](const ParallelGpuLayer& l) { return l.config(); })
      .def_prop_ro("strategy", &ParallelGpuLayer::strategy)
      .def_prop_ro("device", &ParallelGpuLayer::device)
      .def_prop_ro("quantized_dispatch", &ParallelGpuLayer::quantized_dispatch)
      .def_prop_ro("dispatch_input_scale_2", &ParallelGpuLayer::dispatch_input_scale_2)
      .def_prop_ro("layout", &ParallelGpuLayer::layout)
      .def_prop_ro("launch_info", &ParallelGpuLayer::launch)
      .def_prop_ro("stream", &ParallelGpuLayer::stream);
}
