// MoeLayer: weights on the device and the forward pipeline
//   route -> plan -> permute -> GEMM1 (+activation) -> GEMM2 (+bias, router weight) -> finalize.
// Validation happens in full before the first launch; the forward never synchronizes the host.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "fp4moe/moe_gpu.h"
#include "reference/sharding.h"
#include "src/common/buffer_overlap.h"
#include "src/common/cuda_utils.h"
#include "src/common/device_code.h"
#include "src/gemm/simt/grouped_gemm_simt.h"
#include "src/gemm/sm90/moe_gemm_sm90.h"
#include "src/gemm/sm90/tune.h"
#include "src/moe/dummy_weights.h"
#include "src/moe/weights.h"
#include "src/moe/workspace.h"
#include "src/permute/permute.h"
#include "src/routing/det_math.h"
#include "src/routing/routing_gpu.h"

namespace fp4moe {

const char* to_string(KernelPath path) {
  switch (path) {
    case KernelPath::kAuto: return "auto";
    case KernelPath::kSm90: return "sm90";
    case KernelPath::kSimt: return "simt";
  }
  return "?";
}

Status parse_kernel_path(std::string_view name, KernelPath* out) {
  if (name == "auto") *out = KernelPath::kAuto;
  else if (name == "sm90") *out = KernelPath::kSm90;
  else if (name == "simt") *out = KernelPath::kSimt;
  else return invalid_argument("kernel path = '", name, "' is not one of: auto, sm90, simt");
  return Status::Ok();
}

struct MoeLayer::Impl {
  MoeProblem problem;
  LayerOptions options;
  WeightShard shard;
  DeviceWeights weights;
  WorkspaceLayout ws_layout;
  KernelPath path = KernelPath::kSimt;  // resolved (never kAuto)
  int device = 0;
  int num_sms = 0;
  sm90::TuneTable tune;
  std::optional<sm90::Sm90Config> forced;
  // Host copies of the local experts' GEMM1 weight global scales (NVFP4), for set_input_scale_2.
  std::vector<float> w13_scale_2;
  float input_scale_2 = 0.0f;  // set_input_scale_2's shared GEMM1 input scale, 0: per expert

  ~Impl() { weights.release(); }

  // The layer's buffers live on `device`: calls that use them run with it current. `what` prefixes
  // the message ("" for none).
  Status check_current_device(const char* what) const {
    int dev = 0;
    FP4MOE_CUDA_RETURN(cudaGetDevice(&dev));
    if (dev == device) return Status::Ok();
    return invalid_argument(what, what[0] ? ": " : "", "current device ", dev, " is not device ", device,
                            " the layer was created on");
  }

  sm90::ConfigInput config_input(int64_t num_tokens) const {
    sm90::ConfigInput in;
    in.num_tokens = num_tokens;
    in.top_k = problem.top_k();
    in.num_local_experts = shard.num_local_experts;
    in.num_experts = problem.num_experts();
    in.tokens_routed_here = options.tokens_routed_here;
    in.hidden = problem.hidden_size;
    in.inter_local = shard.inter_local;
    in.num_sms = num_sms;
    return in;
  }
  // The configs of GEMM1 and GEMM2 (the same tile tokens): the layer's config, which the default
  // heuristic narrows per GEMM where it has few tiles (sm90::narrow_for_few_tiles), unless split-K
  // (LayerOptions::split_k) splits that GEMM, which serves the case its own way. (A GEMM2 over K
  // ranges splits at them instead, narrowed only where that does not lose the split:
  // sm90::select_ranged_gemm2, split_k below.)
  std::pair<sm90::Sm90Config, sm90::Sm90Config> sm90_gemm_configs(int64_t num_tokens) const {
    if (forced) return {*forced, *forced};
    const sm90::ConfigInput in = config_input(num_tokens);
    if (auto tuned = tune.lookup(in)) return {*tuned, *tuned};
    const sm90::Sm90Config c = sm90::select_config(in);
    auto pick = [&](const layout::GemmWeightShape& g, bool ranged) {
      if (options.split_k && !ranged && sm90::select_split_k(in, c, g.m_units(), g.k_units()) > 1) return c;
      if (ranged && options.range_split) return sm90::select_ranged_gemm2(in, c, g.m_units(), g.k_units());
      return sm90::narrow_for_few_tiles(in, c, g.m_units());
    };
    return {pick(weights.g1, false), pick(weights.g2, gemm2_has_ranges(shard.inter_local))};
  }
  // The config of the tail launches (LayerOptions::tail_tiles, sm90::select_tail), or nothing.
  std::optional<sm90::Sm90Config> tail_config(const sm90::Sm90Config& main) const {
    if (!options.tail_tiles || path != KernelPath::kSm90) return std::nullopt;
    return sm90::select_tail(main);
  }
  // Whether GEMM2 overlaps GEMM1 (LayerOptions::gemm_overlap, sm90::select_gemm_overlap): never with
  // a split GEMM1 (the split partials' slots are one GEMM's at a time; GEMM2 may split) or a tail
  // launch.
  bool gemm_overlap(int64_t num_tokens, const sm90::Sm90Config& c1) const {
    if (!options.gemm_overlap || path != KernelPath::kSm90 || num_tokens <= 0 || tail_config(c1)) return false;
    if (split_k(num_tokens, c1, true) > 1) return false;
    return sm90::select_gemm_overlap(config_input(num_tokens), c1);
  }
  // Whether GEMM1 runs direct (LayerOptions::direct_gemm1, MoeGemmParams::direct_ids) for a forward of
  // num_tokens with precomputed routing and GEMM1 config c1: one token, w4a16 without input
  // weighting, a BN16 config without split-K or tails, H a multiple of 64.
  bool direct_gemm1(int64_t num_tokens, const sm90::Sm90Config& c1) const {
    return options.direct_gemm1 && path == KernelPath::kSm90 && num_tokens == 1 && problem.mode == Mode::kW4A16 &&
           !problem.apply_router_weight_on_input() && c1.tile_tokens == 16 && split_k(num_tokens, c1, true) == 1 &&
           !tail_config(c1) && problem.hidden_size % layout::kUnitK == 0 && problem.top_k() <= routing::kMaxTopK;
  }
  // Split-K ranges of GEMM1 (gemm1) or GEMM2 for a forward of num_tokens with config c (1: none): a
  // GEMM2 over K ranges splits at them (LayerOptions::range_split, sm90::select_range_split), any
  // other GEMM only with LayerOptions::split_k.
  int split_k(int64_t num_tokens, const sm90::Sm90Config& c, bool gemm1) const {
    if (path != KernelPath::kSm90) return 1;
    const layout::GemmWeightShape& g = gemm1 ? weights.g1 : weights.g2;
    if (!gemm1 && gemm2_has_ranges(shard.inter_local))
      return options.range_split ? sm90::select_range_split(config_input(num_tokens), c, g.m_units(), g.k_units())
                                 : 1;
    if (!options.split_k) return 1;
    return sm90::select_split_k(config_input(num_tokens), c, g.m_units(), g.k_units());
  }
};

namespace {

Status make_shard(const MoeProblem& p, const LayerOptions& o, WeightShard* out) {
  ref::ShardSpec spec{o.ep_rank, o.ep_size, o.tp_rank, o.tp_size};
  FP4MOE_RETURN_IF_ERROR(ref::validate_shard(p, spec));
  const ref::ExpertRange ex = ref::local_experts(p.num_experts(), o.ep_rank, o.ep_size);
  const ref::IndexRange sl = ref::tp_slice(p.intermediate_size, o.tp_rank, o.tp_size);
  out->expert_begin = ex.begin;
  out->num_local_experts = ex.size();
  out->inter_begin = sl.begin;
  out->inter_local = sl.size();
  out->add_w2_bias = o.tp_rank == 0;
  return Status::Ok();
}

// (The device is a Hopper GPU: check_device_code, first.)
KernelPath resolve_path(KernelPath requested) {
  return requested == KernelPath::kSimt ? KernelPath::kSimt : KernelPath::kSm90;
}

Status check_ptr(const char* name, const void* p, size_t alignment) {
  if (!p) return invalid_argument(name, " is null");
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
    return invalid_argument(name, " = ", p, " is not ", alignment, "-byte aligned");
  return Status::Ok();
}

}  // namespace

MoeLayer::MoeLayer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MoeLayer::~MoeLayer() = default;

static Status build_layer(const MoeProblem& problem, const LayerOptions& options,
                          const std::function<Status(const WeightShard&, DeviceWeights*)>& make_weights,
                          MoeLayer::Impl* impl) {
  FP4MOE_RETURN_IF_ERROR(validate(problem));
  if (options.max_sms < 0)
    return invalid_argument("LayerOptions::max_sms = ", options.max_sms, " must be >= 0 (0: every SM)");
  // (An enum from a cast integer would otherwise run the sm90 path under another name.)
  if (options.path != KernelPath::kAuto && options.path != KernelPath::kSm90 && options.path != KernelPath::kSimt)
    return invalid_argument("LayerOptions::path = ", int(options.path), " is not a KernelPath");
  impl->problem = problem;
  impl->options = options;
  FP4MOE_RETURN_IF_ERROR(make_shard(problem, options, &impl->shard));
  FP4MOE_CUDA_RETURN(cudaGetDevice(&impl->device));
  DeviceInfo info;
  FP4MOE_RETURN_IF_ERROR(current_device_info(&info));
  FP4MOE_RETURN_IF_ERROR(check_device_code(info.device, info.name, info.major, info.minor));
  impl->num_sms = options.max_sms > 0 && options.max_sms < info.num_sms ? options.max_sms : info.num_sms;
  impl->path = resolve_path(options.path);
  if (!options.tune_file.empty()) FP4MOE_RETURN_IF_ERROR(impl->tune.load(options.tune_file, info.name));
  FP4MOE_RETURN_IF_ERROR(make_weights(impl->shard, &impl->weights));
  // (GEMM grids are at most one CTA an SM: every compiled config has ctas_per_sm 1, which launch.cuh
  // checks against the range slots where it needs them.)
  impl->ws_layout = WorkspaceLayout::make(problem.max_tokens, problem.top_k(), impl->shard.num_local_experts,
                                          problem.hidden_size, impl->shard.inter_local, options.split_k,
                                          impl->num_sms);
  return Status::Ok();
}

Status MoeLayer::create(const MoeProblem& problem, const MoeWeightsView& host_weights, const LayerOptions& options,
                        std::unique_ptr<MoeLayer>* out) {
  if (!out) return invalid_argument("MoeLayer::create: out is null");
  auto impl = std::make_unique<Impl>();
  FP4MOE_RETURN_IF_ERROR(build_layer(
      problem, options,
      [&](const WeightShard& shard, DeviceWeights* w) {
        // (upload_weights first: it refuses a view in device memory before anything reads it here)
        FP4MOE_RETURN_IF_ERROR(upload_weights(problem, host_weights, shard, w));
        if (host_weights.w13_scale_2)
          impl->w13_scale_2.assign(host_weights.w13_scale_2, host_weights.w13_scale_2 + shard.num_local_experts);
        return Status::Ok();
      },
      impl.get()));
  out->reset(new MoeLayer(std::move(impl)));
  return Status::Ok();
}

Status MoeLayer::create_dummy(const MoeProblem& problem, uint64_t seed, const LayerOptions& options,
                              std::unique_ptr<MoeLayer>* out) {
  if (!out) return invalid_argument("MoeLayer::create_dummy: out is null");
  auto impl = std::make_unique<Impl>();
  FP4MOE_RETURN_IF_ERROR(build_layer(
      problem, options,
      [&](const WeightShard& shard, DeviceWeights* w) {
        if (problem.weight_format == WeightFormat::kNvfp4)
          for (int e = 0; e < shard.num_local_experts; ++e)
            impl->w13_scale_2.push_back(
                detail::dummy_w13_scale_2(seed, uint64_t(shard.expert_begin + e), problem.hidden_size));
        return make_dummy_weights(problem, seed, shard, w);
      },
      impl.get()));
  out->reset(new MoeLayer(std::move(impl)));
  return Status::Ok();
}

const MoeProblem& MoeLayer::problem() const { return impl_->problem; }
const LayerOptions& MoeLayer::options() const { return impl_->options; }
int MoeLayer::num_local_experts() const { return impl_->shard.num_local_experts; }
int64_t MoeLayer::local_intermediate_size() const { return impl_->shard.inter_local; }
size_t MoeLayer::workspace_bytes() const { return impl_->ws_layout.total; }
size_t MoeLayer::weight_bytes() const { return impl_->weights.bytes; }

KernelInfo MoeLayer::kernel_info(int64_t num_tokens) const {
  KernelInfo k;
  k.path = impl_->path;
  if (impl_->path == KernelPath::kSm90) {
    const auto [c1, c2] = impl_->sm90_gemm_configs(num_tokens);
    auto split = [&](const sm90::Sm90Config& c, bool gemm1) {
      const int s = impl_->split_k(num_tokens, c, gemm1);
      if (!gemm1 && gemm2_has_ranges(impl_->shard.inter_local)) {
        const int64_t ranges = k_range_count(impl_->weights.g2.k_units());
        return ", K in " + std::to_string(ranges) + " ranges" + (s > 1 ? ", split at them" : "");
      }
      return s > 1 ? ", split-K " + std::to_string(s) : std::string();
    };
    // (sm90::takes_dynamic_units: src/gemm/sm90/scheduler.cuh, schedule_units)
    auto dynamic = [](const sm90::Sm90Config& c, bool gemm1) {
      return sm90::takes_dynamic_units(c.tile_tokens, gemm1, c.tail) ? ", dynamic units" : "";
    };
    // (the tail launches run only where an expert can hold more than one tile of rows)
    const auto tail = num_tokens * impl_->problem.top_k() > c1.tile_tokens ? impl_->tail_config(c1) : std::nullopt;
    const std::string tail_name = tail ? ", tail " + tail->name() : std::string();
    // (the dynamic units before the tail's name: they are the main launch's, the tail kernels' schedule is static)
    k.gemm1 = "sm90_moe_gemm1_wgmma_rs(" + c1.name() + split(c1, true) + dynamic(c1, true) + tail_name +
              (impl_->direct_gemm1(num_tokens, c1) ? ", direct with precomputed routing" : "") + ")";
    const bool overlap = impl_->gemm_overlap(num_tokens, c1);
    k.gemm2 = "sm90_moe_gemm2_wgmma_rs(" + c2.name() + split(c2, false) + dynamic(c2, false) + tail_name +
              (overlap ? ", overlaps GEMM1" : "") + ")";
    if (const int b = sm90::bound_experiment(); b != 0) {
      const std::string what = " [bound experiment " + std::to_string(b) + ": timing only, wrong results]";
      k.gemm1 += what;
      k.gemm2 += what;
    }
    k.regime = c1.regime;
    if (c2.name() != c1.name()) k.regime += std::string("; GEMM2 ") + c2.regime;
    return k;
  }
  k.gemm1 = "gemm1_simt_kernel(units=64x64, tokens=" + std::to_string(kSimtTileTokens) + ")";
  k.gemm2 = "gemm2_simt_kernel(units=64x64, tokens=" + std::to_string(kSimtTileTokens) + ")";
  k.regime = "simt: reference path, CUDA cores";
  return k;
}

std::vector<std::string> MoeLayer::sm90_config_names() {
  std::vector<std::string> names;
  for (const auto& c : sm90::compiled_configs()) names.push_back(c.name());
  return names;
}

Status MoeLayer::force_sm90_config(const std::string& name) {
  if (name.empty()) {
    impl_->forced.reset();
    return Status::Ok();
  }
  if (impl_->path != KernelPath::kSm90)
    return unsupported("force_sm90_config('", name, "'): the layer runs the ", to_string(impl_->path), " path");
  auto c = sm90::config_by_name(name);
  if (!c) {
    std::string all;
    for (const auto& n : sm90_config_names()) all += (all.empty() ? "" : ", ") + n;
    return invalid_argument("sm90 config = '", name, "' is not compiled; configs: ", all);
  }
  c->regime = "forced";
  impl_->forced = *c;
  return Status::Ok();
}

Status MoeLayer::set_input_scale_2(float input_scale_2) {
  Impl& m = *impl_;
  if (m.problem.mode != Mode::kW4A4)
    return invalid_argument("set_input_scale_2: the layer's mode is ", to_string(m.problem.mode),
                            "; only w4a4 quantizes the GEMM1 input");
  if (!(input_scale_2 > 0.0f) || !std::isfinite(input_scale_2))
    return invalid_argument("input_scale_2 = ", input_scale_2, " must be finite and > 0");
  const int E = m.shard.num_local_experts;
  if (m.w13_scale_2.size() != size_t(E))
    return internal_error("set_input_scale_2: ", m.w13_scale_2.size(), " weight global scales kept for ", E,
                          " local experts");
  FP4MOE_RETURN_IF_ERROR(m.check_current_device(""));
  // Exactly what the weight upload computes from a13_scale_2[e] = input_scale_2 (weights.cu).
  const float gs = 1.0f / input_scale_2;
  // alpha1 [E] then a1_gs [E], adjacent in one buffer (weights.cu): one copy replaces both, so a
  // failed copy cannot leave the layer with one updated and the other not.
  std::vector<float> gemm1_scales(2 * size_t(E), gs);
  for (int e = 0; e < E; ++e) gemm1_scales[e] = gemm_alpha(m.w13_scale_2[e], gs, true);
  if (E > 0) {
    if (m.weights.a1_gs != m.weights.alpha1 + E)
      return internal_error("set_input_scale_2: the GEMM1 scales alpha1 and a1_gs are not adjacent");
    FP4MOE_CUDA_RETURN(cudaMemcpy(m.weights.alpha1, gemm1_scales.data(), sizeof(float) * gemm1_scales.size(),
                                  cudaMemcpyHostToDevice));
  }
  m.input_scale_2 = input_scale_2;
  return Status::Ok();
}

float MoeLayer::input_scale_2() const { return impl_->input_scale_2; }

Status MoeLayer::validate(const ForwardArgs& a, const void* workspace, size_t workspace_bytes) const {
  const MoeProblem& p = impl_->problem;
  if (a.num_tokens < 0 || a.num_tokens > p.max_tokens)
    return invalid_argument("num_tokens = ", a.num_tokens, " must be in [0, max_tokens = ", p.max_tokens, "]");
  if (a.hidden_prequantized && (p.mode != Mode::kW4A4 || impl_->input_scale_2 <= 0.0f))
    return invalid_argument("hidden_prequantized needs mode w4a4 (mode is ", to_string(p.mode),
                            ") and one input scale for every expert, set with set_input_scale_2 (",
                            impl_->input_scale_2 > 0.0f ? "set" : "not set", ")");
  FP4MOE_RETURN_IF_ERROR(check_ptr("workspace", workspace, 256));
  FP4MOE_RETURN_IF_ERROR(check_device_accessible("", "workspace", workspace, impl_->device));
  if (workspace_bytes < impl_->ws_layout.total)
    return invalid_argument("workspace_bytes = ", workspace_bytes, " is smaller than the ", impl_->ws_layout.total,
                            " bytes workspace_bytes() asks for");
  const bool has_logits = a.router_logits != nullptr;
  const bool has_topk = a.topk_ids != nullptr || a.topk_weights != nullptr;
  if (has_logits && has_topk)
    return invalid_argument("give either router_logits or (topk_ids and topk_weights), not both");
  // Zero tokens read nothing: null pointers are fine then (empty framework tensors have no data).
  if (a.num_tokens == 0) return Status::Ok();
  if (!has_logits && !has_topk)
    return invalid_argument("give either router_logits or (topk_ids and topk_weights), not neither");
  FP4MOE_RETURN_IF_ERROR(check_ptr("hidden", a.hidden, 16));
  FP4MOE_RETURN_IF_ERROR(check_ptr("out", a.out, 16));
  if (has_logits) {
    if (a.logits_type != LogitsType::kF32 && a.logits_type != LogitsType::kBF16)
      return invalid_argument("logits_type = ", int(a.logits_type), " is not a LogitsType (f32 or bf16)");
    FP4MOE_RETURN_IF_ERROR(check_ptr("router_logits", a.router_logits, a.logits_type == LogitsType::kF32 ? 4 : 2));
    if (p.routing.method == RoutingMethod::kDeepSeekV3 && !impl_->weights.routing_bias)
      return invalid_argument("routing method deepseek-v3 needs the layer's routing_bias");
  } else {
    FP4MOE_RETURN_IF_ERROR(check_ptr("topk_ids", a.topk_ids, 4));
    FP4MOE_RETURN_IF_ERROR(check_ptr("topk_weights", a.topk_weights, 4));
  }
  // No buffer the layer writes may overlap one it reads: `out` is written while `hidden` and the routing
  // may still be read (direct GEMM1 reads `hidden` in place), and the workspace is written first.
  {
    const auto reads =
        forward_inputs(p, a.num_tokens, a.hidden, a.router_logits, a.logits_type, a.topk_ids, a.topk_weights);
    // (The workspace over the bytes the layer uses: a larger arena may hold other buffers past them.)
    const BufferRange out{"out", a.out, size_t(a.num_tokens) * size_t(p.hidden_size) * 2},
        ws{"workspace", workspace, size_t(impl_->ws_layout.total)};
    FP4MOE_RETURN_IF_ERROR(check_disjoint(out, reads));
    FP4MOE_RETURN_IF_ERROR(check_disjoint(ws, reads));
    if (overlaps(out, ws))
      return invalid_argument("out = ", a.out, " (", out.bytes, " bytes) overlaps the workspace = ", workspace, " (",
                              ws.bytes, " bytes used): the layer writes both; give separate buffers");
  }
  // Where each buffer lives: a pointer the GPU cannot reach would fault a kernel and end the context.
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"hidden", a.hidden}, {"out", a.out},
                                  {"router_logits", a.router_logits}, {"topk_ids", a.topk_ids},
                                  {"topk_weights", a.topk_weights}})
    FP4MOE_RETURN_IF_ERROR(check_device_accessible("", name, ptr, impl_->device));
  return Status::Ok();
}

Status MoeLayer::forward(const ForwardArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) const {
  FP4MOE_RETURN_IF_ERROR(validate(a, workspace, workspace_bytes));
  const Impl& m = *impl_;
  const MoeProblem& p = m.problem;
  FP4MOE_RETURN_IF_ERROR(m.check_current_device(""));
  FP4MOE_RETURN_IF_ERROR(check_stream_device("", "stream", stream, m.device));
  WorkspacePtrs ws = WorkspacePtrs::from(workspace, m.ws_layout);
  const int64_t T = a.num_tokens;
  const int K = p.top_k();

  if (a.router_logits && T > 0) {
    RoutingArgs r;
    r.logits = a.router_logits;
    r.logits_type = a.logits_type;
    r.correction_bias = m.weights.routing_bias;
    r.num_tokens = T;
    r.topk_ids = ws.topk_ids;
    r.topk_weights = ws.topk_weights;
#if FP4MOE_TRACE
    unsigned long long* trace = ws.trace;
#else
    unsigned long long* trace = nullptr;
#endif
    FP4MOE_RETURN_IF_ERROR(route_gpu_in_forward(p.routing, r, stream, /*start_dependents=*/true, trace));
  } else if (T > 0) {
    // Precomputed routing is read in place.
    ws.topk_ids = const_cast<int32_t*>(a.topk_ids);
    ws.topk_weights = const_cast<float*>(a.topk_weights);
  }

  PermuteParams pp;
  pp.hidden = a.hidden;
  pp.num_tokens = T;
  pp.hidden_size = p.hidden_size;
  pp.top_k = K;
  pp.num_experts = p.num_experts();
  pp.expert_begin = m.shard.expert_begin;
  pp.num_local_experts = m.shard.num_local_experts;
  pp.inter_local = m.shard.inter_local;
  // The sm90 configs of GEMM1 and GEMM2 (chosen once; their tile tokens cut the plan's token tiles).
  std::pair<sm90::Sm90Config, sm90::Sm90Config> cfg;
  if (m.path == KernelPath::kSm90) cfg = m.sm90_gemm_configs(T);
  pp.tile_tokens = m.path == KernelPath::kSm90 ? cfg.first.tile_tokens : kSimtTileTokens;
  // Both GEMMs have the same tile tokens; their tails run in launches of their own.
  const std::optional<sm90::Sm90Config> tail = m.path == KernelPath::kSm90 ? m.tail_config(cfg.first) : std::nullopt;
  pp.tail_rows = tail ? tail->tile_tokens : 0;
  pp.w4a4 = p.mode == Mode::kW4A4;
  pp.weight_on_input = p.apply_router_weight_on_input();
  pp.a1_gs = m.weights.a1_gs;
  pp.prequantized = a.hidden_prequantized;
  pp.layout = m.ws_layout;
  pp.ws = ws;
  pp.plan_is_first = !(a.router_logits && T > 0);
  // Direct GEMM1 (below) reads the token's row itself: the plan runs alone, in one CTA.
  const bool direct = m.path == KernelPath::kSm90 && !a.router_logits && m.direct_gemm1(T, cfg.first);
  pp.plan_only = direct;
  FP4MOE_RETURN_IF_ERROR(launch_plan_and_permute(pp, stream));
  if (T == 0) return Status::Ok();

  MoeGemmParams g;
  g.layout = m.ws_layout;
  g.ws = ws;
  g.g1 = m.weights.g1;
  g.g2 = m.weights.g2;
  g.w13 = m.weights.w13;
  g.w2 = m.weights.w2;
  g.alpha1 = m.weights.alpha1;
  g.alpha2 = m.weights.alpha2;
  g.a2_gs = m.weights.a2_gs;
  g.w13_bias = m.weights.w13_bias;
  g.w2_bias = m.weights.w2_bias;
  g.mxfp4 = m.weights.mxfp4;
  g.num_local_experts = m.shard.num_local_experts;
  g.hidden = p.hidden_size;
  g.inter_local = m.shard.inter_local;
  g.top_k = K;
  g.activation = p.activation;
  g.w4a4 = pp.w4a4;
  g.weight_on_input = pp.weight_on_input;
  g.tile_tokens = pp.tile_tokens;
  g.max_tiles = (T * K + g.tile_tokens - 1) / g.tile_tokens + m.shard.num_local_experts;
  if (m.path == KernelPath::kSm90) {
    const auto& [cfg1, cfg2] = cfg;
    g.split_k1 = m.split_k(T, cfg1, true);
    g.split_k2 = m.split_k(T, cfg2, false);
    g.overlap = m.gemm_overlap(T, cfg1);
    MoeGemmParams gt = g;  // the tail launches: at most one tile per expert with more than a tile of rows
    if (tail) {
      gt.tail_of = g.tile_tokens;
      gt.tile_tokens = tail->tile_tokens;
      gt.max_tiles = std::min<int64_t>(m.shard.num_local_experts, T * K / (g.tile_tokens + 1));
      gt.split_k1 = gt.split_k2 = 1;
    }
    // Direct GEMM1 (LayerOptions::direct_gemm1, MoeGemmParams::direct_ids): one token whose routed
    // ids are in memory before the forward's first kernel (precomputed routing, read in place).
    MoeGemmParams g1 = g;
    if (direct) {
      g1.direct_ids = a.topk_ids;
      g1.direct_x = a.hidden;
      g1.num_experts = p.num_experts();
      g1.expert_begin = m.shard.expert_begin;
    }
    FP4MOE_RETURN_IF_ERROR(sm90::launch_gemm1(g1, cfg1, m.num_sms, stream));
    if (tail) FP4MOE_RETURN_IF_ERROR(sm90::launch_gemm1(gt, *tail, m.num_sms, stream));
    FP4MOE_RETURN_IF_ERROR(sm90::launch_gemm2(g, cfg2, m.num_sms, stream));
    if (tail) FP4MOE_RETURN_IF_ERROR(sm90::launch_gemm2(gt, *tail, m.num_sms, stream));
  } else {
    FP4MOE_RETURN_IF_ERROR(launch_gemm1_simt(g, stream));
    FP4MOE_RETURN_IF_ERROR(launch_gemm2_simt(g, stream));
  }
  return launch_finalize(pp, a.out, stream);
}

Status MoeLayer::check_device_errors(const void* workspace, cudaStream_t stream) const {
  FP4MOE_RETURN_IF_ERROR(check_ptr("workspace", workspace, 256));
  FP4MOE_RETURN_IF_ERROR(impl_->check_current_device("check_device_errors"));
  FP4MOE_RETURN_IF_ERROR(check_stream_device("check_device_errors", "stream", stream, impl_->device));
  int32_t bad = 0;
  const char* base = static_cast<const char*>(workspace);
  FP4MOE_CUDA_RETURN(cudaMemcpyAsync(&bad, base + impl_->ws_layout.counts + 4 * impl_->shard.num_local_experts, 4,
                                     cudaMemcpyDeviceToHost, stream));
  FP4MOE_CUDA_RETURN(cudaStreamSynchronize(stream));
  if (bad != 0)
    return invalid_argument(bad, " routed expert ids were outside [0, num_experts = ", impl_->problem.num_experts(),
                            "); their slots were skipped");
  return Status::Ok();
}

Status validate_topk_ids(const MoeProblem& p, const int32_t* ids, int64_t num_tokens) {
  if (num_tokens < 0) return invalid_argument("num_tokens = ", num_tokens, " must be >= 0");
  if (num_tokens > 0 && !ids) return invalid_argument("topk_ids is null");
  for (int64_t i = 0; i < num_tokens * p.top_k(); ++i)
    if (ids[i] < 0 || ids[i] >= p.num_experts())
      return invalid_argument("topk_ids[", i / p.top_k(), "][", i % p.top_k(), "] = ", ids[i],
                              " is outside [0, num_experts = ", p.num_experts(), ")");
  return Status::Ok();
}

}  // namespace fp4moe
