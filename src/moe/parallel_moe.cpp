// Parallel MoE: the configuration rules of fp4moe/parallel.h, the CPU reference backend, and the
// dispatch -> experts -> combine pipeline of each strategy (see parallel_moe.h).
#include "src/moe/parallel_moe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "reference/sharding.h"
#include "src/common/buffer_overlap.h"
#include "src/moe/dispatch_codec.h"

namespace fp4moe {

// ---- Configuration ---------------------------------------------------------------------------------

const char* to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kNone: return "none";
    case Strategy::kTpAllReduce: return "tp-allreduce";
    case Strategy::kAllGatherReduceScatter: return "allgather-reducescatter";
    case Strategy::kAllToAll: return "alltoall";
  }
  return "?";
}

Status parse_strategy(std::string_view name, Strategy* out) {
  for (Strategy s : {Strategy::kNone, Strategy::kTpAllReduce, Strategy::kAllGatherReduceScatter, Strategy::kAllToAll}) {
    if (name == to_string(s)) {
      *out = s;
      return Status::Ok();
    }
  }
  return invalid_argument("strategy = '", name, "' is not one of none, tp-allreduce, allgather-reducescatter, alltoall");
}

Status check_config_bounds(const ParallelConfig& c) {
  if (c.dp < 1) return invalid_argument("dp = ", c.dp, " must be >= 1");
  if (c.tp < 1) return invalid_argument("tp = ", c.tp, " must be >= 1");
  if (c.ep < 1) return invalid_argument("ep = ", c.ep, " must be >= 1");
  if (int64_t(c.dp) * c.tp > kMaxWorldSize)
    return invalid_argument("dp * tp = ", c.dp, " * ", c.tp, " = ", int64_t(c.dp) * c.tp, " exceeds the ",
                            kMaxWorldSize, " ranks a parallel layer takes");
  return Status::Ok();
}

Status validate(const ParallelConfig& c, const MoeProblem& problem, int world_size) {
  FP4MOE_RETURN_IF_ERROR(check_config_bounds(c));
  if (c.dp * c.tp != world_size)
    return invalid_argument("dp * tp = ", c.dp, " * ", c.tp, " = ", c.dp * c.tp, " must equal the number of ranks (",
                            world_size, ")");
  if (c.ep != 1 && c.ep != c.dp * c.tp)
    return invalid_argument("ep = ", c.ep, " must be 1 (expert parallelism off) or dp * tp = ", c.dp * c.tp,
                            ": with EP on, every rank holds E/ep whole experts and the MoE's TP is 1");
  const RankLayout l = rank_layout(c, 0);
  ref::ShardSpec shard{0, l.moe_ep_size, 0, l.moe_tp_size};
  Status s = ref::validate_shard(problem, shard);
  if (!s.ok())
    return Status(s.code(), detail::concat(s.message(), " (parallel config dp = ", c.dp, ", tp = ", c.tp, ", ep = ", c.ep,
                                           ": the MoE's ", c.ep > 1 ? "EP" : "TP", " size is ",
                                           c.ep > 1 ? l.moe_ep_size : l.moe_tp_size, ")"));
  return Status::Ok();
}

Status check_strategy(const ParallelConfig& c, Strategy strategy) {
  const int world = c.world_size();
  switch (strategy) {
    case Strategy::kNone:
      if (world != 1)
        return invalid_argument("strategy none needs one rank; dp * tp = ", world,
                                " (every rank holds only part of the layer, so partial outputs must be combined)");
      return Status::Ok();
    case Strategy::kTpAllReduce:
      if (world == 1) return invalid_argument("strategy tp-allreduce needs more than one rank (use none)");
      if (c.dp != 1)
        return invalid_argument("strategy tp-allreduce needs dp = 1 (every rank holding the same tokens); dp = ", c.dp,
                                " (use allgather-reducescatter", c.ep > 1 ? " or alltoall)" : ")");
      return Status::Ok();
    case Strategy::kAllGatherReduceScatter:
      if (c.dp == 1)
        return invalid_argument("strategy allgather-reducescatter needs dp > 1 (with dp = 1 the tokens are already on every "
                                "rank: use ", world == 1 ? "none" : "tp-allreduce", ")");
      return Status::Ok();
    case Strategy::kAllToAll:
      if (c.dp == 1 || c.ep == 1)
        return invalid_argument("strategy alltoall needs dp > 1 and expert parallelism (ep = dp * tp); dp = ", c.dp,
                                ", ep = ", c.ep, " (without EP every rank needs every token: use ",
                                c.dp > 1 ? "allgather-reducescatter" : (world == 1 ? "none" : "tp-allreduce"), ")");
      return Status::Ok();
  }
  return invalid_argument("strategy = ", int(strategy), " is not a Strategy");
}

std::vector<Strategy> applicable_strategies(const ParallelConfig& config) {
  std::vector<Strategy> out;
  for (Strategy s : {Strategy::kNone, Strategy::kTpAllReduce, Strategy::kAllGatherReduceScatter, Strategy::kAllToAll})
    if (check_strategy(config, s).ok()) out.push_back(s);
  return out;
}

std::vector<ParallelConfig> valid_configs(const MoeProblem& problem, int world_size) {
  std::vector<ParallelConfig> out;
  if (world_size < 1 || world_size > kMaxWorldSize) return out;  // (no config; the loop below needs the bound)
  for (int dp = 1; dp <= world_size; ++dp) {
    if (world_size % dp) continue;
    for (int ep : {1, world_size}) {
      ParallelConfig c{dp, world_size / dp, ep};
      if (validate(c, problem, world_size).ok()) out.push_back(c);
      if (world_size == 1) break;
    }
  }
  return out;
}

RankLayout rank_layout(const ParallelConfig& c, int rank) {
  RankLayout l;
  const int tp = std::max(1, c.tp);
  l.rank = rank;
  l.dp_rank = rank / tp;
  l.tp_rank = rank % tp;
  if (c.ep > 1) {
    l.moe_ep_rank = rank;
    l.moe_ep_size = c.ep;
  } else {
    l.moe_tp_rank = rank;
    l.moe_tp_size = std::max(1, c.dp) * tp;
  }
  return l;
}

std::string config_signature(const MoeProblem& p, const ParallelConfig& c, Strategy strategy) {
  std::ostringstream os;
  os << "hidden=" << p.hidden_size << ";intermediate=" << p.intermediate_size << ";experts=" << p.num_experts()
     << ";top_k=" << p.top_k() << ";routing=" << to_string(p.routing.method)
     << ";renormalize=" << p.routing.renormalize << ";groups=" << p.routing.num_groups
     << ";topk_groups=" << p.routing.topk_groups << ";scaling=" << std::hexfloat << p.routing.routed_scaling_factor
     << std::defaultfloat << ";activation=" << to_string(p.activation) << ";bias=" << p.has_bias
     << ";format=" << to_string(p.weight_format) << ";mode=" << to_string(p.mode) << ";max_tokens=" << p.max_tokens
     << ";dp=" << c.dp << ";tp=" << c.tp << ";ep=" << c.ep << ";strategy=" << to_string(strategy);
  return os.str();
}

const char* to_string(QuantizedDispatch q) {
  switch (q) {
    case QuantizedDispatch::kAuto: return "auto";
    case QuantizedDispatch::kOff: return "off";
    case QuantizedDispatch::kOn: return "on";
  }
  return "?";
}

Status parse_quantized_dispatch(std::string_view name, QuantizedDispatch* out) {
  for (QuantizedDispatch q : {QuantizedDispatch::kAuto, QuantizedDispatch::kOff, QuantizedDispatch::kOn}) {
    if (name == to_string(q)) {
      *out = q;
      return Status::Ok();
    }
  }
  return invalid_argument("quantized_dispatch = '", name, "' is not one of auto, off, on");
}

namespace {

// options.quantized_dispatch against the mode and the strategy (ParallelMoeOptions).
Status resolve_quantized_dispatch(QuantizedDispatch q, const MoeProblem& p, Strategy strategy, bool* out) {
  const bool sends_tokens = strategy == Strategy::kAllGatherReduceScatter || strategy == Strategy::kAllToAll;
  switch (q) {
    case QuantizedDispatch::kAuto:
      *out = p.mode == Mode::kW4A4 && strategy == Strategy::kAllGatherReduceScatter;
      return Status::Ok();
    case QuantizedDispatch::kOff:
      *out = false;
      return Status::Ok();
    case QuantizedDispatch::kOn:
      if (p.mode != Mode::kW4A4)
        return invalid_argument("quantized_dispatch = on needs mode w4a4 (NVFP4 tokens are the w4a4 layer's GEMM1 "
                                "input); mode = ", to_string(p.mode), " dispatches bf16 tokens (use auto or off)");
      if (!sends_tokens)
        return invalid_argument("quantized_dispatch = on needs a strategy that dispatches tokens "
                                "(allgather-reducescatter or alltoall); strategy ", to_string(strategy),
                                " sends none (use auto or off)");
      *out = true;
      return Status::Ok();
  }
  return invalid_argument("quantized_dispatch = ", int(q), " is not a QuantizedDispatch");
}

}  // namespace

int64_t max_expert_tokens(const ParallelConfig& c, Strategy strategy, int64_t max_tokens_per_rank) {
  switch (strategy) {
    case Strategy::kNone:
    case Strategy::kTpAllReduce: return max_tokens_per_rank;
    case Strategy::kAllGatherReduceScatter: return int64_t(c.dp) * max_tokens_per_rank;
    // Every other rank may send all of its tokens here (each token at most once per destination).
    case Strategy::kAllToAll: return int64_t(c.world_size()) * max_tokens_per_rank;
  }
  return max_tokens_per_rank;
}

// ---- CPU reference backend -------------------------------------------------------------------------

namespace {

class CpuReferenceBackend final : public ExpertBackend {
 public:
  CpuReferenceBackend(const MoeProblem& problem, HostMoeWeights shard, const ref::ShardSpec& spec,
                      const ref::ReferenceOptions& options)
      : problem_(problem), shard_(std::move(shard)), spec_(spec), options_(options) {}

  comm::MemorySpace memory_space() const override { return comm::MemorySpace::kHost; }
  const MoeProblem& built_problem() const override { return problem_; }
  ref::ShardSpec built_shard() const override { return spec_; }
  comm::DataType output_type() const override { return comm::DataType::kF32; }

  Status route(const void* logits, LogitsType logits_type, int64_t n, int32_t* ids, float* weights) override {
    RoutingArgs a;
    a.logits = logits;
    a.logits_type = logits_type;
    a.correction_bias = shard_.routing_bias.empty() ? nullptr : shard_.routing_bias.data();
    a.num_tokens = n;
    a.topk_ids = ids;
    a.topk_weights = weights;
    return route_cpu(problem_.routing, a);
  }
  Status run_experts(const uint16_t* hidden, const int32_t* ids, const float* weights, int64_t n, void* out) override {
    return ref::moe_forward_routed(problem_, shard_.view(), spec_, hidden, ids, weights, n, static_cast<float*>(out),
                                   options_);
  }

  Status allocate(size_t bytes, void** out) override {
    // 256-byte alignment like the device allocations, so host and device code paths see the same layout.
    *out = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t(256));
    return Status::Ok();
  }
  void release(void* p) override { ::operator delete(p, std::align_val_t(256)); }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status copy_from_host(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) override {
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<uint8_t*>(dst) + r * dst_pitch, static_cast<const uint8_t*>(src) + r * src_pitch, width);
    return Status::Ok();
  }
  Status gather_rows(const void* src, const int32_t* index, int64_t n, size_t row_bytes, void* dst) override {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<uint8_t*>(dst) + i * row_bytes, static_cast<const uint8_t*>(src) + index[i] * row_bytes,
                  row_bytes);
    return Status::Ok();
  }
  Status scatter_add_rows(const void* src, const int32_t* index, int64_t n, void* acc) override {
    const int64_t H = problem_.hidden_size;
    const float* s = static_cast<const float*>(src);
    float* a = static_cast<float*>(acc);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < H; ++c) a[index[i] * H + c] += s[i * H + c];
    return Status::Ok();
  }
  Status zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
    return Status::Ok();
  }
  Status synchronize() override { return Status::Ok(); }

  Status max_input_scale_2(float* out) override {
    if (problem_.mode != Mode::kW4A4 || shard_.a13_scale_2.empty())
      return invalid_argument("max_input_scale_2: mode ", to_string(problem_.mode), " has no GEMM1 input scales");
    return max_positive_scale(shard_.a13_scale_2, out);
  }
  Status use_prequantized_input(float input_scale_2) override {
    if (problem_.mode != Mode::kW4A4)
      return invalid_argument("use_prequantized_input: mode ", to_string(problem_.mode), " is not w4a4");
    if (!(input_scale_2 > 0.0f) || !std::isfinite(input_scale_2))
      return invalid_argument("input_scale_2 = ", input_scale_2, " must be finite and > 0");
    // The reference then quantizes nothing itself and divides by 1 / input_scale_2 for every expert.
    std::fill(shard_.a13_scale_2.begin(), shard_.a13_scale_2.end(), input_scale_2);
    options_.input_prequantized = true;
    return Status::Ok();
  }
  Status quantize_rows_nvfp4(const uint16_t* hidden, const float* row_weights, int64_t n, float gs, void* dst,
                             size_t dst_pitch) override {
    const int64_t H = problem_.hidden_size;
    FP4MOE_RETURN_IF_ERROR(check_nvfp4_rows(n, gs, dst_pitch));
    if (n > 0 && (!hidden || !dst)) return invalid_argument("quantize_rows_nvfp4: hidden or dst is null with n = ", n);
    for (int64_t r = 0; r < n; ++r) {
      uint8_t* codes = static_cast<uint8_t*>(dst) + r * dst_pitch;
      uint8_t* scales = codes + H / 2;
      const float w = row_weights ? row_weights[r] : 1.0f;
      for (int64_t b = 0; b < H / kNvfp4BlockSize; ++b)
        scales[b] = detail::quantize_dispatch_block(hidden + r * H + b * kNvfp4BlockSize, row_weights != nullptr, w,
                                                    gs, codes + b * kNvfp4BlockSize / 2);
    }
    return Status::Ok();
  }
  Status dequantize_rows_nvfp4(const void* src, size_t src_pitch, int64_t n, uint16_t* dst) override {
    const int64_t H = problem_.hidden_size;
    FP4MOE_RETURN_IF_ERROR(check_nvfp4_rows(n, 1.0f, src_pitch));
    if (n > 0 && (!src || !dst)) return invalid_argument("dequantize_rows_nvfp4: src or dst is null with n = ", n);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* codes = static_cast<const uint8_t*>(src) + r * src_pitch;
      const uint8_t* scales = codes + H / 2;
      for (int64_t b = 0; b < H / kNvfp4BlockSize; ++b)
        detail::dequantize_dispatch_block(codes + b * kNvfp4BlockSize / 2, scales[b],
                                          dst + r * H + b * kNvfp4BlockSize);
    }
    return Status::Ok();
  }

 private:
  Status check_nvfp4_rows(int64_t n, float gs, size_t pitch) const {
    if (n < 0) return invalid_argument("NVFP4 rows: n = ", n, " must be >= 0");
    if (!(gs > 0.0f) || !std::isfinite(gs)) return invalid_argument("NVFP4 rows: gs = ", gs, " must be finite and > 0");
    if (problem_.hidden_size % kNvfp4BlockSize)
      return invalid_argument("NVFP4 rows: hidden_size = ", problem_.hidden_size, " is not a multiple of ",
                              kNvfp4BlockSize);
    if (pitch < size_t(detail::dispatch_row_bytes(problem_.hidden_size)))
      return invalid_argument("NVFP4 rows: pitch = ", pitch, " is less than a row's ",
                              detail::dispatch_row_bytes(problem_.hidden_size), " bytes");
    return Status::Ok();
  }
  Status copy(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  MoeProblem problem_;
  HostMoeWeights shard_;
  ref::ShardSpec spec_;
  ref::ReferenceOptions options_;
};

}  // namespace

Status make_cpu_reference_backend(const MoeProblem& problem, const HostMoeWeights& full, const RankLayout& layout,
                                  const ref::ReferenceOptions& options, std::unique_ptr<ExpertBackend>* out) {
  if (!out) return invalid_argument("make_cpu_reference_backend: out is null");
  const ref::ShardSpec spec{layout.moe_ep_rank, layout.moe_ep_size, layout.moe_tp_rank, layout.moe_tp_size};
  HostMoeWeights shard;
  FP4MOE_RETURN_IF_ERROR(ref::shard_weights(problem, full, spec, &shard));
  *out = std::make_unique<CpuReferenceBackend>(problem, std::move(shard), spec, options);
  return Status::Ok();
}

// ---- The layer -------------------------------------------------------------------------------------

namespace {

// A buffer in the backend's memory, released with it.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Status allocate(ExpertBackend* backend, size_t bytes) {
    reset();
    backend_ = backend;
    bytes_ = bytes;
    return backend->allocate(bytes, &ptr_);
  }
  void reset() {
    if (ptr_ && backend_) backend_->release(ptr_);
    ptr_ = nullptr;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  uint8_t* bytes_at(size_t offset) const { return static_cast<uint8_t*>(ptr_) + offset; }
  size_t size() const { return bytes_; }

 private:
  ExpertBackend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// dispatch = [t0, t1), experts = [t1, t2), combine = [t2, now).
void record_step_times(StepTimes* times, Clock::time_point t0, Clock::time_point t1, Clock::time_point t2) {
  if (!times) return;
  times->dispatch_s = std::chrono::duration<double>(t1 - t0).count();
  times->experts_s = std::chrono::duration<double>(t2 - t1).count();
  times->combine_s = seconds_since(t2);
}

std::vector<size_t> scaled(const std::vector<int64_t>& counts, size_t factor) {
  std::vector<size_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = size_t(counts[i]) * factor;
  return out;
}

}  // namespace

struct ParallelMoe::Impl {
  MoeProblem problem;
  ParallelConfig config;
  Strategy strategy = Strategy::kNone;
  ParallelMoeOptions options;
  RankLayout layout;
  comm::Communicator* world = nullptr;
  std::unique_ptr<comm::Communicator> dp_comm;  // ranks with this rank's tp_rank, one per DP group
  std::unique_ptr<comm::Communicator> tp_comm;  // the ranks of this rank's DP group
  std::unique_ptr<ExpertBackend> backend;

  // Token record: [hidden | ids k i32 | weights k f32], hidden as wire_bytes: H bf16, or with quantized
  // dispatch H/2 bytes of e2m1 codes + H/16 e4m3 block scales. hidden_bytes: a bf16 row (2H) of x.
  size_t hidden_bytes = 0, wire_bytes = 0, ids_bytes = 0, record_bytes = 0, out_row_bytes = 0;
  bool quantized = false;       // NVFP4-quantized dispatch (ParallelMoeOptions::quantized_dispatch)
  float dispatch_scale_2 = 0;   // its shared GEMM1 input scale (decode convention)
  float dispatch_gs = 0;        // 1 / dispatch_scale_2 (encode convention), as the expert layer computes it

  Buffer small;        // counts exchanged through the communicator (its memory), 2 * world int64
  Buffer route_ids, route_weights;  // routing of this rank's tokens when computed from logits
  Buffer records;      // this rank's tokens as records (alltoall: its slice)
  Buffer send_records; // alltoall: records grouped by destination
  Buffer recv_records; // gathered / received records
  Buffer x, ids, weights;  // unpacked records for the experts
  Buffer partial;      // the experts' partial outputs
  Buffer returned;     // alltoall: partial outputs back from each destination
  Buffer slice_out;    // alltoall with tp > 1: this rank's slice of the output
  Buffer filler;       // graph mode: max_tokens filler records (zero hidden, spread ids, zero weights)
  Buffer padded_out;   // graph mode: this rank's padded_tokens rows of the reduce-scatter

  std::vector<int32_t> host_ids;  // alltoall planning
  std::vector<int32_t> send_index;

  Status exchange_counts(comm::Communicator& c, int64_t mine, std::vector<int64_t>* all);
  // Gives up on every group of this rank, so its peers in each fail fast.
  void abort_all(const std::string& reason) {
    if (dp_comm) dp_comm->abort(reason);
    if (tp_comm) tp_comm->abort(reason);
    world->abort(reason);
  }
  Status check_replicated_count(int64_t num_tokens);
  Status check_same_padding(int64_t padded_tokens);
  Status pack(const uint16_t* hidden, const int32_t* ids, const float* weights, int64_t n, void* dst);
  Status unpack(const void* src, int64_t n);
  Status forward(const Args& a, StepTimes* times);
  Status forward_alltoall(const uint16_t* hidden, const int32_t* ids, const float* weights, int64_t T, void* out,
                          StepTimes* times);
  Status forward_padded(const uint16_t* hidden, const int32_t* ids, const float* weights, int64_t T, int64_t P,
                        void* out, StepTimes* times);
};

Status ParallelMoe::Impl::exchange_counts(comm::Communicator& c, int64_t mine, std::vector<int64_t>* all) {
  const int n = c.size();
  FP4MOE_RETURN_IF_ERROR(backend->copy_from_host(small.get(), &mine, sizeof(mine)));
  int64_t* gathered = small.get<int64_t>() + 1;
  FP4MOE_RETURN_IF_ERROR(c.all_gather_v(small.get(), 1, gathered, comm::equal_counts(n, 1), comm::DataType::kI64));
  // The host reads the result: wait for the collective with the deadline first (a communicator that
  // only enqueues would otherwise leave the wait to an unbounded stream synchronize in the copy).
  FP4MOE_RETURN_IF_ERROR(c.synchronize());
  all->resize(n);
  return backend->copy_to_host(all->data(), gathered, sizeof(int64_t) * n);
}

Status ParallelMoe::Impl::check_replicated_count(int64_t T) {
  // The ranks sharing tokens: the whole world for tp-allreduce, the DP group's TP ranks otherwise.
  comm::Communicator* c = strategy == Strategy::kTpAllReduce ? world : tp_comm.get();
  if (!options.check_token_counts || !c || c->size() == 1) return Status::Ok();
  std::vector<int64_t> counts;
  FP4MOE_RETURN_IF_ERROR(exchange_counts(*c, T, &counts));
  for (int r = 0; r < c->size(); ++r)
    if (counts[r] != T)
      return invalid_argument(describe(*c), ": num_tokens = ", T, " but rank ", r, " of the group passes ", counts[r],
                              " (these ranks must hold the same tokens)");
  return Status::Ok();
}

Status ParallelMoe::Impl::check_same_padding(int64_t P) {
  if (!options.check_token_counts || !dp_comm || dp_comm->size() == 1) return Status::Ok();
  std::vector<int64_t> all;
  FP4MOE_RETURN_IF_ERROR(exchange_counts(*dp_comm, P, &all));
  for (int r = 0; r < dp_comm->size(); ++r)
    if (all[r] != P)
      return invalid_argument(describe(*dp_comm), ": padded_tokens = ", P, " but rank ", r, " of the group passes ",
                              all[r], " (graph mode exchanges the same number of rows from every rank)");
  return Status::Ok();
}

Status ParallelMoe::Impl::pack(const uint16_t* hidden, const int32_t* ids_in, const float* weights_in, int64_t n,
                               void* dst) {
  if (n == 0) return Status::Ok();
  auto* d = static_cast<uint8_t*>(dst);
  if (quantized) {
    // Llama-4 (top-1) weights the expert's input: the sender applies it before quantizing.
    const float* row_weights = problem.apply_router_weight_on_input() ? weights_in : nullptr;
    FP4MOE_RETURN_IF_ERROR(backend->quantize_rows_nvfp4(hidden, row_weights, n, dispatch_gs, d, record_bytes));
  } else {
    FP4MOE_RETURN_IF_ERROR(backend->copy_2d(d, record_bytes, hidden, hidden_bytes, hidden_bytes, n));
  }
  FP4MOE_RETURN_IF_ERROR(backend->copy_2d(d + wire_bytes, record_bytes, ids_in, ids_bytes, ids_bytes, n));
  return backend->copy_2d(d + wire_bytes + ids_bytes, record_bytes, weights_in, ids_bytes, ids_bytes, n);
}

Status ParallelMoe::Impl::unpack(const void* src, int64_t n) {
  if (n == 0) return Status::Ok();
  auto* s = static_cast<const uint8_t*>(src);
  if (quantized) {
    // code x block scale rows: the expert layer's quantized GEMM1 input, used without requantizing.
    FP4MOE_RETURN_IF_ERROR(backend->dequantize_rows_nvfp4(s, record_bytes, n, x.get<uint16_t>()));
  } else {
    FP4MOE_RETURN_IF_ERROR(backend->copy_2d(x.get(), hidden_bytes, s, record_bytes, hidden_bytes, n));
  }
  FP4MOE_RETURN_IF_ERROR(backend->copy_2d(ids.get(), ids_bytes, s + wire_bytes, record_bytes, ids_bytes, n));
  return backend->copy_2d(weights.get(), ids_bytes, s + wire_bytes + ids_bytes, record_bytes, ids_bytes, n);
}

// Whether `backend` was made for `problem` and for world rank `rank`'s shard of `config`: the layer
// sizes its buffers from its own problem, and each rank must hold its own layout's shard.
static Status check_backend_fits(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy, int rank,
                                 const ExpertBackend& backend) {
  const std::string want = config_signature(problem, config, strategy);
  const std::string built = config_signature(backend.built_problem(), config, strategy);
  if (built != want)
    return invalid_argument("ParallelMoe::create: the backend was made for another problem (backend: ", built,
                            "; this layer: ", want, ")");
  // (A config out of its bounds has no layout to compare: validate() reports it after the agreement.)
  if (!check_config_bounds(config).ok()) return Status::Ok();
  const ref::ShardSpec b = backend.built_shard();
  const RankLayout l = rank_layout(config, rank);
  if (b.ep_rank != l.moe_ep_rank || b.ep_size != l.moe_ep_size || b.tp_rank != l.moe_tp_rank ||
      b.tp_size != l.moe_tp_size)
    return invalid_argument("ParallelMoe::create: the backend holds expert shard ", b.ep_rank, " of ", b.ep_size,
                            " and intermediate shard ", b.tp_rank, " of ", b.tp_size, ", but world rank ", rank,
                            " of (dp ", config.dp, ", tp ", config.tp, ", ep ", config.ep, ") holds expert shard ",
                            l.moe_ep_rank, " of ", l.moe_ep_size, " and intermediate shard ", l.moe_tp_rank, " of ",
                            l.moe_tp_size);
  return Status::Ok();
}

Status ParallelMoe::create(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy,
                           comm::Communicator* world, std::unique_ptr<ExpertBackend> backend,
                           const ParallelMoeOptions& options, std::unique_ptr<ParallelMoe>* out) {
  if (!out) return invalid_argument("ParallelMoe::create: out is null");
  if (!world) return invalid_argument("ParallelMoe::create: world communicator is null");
  if (!backend) return invalid_argument("ParallelMoe::create: backend is null");
  if (backend->memory_space() != world->memory_space())
    return invalid_argument("ParallelMoe::create: the backend's memory (",
                            backend->memory_space() == comm::MemorySpace::kHost ? "host" : "device",
                            ") is not the communicator's");
  auto impl = std::make_unique<Impl>();
  impl->problem = problem;
  impl->config = config;
  impl->strategy = strategy;
  impl->options = options;
  impl->world = world;
  impl->backend = std::move(backend);
  Impl& m = *impl;
  const int world_size = world->size();
  const int64_t H = problem.hidden_size, K = problem.top_k();
  FP4MOE_RETURN_IF_ERROR(m.small.allocate(m.backend.get(), sizeof(int64_t) * (2 * size_t(world_size) + 2)));

  // Agree first, validate second: every rank reaches the exchange even when its own config is bad, so a
  // rank-local mistake is reported (by everyone) as a mismatch instead of leaving the others waiting.
  // Whether the backend fits this rank is part of the agreement for the same reason (the rank whose
  // backend does not fit reports why).
  const Status backend_fits = check_backend_fits(problem, config, strategy, world->rank(), *m.backend);
  const Status agreed = check_same_config(
      *world, *m.backend,
      config_signature(problem, config, strategy) + ";quantized_dispatch=" + to_string(options.quantized_dispatch) +
          ";backend=" + (backend_fits.ok() ? "fits" : "does-not-fit"));
  FP4MOE_RETURN_IF_ERROR(backend_fits);
  FP4MOE_RETURN_IF_ERROR(agreed);
  FP4MOE_RETURN_IF_ERROR(validate(problem));
  FP4MOE_RETURN_IF_ERROR(validate(config, problem, world_size));
  FP4MOE_RETURN_IF_ERROR(check_strategy(config, strategy));
  FP4MOE_RETURN_IF_ERROR(resolve_quantized_dispatch(options.quantized_dispatch, problem, strategy, &m.quantized));
  if (problem.max_tokens < 0) return invalid_argument("max_tokens = ", problem.max_tokens, " must be >= 0");
  m.layout = rank_layout(config, world->rank());

  if (m.quantized) {
    // The shared input scale: the largest a13_scale_2 of all experts. Each rank knows those of the
    // experts it holds (EP: its shard; all of them otherwise), so the max of the ranks' maxima over the
    // world is the layer's, and the same value on every rank.
    // A rank whose backend fails still takes part (sending NaN), so nobody waits for it.
    float mine = 0.0f;
    const Status own = m.backend->max_input_scale_2(&mine);
    if (!own.ok()) mine = std::numeric_limits<float>::quiet_NaN();
    Buffer dev;
    FP4MOE_RETURN_IF_ERROR(dev.allocate(m.backend.get(), sizeof(float) * (size_t(world_size) + 1)));
    FP4MOE_RETURN_IF_ERROR(m.backend->copy_from_host(dev.get(), &mine, sizeof(float)));
    FP4MOE_RETURN_IF_ERROR(world->all_gather_v(dev.get(), 1, dev.get<float>() + 1, comm::equal_counts(world_size, 1),
                                               comm::DataType::kF32));
    FP4MOE_RETURN_IF_ERROR(world->synchronize());  // with the deadline, before the host reads
    std::vector<float> all(world_size);
    FP4MOE_RETURN_IF_ERROR(m.backend->copy_to_host(all.data(), dev.get<float>() + 1, sizeof(float) * world_size));
    FP4MOE_RETURN_IF_ERROR(own);
    float shared = 0.0f;
    for (int r = 0; r < world_size; ++r) {
      if (!(all[r] > 0.0f) || !std::isfinite(all[r]))
        return invalid_argument("quantized dispatch: world rank ", r, "'s largest a13_scale_2 is ", all[r],
                                "; input scales must be finite and > 0");
      shared = std::max(shared, all[r]);
    }
    m.dispatch_scale_2 = shared;
    m.dispatch_gs = 1.0f / shared;  // as the expert layer derives its encode scale from a13_scale_2
    FP4MOE_RETURN_IF_ERROR(m.backend->use_prequantized_input(shared));
  }

  if (world_size > 1) {
    FP4MOE_RETURN_IF_ERROR(world->split(m.layout.tp_rank, m.layout.dp_rank, "dp", &m.dp_comm));
    FP4MOE_RETURN_IF_ERROR(world->split(m.layout.dp_rank, m.layout.tp_rank, "tp", &m.tp_comm));
  }

  m.hidden_bytes = size_t(H) * 2;
  // NVFP4 rows are 9H/16 bytes, 2 mod 4 when H = 32 mod 64: padded to 16 bytes so that records (and
  // the ids and weights inside them) stay aligned for the GPU backend's word-wise row gathers.
  m.wire_bytes = m.quantized ? (size_t(detail::dispatch_row_bytes(H)) + 15) / 16 * 16 : m.hidden_bytes;
  m.ids_bytes = size_t(K) * 4;
  m.record_bytes = m.wire_bytes + 2 * m.ids_bytes;
  m.out_row_bytes = size_t(H) * comm::size_of(m.backend->output_type());
  const size_t T = size_t(problem.max_tokens);
  const size_t expert_tokens = size_t(max_expert_tokens(config, strategy, problem.max_tokens));
  ExpertBackend* b = m.backend.get();
  FP4MOE_RETURN_IF_ERROR(m.route_ids.allocate(b, T * m.ids_bytes));
  FP4MOE_RETURN_IF_ERROR(m.route_weights.allocate(b, T * m.ids_bytes));
  if (strategy == Strategy::kAllGatherReduceScatter || strategy == Strategy::kAllToAll) {
    FP4MOE_RETURN_IF_ERROR(m.records.allocate(b, T * m.record_bytes));
    FP4MOE_RETURN_IF_ERROR(m.recv_records.allocate(b, expert_tokens * m.record_bytes));
    FP4MOE_RETURN_IF_ERROR(m.x.allocate(b, expert_tokens * m.hidden_bytes));
    FP4MOE_RETURN_IF_ERROR(m.ids.allocate(b, expert_tokens * m.ids_bytes));
    FP4MOE_RETURN_IF_ERROR(m.weights.allocate(b, expert_tokens * m.ids_bytes));
    FP4MOE_RETURN_IF_ERROR(m.partial.allocate(b, expert_tokens * m.out_row_bytes));
  }
  if (strategy == Strategy::kAllGatherReduceScatter && T > 0) {
    // Filler records for graph mode: zero hidden states (with quantized dispatch zero codes and zero
    // block scales, which expand to exact zeros: no NaN from garbage), router weights 0, and every
    // filler row on the same k experts, j * (E / k): they add at most k experts' weight reads per step
    // (decode is bound by those), spread over the EP ranks rather than all on one.
    std::vector<uint8_t> host(T * m.record_bytes, 0);
    const int E = problem.num_experts();
    for (size_t i = 0; i < T; ++i) {
      auto* ids = reinterpret_cast<int32_t*>(host.data() + i * m.record_bytes + m.wire_bytes);
      for (int64_t j = 0; j < K; ++j) ids[j] = int32_t(j * (E / K));
    }
    FP4MOE_RETURN_IF_ERROR(m.filler.allocate(b, host.size()));
    FP4MOE_RETURN_IF_ERROR(b->copy_from_host(m.filler.get(), host.data(), host.size()));
    FP4MOE_RETURN_IF_ERROR(m.padded_out.allocate(b, T * m.out_row_bytes));
  }
  if (strategy == Strategy::kAllToAll) {
    // A token goes at most once to each rank holding one of its k experts.
    const size_t fan_out = size_t(std::min<int64_t>(K, world_size));
    FP4MOE_RETURN_IF_ERROR(m.send_records.allocate(b, T * fan_out * m.record_bytes));
    FP4MOE_RETURN_IF_ERROR(m.returned.allocate(b, T * fan_out * m.out_row_bytes));
    FP4MOE_RETURN_IF_ERROR(m.slice_out.allocate(b, T * m.out_row_bytes));
  }
  *out = std::unique_ptr<ParallelMoe>(new ParallelMoe(std::move(impl)));
  return Status::Ok();
}

Status check_same_config(comm::Communicator& world, ExpertBackend& backend, const std::string& signature) {
  constexpr size_t kBytes = 1024;
  if (signature.size() >= kBytes)
    return internal_error("config signature of ", signature.size(), " bytes exceeds ", kBytes - 1);
  const int n = world.size();
  std::vector<char> mine(kBytes, '\0');
  std::memcpy(mine.data(), signature.data(), signature.size());
  Buffer dev;
  FP4MOE_RETURN_IF_ERROR(dev.allocate(&backend, kBytes * (n + 1)));
  FP4MOE_RETURN_IF_ERROR(backend.copy_from_host(dev.get(), mine.data(), kBytes));
  FP4MOE_RETURN_IF_ERROR(
      world.all_gather_v(dev.get(), kBytes, dev.bytes_at(kBytes), comm::equal_counts(n, kBytes), comm::DataType::kU8));
  FP4MOE_RETURN_IF_ERROR(world.synchronize());  // with the deadline, before the host reads
  std::vector<char> all(kBytes * n);
  FP4MOE_RETURN_IF_ERROR(backend.copy_to_host(all.data(), dev.bytes_at(kBytes), all.size()));
  auto text = [&](int r) { return std::string(all.data() + size_t(r) * kBytes); };
  const std::string ref_text = text(0);
  for (int r = 1; r < n; ++r) {
    const std::string other = text(r);
    if (other == ref_text) continue;
    // Name the differing fields (the signature is "key=value;..." with keys in a fixed order).
    auto split = [](const std::string& s) {
      std::vector<std::string> parts;
      std::stringstream ss(s);
      for (std::string item; std::getline(ss, item, ';');) parts.push_back(item);
      return parts;
    };
    const auto a = split(ref_text), b = split(other);
    std::string diff;
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
      if (x != y) diff += detail::concat(diff.empty() ? "" : ", ", "rank 0 ", x, " vs rank ", r, " ", y);
    }
    return invalid_argument(describe(world), ": configuration mismatch across ranks: ", diff, " (rank 0: '", ref_text,
                            "', rank ", r, ": '", other, "')");
  }
  return Status::Ok();
}

ParallelMoe::ParallelMoe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ParallelMoe::~ParallelMoe() = default;
const RankLayout& ParallelMoe::layout() const { return impl_->layout; }
ExpertBackend& ParallelMoe::backend() const { return *impl_->backend; }
bool ParallelMoe::quantized_dispatch() const { return impl_->quantized; }
float ParallelMoe::dispatch_input_scale_2() const { return impl_->dispatch_scale_2; }
size_t ParallelMoe::dispatch_record_bytes() const { return impl_->record_bytes; }

Status ParallelMoe::forward(const Args& a, StepTimes* times) {
  Status s = impl_->forward(a, times);
  // A rank that leaves a step early would make its peers in other groups wait for their deadline: tell
  // them now (the reason travels with the abort, so they still learn which rank and operation failed).
  if (!s.ok()) impl_->abort_all(s.message());
  return s;
}

Status ParallelMoe::check_device_errors() { return impl_->backend->check_device_errors(); }

Status ParallelMoe::synchronize() {
  // Every communicator first: each polls its own asynchronous error with the deadline, so a failed
  // peer in any group ends the wait; the backend's plain stream synchronize only once that is done.
  Status s = Status::Ok();
  for (comm::Communicator* c : {impl_->dp_comm.get(), impl_->tp_comm.get(), impl_->world})
    if (s.ok() && c) s = c->synchronize();
  if (s.ok()) s = impl_->backend->synchronize();
  if (!s.ok()) impl_->abort_all(s.message());
  return s;
}

Status ParallelMoe::Impl::forward(const Args& a, StepTimes* times) {
  const int64_t T = a.num_tokens, H = problem.hidden_size;
  if (T < 0 || T > problem.max_tokens)
    return invalid_argument("num_tokens = ", T, " must be in [0, max_tokens = ", problem.max_tokens, "]");
  const bool has_logits = a.router_logits != nullptr;
  const bool has_topk = a.topk_ids != nullptr || a.topk_weights != nullptr;
  if (T > 0) {
    if (!a.hidden) return invalid_argument("hidden is null with num_tokens = ", T);
    if (!a.out) return invalid_argument("out is null with num_tokens = ", T);
    if (has_logits == has_topk)
      return invalid_argument("give either router_logits or (topk_ids and topk_weights), not ",
                              has_logits ? "both" : "neither");
    if (has_topk && (!a.topk_ids || !a.topk_weights))
      return invalid_argument("topk_ids and topk_weights go together: ", a.topk_ids ? "topk_weights" : "topk_ids",
                              " is null");
    for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"hidden", a.hidden}, {"out", a.out},
                                    {"router_logits", a.router_logits}, {"topk_ids", a.topk_ids},
                                    {"topk_weights", a.topk_weights}})
      FP4MOE_RETURN_IF_ERROR(backend->check_caller_buffer(name, ptr));
    FP4MOE_RETURN_IF_ERROR(
        check_disjoint({"out", a.out, size_t(T) * size_t(H) * comm::size_of(backend->output_type())},
                       forward_inputs(problem, T, a.hidden, a.router_logits, a.logits_type, a.topk_ids,
                                      a.topk_weights)));
  }
  const int64_t P = a.padded_tokens;
  const bool graph_mode = P >= 0;
  if (P < -1) return invalid_argument("padded_tokens = ", P, " must be -1 (off) or in [num_tokens, max_tokens]");
  if (graph_mode) {
    if (strategy == Strategy::kAllToAll)
      return invalid_argument("padded_tokens = ", P, ": strategy alltoall has no CUDA-graph mode (its exchange sizes ",
                              "depend on the routing); use allgather-reducescatter");
    if (P < T || P > problem.max_tokens)
      return invalid_argument("padded_tokens = ", P, " must be in [num_tokens = ", T, ", max_tokens = ",
                              problem.max_tokens, "]");
  }
  if (times) *times = StepTimes{};
  Clock::time_point t0 = Clock::now();

  const int32_t* topk_ids = a.topk_ids;
  const float* topk_weights = a.topk_weights;
  if (T > 0 && has_logits) {
    FP4MOE_RETURN_IF_ERROR(
        backend->route(a.router_logits, a.logits_type, T, route_ids.get<int32_t>(), route_weights.get<float>()));
    topk_ids = route_ids.get<int32_t>();
    topk_weights = route_weights.get<float>();
  }
  const comm::DataType out_type = backend->output_type();

  switch (strategy) {
    case Strategy::kNone: {
      Clock::time_point t1 = Clock::now();
      FP4MOE_RETURN_IF_ERROR(backend->run_experts(a.hidden, topk_ids, topk_weights, T, a.out));
      if (times) {
        FP4MOE_RETURN_IF_ERROR(backend->synchronize());
        times->dispatch_s = std::chrono::duration<double>(t1 - t0).count();
        times->experts_s = seconds_since(t1);
      }
      return Status::Ok();
    }
    case Strategy::kTpAllReduce: {
      FP4MOE_RETURN_IF_ERROR(check_replicated_count(T));
      Clock::time_point t1 = Clock::now();
      FP4MOE_RETURN_IF_ERROR(backend->run_experts(a.hidden, topk_ids, topk_weights, T, a.out));
      if (times) FP4MOE_RETURN_IF_ERROR(backend->synchronize());
      Clock::time_point t2 = Clock::now();
      FP4MOE_RETURN_IF_ERROR(world->all_reduce_sum(a.out, a.out, size_t(T * H), out_type));
      if (!graph_mode || times) FP4MOE_RETURN_IF_ERROR(world->synchronize());
      record_step_times(times, t0, t1, t2);
      return Status::Ok();
    }
    case Strategy::kAllGatherReduceScatter: {
      if (graph_mode) return forward_padded(a.hidden, topk_ids, topk_weights, T, P, a.out, times);
      FP4MOE_RETURN_IF_ERROR(check_replicated_count(T));
      std::vector<int64_t> counts;
      FP4MOE_RETURN_IF_ERROR(exchange_counts(*dp_comm, T, &counts));
      int64_t total = 0;
      for (int64_t c : counts) total += c;
      FP4MOE_RETURN_IF_ERROR(pack(a.hidden, topk_ids, topk_weights, T, records.get()));
      FP4MOE_RETURN_IF_ERROR(dp_comm->all_gather_v(records.get(), size_t(T) * record_bytes, recv_records.get(),
                                                   scaled(counts, record_bytes), comm::DataType::kU8));
      FP4MOE_RETURN_IF_ERROR(unpack(recv_records.get(), total));
      FP4MOE_RETURN_IF_ERROR(dp_comm->synchronize());
      Clock::time_point t1 = Clock::now();
      FP4MOE_RETURN_IF_ERROR(
          backend->run_experts(x.get<uint16_t>(), ids.get<int32_t>(), weights.get<float>(), total, partial.get()));
      if (times) FP4MOE_RETURN_IF_ERROR(backend->synchronize());
      Clock::time_point t2 = Clock::now();
      FP4MOE_RETURN_IF_ERROR(dp_comm->reduce_scatter_v_sum(partial.get(), scaled(counts, size_t(H)), a.out, out_type));
      // The DP group's TP ranks computed different slices/experts for the same tokens: add them up.
      if (tp_comm && tp_comm->size() > 1)
        FP4MOE_RETURN_IF_ERROR(tp_comm->all_reduce_sum(a.out, a.out, size_t(T * H), out_type));
      FP4MOE_RETURN_IF_ERROR(world->synchronize());
      record_step_times(times, t0, t1, t2);
      return Status::Ok();
    }
    case Strategy::kAllToAll:
      return forward_alltoall(a.hidden, topk_ids, topk_weights, T, a.out, times);
  }
  return internal_error("strategy = ", int(strategy), " has no forward");
}

// allgather-reducescatter in graph mode: P rows per rank, fixed sizes, no host waits (unless timed).
Status ParallelMoe::Impl::forward_padded(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                                         int64_t T, int64_t P, void* out, StepTimes* times) {
  Clock::time_point t0 = Clock::now();
  const int64_t H = problem.hidden_size;
  const comm::DataType out_type = backend->output_type();
  FP4MOE_RETURN_IF_ERROR(check_replicated_count(T));
  FP4MOE_RETURN_IF_ERROR(check_same_padding(P));
  const int dp = dp_comm ? dp_comm->size() : 1;
  const int64_t total = int64_t(dp) * P;
  FP4MOE_RETURN_IF_ERROR(pack(hidden, topk_ids, topk_weights, T, records.get()));
  if (P > T)
    FP4MOE_RETURN_IF_ERROR(backend->copy_2d(records.bytes_at(size_t(T) * record_bytes), record_bytes,
                                            filler.bytes_at(size_t(T) * record_bytes), record_bytes, record_bytes,
                                            size_t(P - T)));
  if (dp > 1) {
    FP4MOE_RETURN_IF_ERROR(dp_comm->all_gather_v(records.get(), size_t(P) * record_bytes, recv_records.get(),
                                                 comm::equal_counts(dp, size_t(P) * record_bytes), comm::DataType::kU8));
    FP4MOE_RETURN_IF_ERROR(unpack(recv_records.get(), total));
  } else {
    FP4MOE_RETURN_IF_ERROR(unpack(records.get(), total));
  }
  if (times) FP4MOE_RETURN_IF_ERROR(world->synchronize());
  Clock::time_point t1 = Clock::now();
  FP4MOE_RETURN_IF_ERROR(
      backend->run_experts(x.get<uint16_t>(), ids.get<int32_t>(), weights.get<float>(), total, partial.get()));
  if (times) FP4MOE_RETURN_IF_ERROR(backend->synchronize());
  Clock::time_point t2 = Clock::now();
  if (dp > 1) {
    FP4MOE_RETURN_IF_ERROR(dp_comm->reduce_scatter_v_sum(partial.get(), comm::equal_counts(dp, size_t(P * H)),
                                                         padded_out.get(), out_type));
    if (T > 0)
      FP4MOE_RETURN_IF_ERROR(backend->copy_2d(out, out_row_bytes, padded_out.get(), out_row_bytes, out_row_bytes,
                                              size_t(T)));
  } else if (T > 0) {
    FP4MOE_RETURN_IF_ERROR(backend->copy_2d(out, out_row_bytes, partial.get(), out_row_bytes, out_row_bytes, size_t(T)));
  }
  if (tp_comm && tp_comm->size() > 1)
    FP4MOE_RETURN_IF_ERROR(tp_comm->all_reduce_sum(out, out, size_t(T * H), out_type));
  if (times) FP4MOE_RETURN_IF_ERROR(world->synchronize());
  record_step_times(times, t0, t1, t2);
  return Status::Ok();
}

Status ParallelMoe::Impl::forward_alltoall(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                                           int64_t T, void* out, StepTimes* times) {
  Clock::time_point t0 = Clock::now();
  const int64_t H = problem.hidden_size, K = problem.top_k();
  const int E = problem.num_experts();
  const int world_size = world->size();
  const int experts_per_rank = E / config.ep;
  FP4MOE_RETURN_IF_ERROR(check_replicated_count(T));

  // The DP group's TP ranks hold the same T tokens: each sends its contiguous share of them (the first
  // T % tp ranks one more) and the shares are all-gathered at the end.
  const int tp = config.tp, tp_rank = layout.tp_rank;
  std::vector<int64_t> share(tp), share_begin(tp + 1, 0);
  for (int i = 0; i < tp; ++i) {
    share[i] = T / tp + (i < T % tp ? 1 : 0);
    share_begin[i + 1] = share_begin[i] + share[i];
  }
  const int64_t n = share[tp_rank], begin = share_begin[tp_rank];
  const uint16_t* my_hidden = hidden ? hidden + begin * H : nullptr;
  const int32_t* my_ids = topk_ids ? topk_ids + begin * K : nullptr;
  const float* my_weights = topk_weights ? topk_weights + begin * K : nullptr;

  // Plan on the host: each token once to every rank that owns one of its experts, grouped by destination
  // rank (ascending), tokens in order inside a group.
  host_ids.resize(size_t(n * K));
  if (n) FP4MOE_RETURN_IF_ERROR(backend->copy_to_host(host_ids.data(), my_ids, host_ids.size() * sizeof(int32_t)));
  for (int64_t i = 0; i < n * K; ++i)
    if (host_ids[i] < 0 || host_ids[i] >= E)
      return invalid_argument("topk_ids[", begin * K + i, "] = ", host_ids[i], " is outside [0, num_experts = ", E, ")");
  std::vector<int64_t> send_counts(world_size, 0);
  send_index.clear();
  std::vector<int32_t> dests;
  std::vector<std::vector<int32_t>> per_dest(world_size);
  for (int64_t t = 0; t < n; ++t) {
    dests.clear();
    for (int j = 0; j < K; ++j) dests.push_back(host_ids[t * K + j] / experts_per_rank);
    std::sort(dests.begin(), dests.end());
    dests.erase(std::unique(dests.begin(), dests.end()), dests.end());
    for (int d : dests) per_dest[d].push_back(int32_t(t));
  }
  for (int d = 0; d < world_size; ++d) {
    send_counts[d] = int64_t(per_dest[d].size());
    send_index.insert(send_index.end(), per_dest[d].begin(), per_dest[d].end());
  }
  const int64_t num_send = int64_t(send_index.size());

  // Counts: rank a tells rank b how many records to expect.
  FP4MOE_RETURN_IF_ERROR(backend->copy_from_host(small.get(), send_counts.data(), sizeof(int64_t) * world_size));
  int64_t* recv_counts_dev = small.get<int64_t>() + world_size;
  FP4MOE_RETURN_IF_ERROR(world->all_to_all_v(small.get(), comm::equal_counts(world_size, 1), recv_counts_dev,
                                             comm::equal_counts(world_size, 1), comm::DataType::kI64));
  FP4MOE_RETURN_IF_ERROR(world->synchronize());  // with the deadline, before the host reads
  std::vector<int64_t> recv_counts(world_size);
  FP4MOE_RETURN_IF_ERROR(backend->copy_to_host(recv_counts.data(), recv_counts_dev, sizeof(int64_t) * world_size));
  int64_t num_recv = 0;
  for (int64_t c : recv_counts) num_recv += c;

  FP4MOE_RETURN_IF_ERROR(pack(my_hidden, my_ids, my_weights, n, records.get()));
  if (num_send)
    FP4MOE_RETURN_IF_ERROR(backend->gather_rows(records.get(), send_index.data(), num_send, record_bytes, send_records.get()));
  FP4MOE_RETURN_IF_ERROR(world->all_to_all_v(send_records.get(), scaled(send_counts, record_bytes), recv_records.get(),
                                             scaled(recv_counts, record_bytes), comm::DataType::kU8));
  FP4MOE_RETURN_IF_ERROR(unpack(recv_records.get(), num_recv));
  FP4MOE_RETURN_IF_ERROR(world->synchronize());
  Clock::time_point t1 = Clock::now();

  FP4MOE_RETURN_IF_ERROR(
      backend->run_experts(x.get<uint16_t>(), ids.get<int32_t>(), weights.get<float>(), num_recv, partial.get()));
  if (times) FP4MOE_RETURN_IF_ERROR(backend->synchronize());
  Clock::time_point t2 = Clock::now();

  // The way back, then each token sums what its destinations computed, in ascending rank order.
  const comm::DataType out_type = backend->output_type();
  FP4MOE_RETURN_IF_ERROR(world->all_to_all_v(partial.get(), scaled(recv_counts, size_t(H)), returned.get(),
                                             scaled(send_counts, size_t(H)), out_type));
  void* acc = tp > 1 ? slice_out.get() : out;
  FP4MOE_RETURN_IF_ERROR(backend->zero(acc, size_t(n) * out_row_bytes));
  // One call per destination: its tokens are distinct, and the calls go in ascending rank order.
  int64_t row = 0;
  for (int d = 0; d < world_size; ++d) {
    if (send_counts[d])
      FP4MOE_RETURN_IF_ERROR(backend->scatter_add_rows(static_cast<const uint8_t*>(returned.get()) + row * out_row_bytes,
                                                       send_index.data() + row, send_counts[d], acc));
    row += send_counts[d];
  }
  if (tp > 1)
    FP4MOE_RETURN_IF_ERROR(tp_comm->all_gather_v(slice_out.get(), size_t(n * H), out, scaled(share, size_t(H)), out_type));
  FP4MOE_RETURN_IF_ERROR(world->synchronize());
  record_step_times(times, t0, t1, t2);
  return Status::Ok();
}

}  // namespace fp4moe
