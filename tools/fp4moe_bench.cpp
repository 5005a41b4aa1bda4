// fp4moe-bench: times one MoE layer per token count and reports it against the physical floor.
//
//   fp4moe-bench --preset deepseek-r1 --tokens 1,128,8192 [--mode w4a16|w4a4] [--check] [--json FILE]
//
// At start it measures the two ceilings of this GPU: device copy bandwidth (bytes read + written per
// second) and the bf16 matmul rate (cuBLAS, 8192^3) sustained, i.e. after 1.5 s of back-to-back
// GEMMs (a loaded H200 runs into its power cap, and its SM clock drops from ~1.98 GHz to ~1.4-1.5;
// the rate of a cold burst is reported too). Per token count: median latency of stream launches and
// of CUDA-graph replays (device events, after a warm-up of at least --warmup launches of each and
// --warmup-ms milliseconds, at most 200 ms under --tune; the two timed alternately, 10 launches of
// one then 10 of the other, so that both run in the same power state; inputs rotated over more than
// 3x L2 across both, each input set with its own routing), effective TB/s over the bytes of the
// experts the routing touched (the median input set's count), TFLOP/s, and the ratio to the floor =
// max(touched expert bytes / copy bandwidth, FLOPs / sustained matmul rate). --check compares a
// sample of tokens with the fp64 reference. --clocks reads the SM clock and the board's energy
// (NVML, tools/gpu_clocks.h) over each token count's timed launches. By default the host waits for
// each timed launch before the next, so each starts on an idle GPU and its time includes its own
// launch latency; --back-to-back queues them behind each other, as a
// model's layers run, and times each from the event before it to the event after it. Without a GPU
// it says so and runs the CPU reference on a scaled-down preset instead.
#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fp4moe/checkpoint.h"
#include "fp4moe/moe.h"
#include "fp4moe/moe_gpu.h"
#include "fp4moe/numerics.h"
#include "reference/moe_reference.h"
#include "src/gemm/sm90/tune.h"
#include "src/moe/workspace.h"
#include "tools/check_error.h"
#include "tools/cli_args.h"
#include "tools/gpu_clocks.h"
#include "tools/routing_file.h"
#include "tools/timing_schedule.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace {

using namespace fp4moe;

struct Options {
  std::string preset = "deepseek-r1";
  std::vector<int64_t> tokens = {1, 128, 8192};
  Mode mode = Mode::kW4A16;
  KernelPath path = KernelPath::kAuto;
  bool check = false;
  bool verbose = false;
  std::string json;
  int iters = 50;
  int warmup = 5;
  double warmup_ms = 500;  // and at least this long (the power state of sustained use)
  uint64_t seed = 1234;
  int scale = 1;        // divide H and I (smaller runs)
  int check_tokens = 16;  // tokens compared with the reference per token count, spread over T
  bool random_routing = false;  // uniform random distinct top-k (as the peers' anchors) instead of the router
  std::string checkpoint;       // --checkpoint DIR: a real layer instead of dummy weights
  int layer = -1;               // --layer L (default: the first MoE layer)
  std::string tune_out;         // --tune FILE: measure every compiled config per token count, write FILE
  std::string tune_file;        // --tune-file FILE: use measured choices
  std::vector<std::string> tune_only;  // --tune-only A,B: measure only these compiled configs
  bool split_k = false;         // --split-k: LayerOptions::split_k
  bool tail_tiles = true;       // --no-tail-tiles: LayerOptions::tail_tiles off
  bool gemm_overlap = true;     // --no-gemm-overlap: LayerOptions::gemm_overlap off
  bool range_split = true;      // --no-range-split: LayerOptions::range_split off
  bool direct_gemm1 = true;     // --no-direct-gemm1: LayerOptions::direct_gemm1 off
  int max_sms = 0;              // --max-sms N: LayerOptions::max_sms
  std::string dump_routing;     // --dump-routing DIR: each token count's routing for bench/peers_torch.py
  bool trace = false;           // --trace: each kernel's timeline in one graph replay (FP4MOE_TRACE builds)
  bool clocks = false;          // --clocks: the SM clock and power over each timing loop (NVML, tools/gpu_clocks.h)
  bool back_to_back = false;    // --back-to-back: time launches queued back to back (no host wait between them)
  std::string argv;
  std::set<std::string> given;  // the flags on the command line (to say which ones a run does not apply)
};

[[noreturn]] void usage(const char* msg) {
  const bool help = msg == nullptr;  // --help: the usage on stdout, status 0
  std::fprintf(help ? stdout : stderr,
               "%s%s%s"
               "usage: fp4moe-bench [--preset NAME] [--tokens 1,128,8192] [--mode w4a16|w4a4] [--path auto|sm90|simt]\n"
               "                    [--check] [--check-tokens N] [--json FILE] [--iters N] [--warmup N]\n"
               "                    [--warmup-ms MS] [--seed N] [--scale N] [--routing model|random]\n"
               "                    [--tune FILE [--tune-only NAME,NAME]] [--tune-file FILE]\n"
               "                    [--checkpoint DIR [--layer L]]\n"
               "                    [--split-k] [--no-tail-tiles] [--no-gemm-overlap] [--no-direct-gemm1]\n"
               "                    [--no-range-split] [--max-sms N] [--verbose]\n"
               "                    [--dump-routing DIR] [--trace] [--clocks] [--back-to-back]\n",
               help ? "" : "error: ", help ? "" : msg, help ? "" : "\n");
  std::exit(help ? 0 : 2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) o.argv += std::string(i ? " " : "") + argv[i];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    o.given.insert(a);
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    // (every count is bounded: a value past the bound is refused, never wrapped into an int)
    auto integer = [&](const std::string& v, int64_t lo = 0, int64_t hi = int64_t(1) << 30) {
      int64_t x = 0;
      const std::string err = cli::parse_int(a, v, lo, hi, &x);
      if (!err.empty()) usage(err.c_str());
      return x;
    };
    if (a == "--preset") o.preset = value();
    else if (a == "--tokens") {
      o.tokens.clear();
      const std::string list = value();
      std::stringstream ss(list);
      // (getline drops an empty last item: "1,8," would pass as "1,8")
      if (!list.empty() && list.back() == ',') usage(("--tokens '" + list + "' ends with an empty item").c_str());
      for (std::string t; std::getline(ss, t, ',');) o.tokens.push_back(integer(t, 1));
      if (o.tokens.empty()) usage("--tokens is empty");
    } else if (a == "--mode") {
      Status s = parse_mode(value(), &o.mode);
      if (!s.ok()) usage(s.message().c_str());
    } else if (a == "--path") {
      Status s = parse_kernel_path(value(), &o.path);
      if (!s.ok()) usage(s.message().c_str());
    } else if (a == "--check") o.check = true;
    else if (a == "--check-tokens") o.check_tokens = int(integer(value(), 1));
    else if (a == "--checkpoint") {
      o.checkpoint = value();
      if (o.checkpoint.empty()) usage("--checkpoint is empty");
    }
    else if (a == "--layer") o.layer = int(integer(value(), 0, 1 << 20));
    else if (a == "--tune") o.tune_out = value();
    else if (a == "--tune-file") o.tune_file = value();
    else if (a == "--tune-only") {
      const std::vector<std::string> known = MoeLayer::sm90_config_names();
      std::stringstream ss(value());
      for (std::string n; std::getline(ss, n, ',');) {
        if (std::find(known.begin(), known.end(), n) == known.end()) {
          std::string all;
          for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
          usage(("--tune-only: '" + n + "' is not a compiled config (one of: " + all + ")").c_str());
        }
        o.tune_only.push_back(n);
      }
      if (o.tune_only.empty()) usage("--tune-only is empty");
    }
    else if (a == "--routing") {
      const std::string r = value();
      if (r == "random") o.random_routing = true;
      else if (r == "model") o.random_routing = false;
      else usage(("--routing = '" + r + "' is not one of: model, random").c_str());
    }
    else if (a == "--verbose") o.verbose = true;
    else if (a == "--clocks") o.clocks = true;
    else if (a == "--back-to-back") o.back_to_back = true;
    else if (a == "--trace") {
#if FP4MOE_TRACE
      o.trace = true;
#else
      usage("--trace needs a build configured with -DFP4MOE_TRACE=ON (the kernels record their times only there)");
#endif
    }
    else if (a == "--split-k") o.split_k = true;
    else if (a == "--no-tail-tiles") o.tail_tiles = false;
    else if (a == "--no-gemm-overlap") o.gemm_overlap = false;
    else if (a == "--no-range-split") o.range_split = false;
    else if (a == "--no-direct-gemm1") o.direct_gemm1 = false;
    else if (a == "--max-sms") o.max_sms = int(integer(value(), 0, 1 << 20));  // (0: every SM)
    else if (a == "--dump-routing") o.dump_routing = value();
    else if (a == "--json") o.json = value();
    else if (a == "--iters") o.iters = int(integer(value(), 1));
    else if (a == "--warmup") o.warmup = int(integer(value()));
    else if (a == "--warmup-ms") o.warmup_ms = double(integer(value(), 0, 3600 * 1000));
    else if (a == "--seed") o.seed = uint64_t(integer(value(), 0, INT64_MAX));
    else if (a == "--scale") o.scale = int(integer(value(), 1, 1 << 20));
    else if (a == "--help" || a == "-h") usage(nullptr);
    else usage(("unknown argument '" + a + "'").c_str());
  }
  if (!o.tune_only.empty() && o.tune_out.empty()) usage("--tune-only needs --tune FILE");
  // Files the run writes at its end, or reads at its start: checked now, not after minutes of work.
  for (const std::string& err :
       {o.json.empty() ? "" : cli::check_writable("--json", o.json),
        o.tune_out.empty() ? "" : cli::check_writable("--tune", o.tune_out),
        o.tune_file.empty() ? "" : cli::check_readable("--tune-file", o.tune_file),
        o.dump_routing.empty() ? "" : cli::check_writable_dir("--dump-routing", o.dump_routing)})
    if (!err.empty()) usage(err.c_str());
  // A checkpoint's config.json gives the problem: a preset or a scale would be silently dropped.
  if (!o.checkpoint.empty())
    for (const char* flag : {"--preset", "--scale"})
      if (o.given.count(flag))
        usage((std::string(flag) + " does not apply with --checkpoint (the checkpoint's config gives the problem)").c_str());
  if (o.checkpoint.empty()) {
    MoeProblem p;
    if (Status s = get_preset(o.preset, &p); !s.ok()) usage(s.message().c_str());
    if (o.layer >= 0) usage("--layer needs --checkpoint DIR");
  }
  return o;
}

#define CHECK_CUDA(expr)                                                                                   \
  do {                                                                                                     \
    cudaError_t e_ = (expr);                                                                               \
    if (e_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "error: %s failed: %s (%s:%d)\n", #expr, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)
#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    ::fp4moe::Status s_ = (expr);                                              \
    if (!s_.ok()) {                                                            \
      std::fprintf(stderr, "error: %s: %s\n", #expr, s_.to_string().c_str()); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string now_utc() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string commit() {
#ifdef FP4MOE_GIT_COMMIT
  return FP4MOE_GIT_COMMIT;
#else
  return "unknown";
#endif
}

// ---- Ceilings ----------------------------------------------------------------------------------

struct Ceilings {
  double copy_tbps = 0;
  double bf16_tflops = 0;        // sustained: the floor's and the "of bf16 rate" ceiling
  double bf16_burst_tflops = 0;  // from idle, 10 GEMMs (the ceiling of results before 2026-11-30 s8)
};

Ceilings measure_ceilings() {
  Ceilings c;
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 3) ms.push_back(t);
  }
  c.copy_tbps = 2.0 * double(bytes) / (median(ms) * 1e-3) / 1e12;
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));

  const int n = 8192;
  uint16_t *A, *B;
  float* C;
  CHECK_CUDA(cudaMalloc(&A, size_t(n) * n * 2));
  CHECK_CUDA(cudaMalloc(&B, size_t(n) * n * 2));
  CHECK_CUDA(cudaMalloc(&C, size_t(n) * n * 4));
  {
    // Random bf16 operands (zeros run faster than real data).
    std::vector<uint16_t> h(size_t(n) * n);
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0, 1);
    for (auto& x : h) x = float_to_bf16(d(rng));
    CHECK_CUDA(cudaMemcpy(A, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(B, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "error: cublasCreate failed\n");
    std::exit(1);
  }
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&] {
    if (cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                     CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "error: cublasGemmEx failed\n");
      std::exit(1);
    }
  };
  // The median of `count` GEMMs, each timed alone, after `skip` untimed ones.
  auto timed = [&](int skip, int count) {
    for (int i = 0; i < skip; ++i) gemm();
    std::vector<double> t_ms;
    for (int i = 0; i < count; ++i) {
      CHECK_CUDA(cudaEventRecord(e0));
      gemm();
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float t;
      CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
      t_ms.push_back(t);
    }
    return 2.0 * double(n) * n * n / (median(t_ms) * 1e-3) / 1e12;
  };
  c.bf16_burst_tflops = timed(3, 10);
  // Sustained: back-to-back GEMMs for 1.5 s of GPU time first (an H200 reached its ~700 W cap within
  // about a second of the layer's prefill, bench/results/2026-11-30_h200_s8_run1_*), then 30 timed.
  for (double busy_ms = 0; busy_ms < 1500;) {
    CHECK_CUDA(cudaEventRecord(e0));
    for (int i = 0; i < 32; ++i) gemm();
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    busy_ms += t;
  }
  c.bf16_tflops = timed(0, 30);
  cublasDestroy(handle);
  CHECK_CUDA(cudaFree(A));
  CHECK_CUDA(cudaFree(B));
  CHECK_CUDA(cudaFree(C));
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return c;
}

// ---- One token count ------------------------------------------------------------------------------

struct Row {
  int64_t tokens = 0;
  // Experts the routing touched: the median over the timed input sets (the times are medians over a
  // rotation of all of them; the same median, the upper one of an even count), and each set's count
  // (set_experts[s]).
  int active_experts = 0;
  std::vector<int> set_experts;
  double stream_ms = 0, graph_ms = 0;
  double floor_ms = 0, floor_bytes_ms = 0, floor_flops_ms = 0;
  double touched_gb = 0, gflop = 0;
  // The weights of every expert any timed set touches (their union): where that fits in L2, the
  // rotation cannot keep a set's weights from being L2 hits (small --scale layers), and the note says so.
  double rotation_weights_gb = 0;
  std::string l2_note;
  double check_error = -1;
  double check_worst_column = -1;  // tools::CheckError::worst_column
  bool check_pass = true;
  std::string check_note;  // why a check failed, where the error alone does not say (JSON-safe text)
  double validate_us = 0;  // host time of one MoeLayer::validate of these arguments (median of 20 means of 100)
  KernelInfo kernel;
  // --clocks: the SM clock and board power sampled over the timed launches (after the warm-up; one
  // reading for the stream launches and graph replays, which alternate)
  bench::ClockStats clocks;
  // --trace: per kernel of src/common/trace.h, in us from the first traced kernel's start: first
  // start, first and last return from its griddepcontrol.wait (-1 where none waited), last end, last
  // start, first end; -1 everywhere for a kernel that did not run.
  std::vector<std::array<double, 6>> trace;
  // --trace, the sm90 GEMMs, per kernel of src/common/trace.h (-1: not recorded).
  struct TraceShares {
    // Shares of the consumers' time waiting for full stages and in K loops; of the producer's time
    // waiting for empty stages, in its per-unit setup (the tile's lookup, with the overlap its wait
    // for GEMM1's rows) and issuing its stages' copies; the part of the setup up to the lookup's
    // result, and taking the next unit from the scheduling thread (dynamic kernels).
    double consumers_waiting = -1, consumers_in_k_loops = -1;
    double producer_waiting = -1, producer_in_setup = -1, producer_issuing = -1;
    double producer_in_lookup = -1, producer_taking = -1;
    // Per tile of a consumer warpgroup, in SM clock cycles: finding it (GEMM2's decode kernels, which
    // take it from the producer: waiting for its first stage), from its start to its K loop, in its K
    // loop, after its K loop (the epilogue).
    double find = -1, before_k_loop = -1, k_loop = -1, after_k_loop = -1;
  };
  std::vector<TraceShares> trace_waits;
};

std::vector<uint16_t> random_bf16_normal(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> d(0, 1);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

// A finite number as the JSON's other numbers are written (stream defaults: 6 significant digits).
std::string json_number(double v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

tools::CheckError check_against_reference(const MoeProblem& p, uint64_t seed, const HostMoeWeights* loaded,
                                          const std::vector<uint16_t>& hidden, const std::vector<uint16_t>& out,
                                          const std::vector<int32_t>& ids, const std::vector<float>& weights,
                                          int64_t T, int sample) {
  const int64_t n = std::min<int64_t>(T, sample);
  if (n < T) {
    // Tokens spread over the whole batch (first, last and evenly between): the permute keeps token
    // order inside an expert, so the first tokens alone would only ever see the start of each tile.
    const int64_t H = p.hidden_size, K = p.top_k();
    std::vector<uint16_t> h(size_t(n * H)), o(size_t(n * H));
    std::vector<int32_t> i2(size_t(n * K));
    std::vector<float> w2(i2.size());
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = n == 1 ? 0 : j * (T - 1) / (n - 1);
      std::copy_n(hidden.begin() + t * H, H, h.begin() + j * H);
      std::copy_n(out.begin() + t * H, H, o.begin() + j * H);
      std::copy_n(ids.begin() + t * K, K, i2.begin() + j * K);
      std::copy_n(weights.begin() + t * K, K, w2.begin() + j * K);
    }
    return check_against_reference(p, seed, loaded, h, o, i2, w2, n, sample);
  }
  if (loaded) {
    // Checkpoint weights are on the host already: the reference only visits the experts routed to.
    std::vector<float> ref_out(size_t(n * p.hidden_size));
    CHECK_OK(ref::moe_forward_routed(p, loaded->view(), {}, hidden.data(), ids.data(), weights.data(), n,
                                     ref_out.data()));
    return tools::check_error_of(out, ref_out, p.hidden_size);
  }
  // Dummy weights: only the experts the sampled tokens touch are regenerated on the host.
  const int K = p.top_k();
  std::vector<int> experts;
  for (int64_t i = 0; i < n * K; ++i) experts.push_back(ids[i]);
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  std::vector<int32_t> local_ids(size_t(n * K));
  for (int64_t i = 0; i < n * K; ++i)
    local_ids[i] = int32_t(std::lower_bound(experts.begin(), experts.end(), ids[i]) - experts.begin());
  MoeProblem sub = p;
  sub.routing.num_experts = int(experts.size());
  if (sub.routing.method == RoutingMethod::kDeepSeekV3) {
    sub.routing.method = RoutingMethod::kSoftmaxTopK;  // routing is given; only the expert math matters
    sub.routing.num_groups = sub.routing.topk_groups = 1;
  }
  HostMoeWeights w = make_random_weights_subset(p, seed, experts);
  std::vector<float> ref_out(size_t(n * p.hidden_size));
  CHECK_OK(ref::moe_forward_routed(sub, w.view(), {}, hidden.data(), local_ids.data(), weights.data(), n,
                                   ref_out.data()));
  return tools::check_error_of(out, ref_out, p.hidden_size);
}

// A failed check: the pass false and `note` (if any) appended to the row's notes, so that one
// failure's reason does not hide another's.
void fail_check(Row& row, const std::string& note) {
  row.check_pass = false;
  if (note.empty()) return;
  row.check_note += (row.check_note.empty() ? "" : "; ") + note;
}

// clocks: with --clocks, the device's sampler (main stops where NVML cannot be used); nullptr otherwise
Row run_tokens(const MoeLayer& layer, const Options& o, const Ceilings& ceil, int64_t T, size_t l2_bytes,
               const HostMoeWeights* loaded = nullptr, bench::ClockSampler* clocks = nullptr) {
  const MoeProblem& p = layer.problem();
  Row row;
  row.tokens = T;
  row.kernel = layer.kernel_info(T);
  const int K = p.top_k(), E = p.num_experts();
  const int64_t H = p.hidden_size;
  // Input sets rotated so the activations alone exceed 3x L2 (weights are far larger anyway).
  const size_t set_bytes = size_t(T) * (H * 2 + E * 4);
  const int num_sets = int(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(set_bytes, 1) + 1, 1, 8));
  // (stream launches and graph replays in blocks of whole rotations: tools/timing_schedule.h)
  const int timing_block = tools::timing_block(num_sets);
  std::mt19937_64 rng(o.seed ^ uint64_t(T));
  std::vector<std::vector<uint16_t>> hidden(num_sets);
  std::vector<uint16_t*> d_hidden(num_sets);
  std::vector<float*> d_logits(num_sets);
  std::vector<int32_t*> d_ids(num_sets);
  std::vector<float*> d_wts(num_sets);
  std::vector<std::vector<int32_t>> host_ids(num_sets);
  std::vector<std::vector<float>> host_wts(num_sets);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> logits0;  // set 0's router logits
  for (int s = 0; s < num_sets; ++s) {
    hidden[s] = random_bf16_normal(rng, size_t(T * H));
    if (o.random_routing) {
      // k distinct experts per token, uniformly; weights a softmax over the k of N(0,1) scores.
      host_ids[s].resize(size_t(T) * K);
      host_wts[s].resize(host_ids[s].size());
      std::uniform_int_distribution<int> pick(0, E - 1);
      for (int64_t t = 0; t < T; ++t) {
        double sum = 0;
        for (int k = 0; k < K; ++k) {
          int e;
          do e = pick(rng);
          while (std::find(&host_ids[s][t * K], &host_ids[s][t * K + k], e) != &host_ids[s][t * K + k]);
          host_ids[s][t * K + k] = e;
          host_wts[s][t * K + k] = std::exp(nd(rng));
          sum += host_wts[s][t * K + k];
        }
        for (int k = 0; k < K; ++k) host_wts[s][t * K + k] = float(host_wts[s][t * K + k] / sum);
      }
      CHECK_CUDA(cudaMalloc(&d_ids[s], std::max<size_t>(16, host_ids[s].size() * 4)));
      CHECK_CUDA(cudaMalloc(&d_wts[s], std::max<size_t>(16, host_wts[s].size() * 4)));
      CHECK_CUDA(cudaMemcpy(d_ids[s], host_ids[s].data(), host_ids[s].size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(d_wts[s], host_wts[s].data(), host_wts[s].size() * 4, cudaMemcpyHostToDevice));
    }
    std::vector<float> logits(size_t(T) * E);
    for (auto& x : logits) x = nd(rng);
    if (s == 0) logits0 = logits;  // (for --check's routing check)
    CHECK_CUDA(cudaMalloc(&d_hidden[s], std::max<size_t>(16, hidden[s].size() * 2)));
    CHECK_CUDA(cudaMalloc(&d_logits[s], std::max<size_t>(16, logits.size() * 4)));
    CHECK_CUDA(cudaMemcpy(d_hidden[s], hidden[s].data(), hidden[s].size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_logits[s], logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
  }
  uint16_t* d_out;
  void* ws;
  CHECK_CUDA(cudaMalloc(&d_out, std::max<size_t>(16, size_t(T * H * 2))));
  CHECK_CUDA(cudaMalloc(&ws, layer.workspace_bytes()));
  // The layer's workspace layout (forward.cu makes it from the same arguments: the SMs its GEMMs
  // launch on, LayerOptions::max_sms or the device's), to read the routing (--routing model) and the
  // trace words (--trace).
  int device = 0, device_sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, device));
  const int layer_sms = o.max_sms > 0 && o.max_sms < device_sms ? o.max_sms : device_sms;
  const WorkspaceLayout wl = WorkspaceLayout::make(p.max_tokens, K, layer.num_local_experts(), H,
                                                   layer.local_intermediate_size(), o.split_k, layer_sms);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto args = [&](int s) {
    ForwardArgs a;
    a.hidden = d_hidden[s];
    if (o.random_routing) {
      a.topk_ids = d_ids[s];
      a.topk_weights = d_wts[s];
    } else {
      a.router_logits = d_logits[s];
    }
    a.num_tokens = T;
    a.out = d_out;
    return a;
  };

  // Each timed set's routing and touched experts (--dump-routing writes every set's routing), then
  // the check of set 0. The times are medians over a rotation of all sets, so the floor is the median
  // set's: with set 0's alone, Llama-4-Scout T=8 (top-1 of 16) counted 5 experts where its eight sets
  // touch 5-8 (session 43). With --routing model each set's routing comes from a forward of it, read
  // back from the workspace; random routing is drawn on the host, and only set 0 runs here (for the
  // check). Set 0 goes last, so that the output checked is its own.
  std::vector<int32_t> ids(size_t(T) * K);
  std::vector<float> wts(ids.size());
  row.set_experts.assign(size_t(num_sets), 0);
  std::set<int> rotation_experts;  // every expert a timed set touches
  // (--dump-routing's files are named after the preset, which bench/peers_torch.py looks for; a
  // checkpoint's model type without '/'.)
  std::string dump_name = o.checkpoint.empty() ? o.preset : layer.problem().name;
  std::replace(dump_name.begin(), dump_name.end(), '/', '_');
  if (!o.dump_routing.empty()) {
    // An earlier dump's files for this token count go first: bench/routing_file.py takes every set
    // up to the first missing one, so a stale one past this run's count, or beside a run that dies
    // before its set 0 (written last), would be read as this run's.
    int stale = 0;
    while (std::remove(tools::routing_file_path(o.dump_routing, dump_name, T, stale).c_str()) == 0) ++stale;
  }
  for (int s = num_sets - 1; s >= 0; --s) {
    if (s == 0 || !o.random_routing) {
      // (Set 0's output poisoned first, bf16 NaN everywhere: a row the layer fails to write fails the
      // check; on the layer's stream, which as a non-blocking stream would not wait for a memset on
      // the legacy one.)
      if (s == 0) CHECK_CUDA(cudaMemsetAsync(d_out, 0xFF, std::max<size_t>(16, size_t(T * H * 2)), stream));
      CHECK_OK(layer.forward(args(s), ws, layer.workspace_bytes(), stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      CHECK_OK(layer.check_device_errors(ws, stream));
    }
    if (o.random_routing) {
      ids = host_ids[s];
      wts = host_wts[s];
    } else {
      CHECK_CUDA(
          cudaMemcpy(ids.data(), static_cast<char*>(ws) + wl.topk_ids, ids.size() * 4, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(wts.data(), static_cast<char*>(ws) + wl.topk_weights, wts.size() * 4,
                            cudaMemcpyDeviceToHost));
    }
    row.set_experts[size_t(s)] = int(std::set<int>(ids.begin(), ids.end()).size());
    rotation_experts.insert(ids.begin(), ids.end());
    if (!o.dump_routing.empty()) {
      const std::string path = tools::routing_file_path(o.dump_routing, dump_name, T, s);
      if (!tools::write_routing_file(path, T, K, E, ids, wts)) {
        std::fprintf(stderr, "error: --dump-routing: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        std::exit(1);
      }
    }
  }
  row.active_experts = int(median(std::vector<double>(row.set_experts.begin(), row.set_experts.end())));
  std::vector<uint16_t> checked_out;  // set 0's output from a stream launch (--check)
  if (o.check && T > 0) {
    std::vector<uint16_t>& out = checked_out;
    out.resize(size_t(T * H));
    CHECK_CUDA(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));
    const tools::CheckError e =
        check_against_reference(p, o.seed, loaded, hidden[0], out, ids, wts, T, o.check_tokens);
    row.check_error = e.rel;
    row.check_worst_column = e.worst_column;
    const double tol = tools::check_tolerance(p.mode == Mode::kW4A4);
    const double column_tol = tools::column_tolerance(tol, e.tokens);
    if (!tools::check_passes(e, tol)) fail_check(row, "");
    if (!std::isfinite(e.rel)) {
      fail_check(row, "a NaN in the sampled output or a zero reference");
    } else if (e.worst_column > column_tol) {
      char note[192];
      std::snprintf(note, sizeof note, "column %lld's rms error over the %lld sampled tokens is %.3g of its scale "
                    "(bound %.3g)", (long long)e.column, (long long)e.tokens, e.worst_column, column_tol);
      fail_check(row, note);
    }
    // The whole output, the rows outside the reference's sample too: none may keep the poison (a row
    // the layer did not write).
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isnan(bf16_to_float(out[i]))) {
        char note[96];
        std::snprintf(note, sizeof note, "a NaN in the output at token %lld, column %lld (the first)",
                      (long long)(i / size_t(H)), (long long)(i % size_t(H)));
        fail_check(row, note);
        break;
      }
    }
    if (!o.random_routing) {
      // The reference above runs the GPU's routing (read back from the workspace); the router itself
      // is checked here: route_cpu on the same logits (and DeepSeek-V3's correction bias), which the
      // GPU router matches bit for bit (ids in order, weights).
      std::vector<int32_t> cpu_ids(ids.size());
      std::vector<float> cpu_wts(ids.size());
      const std::vector<float> bias =
          loaded ? loaded->routing_bias : make_random_weights_subset(p, o.seed, {}).routing_bias;
      RoutingArgs ra;
      ra.logits = logits0.data();
      ra.logits_type = LogitsType::kF32;
      ra.correction_bias = bias.empty() ? nullptr : bias.data();
      ra.num_tokens = T;
      ra.topk_ids = cpu_ids.data();
      ra.topk_weights = cpu_wts.data();
      CHECK_OK(route_cpu(p.routing, ra));
      for (size_t i = 0; i < ids.size(); ++i) {
        if (cpu_ids[i] != ids[i] || std::memcmp(&cpu_wts[i], &wts[i], 4) != 0) {
          char note[256];
          std::snprintf(note, sizeof note, "the GPU router differs from route_cpu at token %lld, choice %lld "
                        "(expert %d, weight %.9g against expert %d, weight %.9g)", (long long)(i / size_t(K)),
                        (long long)(i % size_t(K)), ids[i], double(wts[i]), cpu_ids[i], double(cpu_wts[i]));
          fail_check(row, note);
          break;
        }
      }
    }
  }

  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  // Stream launches and graph replays are timed alternately, timing_block launches of one then of the
  // other, after one warm-up of both, so that both see the same clocks and power state. (Timed one
  // after the other, the graph replays came second and ran at a lower SM clock: 1725-1800 against
  // 1890-1920 MHz at DeepSeek-R1 T=8 with 50 launches each, session 18's run 1.)
  std::vector<cudaEvent_t> b2b_events(o.back_to_back ? size_t(timing_block) + 1 : 0);
  for (cudaEvent_t& e : b2b_events) CHECK_CUDA(cudaEventCreate(&e));
  // n timed launches of one kind, their times appended to *ms.
  auto time_block = [&](auto&& launch, int first, int n, std::vector<double>* ms) {
    if (o.back_to_back) {
      // Every launch queued behind the one before, an event between each two: launch i's time is
      // event i to event i + 1, and the device does not wait for the host between launches (as inside
      // a model's forward) as long as the host enqueues faster than a launch runs.
      // (An untimed launch first, so that the first timed one, too, is queued behind another.)
      launch((first + num_sets - 1) % num_sets);
      CHECK_CUDA(cudaEventRecord(b2b_events[0], stream));
      for (int i = 0; i < n; ++i) {
        launch((first + i) % num_sets);
        CHECK_CUDA(cudaEventRecord(b2b_events[size_t(i) + 1], stream));
      }
      CHECK_CUDA(cudaEventSynchronize(b2b_events[size_t(n)]));
      for (int i = 0; i < n; ++i) {
        float t;
        CHECK_CUDA(cudaEventElapsedTime(&t, b2b_events[size_t(i)], b2b_events[size_t(i) + 1]));
        ms->push_back(t);
      }
    } else {
      // One launch at a time: the host waits for each, so each starts on an idle device and its time
      // includes the launch's own latency after the first event.
      for (int i = 0; i < n; ++i) {
        CHECK_CUDA(cudaEventRecord(e0, stream));
        launch((first + i) % num_sets);
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float t;
        CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
        ms->push_back(t);
      }
    }
  };
  std::vector<cudaGraphExec_t> graphs(num_sets);
  for (int s = 0; s < num_sets; ++s) {
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(layer.forward(args(s), ws, layer.workspace_bytes(), stream));
    CHECK_CUDA(cudaStreamEndCapture(stream, &g));
    CHECK_CUDA(cudaGraphInstantiate(&graphs[s], g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  auto stream_launch = [&](int s) { CHECK_OK(layer.forward(args(s), ws, layer.workspace_bytes(), stream)); };
  auto graph_launch = [&](int s) { CHECK_CUDA(cudaGraphLaunch(graphs[s], stream)); };
  {
    // At least o.warmup launches of each and o.warmup_ms of wall time (synchronizing every 16
    // launches, so that the GPU has been busy for about that long), as the sustained matmul ceiling
    // is measured.
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 2 * o.warmup ||
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() <
                        o.warmup_ms;
         ++i) {
      if (i % 2 == 0) stream_launch((i / 2) % num_sets);
      else graph_launch((i / 2) % num_sets);
      if (i % 16 == 15) CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<double> stream_ms, graph_ms;
    if (clocks) clocks->start();
    // (tools/timing_schedule.h: one rotation of the sets across both kinds, blocks of whole
    // rotations, --iters rounded up to whole rotations)
    const int iters = tools::timed_launches(o.iters, num_sets);
    for (int done = 0; done < iters; done += timing_block) {
      const int n = std::min(timing_block, iters - done);
      time_block(stream_launch, tools::stream_block_start(done), n, &stream_ms);
      time_block(graph_launch, tools::graph_block_start(done, n), n, &graph_ms);
    }
    // (one reading over both: they alternate too often to be told apart)
    if (clocks) row.clocks = clocks->stop();
    row.stream_ms = median(stream_ms);
    row.graph_ms = median(graph_ms);
  }
  {
    // The host's argument checks alone (part of every stream launch; a graph replay skips them).
    std::vector<double> us;
    for (int b = 0; b < 20; ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 100; ++i) CHECK_OK(layer.validate(args(i % num_sets), ws, layer.workspace_bytes()));
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 100);
    }
    row.validate_us = median(us);
  }
  CHECK_OK(layer.check_device_errors(ws, stream));
  if (!checked_out.empty()) {
    // What was timed gives what was checked: a replay of set 0's graph after all the timed launches
    // (the workspace reused many times over) must give the checked stream launch's bits.
    CHECK_CUDA(cudaMemsetAsync(d_out, 0xFF, checked_out.size() * 2, stream));
    CHECK_CUDA(cudaGraphLaunch(graphs[0], stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<uint16_t> replayed(checked_out.size());
    CHECK_CUDA(cudaMemcpy(replayed.data(), d_out, replayed.size() * 2, cudaMemcpyDeviceToHost));
    if (replayed != checked_out) {
      const auto diff = std::mismatch(replayed.begin(), replayed.end(), checked_out.begin());
      const size_t at = size_t(diff.first - replayed.begin());
      char note[160];
      std::snprintf(note, sizeof note, "the graph replay's output differs from the checked launch's (token %lld, "
                    "column %lld first)", (long long)(at / size_t(H)), (long long)(at % size_t(H)));
      fail_check(row, note);
    }
  }
#if FP4MOE_TRACE
  if (o.trace) {
    // One replay right after another (the trace words zeroed between them, which serializes the
    // two): the kernels of one forward chained by programmatic dependent launch as in the timing.
    if (wl.total != layer.workspace_bytes()) {
      std::fprintf(stderr, "error: --trace: the workspace layout (%zu bytes) is not the layer's (%zu)\n", wl.total,
                   layer.workspace_bytes());
      std::exit(1);
    }
    char* words = static_cast<char*>(ws) + wl.trace;
    CHECK_CUDA(cudaGraphLaunch(graphs[0], stream));
    CHECK_CUDA(cudaMemsetAsync(words, 0, kTraceBytes, stream));
    CHECK_CUDA(cudaGraphLaunch(graphs[0], stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    unsigned long long w[kTraceKernels][kTraceWords];
    CHECK_CUDA(cudaMemcpy(w, words, kTraceBytes, cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull;
    for (int k = 0; k < kTraceKernels; ++k)
      if (w[k][3] != 0) t0 = std::min(t0, ~w[k][0]);
    for (int k = 0; k < kTraceKernels; ++k) {
      std::array<double, 6> v = {-1, -1, -1, -1, -1, -1};
      if (w[k][3] != 0) {
        auto us = [&](unsigned long long t) { return double(t - t0) / 1e3; };
        v[0] = us(~w[k][0]);
        if (w[k][2] != 0) v[1] = us(~w[k][1]), v[2] = us(w[k][2]);
        v[3] = us(w[k][3]);
        v[4] = us(w[k][4]);
        v[5] = us(~w[k][5]);
      }
      row.trace.push_back(v);
      Row::TraceShares waits;
      if (w[k][kTraceConsumerTime] != 0) {
        waits.consumers_waiting = double(w[k][kTraceConsumerWait]) / double(w[k][kTraceConsumerTime]);
        waits.consumers_in_k_loops = double(w[k][kTraceConsumerKLoop]) / double(w[k][kTraceConsumerTime]);
      }
      if (w[k][kTraceConsumerTiles] != 0) {
        const double tiles = double(w[k][kTraceConsumerTiles]);
        waits.find = double(w[k][kTraceConsumerFind]) / tiles;
        waits.before_k_loop = double(w[k][kTraceConsumerPre]) / tiles;
        waits.k_loop = double(w[k][kTraceConsumerKLoop]) / tiles;
        waits.after_k_loop =
            double(w[k][kTraceConsumerTile] - w[k][kTraceConsumerPre] - w[k][kTraceConsumerKLoop]) / tiles;
      }
      if (w[k][kTraceProducerTime] != 0) {
        waits.producer_waiting = double(w[k][kTraceProducerWait]) / double(w[k][kTraceProducerTime]);
        waits.producer_in_setup = double(w[k][kTraceProducerSetup]) / double(w[k][kTraceProducerTime]);
        waits.producer_issuing = double(w[k][kTraceProducerIssue]) / double(w[k][kTraceProducerTime]);
        waits.producer_in_lookup = double(w[k][kTraceProducerLookup]) / double(w[k][kTraceProducerTime]);
        waits.producer_taking = double(w[k][kTraceProducerTake]) / double(w[k][kTraceProducerTime]);
      }
      row.trace_waits.push_back(waits);
    }
  }
#endif
  for (auto g : graphs) cudaGraphExecDestroy(g);

  row.touched_gb = double(row.active_experts) * double(p.expert_weight_bytes()) * layer.local_intermediate_size() /
                   double(p.intermediate_size) / 1e9;
  row.gflop = double(T) * K * double(p.flops_per_pair()) / 1e9;
  row.floor_bytes_ms = row.touched_gb / ceil.copy_tbps;  // GB / (TB/s) = ms
  row.floor_flops_ms = row.gflop / ceil.bf16_tflops;     // GFLOP / (TFLOP/s) = ms
  row.floor_ms = std::max(row.floor_bytes_ms, row.floor_flops_ms);
  row.rotation_weights_gb = row.touched_gb / std::max(row.active_experts, 1) * double(rotation_experts.size());
  if (row.rotation_weights_gb * 1e9 < 2.0 * double(l2_bytes)) {
    char note[192];
    std::snprintf(note, sizeof note, "the timed sets' weights (%.1f MB) fit in L2 (%.0f MB) twice over: weights may "
                  "come from L2, the time below the floor", row.rotation_weights_gb * 1e3, double(l2_bytes) / 1e6);
    row.l2_note = note;
  }

  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (cudaEvent_t e : b2b_events) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaFree(ws);
  cudaFree(d_out);
  for (int s = 0; s < num_sets; ++s) {
    cudaFree(d_hidden[s]);
    cudaFree(d_logits[s]);
    if (o.random_routing) cudaFree(d_ids[s]), cudaFree(d_wts[s]);
  }
  return row;
}

void write_json(const Options& o, const MoeProblem& p, const char* gpu, const Ceilings& c,
                const std::vector<Row>& rows) {
  std::ofstream f(o.json);
  if (!f) {
    std::fprintf(stderr, "error: cannot write --json %s\n", o.json.c_str());
    std::exit(1);
  }
  f << "{\n  \"tool\": \"fp4moe-bench\",\n  \"date\": \"" << now_utc() << "\",\n  \"commit\": \"" << commit()
    << "\",\n  \"gpu\": \"" << cli::json_escape(gpu) << "\",\n  \"command\": \"" << cli::json_escape(o.argv)
    << "\",\n  \"preset\": \"" << cli::json_escape(p.name)
    << "\",\n  \"mode\": \"" << to_string(p.mode) << "\",\n  \"split_k\": " << (o.split_k ? "true" : "false")
    << ",\n  \"tail_tiles\": " << (o.tail_tiles ? "true" : "false")
    << ",\n  \"gemm_overlap\": " << (o.gemm_overlap ? "true" : "false")
    << ",\n  \"range_split\": " << (o.range_split ? "true" : "false")
    << ",\n  \"direct_gemm1\": " << (o.direct_gemm1 ? "true" : "false")
    << ",\n  \"max_sms\": " << o.max_sms
    << ",\n  \"routing\": \"" << (o.random_routing ? "random" : "model")
    << "\",\n  \"ceilings\": {\"copy_TBps\": " << c.copy_tbps
    << ", \"bf16_mm_TFLOPs\": " << c.bf16_tflops << ", \"bf16_mm_burst_TFLOPs\": " << c.bf16_burst_tflops
    << ", \"bf16_mm_method\": \"cuBLAS 8192^3, median of 30 after 1.5 s of back-to-back GEMMs"
    << " (burst: of 10 from idle)\""
    << "},\n  \"warmup_ms\": " << o.warmup_ms << ",\n  \"timing\": \""
    << (o.back_to_back ? "back-to-back" : "one launch at a time")
    << ", stream and graph alternating in blocks of whole rotations through the input sets (at least "
    << tools::kMinTimingBlock << " launches)\",\n  \"iters\": " << o.iters << ",\n  \"seed\": " << o.seed
    << ",\n  \"check_tokens\": " << (o.check ? std::to_string(o.check_tokens) : std::string("null"))
    << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << "    {\"T\": " << r.tokens << ", \"active_experts\": " << r.active_experts << ", \"set_experts\": [";
    for (size_t k = 0; k < r.set_experts.size(); ++k) f << (k ? ", " : "") << r.set_experts[k];
    f << "]"
      << ", \"stream_ms\": " << r.stream_ms << ", \"graph_ms\": " << r.graph_ms
      << ", \"validate_us\": " << r.validate_us
      << ", \"floor_ms\": " << r.floor_ms << ", \"floor_bytes_ms\": "
      << r.floor_bytes_ms << ", \"floor_flops_ms\": " << r.floor_flops_ms << ", \"ratio_to_floor\": "
      << (r.floor_ms > 0 ? r.graph_ms / r.floor_ms : 0) << ", \"touched_GB\": " << r.touched_gb
      << ", \"rotation_weights_GB\": " << r.rotation_weights_gb
      << ", \"GFLOP\": " << r.gflop << ", \"TBps\": " << (r.graph_ms > 0 ? r.touched_gb / r.graph_ms : 0)
      << ", \"TFLOPs\": " << (r.graph_ms > 0 ? r.gflop / r.graph_ms : 0)
      // (null where --check did not run; an error that is not a number, from a NaN output or a zero
      // reference, is null too, with the pass false: JSON has no inf or nan)
      << ", \"check_error\": "
      << (o.check && std::isfinite(r.check_error) ? json_number(r.check_error) : std::string("null"))
      << ", \"check_worst_column_error\": "
      << (o.check && std::isfinite(r.check_worst_column) ? json_number(r.check_worst_column) : std::string("null"))
      << ", \"check_pass\": " << (!o.check ? "null" : r.check_pass ? "true" : "false")
      << ", \"check_note\": \"" << cli::json_escape(r.check_note) << "\", \"kernel_path\": \""
      << to_string(r.kernel.path) << "\", \"gemm1\": \"" << r.kernel.gemm1 << "\", \"gemm2\": \"" << r.kernel.gemm2
      << "\", \"regime\": \"" << r.kernel.regime << "\"";
    if (o.clocks) {  // (absent figures are null: no clock read or no energy counter)
      auto num = [&](bool have, double v) { return have ? std::to_string(v) : std::string("null"); };
      // (the keys of the time when stream launches and graph replays had a reading each)
      const bench::ClockStats& g = r.clocks;
      const bench::ClockStats& st = r.clocks;
      f << ", \"clocks\": {\"graph_samples\": " << g.samples << ", \"graph_sm_mhz_mean\": "
        << num(g.samples > 0, g.sm_mhz_mean) << ", \"graph_sm_mhz_min\": " << num(g.samples > 0, g.sm_mhz_min)
        << ", \"graph_sm_mhz_max\": " << num(g.samples > 0, g.sm_mhz_max)
        << ", \"graph_power_w\": " << num(g.power_w >= 0, g.power_w) << ", \"stream_samples\": " << st.samples
        << ", \"stream_sm_mhz_mean\": " << num(st.samples > 0, st.sm_mhz_mean)
        << ", \"stream_power_w\": " << num(st.power_w >= 0, st.power_w)
        << ", \"one_reading_for_both\": true}";  // (timed alternately: the same reading in both)
    }
    if (!r.trace.empty()) {
      f << ", \"trace_us\": {";
      bool first = true;
      for (size_t k = 0; k < r.trace.size(); ++k) {
        const auto& v = r.trace[k];
        if (v[3] < 0) continue;
        f << (first ? "" : ", ") << "\"" << kTraceKernelNames[k] << "\": [" << v[0] << ", " << v[1] << ", " << v[2]
          << ", " << v[3] << ", " << v[4] << ", " << v[5] << "]";
        first = false;
      }
      f << "}, \"trace_waits\": {";
      first = true;
      for (size_t k = 0; k < r.trace_waits.size(); ++k) {
        const Row::TraceShares& q = r.trace_waits[k];
        if (q.consumers_waiting < 0) continue;
        f << (first ? "" : ", ") << "\"" << kTraceKernelNames[k]
          << "\": {\"consumers_waiting\": " << q.consumers_waiting << ", \"producer_waiting\": " << q.producer_waiting
          << ", \"consumers_in_k_loops\": " << q.consumers_in_k_loops << ", \"cycles_per_tile\": {\"find\": "
          << q.find << ", \"before_k_loop\": " << q.before_k_loop << ", \"k_loop\": " << q.k_loop
          << ", \"after_k_loop\": " << q.after_k_loop << "}, \"producer_in_setup\": " << q.producer_in_setup
          << ", \"producer_issuing\": " << q.producer_issuing << ", \"producer_in_lookup\": "
          << q.producer_in_lookup << ", \"producer_taking\": " << q.producer_taking << "}";
        first = false;
      }
      f << "}";
    }
    f << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

// --checkpoint: the layer's problem and its weights on the host (for the layer and for --check).
void load_checkpoint(const Options& o, MoeProblem* problem, HostMoeWeights* weights) {
  std::unique_ptr<Checkpoint> ckpt;
  CHECK_OK(Checkpoint::open(o.checkpoint, &ckpt));
  const CheckpointInfo& info = ckpt->info();
  if (info.moe_layers.empty()) {
    std::fprintf(stderr, "error: checkpoint %s has no MoE layer\n", o.checkpoint.c_str());
    std::exit(1);
  }
  const int layer = o.layer >= 0 ? o.layer : info.moe_layers.front();
  LoadReport report;
  CHECK_OK(ckpt->load_moe_layer(layer, {}, weights, &report));
  *problem = info.problem;
  for (const auto& w : report.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::printf("checkpoint %s: %s (%s), layer %d, %.2f GB read\n", o.checkpoint.c_str(), info.architecture.c_str(),
              to_string(info.convention), layer, double(report.bytes_read) / 1e9);
}

int run_cpu_fallback(const Options& o, const char* why) {
  MoeProblem p;
  HostMoeWeights w;
  std::printf("fp4moe-bench: no CUDA GPU available (%s).\n", why);
  // The options that only mean something for the GPU layer, said out loud rather than dropped.
  std::string ignored;
  auto note = [&](bool given, const char* what) {
    if (given) ignored += std::string(ignored.empty() ? "" : ", ") + what;
  };
  note(!o.tune_out.empty() || !o.tune_file.empty(), "--tune / --tune-file");
  note(!o.dump_routing.empty(), "--dump-routing");
  note(o.path != KernelPath::kAuto, "--path");
  note(o.random_routing, "--routing random");
  note(o.split_k || !o.tail_tiles || !o.gemm_overlap || !o.range_split || !o.direct_gemm1 || o.max_sms > 0,
       "the layer options (--split-k, --no-*, --max-sms)");
  note(o.clocks || o.trace || o.back_to_back, "--clocks / --trace / --back-to-back");
  note(o.given.count("--iters") || o.given.count("--warmup") || o.given.count("--warmup-ms"),
       "--iters / --warmup / --warmup-ms (the reference runs once)");
  note(o.given.count("--check-tokens") > 0, "--check-tokens");
  note(o.verbose, "--verbose");
  note(o.checkpoint.empty() && o.given.count("--scale") && o.scale < 16,
       "--scale below 16 (the CPU reference divides H and I by 16 at least)");
  if (!ignored.empty()) std::printf("Not applied without a GPU: %s.\n", ignored.c_str());
  if (!o.checkpoint.empty()) {
    load_checkpoint(o, &p, &w);
    p.mode = o.mode;
  } else {
    CHECK_OK(get_preset(o.preset, &p));
    p = scaled_preset(p, std::max(o.scale, 16));
    p.mode = o.mode;
  }
  CHECK_OK(validate(p));
  std::printf("Running the CPU reference instead, on %s (H=%lld, I=%lld, E=%d, top-%d, %s).\n", p.name.c_str(),
              (long long)p.hidden_size, (long long)p.intermediate_size, p.num_experts(), p.top_k(), to_string(p.mode));
  if (o.checkpoint.empty()) w = make_random_weights(p, o.seed);
  std::printf("%8s %10s %14s %12s\n", "tokens", "ms", "GFLOP/s(fp64)", "out_norm");
  std::set<int64_t> done;
  for (int64_t asked : o.tokens) {
    const int64_t T = std::min<int64_t>(asked, 64);  // the fp64 reference is slow: at most 64 tokens
    if (!done.insert(T).second) continue;
    if (T != asked) std::printf("(%lld tokens asked; the CPU reference runs %lld)\n", (long long)asked, (long long)T);
    std::mt19937_64 rng(o.seed ^ uint64_t(T));
    auto hidden = random_bf16_normal(rng, size_t(T * p.hidden_size));
    std::vector<float> logits(size_t(T) * p.num_experts());
    std::normal_distribution<float> nd(0, 1);
    for (auto& x : logits) x = nd(rng);
    std::vector<float> out(size_t(T * p.hidden_size));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_OK(ref::moe_forward(p, w.view(), {}, hidden.data(), logits.data(), LogitsType::kF32, T, out.data()));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double norm = 0;
    for (float v : out) norm += double(v) * v;
    std::printf("%8lld %10.2f %14.2f %12.4g\n", (long long)T, ms,
                double(T) * p.top_k() * p.flops_per_pair() / (ms * 1e6), std::sqrt(norm));
  }
  return 0;
}

}  // namespace

static int tool_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int num_devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&num_devices);
  if (err != cudaSuccess || num_devices == 0) {
    // What only a GPU run can give is refused rather than skipped: a script that asked for a check or
    // a JSON file must not see a success without either.
    const char* needs_gpu = o.clocks ? "--clocks" : o.check ? "--check" : !o.json.empty() ? "--json" : nullptr;
    if (needs_gpu) {
      std::fprintf(stderr, "error: %s needs a CUDA GPU (%s); without one, fp4moe-bench runs the CPU reference alone\n",
                   needs_gpu, err != cudaSuccess ? cudaGetErrorString(err) : "no device");
      return 2;
    }
    return run_cpu_fallback(o, err != cudaSuccess ? cudaGetErrorString(err) : "no device");
  }

  MoeProblem p;
  HostMoeWeights loaded;
  if (!o.checkpoint.empty()) {
    load_checkpoint(o, &p, &loaded);
  } else {
    CHECK_OK(get_preset(o.preset, &p));
    if (o.scale > 1) p = scaled_preset(p, o.scale);
  }
  p.mode = o.mode;
  p.max_tokens = std::max<int64_t>(1, *std::max_element(o.tokens.begin(), o.tokens.end()));
  CHECK_OK(validate(p));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("fp4moe-bench: %s (%d SMs, %.0f MB L2), preset %s, mode %s\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6, p.name.c_str(), to_string(p.mode));
  std::unique_ptr<bench::ClockSampler> clocks;
  if (o.clocks) {  // (before the ceilings: a few seconds)
    char bus[32] = "";
    CHECK_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    clocks = std::make_unique<bench::ClockSampler>(bus, 2);
    if (!clocks->ok()) {
      std::fprintf(stderr, "error: --clocks: %s (NVML comes with the NVIDIA driver)\n", clocks->why_not().c_str());
      return 2;
    }
  }
  const Ceilings ceil = measure_ceilings();
  std::printf("ceilings: copy %.2f TB/s (read+write), bf16 matmul %.0f TFLOP/s sustained (cuBLAS 8192^3; %.0f in "
              "a burst from idle)\n",
              ceil.copy_tbps, ceil.bf16_tflops, ceil.bf16_burst_tflops);
  if (o.back_to_back) std::printf("timing: back to back (each launch queued behind the one before)\n");
  LayerOptions lo;
  lo.path = o.path;
  lo.tune_file = o.tune_file;
  lo.split_k = o.split_k;
  lo.tail_tiles = o.tail_tiles;
  lo.gemm_overlap = o.gemm_overlap;
  lo.range_split = o.range_split;
  lo.direct_gemm1 = o.direct_gemm1;
  lo.max_sms = o.max_sms;
  std::unique_ptr<MoeLayer> layer;
  const HostMoeWeights* host = o.checkpoint.empty() ? nullptr : &loaded;
  auto make_layer = [&] {
    if (host) CHECK_OK(MoeLayer::create(p, host->view(), lo, &layer));
    else CHECK_OK(MoeLayer::create_dummy(p, o.seed, lo, &layer));
  };
  make_layer();
  if (!o.tune_out.empty()) {
    // Every compiled config (or those of --tune-only) at every token count (graph replay, no check),
    // the fastest kept. Nothing is compiled: the candidates are the kernels already in the library.
    sm90::TuneTable table;
    table.set_device(prop.name);
    Options quick = o;
    quick.check = false;
    quick.iters = std::min(o.iters, 20);
    quick.warmup_ms = std::min(o.warmup_ms, 200.0);  // every candidate alike, and --tune stays short
    std::printf("tuning (graph replay ms per config):\n");
    for (int64_t T : o.tokens) {
      std::string best;
      double best_ms = INFINITY;
      std::printf("%7lld", (long long)T);
      std::fflush(stdout);
      for (const auto& name : MoeLayer::sm90_config_names()) {
        if (!o.tune_only.empty() && std::find(o.tune_only.begin(), o.tune_only.end(), name) == o.tune_only.end())
          continue;
        CHECK_OK(layer->force_sm90_config(name));
        const double ms = run_tokens(*layer, quick, Ceilings{1, 1}, T, size_t(prop.l2CacheSize), host).graph_ms;
        std::printf("  %s %.4f", name.c_str(), ms);
        std::fflush(stdout);  // a run killed by a timeout keeps what it measured
        if (ms < best_ms) best_ms = ms, best = name;
      }
      std::printf("  -> %s\n", best.c_str());
      sm90::ConfigInput in;
      in.num_tokens = T;
      in.top_k = p.top_k();
      in.num_local_experts = layer->num_local_experts();
      in.hidden = p.hidden_size;
      in.inter_local = layer->local_intermediate_size();
      table.set(in, *sm90::config_by_name(best));
    }
    CHECK_OK(table.save(o.tune_out));
    std::printf("wrote %s (%zu entries)\n", o.tune_out.c_str(), table.size());
    lo.tune_file = o.tune_out;
    layer.reset();
    make_layer();
  }
  std::printf("layer (%s): H=%lld I=%lld E=%d top-%d, %.2f GB of repacked weights, workspace %.1f MB\n",
              host ? "checkpoint" : "dummy weights",
              (long long)p.hidden_size, (long long)p.intermediate_size, p.num_experts(), p.top_k(),
              layer->weight_bytes() / 1e9, layer->workspace_bytes() / 1e6);
  std::vector<Row> rows;
  bool all_pass = true;
  std::printf("\n%7s %7s %11s %11s %10s %8s %9s %9s %s\n", "tokens", "experts", "stream_ms", "graph_ms", "floor_ms",
              "x_floor", "TB/s", "TFLOP/s", o.check ? "check(rel_err, worst_column)" : "");
  for (int64_t T : o.tokens) {
    Row r = run_tokens(*layer, o, ceil, T, size_t(prop.l2CacheSize), host, clocks.get());
    all_pass &= r.check_pass;
    char check[64] = "";
    if (o.check)
      std::snprintf(check, sizeof check, "%s (%.2e, %.2e)", r.check_pass ? "pass" : "FAIL", r.check_error,
                    r.check_worst_column);
    std::printf("%7lld %7d %11.4f %11.4f %10.4f %8.2f %9.2f %9.1f %s\n", (long long)T, r.active_experts, r.stream_ms,
                r.graph_ms, r.floor_ms, r.floor_ms > 0 ? r.graph_ms / r.floor_ms : 0,
                r.graph_ms > 0 ? r.touched_gb / r.graph_ms : 0, r.graph_ms > 0 ? r.gflop / r.graph_ms : 0, check);
    if (!r.check_note.empty()) std::printf("        check: %s\n", r.check_note.c_str());
    if (!r.l2_note.empty()) std::printf("        note: %s\n", r.l2_note.c_str());
    if (o.verbose)
      std::printf("        path %s | %s | %s | %s\n", to_string(r.kernel.path), r.kernel.regime.c_str(),
                  r.kernel.gemm1.c_str(), r.kernel.gemm2.c_str());
    if (clocks) {
      const bench::ClockStats& g = r.clocks;
      auto watts = [](const bench::ClockStats& c) {
        return c.power_w >= 0 ? std::to_string(int(c.power_w + 0.5)) + " W" : std::string("power n/a");
      };
      std::printf("        clocks: stream launches and graph replays SM %.0f MHz (min %.0f, max %.0f; %d reads), %s\n",
                  g.sm_mhz_mean, g.sm_mhz_min, g.sm_mhz_max, g.samples, watts(g).c_str());
    }
#if FP4MOE_TRACE
    if (o.trace) {
      std::printf("        trace (us from the first kernel's start; first..last CTA start, return from the PDL "
                  "wait and CTA end)\n");
      for (size_t k = 0; k < r.trace.size(); ++k) {
        const auto& v = r.trace[k];
        if (v[3] < 0) continue;
        std::printf("        %-11s start %8.2f..%-8.2f  wait %8.2f..%-8.2f  end %8.2f..%-8.2f  (%.2f)",
                    kTraceKernelNames[k], v[0], v[4], v[1], v[2], v[5], v[3], v[3] - v[0]);
        const Row::TraceShares& q = r.trace_waits[k];
        if (q.consumers_waiting >= 0)
          std::printf("  consumers: K loops %.1f%%, waits for data %.1f%%; producer waits for room %.1f%%, "
                      "in its per-unit setup %.1f%% (to the lookup's result %.1f%%), issuing copies %.1f%%, "
                      "taking units %.1f%%", 100 * q.consumers_in_k_loops, 100 * q.consumers_waiting,
                      100 * q.producer_waiting, 100 * q.producer_in_setup, 100 * q.producer_in_lookup,
                      100 * q.producer_issuing, 100 * q.producer_taking);
        if (q.find >= 0)
          std::printf("\n        %-11s cycles per tile and warpgroup: find %.0f, before the K loop %.0f, K loop %.0f, "
                      "after it %.0f", "", q.find, q.before_k_loop, q.k_loop, q.after_k_loop);
        std::printf("\n");
      }
      // The tool's own check: a kernel's wait returns only once the kernel launched before it (the
      // enum follows the launch order) has ended, as programmatic dependent launch guarantees.
      // Direct GEMM1 (precomputed routing at T=1) waits only at its end: its "wait" is when its
      // tile table is ready, before the plan has ended.
      const bool direct = o.random_routing && r.kernel.gemm1.find("direct") != std::string::npos;
      if (direct) std::printf("        (gemm1 is direct: its wait is when its table is ready; it waits at its end)\n");
      int prev = -1;
      for (size_t k = 0; k < r.trace.size(); ++k) {
        if (r.trace[k][3] < 0) continue;
        if (direct && k == kTraceGemm1) {
          prev = int(k);
          continue;
        }
        if (prev >= 0 && r.trace[k][1] >= 0 && r.trace[k][1] < r.trace[prev][3])
          std::printf("        trace: WARNING %s's wait returned at %.2f, before %s ended (%.2f)\n",
                      kTraceKernelNames[k], r.trace[k][1], kTraceKernelNames[prev], r.trace[prev][3]);
        prev = int(k);
      }
    }
#endif
    rows.push_back(r);
  }
  if (!o.json.empty()) write_json(o, p, prop.name, ceil, rows);
  if (o.check && !all_pass) {
    std::fprintf(stderr, "error: --check failed for at least one token count\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return fp4moe::cli::run_main("fp4moe-bench", [&] { return tool_main(argc, argv); });
}
