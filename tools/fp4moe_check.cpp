// fp4moe-check: loads one MoE layer of a real (or generated) checkpoint and checks it end to end.
//
//   fp4moe-check --checkpoint DIR [--layer L] [--tokens T] [--mode w4a16|w4a4] [--path auto|sm90|simt]
//                [--ep-rank R --ep-size N] [--tp-rank R --tp-size N] [--threads N] [--seed S] [--load-rate]
//
// Prints the checkpoint (architecture, convention, the MoeProblem it implies, shards, index warnings),
// loads the layer (the rank's experts / TP slice), reports the load (layout, bytes, GB/s, warnings),
// runs T random tokens (hidden ~ N(0,1) bf16, router logits ~ N(0,1)) through the fp64 CPU reference
// and, when a CUDA GPU is present, through MoeLayer, and prints the error statistics of the GPU output
// against the reference and the kernel path that ran. Without a GPU it says so and prints the
// reference's output statistics only. Exit status: 0 ok, 1 check failed, 2 usage or load error.
//
// --load-rate: loads every MoE layer of the checkpoint and compares the load rate with a plain
// sequential read() of the same shard files, each from a cold page cache (posix_fadvise DONTNEED
// on the shard files, which needs no privileges and touches no other file).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/checkpoint.h"
#include "fp4moe/moe.h"
#include "fp4moe/numerics.h"
#include "reference/moe_reference.h"
#include "tools/cli_args.h"

#if FP4MOE_HAS_CUDA
#include <cuda_runtime.h>

#include "fp4moe/moe_gpu.h"
#endif

namespace {

using namespace fp4moe;

struct Options {
  std::string checkpoint;
  int layer = -1;  // -1: the first MoE layer
  int64_t tokens = 16;
  Mode mode = Mode::kW4A16;
  std::string path = "auto";
  LoadOptions shard;
  uint64_t seed = 1;
  bool load_rate = false;
  std::vector<std::string> layer_flags;  // the flags given that choose or run one layer's check
};

[[noreturn]] void usage(const std::string& why) {
  const bool help = why.empty();  // --help: the usage on stdout, status 0
  std::fprintf(help ? stdout : stderr,
               "%s%s%s"
               "usage: fp4moe-check --checkpoint DIR [--layer L] [--tokens T] [--mode w4a16|w4a4]\n"
               "                    [--path auto|sm90|simt] [--ep-rank R --ep-size N] [--tp-rank R --tp-size N]\n"
               "                    [--threads N] [--seed S] [--load-rate]\n"
               "  --layer L: a MoE layer of the checkpoint (default: the first); --threads 0: min(8, hardware threads)\n"
               "  --load-rate: load every MoE layer (the --ep/--tp shard, --threads) and time it against read();\n"
               "               --layer, --tokens, --mode, --path and --seed do not apply to it\n",
               help ? "" : "fp4moe-check: ", why.c_str(), help ? "" : "\n");
  std::exit(help ? 0 : 2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + a);
      return argv[++i];
    };
    // (bounded: a value past the bound is refused, never wrapped into an int)
    auto int_value = [&](int64_t lo = 0, int64_t hi = int64_t(1) << 30) -> int64_t {
      int64_t x = 0;
      const std::string err = cli::parse_int(a, value(), lo, hi, &x);
      if (!err.empty()) usage(err);
      return x;
    };
    if (a == "--layer" || a == "--tokens" || a == "--mode" || a == "--path" || a == "--seed")
      o.layer_flags.push_back(a);
    if (a == "--checkpoint") {
      o.checkpoint = value();
      if (o.checkpoint.empty()) usage("--checkpoint is empty");
    }
    else if (a == "--layer") o.layer = int(int_value());
    else if (a == "--tokens") o.tokens = int_value();
    else if (a == "--mode") {
      if (Status s = parse_mode(value(), &o.mode); !s.ok()) usage(s.message());
    } else if (a == "--path") {
      o.path = value();
      if (o.path != "auto" && o.path != "sm90" && o.path != "simt")
        usage("--path = '" + o.path + "' is not one of: auto, sm90, simt");
    }
    else if (a == "--ep-rank") o.shard.ep_rank = int(int_value());
    else if (a == "--ep-size") o.shard.ep_size = int(int_value());
    else if (a == "--tp-rank") o.shard.tp_rank = int(int_value());
    else if (a == "--tp-size") o.shard.tp_size = int(int_value());
    else if (a == "--seed") o.seed = uint64_t(int_value(0, INT64_MAX));
    else if (a == "--threads") o.shard.num_threads = int(int_value());
    else if (a == "--load-rate") o.load_rate = true;
    else if (a == "--help" || a == "-h") usage("");
    else usage("unknown argument '" + a + "'");
  }
  if (o.checkpoint.empty()) usage("--checkpoint DIR is required");
  // --load-rate loads every MoE layer and runs no tokens: a flag that would not apply is refused, not ignored.
  if (o.load_rate && !o.layer_flags.empty())
    usage(o.layer_flags.front() + " does not apply with --load-rate (it loads every MoE layer, with the shard "
          "options only, and runs no tokens)");
  if (o.tokens < 1 || o.tokens > (1 << 20))
    usage("--tokens = " + std::to_string(o.tokens) + " must be in [1, 2^20]");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Drops the page-cache pages of the shard files so the next read comes from the disk.
void evict(const Checkpoint& ckpt) {
  for (const SafetensorsFile* f : ckpt.shards()) {
    const int fd = open(f->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

int run_load_rate(const Checkpoint& ckpt, const Options& o) {
  const CheckpointInfo& info = ckpt.info();
  // Plain sequential read of every shard: the disk's (or page cache's) rate for these files.
  std::vector<char> buf(size_t(16) << 20);
  auto read_all = [&]() -> uint64_t {
    uint64_t total = 0;
    for (const SafetensorsFile* f : ckpt.shards()) {
      const int fd = open(f->path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ssize_t n;
      while ((n = read(fd, buf.data(), buf.size())) > 0) total += uint64_t(n);
      close(fd);
    }
    return total;
  };
  // One set of host buffers for every layer, as a loader that uploads layer by layer would use.
  HostMoeWeights w;
  auto load_all = [&](uint64_t* bytes) -> Status {
    *bytes = 0;
    for (int l : info.moe_layers) {
      LoadReport r;
      FP4MOE_RETURN_IF_ERROR(ckpt.load_moe_layer(l, o.shard, &w, &r));
      *bytes += r.bytes_read;
    }
    return Status::Ok();
  };
  std::printf("\nload rate: %zu MoE layers, %zu shards, %.2f GB on disk\n", info.moe_layers.size(), ckpt.shards().size(),
              ckpt.total_bytes() / 1e9);
  std::printf("%-34s %10s %9s %9s\n", "", "GB", "seconds", "GB/s");
  for (const bool cold : {true, false}) {
    if (cold) evict(ckpt);
    auto t0 = std::chrono::steady_clock::now();
    const uint64_t read_bytes = read_all();
    const double t_read = seconds_since(t0);
    if (cold) evict(ckpt);
    uint64_t load_bytes = 0;
    t0 = std::chrono::steady_clock::now();
    if (Status s = load_all(&load_bytes); !s.ok()) {
      std::fprintf(stderr, "fp4moe-check: %s\n", s.to_string().c_str());
      return 2;
    }
    const double t_load = seconds_since(t0);
    const char* tag = cold ? "cold" : "warm";
    std::printf("sequential read() of all shards, %s %10.3f %9.3f %9.2f\n", tag, read_bytes / 1e9, t_read,
                read_bytes / 1e9 / t_read);
    std::printf("load_moe_layer, every MoE layer, %s %10.3f %9.3f %9.2f\n", tag, load_bytes / 1e9, t_load,
                load_bytes / 1e9 / t_load);
  }
  return 0;
}

struct ErrorStats {
  double rel_l2 = 0, max_abs = 0, ref_max_abs = 0, ref_norm = 0;
  int64_t num_nan = 0;
};

ErrorStats compare(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
    if (std::isnan(g) || std::isnan(r)) {
      ++s.num_nan;
      continue;
    }
    num += (g - r) * (g - r);
    den += r * r;
    s.max_abs = std::max(s.max_abs, std::fabs(g - r));
    s.ref_max_abs = std::max(s.ref_max_abs, std::fabs(r));
  }
  s.ref_norm = std::sqrt(den);
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0);
  return s;
}

#if FP4MOE_HAS_CUDA
// Normalized L2 limits of a GPU forward against the fp64 reference (the table of tests/moe_test_util.h,
// with its reasons): w4a16 rounds the intermediate, the weighted expert outputs and the output to bf16;
// w4a4 can land a near-tie intermediate value one e2m1 step away.
double tolerance(Mode mode) { return mode == Mode::kW4A4 ? 3e-2 : 8e-3; }

#define CHECK_CUDA_OR_RETURN(expr)                                                                    \
  do {                                                                                                \
    cudaError_t e_ = (expr);                                                                          \
    if (e_ != cudaSuccess)                                                                            \
      return Status(StatusCode::kCudaError, std::string(#expr) + ": " + cudaGetErrorString(e_));      \
  } while (0)

Status run_gpu(const MoeProblem& p, const HostMoeWeights& w, const Options& o, const std::vector<uint16_t>& hidden,
               const std::vector<float>& logits, std::vector<float>* out, KernelInfo* info) {
  LayerOptions lo;
  FP4MOE_RETURN_IF_ERROR(parse_kernel_path(o.path, &lo.path));
  lo.ep_rank = o.shard.ep_rank;
  lo.ep_size = o.shard.ep_size;
  lo.tp_rank = o.shard.tp_rank;
  lo.tp_size = o.shard.tp_size;
  std::unique_ptr<MoeLayer> layer;
  FP4MOE_RETURN_IF_ERROR(MoeLayer::create(p, w.view(), lo, &layer));
  const int64_t T = o.tokens, H = p.hidden_size;
  uint16_t *d_hidden = nullptr, *d_out = nullptr;
  float* d_logits = nullptr;
  void* ws = nullptr;
  cudaStream_t stream = nullptr;
  Status st = [&]() -> Status {
    CHECK_CUDA_OR_RETURN(cudaMalloc(&d_hidden, hidden.size() * 2));
    CHECK_CUDA_OR_RETURN(cudaMalloc(&d_logits, logits.size() * 4));
    CHECK_CUDA_OR_RETURN(cudaMalloc(&d_out, size_t(T * H) * 2));
    CHECK_CUDA_OR_RETURN(cudaMalloc(&ws, std::max<size_t>(layer->workspace_bytes(), 256)));
    CHECK_CUDA_OR_RETURN(cudaStreamCreate(&stream));
    CHECK_CUDA_OR_RETURN(cudaMemcpy(d_hidden, hidden.data(), hidden.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA_OR_RETURN(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA_OR_RETURN(cudaMemset(d_out, 0xff, size_t(T * H) * 2));  // NaN poison: unwritten outputs show
    ForwardArgs args;
    args.hidden = d_hidden;
    args.router_logits = d_logits;
    args.logits_type = LogitsType::kF32;
    args.num_tokens = T;
    args.out = d_out;
    FP4MOE_RETURN_IF_ERROR(layer->forward(args, ws, layer->workspace_bytes(), stream));
    FP4MOE_RETURN_IF_ERROR(layer->check_device_errors(ws, stream));
    CHECK_CUDA_OR_RETURN(cudaStreamSynchronize(stream));
    std::vector<uint16_t> host(size_t(T * H));
    CHECK_CUDA_OR_RETURN(cudaMemcpy(host.data(), d_out, host.size() * 2, cudaMemcpyDeviceToHost));
    out->resize(host.size());
    for (size_t i = 0; i < host.size(); ++i) (*out)[i] = bf16_to_float(host[i]);
    *info = layer->kernel_info(T);
    return Status::Ok();
  }();
  cudaFree(d_hidden);
  cudaFree(d_logits);
  cudaFree(d_out);
  cudaFree(ws);
  if (stream) cudaStreamDestroy(stream);
  return st;
}
#endif

}  // namespace

static int tool_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::unique_ptr<Checkpoint> ckpt;
  auto t0 = std::chrono::steady_clock::now();
  if (Status s = Checkpoint::open(o.checkpoint, &ckpt); !s.ok()) {
    std::fprintf(stderr, "fp4moe-check: %s\n", s.to_string().c_str());
    return 2;
  }
  const CheckpointInfo& info = ckpt->info();
  const MoeProblem& cp = info.problem;
  std::printf("checkpoint %s: %s (%s), %s, %d shards, %lld tensors, %.2f GB, headers scanned in %.3f s\n",
              info.directory.c_str(), info.architecture.c_str(), info.model_type.c_str(), to_string(info.convention),
              ckpt->num_shards(), (long long)ckpt->num_tensors(), ckpt->total_bytes() / 1e9, seconds_since(t0));
  std::printf("problem: H=%lld I=%lld E=%d top-%d, routing %s%s, activation %s, %s%s, %d shared expert(s), "
              "%zu of %d layers MoE\n",
              (long long)cp.hidden_size, (long long)cp.intermediate_size, cp.num_experts(), cp.top_k(),
              to_string(cp.routing.method), cp.routing.renormalize ? " (renormalized)" : "", to_string(cp.activation),
              to_string(cp.weight_format), cp.has_bias ? " with biases" : "", cp.num_shared_experts,
              info.moe_layers.size(), info.num_layers);
  for (const auto& w : ckpt->warnings()) std::printf("warning: %s\n", w.c_str());
  if (o.load_rate) return run_load_rate(*ckpt, o);

  const int layer = o.layer >= 0 ? o.layer : info.moe_layers.front();
  HostMoeWeights weights;
  LoadReport report;
  t0 = std::chrono::steady_clock::now();
  if (Status s = ckpt->load_moe_layer(layer, o.shard, &weights, &report); !s.ok()) {
    std::fprintf(stderr, "fp4moe-check: %s\n", s.to_string().c_str());
    return 2;
  }
  const double t_load = seconds_since(t0);
  std::printf("layer %d: %s, %d experts [%d, %d) x I=%lld, %d tensor reads, %.3f GB in %.3f s (%.2f GB/s)%s\n", layer,
              report.expert_layout.c_str(), weights.num_experts, o.shard.ep_rank * weights.num_experts,
              (o.shard.ep_rank + 1) * weights.num_experts, (long long)weights.intermediate, report.num_tensors_read,
              report.bytes_read / 1e9, t_load, report.bytes_read / 1e9 / std::max(t_load, 1e-9),
              report.has_input_scales ? ", input scales present" : "");
  for (const auto& w : report.warnings) std::printf("warning: %s\n", w.c_str());

  MoeProblem p = cp;
  p.mode = o.mode;
  p.max_tokens = std::max<int64_t>(p.max_tokens, o.tokens);
  if (Status s = validate(p); !s.ok()) {
    std::fprintf(stderr, "fp4moe-check: %s\n", s.to_string().c_str());
    return 2;
  }
  if (p.mode == Mode::kW4A4 && !report.has_input_scales) {
    std::fprintf(stderr, "fp4moe-check: --mode w4a4 needs the checkpoint's input scales; this one has none\n");
    return 2;
  }

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t T = o.tokens, H = p.hidden_size;
  std::vector<uint16_t> hidden(size_t(T * H));
  for (auto& x : hidden) x = float_to_bf16(nd(rng));
  std::vector<float> logits(size_t(T) * p.num_experts());
  for (auto& x : logits) x = nd(rng);

  const ref::ShardSpec shard{o.shard.ep_rank, o.shard.ep_size, o.shard.tp_rank, o.shard.tp_size};
  std::vector<float> ref_out(size_t(T * H));
  t0 = std::chrono::steady_clock::now();
  if (Status s = ref::moe_forward(p, weights.view(), shard, hidden.data(), logits.data(), LogitsType::kF32, T,
                                  ref_out.data());
      !s.ok()) {
    std::fprintf(stderr, "fp4moe-check: reference: %s\n", s.to_string().c_str());
    return 2;
  }
  const ErrorStats ref_stats = compare(ref_out, ref_out);
  std::printf("reference (fp64, %s, %lld tokens%s): %.3f s, output norm %.4g, max |out| %.4g, %lld NaN\n",
              to_string(p.mode), (long long)T, o.shard.ep_size * o.shard.tp_size > 1 ? ", this rank's partial" : "",
              seconds_since(t0), ref_stats.ref_norm, ref_stats.ref_max_abs, (long long)ref_stats.num_nan);

#if FP4MOE_HAS_CUDA
  int num_devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&num_devices);
  if (err != cudaSuccess || num_devices == 0) {
    std::printf("gpu: no CUDA GPU (%s): GPU check skipped, reference only\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "no device");
    return 0;
  }
  std::vector<float> gpu_out;
  KernelInfo kinfo;
  if (Status s = run_gpu(p, weights, o, hidden, logits, &gpu_out, &kinfo); !s.ok()) {
    std::fprintf(stderr, "fp4moe-check: gpu: %s\n", s.to_string().c_str());
    return 1;
  }
  const ErrorStats e = compare(gpu_out, ref_out);
  const bool pass = e.num_nan == 0 && e.ref_norm > 0 && e.rel_l2 <= tolerance(p.mode);
  std::printf("gpu: path %s, gemm1 %s, gemm2 %s, regime '%s'\n", to_string(kinfo.path), kinfo.gemm1.c_str(),
              kinfo.gemm2.c_str(), kinfo.regime.c_str());
  std::printf("gpu vs reference: rel L2 %.3e (limit %.1e), max abs err %.4g (max |ref| %.4g), %lld NaN: %s\n",
              e.rel_l2, tolerance(p.mode), e.max_abs, e.ref_max_abs, (long long)e.num_nan, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
#else
  std::printf("gpu: this build has no CUDA (FP4MOE_ENABLE_CUDA=OFF): GPU check skipped, reference only\n");
  return 0;
#endif
}

int main(int argc, char** argv) {
  return fp4moe::cli::run_main("fp4moe-check", [&] { return tool_main(argc, argv); });
}
