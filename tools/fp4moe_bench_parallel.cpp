// fp4moe-bench-parallel: times the parallel MoE layer, split into dispatch / experts / combine, for each
// parallel config and strategy, on N local GPUs (one process each) or, with --cpu, on N in-process ranks
// running the fp64 reference (to check the tool and the plumbing without a GPU; the times then mean little).
//
//   fp4moe-bench-parallel --nproc 2 [--preset deepseek-r1] [--mode w4a16|w4a4] [--tokens 1,128,1024,8192]
//                         [--configs all|dp2tp1ep2,...] [--strategies all|alltoall,...]
//                         [--quantized-dispatch auto|off|on] [--iters 20] [--warmup 3] [--timeout-ms 60000]
//                         [--cpu [--scale 16]]
//
// --mode: the layer's mode (default w4a16). --quantized-dispatch: ParallelMoeOptions::quantized_dispatch
// (auto: NVFP4 token records for w4a4 with allgather-reducescatter, bf16 otherwise; on: NVFP4 wherever a
// strategy dispatches tokens, w4a4 only; tp-allreduce rows, which send no tokens, then run as auto).
// The last column, wire, says which ran: bf16 sends 2 bytes per hidden element, nvfp4 0.5625 (H/2
// bytes of e2m1 codes + H/16 e4m3 block scales per token); each token record also carries its top-k
// ids and weights (8 bytes per slot).
//
// Without launcher variables and with --nproc N > 1 it starts N copies of itself with torchrun-style
// variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free
// port) and waits for them; under torchrun/mpirun/srun it is one of the ranks already. Every rank builds
// the layer on dummy weights for each (config, strategy), runs warm-up steps, then:
//   phases: steps with a stream synchronize at each phase boundary (StepTimes), median per phase;
//   step:   steps without those inner synchronizes, median wall time (what a caller sees);
//   raw:    a plain all-gather + reduce-scatter of the same bytes through the same communicator, median
//           (the NCCL bandwidth reference for dispatch + combine, measured in the same run): the
//           all-gather moves the layer's own token records (ParallelMoe::dispatch_record_bytes, so NVFP4
//           records when the dispatch is quantized), the reduce-scatter its output rows;
//   graph:  GPU only, strategies with a CUDA-graph mode: the forward with padded_tokens = tok/rank
//           captured once (collectives included), then replays, median ("-" where there is none);
//   g-exp:  GPU only, next to graph: this rank's experts alone (ExpertBackend::run_experts on the rows
//           its experts phase takes: tok/rank x dp for allgather-reducescatter, tok/rank otherwise),
//           captured and replayed the same way; graph - g-exp is the step's communication plus its
//           routing and record packing, the part to compare with g-raw;
//   g-raw:  GPU only: the raw all-gather + reduce-scatter above, captured and replayed. Like raw, it is
//           over the whole world: the reference for allgather-reducescatter with tp = 1; tp-allreduce
//           rows all-reduce instead, and dp x tp > 1 gathers over the DP group only.
// wire: what the dispatch sends per token (bf16 or nvfp4 rows), "-" for strategies that send none.
// The NCCL communicators only enqueue (wait_each_op off, so the forward can be captured): the host
// waits once per step rather than after every collective, so phases/step are not comparable with
// runs of this tool before the graph column existed (bench/results/2026-11-29_h200x2_*).
// Rank 0 prints the slowest rank's medians per row. Host-clock timing (steady_clock) around synchronized
// steps and replays, after a barrier: it includes launch overheads.
//
// Ran on 2 H200s (bench/results/2026-11-29_h200x2_*.txt, 2026-11-30_h200x2_run3/run4_*.txt, with the
// g-exp and g-raw columns from 2026-11-29_h200x2_parallel_g-exp.txt on); --cpu
// runs anywhere (no graph columns there).
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/numerics.h"
#include "fp4moe/parallel.h"
#include "src/comm/local_comm.h"
#include "src/comm/bootstrap.h"
#include "src/comm/nccl_comm.h"
#include "src/moe/parallel_moe.h"
#include "tools/cli_args.h"

extern char** environ;

namespace {

using namespace fp4moe;
using Clock = std::chrono::steady_clock;

struct Options {
  int nproc = 1;
  std::string preset = "deepseek-r1";
  Mode mode = Mode::kW4A16;
  QuantizedDispatch quantized_dispatch = QuantizedDispatch::kAuto;
  std::vector<int64_t> tokens = {1, 128, 1024, 8192};
  std::string configs = "all";
  std::string strategies = "all";
  int iters = 20;
  int warmup = 3;
  int timeout_ms = 60000;
  bool cpu = false;
  int scale = 16;  // --cpu only: the reference is slow at full size
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "fp4moe-bench-parallel: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int to_int(const std::string& flag, const std::string& v, int lo = 0, int hi = 1 << 30) {
  int64_t x = 0;
  const std::string err = cli::parse_int(flag, v, lo, hi, &x);
  if (!err.empty()) die(err);
  return int(x);
}

// Ranks started on one machine: threads of the fp64 reference with --cpu, one process per GPU otherwise.
constexpr int kMaxCpuRanks = 256;

Options parse(int argc, char** argv) {
  Options o;
  bool scale_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--nproc") o.nproc = to_int(a, value(), 1, 1 << 16);
    else if (a == "--preset") o.preset = value();
    else if (a == "--mode") {
      const Status s = parse_mode(value(), &o.mode);
      if (!s.ok()) die(s.message());
    } else if (a == "--quantized-dispatch") {
      const Status s = parse_quantized_dispatch(value(), &o.quantized_dispatch);
      if (!s.ok()) die(s.message());
    }
    else if (a == "--tokens") {
      o.tokens.clear();
      // (at least one token a rank: the layer is sized for the largest count)
      for (const auto& t : split_list(value())) o.tokens.push_back(to_int(a, t, 1, 1 << 20));
    } else if (a == "--configs") o.configs = value();
    else if (a == "--strategies") o.strategies = value();
    else if (a == "--iters") o.iters = to_int(a, value(), 1);
    else if (a == "--warmup") o.warmup = to_int(a, value());
    else if (a == "--timeout-ms") o.timeout_ms = to_int(a, value(), 1);
    else if (a == "--cpu") o.cpu = true;
    else if (a == "--scale") o.scale = to_int(a, value(), 1, 1 << 20), scale_given = true;
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: fp4moe-bench-parallel --nproc N [--preset NAME] [--mode w4a16|w4a4] [--tokens 1,128,1024,8192]\n"
          "                             [--configs all|dp2tp1ep2,...] [--strategies all|alltoall,...]\n"
          "                             [--quantized-dispatch auto|off|on] [--iters N] [--warmup N]\n"
          "                             [--timeout-ms MS] [--cpu [--scale N]]\n"
          "(the columns and the launch modes are described at the top of tools/fp4moe_bench_parallel.cpp)\n");
      std::exit(0);
    } else {
      die("unknown argument '" + a + "'");
    }
  }
  if (o.cpu && o.nproc > kMaxCpuRanks)
    die("--nproc = " + std::to_string(o.nproc) + " with --cpu: at most " + std::to_string(kMaxCpuRanks) +
        " in-process ranks (one thread each)");
  if (scale_given && !o.cpu) die("--scale is for --cpu runs only (the GPU runs the full layer)");
  if (o.quantized_dispatch == QuantizedDispatch::kOn && o.mode != Mode::kW4A4)
    die(std::string("--quantized-dispatch on needs --mode w4a4 (mode is ") + to_string(o.mode) + ")");
  if (o.tokens.empty()) die("--tokens is empty");
  return o;
}

std::string config_name(const ParallelConfig& c) {
  return "dp" + std::to_string(c.dp) + "tp" + std::to_string(c.tp) + "ep" + std::to_string(c.ep);
}

// The (config, strategy) pairs to run, in a fixed order every rank computes alike.
std::vector<std::pair<ParallelConfig, Strategy>> plan(const Options& o, const MoeProblem& p, int world) {
  const std::vector<std::string> want_c = split_list(o.configs), want_s = split_list(o.strategies);
  std::vector<std::pair<ParallelConfig, Strategy>> out;
  for (const ParallelConfig& c : valid_configs(p, world)) {
    if (o.configs != "all" && std::find(want_c.begin(), want_c.end(), config_name(c)) == want_c.end()) continue;
    for (Strategy s : applicable_strategies(c)) {
      if (o.strategies != "all" && std::find(want_s.begin(), want_s.end(), to_string(s)) == want_s.end()) continue;
      out.push_back({c, s});
    }
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-rank medians, in ms: dispatch, experts, combine, step, raw, graph, g-exp, g-raw (-1: none).
constexpr int kNumStats = 8;

// Rank 0 gets every rank's stats through the communicator (in the backend's memory).
Status gather_stats(comm::Communicator& world, ExpertBackend& backend, const std::vector<double>& mine,
                    std::vector<double>* all) {
  const int n = world.size();
  void* dev = nullptr;
  FP4MOE_RETURN_IF_ERROR(backend.allocate(sizeof(double) * kNumStats * (n + 1), &dev));
  auto* d = static_cast<double*>(dev);
  Status s = backend.copy_from_host(d, mine.data(), sizeof(double) * kNumStats);
  if (s.ok())
    s = world.all_gather_v(d, kNumStats * sizeof(double), d + kNumStats,
                           comm::equal_counts(n, kNumStats * sizeof(double)), comm::DataType::kU8);
  if (s.ok()) s = world.synchronize();  // with the deadline, before the host reads
  all->resize(size_t(kNumStats) * n);
  if (s.ok()) s = backend.copy_to_host(all->data(), d + kNumStats, sizeof(double) * kNumStats * n);
  backend.release(dev);
  return s;
}

// Inputs of one rank in the backend's memory: random hidden states and logits.
struct Inputs {
  void* hidden = nullptr;
  void* logits = nullptr;
  void* out = nullptr;
};

// Captures `body` (one forward) into a CUDA graph and times `iters` replays after `warmup`, each after a
// barrier and up to `sync` (ms into *out). Empty on the CPU.
using GraphTimer = std::function<Status(const std::function<Status()>& body, const std::function<Status()>& sync,
                                        int warmup, int iters, std::vector<double>* out)>;

Status run_rank(const Options& o, const MoeProblem& base, comm::Communicator& world,
                const std::function<Status(const MoeProblem&, const ParallelConfig&, Strategy, const RankLayout&,
                                           std::unique_ptr<ExpertBackend>*)>& make_backend,
                const GraphTimer& time_graph = {}) {
  const int rank = world.rank();
  const auto runs = plan(o, base, world.size());
  if (runs.empty())
    return invalid_argument("no (config, strategy) pair of ", world.size(), " ranks for ", base.name,
                            " matches --configs ", o.configs, " --strategies ", o.strategies);
  if (rank == 0) {
    std::printf("fp4moe-bench-parallel: %d ranks (%s), preset %s, %s, H %lld, I %lld, E %d, top-%d; ms, slowest rank\n",
                world.size(), o.cpu ? "cpu reference" : "nccl", base.name.c_str(), to_string(base.mode),
                (long long)base.hidden_size, (long long)base.intermediate_size, base.num_experts(), base.top_k());
    std::printf("quantized dispatch %s; wire: the dispatched token rows, bf16 (2 B/elt) or nvfp4 (0.5625 B/elt), "
                "plus 8 B per top-k slot\n", to_string(o.quantized_dispatch));
    std::printf("%-12s %-24s %8s %10s %10s %10s %10s %10s %10s %10s %10s %10s  %s\n", "config", "strategy", "tok/rank",
                "dispatch", "experts", "combine", "phases", "step", "raw-comm", "graph", "g-exp", "g-raw", "wire");
  }
  MoeProblem p = base;
  p.max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  std::mt19937_64 rng(1000 + rank);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [config, strategy] : runs) {
    const RankLayout layout = rank_layout(config, rank);
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_backend(p, config, strategy, layout, &backend));
    ExpertBackend* b = backend.get();
    std::unique_ptr<ParallelMoe> layer;
    // Every rank of a DP group passes the same count by construction: no per-step check (which would
    // also keep the forward from being captured).
    ParallelMoeOptions options;
    options.check_token_counts = false;
    // on with a strategy that sends no tokens (tp-allreduce) would be refused: such rows run as auto.
    options.quantized_dispatch =
        o.quantized_dispatch == QuantizedDispatch::kOn &&
                !(strategy == Strategy::kAllGatherReduceScatter || strategy == Strategy::kAllToAll)
            ? QuantizedDispatch::kAuto
            : o.quantized_dispatch;
    FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, config, strategy, &world, std::move(backend), options, &layer));
    const size_t H = size_t(p.hidden_size), E = size_t(p.num_experts()), T = size_t(p.max_tokens);
    const size_t out_bytes = T * H * comm::size_of(b->output_type());
    // Raw reference: the same per-rank bytes as dispatch (the layer's token records, bf16 or NVFP4) and
    // combine (outputs).
    const size_t record_bytes = layer->dispatch_record_bytes();
    const bool sends_tokens = strategy == Strategy::kAllGatherReduceScatter || strategy == Strategy::kAllToAll;
    const char* dispatch_name = !sends_tokens ? "-" : layer->quantized_dispatch() ? "nvfp4" : "bf16";
    Inputs in;
    void* raw_send = nullptr;
    void* raw_recv = nullptr;
    const size_t raw_bytes = std::max(T * record_bytes, out_bytes) * size_t(world.size());
    // The experts-alone graph's rows: the most its experts phase takes in one step.
    const int64_t exp_rows_per_token = strategy == Strategy::kAllGatherReduceScatter ? config.dp : 1;
    const size_t K = size_t(p.top_k()), XT = T * size_t(exp_rows_per_token);
    // Random hidden states and logits for `rows` tokens, allocated in the backend's memory.
    auto random_inputs = [&](size_t rows, Inputs* x) -> Status {
      FP4MOE_RETURN_IF_ERROR(b->allocate(rows * H * 2, &x->hidden));
      FP4MOE_RETURN_IF_ERROR(b->allocate(rows * E * 4, &x->logits));
      std::vector<uint16_t> h(rows * H);
      std::vector<float> l(rows * E);
      for (auto& v : h) v = float_to_bf16(normal(rng));
      for (auto& v : l) v = normal(rng);
      FP4MOE_RETURN_IF_ERROR(b->copy_from_host(x->hidden, h.data(), h.size() * 2));
      return b->copy_from_host(x->logits, l.data(), l.size() * 4);
    };
    FP4MOE_RETURN_IF_ERROR(random_inputs(T, &in));
    FP4MOE_RETURN_IF_ERROR(b->allocate(out_bytes, &in.out));
    FP4MOE_RETURN_IF_ERROR(b->allocate(raw_bytes, &raw_send));
    FP4MOE_RETURN_IF_ERROR(b->allocate(raw_bytes, &raw_recv));
    FP4MOE_RETURN_IF_ERROR(b->zero(raw_send, raw_bytes));
    Inputs ex;
    void* ex_ids = nullptr;
    void* ex_weights = nullptr;
    if (time_graph) {
      FP4MOE_RETURN_IF_ERROR(random_inputs(XT, &ex));
      FP4MOE_RETURN_IF_ERROR(b->allocate(XT * H * comm::size_of(b->output_type()), &ex.out));
      FP4MOE_RETURN_IF_ERROR(b->allocate(XT * K * 4, &ex_ids));
      FP4MOE_RETURN_IF_ERROR(b->allocate(XT * K * 4, &ex_weights));
    }
    for (int64_t tokens : o.tokens) {
      // Tokens per rank; a DP group's TP ranks share theirs (that is what tp means here).
      ParallelMoe::Args a;
      a.hidden = static_cast<const uint16_t*>(in.hidden);
      a.router_logits = in.logits;
      a.num_tokens = tokens;
      a.out = in.out;
      std::vector<double> dispatch, experts, combine, step, raw;
      for (int i = 0; i < o.warmup; ++i) FP4MOE_RETURN_IF_ERROR(layer->forward(a));
      for (int i = 0; i < o.iters; ++i) {
        StepTimes t;
        FP4MOE_RETURN_IF_ERROR(layer->forward(a, &t));
        dispatch.push_back(t.dispatch_s * 1e3);
        experts.push_back(t.experts_s * 1e3);
        combine.push_back(t.combine_s * 1e3);
      }
      for (int i = 0; i < o.iters; ++i) {
        FP4MOE_RETURN_IF_ERROR(world.barrier());
        const Clock::time_point t0 = Clock::now();
        FP4MOE_RETURN_IF_ERROR(layer->forward(a));
        FP4MOE_RETURN_IF_ERROR(b->synchronize());
        step.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      const size_t gather_bytes = size_t(tokens) * record_bytes;
      const size_t scatter_elems = size_t(tokens) * H;
      for (int i = 0; i < o.iters; ++i) {
        FP4MOE_RETURN_IF_ERROR(world.barrier());
        const Clock::time_point t0 = Clock::now();
        FP4MOE_RETURN_IF_ERROR(world.all_gather_v(raw_send, gather_bytes, raw_recv,
                                                  comm::equal_counts(world.size(), gather_bytes), comm::DataType::kU8));
        FP4MOE_RETURN_IF_ERROR(world.reduce_scatter_v_sum(raw_send, comm::equal_counts(world.size(), scatter_elems),
                                                          raw_recv, b->output_type()));
        FP4MOE_RETURN_IF_ERROR(world.synchronize());
        raw.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      double graph_ms = -1.0, graph_exp_ms = -1.0, graph_raw_ms = -1.0;
      if (time_graph && strategy != Strategy::kAllToAll && tokens > 0) {
        ParallelMoe::Args g = a;
        g.padded_tokens = tokens;
        std::vector<double> replays;
        FP4MOE_RETURN_IF_ERROR(time_graph([&] { return layer->forward(g); }, [&] { return layer->synchronize(); },
                                          o.warmup, o.iters, &replays));
        graph_ms = median(replays);
        // The experts alone, on routing computed outside the graph.
        const int64_t rows = tokens * exp_rows_per_token;
        FP4MOE_RETURN_IF_ERROR(b->route(ex.logits, LogitsType::kF32, rows, static_cast<int32_t*>(ex_ids),
                                        static_cast<float*>(ex_weights)));
        FP4MOE_RETURN_IF_ERROR(b->synchronize());
        replays.clear();
        FP4MOE_RETURN_IF_ERROR(time_graph(
            [&] {
              return b->run_experts(static_cast<const uint16_t*>(ex.hidden), static_cast<const int32_t*>(ex_ids),
                                    static_cast<const float*>(ex_weights), rows, ex.out);
            },
            [&] { return b->synchronize(); }, o.warmup, o.iters, &replays));
        graph_exp_ms = median(replays);
        replays.clear();
        FP4MOE_RETURN_IF_ERROR(time_graph(
            [&] {
              FP4MOE_RETURN_IF_ERROR(world.all_gather_v(raw_send, gather_bytes, raw_recv,
                                                        comm::equal_counts(world.size(), gather_bytes),
                                                        comm::DataType::kU8));
              return world.reduce_scatter_v_sum(raw_send, comm::equal_counts(world.size(), scatter_elems), raw_recv,
                                                b->output_type());
            },
            [&] { return world.synchronize(); }, o.warmup, o.iters, &replays));
        graph_raw_ms = median(replays);
      }
      std::vector<double> mine{median(dispatch), median(experts), median(combine), median(step),
                               median(raw),      graph_ms,        graph_exp_ms,    graph_raw_ms},
          all;
      FP4MOE_RETURN_IF_ERROR(gather_stats(world, *b, mine, &all));
      if (rank == 0) {
        std::vector<double> worst(kNumStats, -1e300);
        for (int r = 0; r < world.size(); ++r)
          for (int k = 0; k < kNumStats; ++k) worst[k] = std::max(worst[k], all[size_t(r) * kNumStats + k]);
        char graph[3][32];
        for (int k = 0; k < 3; ++k) {
          std::snprintf(graph[k], sizeof graph[k], "%10s", "-");
          if (worst[5 + k] >= 0) std::snprintf(graph[k], sizeof graph[k], "%10.3f", worst[5 + k]);
        }
        std::printf("%-12s %-24s %8lld %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %s %s %s  %s\n",
                    config_name(config).c_str(), to_string(strategy), (long long)tokens, worst[0], worst[1], worst[2],
                    worst[0] + worst[1] + worst[2], worst[3], worst[4], graph[0], graph[1], graph[2], dispatch_name);
        std::fflush(stdout);
      }
    }
    b->release(in.hidden);
    b->release(in.logits);
    b->release(in.out);
    b->release(raw_send);
    b->release(raw_recv);
    for (void* ptr : {ex.hidden, ex.logits, ex.out, ex_ids, ex_weights})
      if (ptr) b->release(ptr);
  }
  return Status::Ok();
}

int run_cpu(const Options& o, const MoeProblem& p) {
  const HostMoeWeights weights = make_random_weights(p, 1234);
  comm::CommOptions co;
  co.timeout = std::chrono::milliseconds(o.timeout_ms);
  auto world = comm::LocalWorld::create(o.nproc, co);
  auto st = comm::run_local_ranks(world, [&](int, comm::Communicator& c) -> Status {
    return run_rank(o, p, c,
                    [&](const MoeProblem& prob, const ParallelConfig&, Strategy, const RankLayout& layout,
                        std::unique_ptr<ExpertBackend>* out) {
                      ref::ReferenceOptions ro;
                      ro.num_threads = 1;
                      return make_cpu_reference_backend(prob, weights, layout, ro, out);
                    });
  });
  int rc = 0;
  for (size_t r = 0; r < st.size(); ++r)
    if (!st[r].ok()) {
      std::fprintf(stderr, "rank %zu: %s\n", r, st[r].to_string().c_str());
      rc = 1;
    }
  return rc;
}

int run_gpu_rank(const Options& o, const MoeProblem& p, const LaunchInfo& info) {
  comm::CommOptions co;
  co.timeout = std::chrono::milliseconds(o.timeout_ms);
  co.wait_each_op = false;  // collectives only enqueue (capturable); the layer and the timers synchronize
  cudaStream_t stream = nullptr;
  std::unique_ptr<comm::NcclCommunicator> world;
  Status s = Status::Ok();
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    s = unsupported("no CUDA device on this node: use --cpu");
  } else if (info.local_rank < device_count && cudaSetDevice(info.local_rank) == cudaSuccess &&
             cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess) {
    s = comm::create_nccl_world(info, stream, co, &world);
  } else {
    s = invalid_argument("local_rank = ", info.local_rank, " but this node has ", device_count, " GPUs");
  }
  if (s.ok())
    s = run_rank(o, p, *world,
                 [&](const MoeProblem& prob, const ParallelConfig& c, Strategy strategy, const RankLayout& layout,
                     std::unique_ptr<ExpertBackend>* out) {
                   return make_gpu_backend(prob, c, strategy, layout, nullptr, 1234, stream, out);
                 },
                 [&](const std::function<Status()>& body, const std::function<Status()>& sync, int warmup, int iters,
                     std::vector<double>* out) -> Status {
                   auto cuda = [](cudaError_t e, const char* what) {
                     return e == cudaSuccess ? Status::Ok()
                                             : Status(StatusCode::kCudaError, detail::concat(what, ": ", cudaGetErrorString(e)));
                   };
                   FP4MOE_RETURN_IF_ERROR(cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                                               "cudaStreamBeginCapture"));
                   const Status captured = body();
                   cudaGraph_t graph = nullptr;
                   const cudaError_t end = cudaStreamEndCapture(stream, &graph);
                   if (!captured.ok() || end != cudaSuccess) {
                     if (graph) cudaGraphDestroy(graph);
                     FP4MOE_RETURN_IF_ERROR(captured);
                     return cuda(end, "cudaStreamEndCapture");
                   }
                   cudaGraphExec_t exec = nullptr;
                   const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
                   cudaGraphDestroy(graph);
                   FP4MOE_RETURN_IF_ERROR(cuda(inst, "cudaGraphInstantiate"));
                   Status st = Status::Ok();
                   for (int i = 0; i < warmup + iters && st.ok(); ++i) {
                     st = world->barrier();
                     const Clock::time_point t0 = Clock::now();
                     if (st.ok()) st = cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
                     if (st.ok()) st = sync();
                     if (st.ok() && i >= warmup)
                       out->push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
                   }
                   cudaGraphExecDestroy(exec);
                   return st;
                 });
  world.reset();
  if (stream) cudaStreamDestroy(stream);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", info.rank, s.to_string().c_str());
    return 1;
  }
  return 0;
}


// Starts nproc copies of this program as ranks 0..nproc-1 and waits; if one fails, the others are
// stopped after their deadline would have passed anyway (they fail on their own through the
// communicator's deadline; SIGTERM is the backstop).
int launch_local(int argc, char** argv, const Options& o) {
  // One GPU per rank: more ranks than GPUs would leave the extra ones failing and the others
  // waiting for them until their deadline.
  int gpus = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&gpus); e != cudaSuccess)
    die(std::string("--nproc ") + std::to_string(o.nproc) + ": no CUDA GPU (" + cudaGetErrorString(e) +
        "); --cpu runs the ranks on the CPU reference");
  if (o.nproc > gpus)
    die("--nproc = " + std::to_string(o.nproc) + " but this machine has " + std::to_string(gpus) +
        " GPU(s), one per rank; --cpu runs more ranks on the CPU reference");
  const int port = comm::find_free_loopback_port();
  if (port == 0) die("no free local port for the rendezvous");
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nproc; ++r) {
    // This process's environment minus the variables set below (getenv would find a stale first copy).
    static const char* kOwn[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      bool own = false;
      for (const char* k : kOwn) own = own || std::strncmp(*e, k, std::strlen(k)) == 0;
      if (!own) env.push_back(*e);
    }
    auto set = [&](const std::string& k, const std::string& v) { env.push_back(k + "=" + v); };
    set("RANK", std::to_string(r));
    set("WORLD_SIZE", std::to_string(o.nproc));
    set("LOCAL_RANK", std::to_string(r));
    set("LOCAL_WORLD_SIZE", std::to_string(o.nproc));
    set("MASTER_ADDR", "127.0.0.1");
    set("MASTER_PORT", std::to_string(port));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (const int err = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()); err != 0) {
      // The ranks already started would wait for this one until their deadline: stop them first.
      for (pid_t started : pids) ::kill(started, SIGTERM);
      for (pid_t started : pids) ::waitpid(started, nullptr, 0);
      die("starting rank " + std::to_string(r) + " failed: " + std::strerror(err));
    }
    pids.push_back(pid);
  }
  (void)argc;
  int rc = 0;
  size_t remaining = pids.size();
  Clock::time_point first_failure{};
  while (remaining) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --remaining;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && rc == 0) {
        rc = 1;
        first_failure = Clock::now();
      }
      for (auto& p : pids)
        if (p == done) p = 0;
      continue;
    }
    if (rc != 0 && Clock::now() - first_failure > std::chrono::milliseconds(o.timeout_ms) + std::chrono::seconds(5))
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
    ::usleep(10000);
  }
  return rc;
}

}  // namespace

static int tool_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  MoeProblem p;
  Status s = get_preset(o.preset, &p);
  if (!s.ok()) die(s.to_string());
  p.mode = o.mode;
  s = validate(p);
  if (!s.ok()) die(s.to_string());
  if (o.cpu) p = scaled_preset(p, o.scale);
  // The world the configs are checked against: --nproc, or under a launcher (torchrun, mpirun, SLURM)
  // the ranks it started (--nproc may be left at 1 there).
  LaunchInfo info;
  const Status launched = launch_info_from_environment(&info);  // (--cpu: only for the note below)
  if (!o.cpu) {
    if (!launched.ok()) die(launched.to_string());
    if (info.launcher != "none" && info.world_size != o.nproc && o.nproc != 1)
      die("--nproc = " + std::to_string(o.nproc) + " but the launcher started " + std::to_string(info.world_size) +
          " ranks");
  }
  const int world = !o.cpu && info.launcher != "none" ? info.world_size : o.nproc;
  // Names in --configs / --strategies must exist (a typo used to run nothing and succeed).
  if (o.strategies != "all")
    for (const std::string& name : split_list(o.strategies)) {
      Strategy st;
      if (Status e = parse_strategy(name, &st); !e.ok()) die("--strategies: " + e.message());
    }
  if (o.configs != "all") {
    std::vector<std::string> known;
    for (const ParallelConfig& c : valid_configs(p, world)) known.push_back(config_name(c));
    for (const std::string& name : split_list(o.configs))
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string all;
        for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
        die("--configs: '" + name + "' is not a valid config of " + std::to_string(world) + " ranks for " + p.name +
            " (valid: " + (all.empty() ? "none" : all) + ")");
      }
    if (split_list(o.configs).empty()) die("--configs is empty");
  }
  if (o.cpu) {
    // (--cpu runs its --nproc ranks as threads of this process: a launcher's ranks would each run a world.)
    if (launched.ok() && info.launcher != "none")
      std::fprintf(stderr, "fp4moe-bench-parallel: note: --cpu runs all %d ranks in this process; the %s launcher's "
                   "%d processes each run their own\n", o.nproc, info.launcher.c_str(), info.world_size);
    return run_cpu(o, p);
  }
  if (info.launcher == "none" && o.nproc > 1) return launch_local(argc, argv, o);
  return run_gpu_rank(o, p, info);
}

int main(int argc, char** argv) {
  return fp4moe::cli::run_main("fp4moe-bench-parallel", [&] { return tool_main(argc, argv); });
}
