// Parallel MoE on CPU: configuration rules, launcher variables, the TCP rendezvous, the in-process
// communicator (collectives, deadlines, aborts), and every strategy for every valid (dp, tp, ep) on 2, 4
// and 8 ranks against the single-rank fp64 reference.
//
// Two checks per parallel run:
//   exact:  each rank's output equals, bit for bit (as float values), the serial sum of the ranks'
//           partial outputs in the order the strategy's reductions use (LocalCommunicator adds in
//           ascending rank order). This proves dispatch and combine move exactly the right data.
//   close:  each rank's output against the single-rank reference for its tokens, normalized L2 error
//           <= kParallelTolerance. Why not exact: the reference rounds the fp64 sum over a token's k
//           experts to fp32 once, the parallel layer rounds each rank's partial sum to fp32 and adds up
//           to 8 of them in fp32. Everything else (GEMM inputs, the intermediate's bf16/NVFP4 rounding,
//           which lies on 32-aligned TP slices) is identical, so the error is a few fp32 ulps of the
//           partials' magnitude: about 8 * 2^-24 = 5e-7 relative, plus cancellation between partials.
//   exact vs the reference too where only one rank contributes to each token (top-1 routing with EP).
//
// w4a4 with NVFP4-quantized dispatch (the default for allgather-reducescatter) computes the layer whose
// a13_scale_2 are all replaced by the largest (parallel_moe.h): there both checks are against that
// layer (with_shared_input_scale), which differs from the plain one whenever the experts' scales do.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <thread>
#include <tuple>

#include "fp4moe/parallel.h"
#include "moe_test_util.h"
#include "src/comm/bootstrap.h"
#include "src/comm/local_comm.h"
#include "src/format/block_codec.h"
#include "src/moe/dispatch_codec.h"
#include "src/moe/parallel_moe.h"

namespace fp4moe {
namespace {

using comm::CommOptions;
using comm::Communicator;
using comm::DataType;
using comm::LocalWorld;
using comm::run_local_ranks;
using testing::make_rng;
using Clock = std::chrono::steady_clock;

constexpr double kParallelTolerance = 1e-5;

CommOptions with_timeout(int ms) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- Configuration ---------------------------------------------------------------------------------

MoeProblem small_problem() {
  MoeProblem p;
  EXPECT_OK(get_preset("qwen3-30b-a3b", &p));
  return scaled_preset(p, 3);  // H 768, I 256, E 128, top-8
}

TEST(ParallelConfig, StrategyNamesRoundTrip) {
  for (Strategy s : {Strategy::kNone, Strategy::kTpAllReduce, Strategy::kAllGatherReduceScatter, Strategy::kAllToAll}) {
    Strategy back = Strategy::kNone;
    ASSERT_OK(parse_strategy(to_string(s), &back));
    EXPECT_EQ(back, s);
  }
  Strategy s;
  Status st = parse_strategy("all2all", &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "'all2all'")) << st.message();
}

TEST(ParallelConfig, ValidateNamesTheBadValue) {
  const MoeProblem p = small_problem();
  EXPECT_OK(validate(ParallelConfig{2, 2, 4}, p, 4));
  EXPECT_OK(validate(ParallelConfig{4, 1, 1}, p, 4));
  Status s = validate(ParallelConfig{2, 2, 2}, p, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "ep = 2")) << s.message();
  s = validate(ParallelConfig{2, 1, 1}, p, 4);
  EXPECT_TRUE(contains(s.message(), "dp * tp = 2 * 1 = 2")) << s.message();
  s = validate(ParallelConfig{0, 1, 1}, p, 0);
  EXPECT_TRUE(contains(s.message(), "dp = 0")) << s.message();
  // dp * tp past the bound is refused before the int product could wrap (2^16 * 2^16 = 0 in int).
  s = validate(ParallelConfig{1 << 16, 1 << 16, 1}, p, 0);
  EXPECT_TRUE(contains(s.message(), "dp * tp = 65536 * 65536 = 4294967296 exceeds the 65536")) << s.message();
  s = validate(ParallelConfig{3, 1431655766, 1}, p, 2);  // 3 * 1431655766 wraps to 2 in int
  EXPECT_TRUE(contains(s.message(), "exceeds the 65536")) << s.message();
  // valid_configs past the bound: none (its loop used to overflow to a division by zero).
  EXPECT_TRUE(valid_configs(p, std::numeric_limits<int>::max()).empty());
  // 128 experts over 3 ranks do not divide.
  s = validate(ParallelConfig{3, 1, 3}, p, 3);
  EXPECT_TRUE(contains(s.message(), "num_experts = 128")) << s.message();
  // I = 256 over a TP of 16 is 16 per rank: not whole 32-element scale blocks.
  s = validate(ParallelConfig{4, 4, 1}, p, 16);
  EXPECT_TRUE(contains(s.message(), "intermediate_size = 256")) << s.message();
  EXPECT_TRUE(contains(s.message(), "TP size is 16")) << s.message();
}

TEST(ParallelConfig, StrategiesPerConfig) {
  using V = std::vector<Strategy>;
  EXPECT_EQ(applicable_strategies({1, 1, 1}), V{Strategy::kNone});
  EXPECT_EQ(applicable_strategies({1, 4, 1}), V{Strategy::kTpAllReduce});
  EXPECT_EQ(applicable_strategies({1, 4, 4}), V{Strategy::kTpAllReduce});
  EXPECT_EQ(applicable_strategies({4, 1, 1}), V{Strategy::kAllGatherReduceScatter});
  EXPECT_EQ(applicable_strategies({2, 2, 4}), (V{Strategy::kAllGatherReduceScatter, Strategy::kAllToAll}));
  Status s = check_strategy({2, 1, 1}, Strategy::kAllToAll);
  EXPECT_TRUE(contains(s.message(), "use allgather-reducescatter")) << s.message();
  s = check_strategy({2, 1, 2}, Strategy::kTpAllReduce);
  EXPECT_TRUE(contains(s.message(), "dp = 2")) << s.message();
}

TEST(ParallelConfig, ValidConfigsAndLayout) {
  const MoeProblem p = small_problem();
  EXPECT_EQ(valid_configs(p, 2).size(), 4u);  // dp 1, 2 x ep 1, 2
  EXPECT_EQ(valid_configs(p, 4).size(), 6u);  // dp 1, 2, 4
  EXPECT_EQ(valid_configs(p, 8).size(), 8u);  // dp 1, 2, 4, 8
  // World rank 5 of dp 2 x tp 4: DP group 1, TP rank 1.
  RankLayout l = rank_layout({2, 4, 1}, 5);
  EXPECT_EQ(l.dp_rank, 1);
  EXPECT_EQ(l.tp_rank, 1);
  EXPECT_EQ(l.moe_tp_rank, 5);  // EP off: the MoE's TP is over all 8 ranks
  EXPECT_EQ(l.moe_tp_size, 8);
  EXPECT_EQ(l.moe_ep_size, 1);
  l = rank_layout({2, 4, 8}, 5);
  EXPECT_EQ(l.moe_ep_rank, 5);
  EXPECT_EQ(l.moe_ep_size, 8);
  EXPECT_EQ(l.moe_tp_size, 1);
}

// ---- Launcher variables ----------------------------------------------------------------------------

TEST(LaunchEnv, Torchrun) {
  LaunchInfo info;
  ASSERT_OK(parse_launch_env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}},
                             &info));
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.master_addr, "node0");
  EXPECT_EQ(info.master_port, 29500);
  // torchrun's agent store holds MASTER_PORT: the rendezvous takes the next one.
  ASSERT_OK(parse_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
                              {"TORCHELASTIC_USE_AGENT_STORE", "True"}},
                             &info));
  EXPECT_EQ(info.master_port, 29501);
  ASSERT_OK(parse_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
                              {"FP4MOE_RENDEZVOUS_PORT", "31000"}},
                             &info));
  EXPECT_EQ(info.master_port, 31000);
}

TEST(LaunchEnv, Mpirun) {
  LaunchInfo info;
  ASSERT_OK(parse_launch_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"MASTER_PORT", "1234"}},
                             &info));
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.master_addr, "127.0.0.1");  // every rank on this node
  EXPECT_EQ(info.master_port, 1234);
  // Across nodes an address is needed.
  Status s = parse_launch_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_PORT", "1234"}},
                              &info);
  EXPECT_TRUE(contains(s.message(), "MASTER_ADDR")) << s.message();
}

TEST(LaunchEnv, Slurm) {
  LaunchInfo info;
  ASSERT_OK(parse_launch_env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                              {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "1"},
                              {"SLURM_JOB_NODELIST", "gpu[07-08,11],cpu1"}, {"SLURM_JOB_ID", "123456"}},
                             &info));
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.master_addr, "gpu07");
  EXPECT_EQ(info.master_port, 20000 + 123456 % 20000);
  ASSERT_OK(parse_launch_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_TASKS_PER_NODE", "2,1"},
                              {"SLURM_NODEID", "1"}, {"SLURM_STEP_NODELIST", "a1"}, {"MASTER_PORT", "4000"}},
                             &info));
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_EQ(info.master_addr, "a1");
  EXPECT_EQ(info.master_port, 4000);
  Status s = parse_launch_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(y3)"}}, &info);
  EXPECT_TRUE(contains(s.message(), "SLURM_TASKS_PER_NODE = '2(y3)'")) << s.message();
}

TEST(LaunchEnv, PrecedenceAndErrors) {
  LaunchInfo info;
  // torchrun started by srun: the torchrun variables describe this worker.
  ASSERT_OK(parse_launch_env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
                              {"NCCL_COMM_ID", "10.0.0.1:5000"}},
                             &info));
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.nccl_comm_id, "10.0.0.1:5000");
  EXPECT_TRUE(info.master_addr.empty());  // NCCL_COMM_ID replaces the rendezvous
  ASSERT_OK(parse_launch_env({}, &info));
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.world_size, 1);
  Status s = parse_launch_env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, &info);
  EXPECT_TRUE(contains(s.message(), "RANK = 4 must be in [0, 3]")) << s.message();
  s = parse_launch_env({{"RANK", "1x"}, {"WORLD_SIZE", "4"}}, &info);
  EXPECT_TRUE(contains(s.message(), "RANK = '1x' is not an integer")) << s.message();
  s = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}, &info);
  EXPECT_TRUE(contains(s.message(), "MASTER_PORT")) << s.message();
  s = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, &info);
  EXPECT_TRUE(contains(s.message(), "MASTER_PORT = 70000")) << s.message();
}

// ---- TCP rendezvous over loopback ------------------------------------------------------------------


TEST(Bootstrap, BroadcastsTheBlobToEveryRank) {
  const int port = comm::find_free_loopback_port();
  ASSERT_GT(port, 0);
  const int n = 4;
  std::vector<std::vector<uint8_t>> blobs(n);
  for (int i = 0; i < 128; ++i) blobs[0].push_back(uint8_t(i * 7 + 1));  // ncclUniqueId-sized
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  // Rank 0 starts last: the others must retry their connects.
  for (int r = n - 1; r >= 0; --r) {
    threads.emplace_back([&, r] {
      st[r] = comm::tcp_broadcast_blob("127.0.0.1", port, r, n, std::chrono::milliseconds(10000), &blobs[r]);
    });
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_OK(st[r]);
    EXPECT_EQ(blobs[r], blobs[0]) << "rank " << r;
  }
}

TEST(Bootstrap, MismatchedWorldSizeAndMissingRank) {
  int port = comm::find_free_loopback_port();
  std::vector<uint8_t> b0{1, 2, 3}, b1;
  Status s0, s1;
  std::thread t0([&] { s0 = comm::tcp_broadcast_blob("127.0.0.1", port, 0, 2, std::chrono::milliseconds(5000), &b0); });
  std::thread t1([&] { s1 = comm::tcp_broadcast_blob("127.0.0.1", port, 1, 3, std::chrono::milliseconds(5000), &b1); });
  t0.join();
  t1.join();
  EXPECT_EQ(s0.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s0.message(), "rank 1 was started with world size 3, rank 0 with 2")) << s0.message();
  EXPECT_TRUE(contains(s1.message(), "rank 0 refused the rendezvous")) << s1.message();

  // Rank 2 of 3 never comes: rank 0 gives up at its deadline and names it.
  port = comm::find_free_loopback_port();
  std::vector<uint8_t> c0{9}, c1;
  const Clock::time_point start = Clock::now();
  std::thread u0([&] { s0 = comm::tcp_broadcast_blob("127.0.0.1", port, 0, 3, std::chrono::milliseconds(300), &c0); });
  std::thread u1([&] { s1 = comm::tcp_broadcast_blob("127.0.0.1", port, 1, 3, std::chrono::milliseconds(300), &c1); });
  u0.join();
  u1.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(s0.code(), StatusCode::kTimeout);
  EXPECT_TRUE(contains(s0.message(), "waiting for rank(s) 2")) << s0.message();
  // Rank 1 fails too, inside the deadline: by its own timeout, or (when rank 0 gives up first and
  // closes the connection) by seeing the peer go away. Both are correct; which comes first is a race.
  EXPECT_TRUE(s1.code() == StatusCode::kTimeout || s1.code() == StatusCode::kIoError) << s1.to_string();
  EXPECT_FALSE(s1.ok());
}

// ---- LocalCommunicator -----------------------------------------------------------------------------

TEST(LocalComm, Collectives) {
  const int n = 4;
  auto world = LocalWorld::create(n, with_timeout(20000));
  auto st = run_local_ranks(world, [](int rank, Communicator& c) -> Status {
    const int n = c.size();
    // all_reduce in place, f32 and bf16.
    std::vector<float> f{float(rank), 1.0f, -0.5f * rank};
    FP4MOE_RETURN_IF_ERROR(c.all_reduce_sum(f.data(), f.data(), f.size(), DataType::kF32));
    if (f != std::vector<float>{6.0f, 4.0f, -3.0f}) return internal_error("all_reduce f32 on rank ", rank);
    std::vector<uint16_t> h{float_to_bf16(0.25f * (rank + 1))};
    FP4MOE_RETURN_IF_ERROR(c.all_reduce_sum(h.data(), h.data(), 1, DataType::kBF16));
    if (bf16_to_float(h[0]) != 2.5f) return internal_error("all_reduce bf16 on rank ", rank);
    // all_gather_v: rank r sends r elements (rank 0 sends none).
    std::vector<size_t> counts{0, 1, 2, 3};
    std::vector<int32_t> mine(rank, 100 + rank), all(6, -1);
    FP4MOE_RETURN_IF_ERROR(c.all_gather_v(mine.data(), mine.size(), all.data(), counts, DataType::kI32));
    if (all != std::vector<int32_t>{101, 102, 102, 103, 103, 103}) return internal_error("all_gather_v on rank ", rank);
    // reduce_scatter_v: block b has counts[b] elements; every rank contributes (rank + 1) * (index + 1).
    std::vector<float> send(6), recv(rank);
    for (int i = 0; i < 6; ++i) send[i] = float((rank + 1) * (i + 1));
    FP4MOE_RETURN_IF_ERROR(c.reduce_scatter_v_sum(send.data(), counts, recv.data(), DataType::kF32));
    const int offset = rank * (rank - 1) / 2;
    for (int i = 0; i < rank; ++i)
      if (recv[i] != float(10 * (offset + i + 1))) return internal_error("reduce_scatter_v on rank ", rank);
    // all_to_all_v: rank a sends a + b copies of value 10a + b to rank b.
    std::vector<size_t> sc(n), rc(n);
    std::vector<int64_t> out_data, expect;
    for (int b = 0; b < n; ++b) {
      sc[b] = size_t(rank + b);
      rc[b] = size_t(b + rank);
      for (int i = 0; i < rank + b; ++i) out_data.push_back(10 * rank + b);
      for (int i = 0; i < b + rank; ++i) expect.push_back(10 * b + rank);
    }
    std::vector<int64_t> in_data(expect.size(), -1);
    FP4MOE_RETURN_IF_ERROR(c.all_to_all_v(out_data.data(), sc, in_data.data(), rc, DataType::kI64));
    if (in_data != expect) return internal_error("all_to_all_v on rank ", rank);
    // split into odd/even groups ordered by descending rank.
    std::unique_ptr<Communicator> sub;
    FP4MOE_RETURN_IF_ERROR(c.split(rank % 2, -rank, "parity", &sub));
    if (!sub || sub->size() != 2 || sub->rank() != (rank < 2 ? 1 : 0) || sub->name() != "parity")
      return internal_error("split on rank ", rank);
    int32_t v = rank, sum = 0;
    FP4MOE_RETURN_IF_ERROR(sub->all_reduce_sum(&v, &sum, 1, DataType::kI32));
    if (sum != (rank % 2 ? 4 : 2)) return internal_error("sub-group all_reduce on rank ", rank);
    std::unique_ptr<Communicator> none;
    FP4MOE_RETURN_IF_ERROR(c.split(rank == 0 ? -1 : 0, rank, "rest", &none));
    if ((rank == 0) != (none == nullptr)) return internal_error("split with color -1 on rank ", rank);
    return c.barrier();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
}

TEST(LocalComm, SilentRankTimesOutNamingRankGroupAndOperation) {
  auto world = LocalWorld::create(3, with_timeout(200));
  const Clock::time_point start = Clock::now();
  auto st = run_local_ranks(world, [](int rank, Communicator& c) -> Status {
    if (rank == 2) return Status::Ok();  // never calls: a hung or dead peer
    float x = 1.0f;
    return c.all_reduce_sum(&x, &x, 1, DataType::kF32);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok());
    timeouts += st[r].code() == StatusCode::kTimeout;
    // The first to time out reports kTimeout; the other sees the aborted group with the same reason.
    EXPECT_TRUE(contains(st[r].message(), "group 'world'")) << st[r].message();
    EXPECT_TRUE(contains(st[r].message(), "all_reduce_sum #1")) << st[r].message();
    EXPECT_TRUE(contains(st[r].message(), "waiting for rank 2 (world rank 2)")) << st[r].message();
  }
  EXPECT_GE(timeouts, 1);
}

TEST(LocalComm, KilledRankMakesPeersFailFast) {
  auto world = LocalWorld::create(4, with_timeout(30000));
  const Clock::time_point start = Clock::now();
  auto st = run_local_ranks(world, [&](int rank, Communicator& c) -> Status {
    std::unique_ptr<Communicator> tp;
    FP4MOE_RETURN_IF_ERROR(c.split(rank / 2, rank, "tp", &tp));
    if (rank == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      c.abort("injected failure");
      return Status::Ok();
    }
    float x = 1.0f;
    for (int i = 0; i < 3; ++i) FP4MOE_RETURN_IF_ERROR(tp->all_reduce_sum(&x, &x, 1, DataType::kF32));
    return c.barrier();
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // far below the 30 s deadline
  // Rank 2 shares the 'tp' group with rank 3; ranks 0 and 1 finish their group, then fail in the world barrier.
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kNcclError) << st[r].to_string();
    EXPECT_TRUE(contains(st[r].message(), "world rank 3 aborted (injected failure)")) << st[r].message();
  }
  EXPECT_TRUE(contains(st[2].message(), "group 'tp'")) << st[2].message();
  EXPECT_TRUE(contains(st[0].message(), "barrier #")) << st[0].message();
}

TEST(LocalComm, MismatchedOperationsAreReported) {
  auto world = LocalWorld::create(2, with_timeout(5000));
  auto st = run_local_ranks(world, [](int rank, Communicator& c) -> Status {
    float x = 1.0f;
    if (rank == 0) return c.all_reduce_sum(&x, &x, 1, DataType::kF32);
    return c.barrier();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInternal) << st[r].to_string();
    EXPECT_TRUE(contains(st[r].message(), "the ranks issue different operations")) << st[r].message();
  }
}

// ---- Parallel MoE ----------------------------------------------------------------------------------

// One DP group's tokens, its routing (as route_cpu computes it) and the single-rank reference output.
struct GroupData {
  int64_t num_tokens = 0;
  std::vector<uint16_t> hidden;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<float> reference;
  std::vector<float> reference_shared;  // w4a4: the single-rank layer with the shared input scale
};

// The weights with every expert's GEMM1 input scale (a13_scale_2) replaced by the largest: the
// single-rank layer whose numerics NVFP4-quantized dispatch reproduces.
HostMoeWeights with_shared_input_scale(const HostMoeWeights& w) {
  HostMoeWeights s = w;
  if (!s.a13_scale_2.empty())
    std::fill(s.a13_scale_2.begin(), s.a13_scale_2.end(),
              *std::max_element(w.a13_scale_2.begin(), w.a13_scale_2.end()));
  return s;
}

GroupData make_group(const MoeProblem& p, const HostMoeWeights& w, int64_t T, uint64_t salt,
                     const HostMoeWeights* shared = nullptr) {
  auto rng = make_rng(salt);
  GroupData g;
  g.num_tokens = T;
  g.hidden = testing::random_hidden(rng, T, p.hidden_size);
  g.logits = testing::random_logits(rng, T, p.num_experts());
  g.ids.resize(size_t(T) * p.top_k());
  g.weights.resize(g.ids.size());
  RoutingArgs ra;
  ra.logits = g.logits.data();
  ra.correction_bias = w.routing_bias.empty() ? nullptr : w.routing_bias.data();
  ra.num_tokens = T;
  ra.topk_ids = g.ids.data();
  ra.topk_weights = g.weights.data();
  EXPECT_OK(route_cpu(p.routing, ra));
  g.reference.resize(size_t(T * p.hidden_size));
  EXPECT_OK(ref::moe_forward_routed(p, w.view(), ref::ShardSpec{}, g.hidden.data(), g.ids.data(), g.weights.data(), T,
                                    g.reference.data()));
  if (shared) {
    g.reference_shared.resize(g.reference.size());
    EXPECT_OK(ref::moe_forward_routed(p, shared->view(), ref::ShardSpec{}, g.hidden.data(), g.ids.data(),
                                      g.weights.data(), T, g.reference_shared.data()));
  }
  return g;
}

// Every rank succeeded and its output equals base's bit for bit.
void expect_same_bits(const std::vector<Status>& st, const std::vector<std::vector<float>>& outs,
                      const std::vector<std::vector<float>>& base) {
  ASSERT_EQ(outs.size(), base.size());
  for (size_t r = 0; r < outs.size(); ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
    ASSERT_EQ(outs[r].size(), base[r].size());
    for (size_t i = 0; i < outs[r].size(); ++i) ASSERT_EQ(outs[r][i], base[r][i]) << "rank " << r << " element " << i;
  }
}

// Runs the parallel layer on LocalCommunicator ranks; each rank routes its own tokens from the logits
// (or takes the group's precomputed routing). Outputs start as NaN so an unwritten element fails.
std::vector<std::vector<float>> run_parallel(const MoeProblem& p, const HostMoeWeights& w, const ParallelConfig& c,
                                             Strategy strategy, const std::vector<GroupData>& groups, bool from_logits,
                                             std::vector<Status>* statuses, int64_t padded_tokens = -1,
                                             bool check_token_counts = true,
                                             QuantizedDispatch quantized_dispatch = QuantizedDispatch::kAuto,
                                             std::vector<float>* dispatch_scales = nullptr) {
  const int n = c.world_size();
  std::vector<std::vector<float>> outs(n);
  if (dispatch_scales) dispatch_scales->assign(n, -1.0f);
  auto world = LocalWorld::create(n, with_timeout(30000));
  *statuses = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    const RankLayout l = rank_layout(c, rank);
    std::unique_ptr<ExpertBackend> backend;
    ref::ReferenceOptions ro;
    ro.num_threads = 1;  // the ranks are the threads
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, l, ro, &backend));
    std::unique_ptr<ParallelMoe> layer;
    ParallelMoeOptions options;
    options.check_token_counts = check_token_counts;
    options.quantized_dispatch = quantized_dispatch;
    FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, c, strategy, &comm, std::move(backend), options, &layer));
    // The shared input scale this rank dispatches with, 0 with bf16 dispatch.
    if (dispatch_scales)
      (*dispatch_scales)[rank] = layer->quantized_dispatch() ? layer->dispatch_input_scale_2() : 0.0f;
    const GroupData& g = groups[l.dp_rank];
    outs[rank].assign(size_t(g.num_tokens * p.hidden_size), std::numeric_limits<float>::quiet_NaN());
    ParallelMoe::Args a;
    a.hidden = g.hidden.data();
    if (from_logits) {
      a.router_logits = g.logits.data();
    } else {
      a.topk_ids = g.ids.data();
      a.topk_weights = g.weights.data();
    }
    a.num_tokens = g.num_tokens;
    a.out = outs[rank].data();
    a.padded_tokens = padded_tokens;
    FP4MOE_RETURN_IF_ERROR(layer->forward(a));
    return layer->synchronize();
  });
  return outs;
}

// The serial sum of the ranks' partial outputs for one DP group's tokens, in the order the strategy's
// reductions add them: world-rank order (tp-allreduce; alltoall, where non-owners add exact zeros), or
// over the DP group first and then over the TP group (allgather-reducescatter).
std::vector<float> serial_sum(const MoeProblem& p, const HostMoeWeights& w, const ParallelConfig& c, Strategy strategy,
                              const GroupData& g) {
  const int n = c.world_size();
  const size_t len = size_t(g.num_tokens * p.hidden_size);
  std::vector<std::vector<float>> partial(n, std::vector<float>(len));
  for (int r = 0; r < n; ++r) {
    std::unique_ptr<ExpertBackend> b;
    EXPECT_OK(make_cpu_reference_backend(p, w, rank_layout(c, r), {}, &b));
    EXPECT_OK(b->run_experts(g.hidden.data(), g.ids.data(), g.weights.data(), g.num_tokens, partial[r].data()));
  }
  std::vector<float> out(len);
  for (size_t i = 0; i < len; ++i) {
    if (strategy == Strategy::kAllGatherReduceScatter) {
      float total = 0.0f;
      for (int t = 0; t < c.tp; ++t) {
        float s = partial[t][i];
        for (int d = 1; d < c.dp; ++d) s += partial[d * c.tp + t][i];
        total = t == 0 ? s : total + s;
      }
      out[i] = total;
    } else {
      float s = partial[0][i];
      for (int r = 1; r < n; ++r) s += partial[r][i];
      out[i] = s;
    }
  }
  return out;
}

struct PresetCase {
  const char* preset;
  int factor;
  Mode mode;
};
void PrintTo(const PresetCase& c, std::ostream* os) { *os << c.preset << "/" << c.factor << " " << to_string(c.mode); }

// Token counts per DP group: awkward sizes, with empty groups (a rank with 0 tokens still takes part).
int64_t tokens_of_group(int dp_rank, int dp) {
  static const int64_t kCounts[] = {5, 0, 3, 1, 7, 0, 2, 4};
  return dp == 1 ? 6 : kCounts[dp_rank % 8];
}

class ParallelMoeAllConfigs : public ::testing::TestWithParam<PresetCase> {};

TEST_P(ParallelMoeAllConfigs, EveryStrategyMatchesTheReference) {
  const PresetCase pc = GetParam();
  MoeProblem full_preset;
  ASSERT_OK(get_preset(pc.preset, &full_preset));
  MoeProblem p = scaled_preset(full_preset, pc.factor);
  p.mode = pc.mode;
  p.max_tokens = 8;
  ASSERT_OK(validate(p));
  const HostMoeWeights w = make_random_weights(p, 1234);
  const bool w4a4 = p.mode == Mode::kW4A4;
  const HostMoeWeights w_shared = with_shared_input_scale(w);
  // Top-1 with EP: each token's output comes from one rank alone, so it must equal the reference exactly.
  const bool single_contributor = p.top_k() == 1;
  int num_runs = 0;
  for (int world : {2, 4, 8}) {
    std::map<int, std::vector<GroupData>> groups_by_dp;
    for (const ParallelConfig& c : valid_configs(p, world)) {
      auto& groups = groups_by_dp[c.dp];
      if (groups.empty())
        for (int d = 0; d < c.dp; ++d)
          groups.push_back(make_group(p, w, tokens_of_group(d, c.dp), world * 100 + d, w4a4 ? &w_shared : nullptr));
      for (Strategy s : applicable_strategies(c)) {
        // Default options: w4a4 with allgather-reducescatter dispatches NVFP4 with the shared scale.
        const bool quantized = w4a4 && s == Strategy::kAllGatherReduceScatter;
        const HostMoeWeights& w_ref = quantized ? w_shared : w;
        SCOPED_TRACE(::testing::Message() << p.name << " " << to_string(p.mode) << " dp=" << c.dp << " tp=" << c.tp
                                          << " ep=" << c.ep << " " << to_string(s));
        std::vector<Status> st;
        const bool from_logits = (num_runs % 2) == 0;  // both routing inputs, alternately
        auto outs = run_parallel(p, w, c, s, groups, from_logits, &st);
        ++num_runs;
        for (int r = 0; r < world; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
        std::map<int, std::vector<float>> exact;
        for (int r = 0; r < world; ++r) {
          const RankLayout l = rank_layout(c, r);
          const GroupData& g = groups[l.dp_rank];
          if (!exact.count(l.dp_rank)) exact[l.dp_rank] = serial_sum(p, w_ref, c, s, g);
          const std::vector<float>& want = exact[l.dp_rank];
          const std::vector<float>& reference = quantized ? g.reference_shared : g.reference;
          ASSERT_EQ(outs[r].size(), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(outs[r][i], want[i]) << "rank " << r << " element " << i << " differs from the serial sum";
          if (g.num_tokens == 0) continue;
          EXPECT_GT(testing::l2_norm(outs[r]), 0.0) << "rank " << r;
          EXPECT_LE(testing::rel_l2(outs[r], reference), kParallelTolerance) << "rank " << r;
          if (single_contributor && c.ep > 1) {
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(outs[r][i], reference[i]) << "rank " << r << " element " << i << " (top-1, EP)";
          }
        }
      }
    }
  }
  EXPECT_GE(num_runs, 20);
}

INSTANTIATE_TEST_SUITE_P(Presets, ParallelMoeAllConfigs,
                         ::testing::Values(PresetCase{"deepseek-r1", 14, Mode::kW4A16},  // H 512, I 256, E 256, top-8
                                           PresetCase{"qwen3-30b-a3b", 3, Mode::kW4A4},  // H 768, I 256, E 128, top-8
                                           PresetCase{"gpt-oss-20b", 12, Mode::kW4A16},  // MXFP4, biases, E 32, top-4
                                           PresetCase{"llama4-scout", 32, Mode::kW4A16}),  // top-1, weight on input
                         [](const ::testing::TestParamInfo<PresetCase>& info) {
                           std::string name = info.param.preset;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name + "_" + to_string(info.param.mode);
                         });

// CUDA-graph mode (Args::padded_tokens): fixed exchange sizes, filler rows, no host waits. Every row is
// computed on its own, so the outputs must equal the unpadded forward's bit for bit, for every config
// and strategy that has the mode, padding to the group's largest count and to max_tokens.
TEST(ParallelMoe, GraphModeWithPaddedTokensEqualsTheUnpaddedForward) {
  MoeProblem full_preset;
  ASSERT_OK(get_preset("deepseek-r1", &full_preset));
  MoeProblem p = scaled_preset(full_preset, 14);
  p.max_tokens = 8;
  const HostMoeWeights w = make_random_weights(p, 77);
  int num_runs = 0;
  for (int world : {2, 4}) {
    for (const ParallelConfig& c : valid_configs(p, world)) {
      std::vector<GroupData> groups;
      int64_t largest = 0;
      for (int d = 0; d < c.dp; ++d) {
        groups.push_back(make_group(p, w, tokens_of_group(d, c.dp), 900 + world * 10 + d));
        largest = std::max(largest, groups.back().num_tokens);
      }
      for (Strategy s : applicable_strategies(c)) {
        if (s == Strategy::kAllToAll) continue;
        std::vector<Status> st;
        const auto base = run_parallel(p, w, c, s, groups, true, &st);
        for (int r = 0; r < world; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string();
        for (int64_t padded : {largest, p.max_tokens}) {
          for (bool check : {true, false}) {
            SCOPED_TRACE(::testing::Message() << "dp=" << c.dp << " tp=" << c.tp << " ep=" << c.ep << " "
                                              << to_string(s) << " padded_tokens=" << padded << " check=" << check);
            const auto outs = run_parallel(p, w, c, s, groups, true, &st, padded, check);
            ++num_runs;
            expect_same_bits(st, outs, base);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GE(num_runs, 12);
}

TEST(ParallelMoe, GraphModeRejectsBadPaddingAndAllToAll) {
  MoeProblem p = small_problem();
  p.max_tokens = 8;
  const HostMoeWeights w = make_random_weights(p, 5);
  std::vector<GroupData> groups{make_group(p, w, 5, 1), make_group(p, w, 3, 2)};
  const ParallelConfig dp2ep2{2, 1, 2};
  std::vector<Status> st;
  // Fewer rows than tokens, more than max_tokens: every rank says so (the world is aborted).
  for (int64_t bad : {int64_t(4), int64_t(9)}) {
    run_parallel(p, w, dp2ep2, Strategy::kAllGatherReduceScatter, groups, true, &st, bad);
    EXPECT_FALSE(st[0].ok());
    EXPECT_TRUE(contains(st[0].message(), "padded_tokens = " + std::to_string(bad))) << st[0].message();
  }
  run_parallel(p, w, dp2ep2, Strategy::kAllToAll, groups, true, &st, 8);
  EXPECT_TRUE(contains(st[0].message(), "alltoall has no CUDA-graph mode")) << st[0].message();
  EXPECT_TRUE(contains(st[1].message(), "alltoall has no CUDA-graph mode")) << st[1].message();
}

// Ranks of one DP-group exchange disagreeing on padded_tokens: caught when token counts are checked.
TEST(ParallelMoe, GraphModeMismatchedPaddingIsDetectedWhenChecked) {
  MoeProblem p = small_problem();
  p.max_tokens = 8;
  const HostMoeWeights w = make_random_weights(p, 6);
  const ParallelConfig dp2ep2{2, 1, 2};
  auto world = LocalWorld::create(2, with_timeout(10000));
  auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(dp2ep2, rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    FP4MOE_RETURN_IF_ERROR(
        ParallelMoe::create(p, dp2ep2, Strategy::kAllGatherReduceScatter, &comm, std::move(backend), {}, &layer));
    const GroupData g = make_group(p, w, 2, 10 + rank);
    std::vector<float> out(size_t(2 * p.hidden_size));
    ParallelMoe::Args a;
    a.hidden = g.hidden.data();
    a.router_logits = g.logits.data();
    a.num_tokens = 2;
    a.out = out.data();
    a.padded_tokens = rank == 0 ? 4 : 6;
    return layer->forward(a);
  });
  EXPECT_TRUE(contains(st[0].message(), "padded_tokens = 4 but rank 1 of the group passes 6")) << st[0].message();
  EXPECT_FALSE(st[1].ok());
}

// The TP ranks of one DP group passing different token counts: every rank learns which one differs.
TEST(ParallelMoe, TpRanksWithDifferentTokenCountsAreDetected) {
  MoeProblem p = small_problem();
  p.max_tokens = 8;
  const HostMoeWeights w = make_random_weights(p, 7);
  const ParallelConfig tp2{1, 2, 1};
  auto world = LocalWorld::create(2, with_timeout(10000));
  auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(tp2, rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    FP4MOE_RETURN_IF_ERROR(
        ParallelMoe::create(p, tp2, Strategy::kTpAllReduce, &comm, std::move(backend), {}, &layer));
    const GroupData g = make_group(p, w, 3, 20);
    std::vector<float> out(size_t(3 * p.hidden_size));
    ParallelMoe::Args a;
    a.hidden = g.hidden.data();
    a.router_logits = g.logits.data();
    a.num_tokens = rank == 0 ? 3 : 2;
    a.out = out.data();
    return layer->forward(a);
  });
  EXPECT_TRUE(contains(st[0].message(), "num_tokens = 3 but rank 1 of the group passes 2")) << st[0].message();
  EXPECT_TRUE(contains(st[1].message(), "num_tokens = 2 but rank 0 of the group passes 3")) << st[1].message();
}

// Every token routed to the experts of the last rank: with alltoall all the other ranks receive nothing
// and send everything to one peer; with allgather-reducescatter they contribute exact zeros.
TEST(ParallelMoe, AllTokensOnOneRanksExperts) {
  MoeProblem p = small_problem();
  p.max_tokens = 16;
  const HostMoeWeights w = make_random_weights(p, 7);
  const ParallelConfig c{4, 1, 4};
  std::vector<GroupData> groups;
  for (int d = 0; d < 4; ++d) {
    GroupData g = make_group(p, w, d == 1 ? 0 : 9 + d, 40 + d);
    for (size_t i = 0; i < g.ids.size(); ++i) g.ids[i] = int32_t(96 + (i % p.top_k()) * 4 + d);  // experts 96..127
    ASSERT_OK(ref::moe_forward_routed(p, w.view(), ref::ShardSpec{}, g.hidden.data(), g.ids.data(), g.weights.data(),
                                      g.num_tokens, g.reference.data()));
    groups.push_back(std::move(g));
  }
  for (Strategy s : {Strategy::kAllGatherReduceScatter, Strategy::kAllToAll}) {
    std::vector<Status> st;
    auto outs = run_parallel(p, w, c, s, groups, /*from_logits=*/false, &st);
    for (int r = 0; r < 4; ++r) {
      ASSERT_OK(st[r]);
      // One rank holds every expert used: its partial is the whole output, bit for bit.
      for (size_t i = 0; i < outs[r].size(); ++i)
        ASSERT_EQ(outs[r][i], groups[r].reference[i]) << to_string(s) << " rank " << r << " element " << i;
    }
  }
}

// A rank that dies in the middle of a step: the others return an error naming the rank, the group and
// the operation within the deadline instead of hanging.
TEST(ParallelMoe, RankDyingMidStepFailsThePeersWithinTheDeadline) {
  MoeProblem p = small_problem();
  p.max_tokens = 4;
  const HostMoeWeights w = make_random_weights(p, 3);
  const ParallelConfig c{2, 2, 4};
  std::vector<GroupData> groups{make_group(p, w, 3, 1), make_group(p, w, 2, 2)};
  for (bool abort_loudly : {false, true}) {
    SCOPED_TRACE(abort_loudly ? "rank aborts" : "rank goes silent");
    auto world = LocalWorld::create(4, with_timeout(300));
    const Clock::time_point start = Clock::now();
    std::atomic<bool> created{false};
    auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
      std::unique_ptr<ExpertBackend> backend;
      FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(c, rank), {}, &backend));
      std::unique_ptr<ParallelMoe> layer;
      FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, c, Strategy::kAllToAll, &comm, std::move(backend), {}, &layer));
      created = true;
      if (rank == 3) {  // dies after set-up, before its step's collectives
        if (abort_loudly) comm.abort("simulated crash");
        return Status::Ok();
      }
      const GroupData& g = groups[layer->layout().dp_rank];
      std::vector<float> out(size_t(g.num_tokens * p.hidden_size));
      ParallelMoe::Args a;
      a.hidden = g.hidden.data();
      a.router_logits = g.logits.data();
      a.num_tokens = g.num_tokens;
      a.out = out.data();
      return layer->forward(a);
    });
    EXPECT_TRUE(created);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
    for (int r = 0; r < 3; ++r) {
      EXPECT_FALSE(st[r].ok()) << "rank " << r;
      EXPECT_TRUE(st[r].code() == StatusCode::kTimeout || st[r].code() == StatusCode::kNcclError) << st[r].to_string();
      EXPECT_TRUE(contains(st[r].message(), "world rank 3")) << st[r].message();
      EXPECT_TRUE(contains(st[r].message(), "group '")) << st[r].message();
      EXPECT_TRUE(contains(st[r].message(), "all_to_all_v #") || contains(st[r].message(), "all_gather_v #"))
          << st[r].message();
    }
  }
}

TEST(ParallelMoe, MismatchedConfigIsDetectedAtSetUp) {
  MoeProblem p = small_problem();
  p.max_tokens = 4;
  const HostMoeWeights w = make_random_weights(p, 5);
  auto world = LocalWorld::create(4, with_timeout(20000));
  auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    ParallelConfig c{2, 2, 4};
    MoeProblem mine = p;
    if (rank == 2) {
      c = ParallelConfig{4, 1, 4};  // this rank was launched with other flags
      mine.max_tokens = 8;
    }
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(mine, w, rank_layout(c, rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    return ParallelMoe::create(mine, c, Strategy::kAllToAll, &comm, std::move(backend), {}, &layer);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].to_string();
    EXPECT_TRUE(contains(st[r].message(), "configuration mismatch")) << st[r].message();
    EXPECT_TRUE(contains(st[r].message(), "rank 0 dp=2 vs rank 2 dp=4")) << st[r].message();
    EXPECT_TRUE(contains(st[r].message(), "rank 0 max_tokens=4 vs rank 2 max_tokens=8")) << st[r].message();
  }
}

// A backend made for another problem or another rank's shard is refused at set-up, by every rank at
// once: the layer sizes its buffers from its own problem, and each rank must hold its own layout's
// shard (on 2 ranks, each with the other rank's shard, then one rank's for a wider hidden size).
TEST(ParallelMoe, BackendForAnotherProblemOrShardIsRefused) {
  MoeProblem p = small_problem();
  p.max_tokens = 4;
  const HostMoeWeights w = make_random_weights(p, 8);
  const ParallelConfig c{2, 1, 2};
  auto world = LocalWorld::create(2, with_timeout(20000));
  auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(c, 1 - rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    return ParallelMoe::create(p, c, Strategy::kAllGatherReduceScatter, &comm, std::move(backend), {}, &layer);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].to_string();
    EXPECT_TRUE(contains(st[r].message(), "the backend holds expert shard " + std::to_string(1 - r) + " of 2"))
        << st[r].message();
    EXPECT_TRUE(contains(st[r].message(), "world rank " + std::to_string(r))) << st[r].message();
  }
  MoeProblem wider = p;
  wider.hidden_size = 2 * p.hidden_size;
  const HostMoeWeights w_wider = make_random_weights(wider, 8);
  auto world2 = LocalWorld::create(2, with_timeout(20000));
  st = run_local_ranks(world2, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(rank == 1 ? wider : p, rank == 1 ? w_wider : w,
                                                      rank_layout(c, rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    return ParallelMoe::create(p, c, Strategy::kAllGatherReduceScatter, &comm, std::move(backend), {}, &layer);
  });
  // (The other rank learns it in the set-up's agreement, at once, instead of waiting for a peer.)
  EXPECT_EQ(st[0].code(), StatusCode::kInvalidArgument) << st[0].to_string();
  EXPECT_TRUE(contains(st[0].message(), "rank 0 backend=fits vs rank 1 backend=does-not-fit")) << st[0].message();
  EXPECT_EQ(st[1].code(), StatusCode::kInvalidArgument) << st[1].to_string();
  EXPECT_TRUE(contains(st[1].message(), "made for another problem")) << st[1].message();
  EXPECT_TRUE(contains(st[1].message(), "hidden=" + std::to_string(wider.hidden_size))) << st[1].message();
}

TEST(ParallelMoe, BadArgumentsAbortThePeers) {
  MoeProblem p = small_problem();
  p.max_tokens = 4;
  const HostMoeWeights w = make_random_weights(p, 6);
  const ParallelConfig c{2, 1, 2};
  auto world = LocalWorld::create(2, with_timeout(20000));
  const Clock::time_point start = Clock::now();
  auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(c, rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, c, Strategy::kAllGatherReduceScatter, &comm, std::move(backend), {}, &layer));
    std::vector<uint16_t> hidden(size_t(8 * p.hidden_size));
    std::vector<float> logits(size_t(8 * p.num_experts())), out(hidden.size());
    ParallelMoe::Args a;
    a.hidden = hidden.data();
    a.router_logits = logits.data();
    a.num_tokens = rank == 1 ? 8 : 2;  // rank 1 exceeds max_tokens = 4
    a.out = out.data();
    return layer->forward(a);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(st[1].code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st[1].message(), "num_tokens = 8 must be in [0, max_tokens = 4]")) << st[1].message();
  EXPECT_EQ(st[0].code(), StatusCode::kNcclError) << st[0].to_string();
  EXPECT_TRUE(contains(st[0].message(), "num_tokens = 8")) << st[0].message();
}


// An out buffer that overlaps an input is refused by name on every rank (no in-place forward).
TEST(ParallelMoe, OutOverlappingAnInputIsRefused) {
  MoeProblem p = small_problem();
  p.max_tokens = 4;
  const HostMoeWeights w = make_random_weights(p, 7);
  const ParallelConfig c{2, 1, 2};
  auto world = LocalWorld::create(2, with_timeout(20000));
  auto st = run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(c, rank), {}, &backend));
    std::unique_ptr<ParallelMoe> layer;
    FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, c, Strategy::kAllGatherReduceScatter, &comm, std::move(backend), {}, &layer));
    // One allocation: the logits, then the output starting inside them.
    std::vector<float> buf(size_t(4 * p.num_experts() + 4 * p.hidden_size));
    std::vector<uint16_t> hidden(size_t(4 * p.hidden_size));
    ParallelMoe::Args a;
    a.hidden = hidden.data();
    a.router_logits = buf.data();
    a.num_tokens = 3;
    a.out = buf.data() + 2 * p.num_experts();
    return layer->forward(a);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok());
    EXPECT_TRUE(contains(st[r].message(), "overlaps router_logits")) << st[r].message();
  }
}

// ---- NVFP4-quantized dispatch (w4a4) ---------------------------------------------------------------

MoeProblem w4a4_problem(const char* preset, int factor) {
  MoeProblem full;
  EXPECT_OK(get_preset(preset, &full));
  MoeProblem p = scaled_preset(full, factor);
  p.mode = Mode::kW4A4;
  p.max_tokens = 8;
  EXPECT_OK(validate(p));
  return p;
}

float largest_input_scale(const HostMoeWeights& w) {
  return *std::max_element(w.a13_scale_2.begin(), w.a13_scale_2.end());
}

// The sender's quantization and the receiver's expansion are exactly the expert layer's own w4a4 input
// path (permute.cu / the reference): router weight rounded to bf16, then the `kernel` recipe's codes and
// block scale as code x scale. Rows include a zero block, a NaN block and a saturating block.
TEST(QuantizedDispatch, RowCodecIsTheLayersOwnInputQuantization) {
  const MoeProblem p = w4a4_problem("llama4-scout", 32);  // H 256, top-1, router weight on the input
  const HostMoeWeights w = make_random_weights(p, testing::test_seed() + 1);
  std::unique_ptr<ExpertBackend> b;
  ASSERT_OK(make_cpu_reference_backend(p, w, rank_layout({1, 1, 1}, 0), {}, &b));
  const int64_t H = p.hidden_size, n = 5;
  auto rng = make_rng(91);
  std::vector<uint16_t> hidden = testing::random_hidden(rng, n, H);
  for (int i = 0; i < 16; ++i) {
    hidden[size_t(H + i)] = 0;                                          // row 1, block 0: zeros
    hidden[size_t(2 * H + 16 + i)] = float_to_bf16(i == 3 ? NAN : 1.0f);  // row 2, block 1: a NaN
    hidden[size_t(3 * H + 32 + i)] = float_to_bf16(1e30f * (i + 1));    // row 3, block 2: huge
  }
  std::vector<float> row_weights = testing::random_floats(rng, size_t(n), 0.1f, 1.0f);
  const float gs = 1.0f / largest_input_scale(w);
  const size_t pitch = size_t(detail::dispatch_row_bytes(H)) + 24;  // a record's pitch (ids, weights after)
  EXPECT_EQ(detail::dispatch_row_bytes(H), H / 2 + H / 16);
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "router weight on the input" : "no weight");
    std::vector<uint8_t> wire(size_t(n) * pitch, 0xAB);
    ASSERT_OK(
        b->quantize_rows_nvfp4(hidden.data(), weighted ? row_weights.data() : nullptr, n, gs, wire.data(), pitch));
    std::vector<uint16_t> got(size_t(n * H), 0xFFFF);
    ASSERT_OK(b->dequantize_rows_nvfp4(wire.data(), pitch, n, got.data()));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t blk = 0; blk < H / 16; ++blk) {
        float u[16];
        for (int i = 0; i < 16; ++i) {
          u[i] = bf16_to_float(hidden[size_t(r * H + blk * 16 + i)]);
          if (weighted) u[i] = bf16_to_float(float_to_bf16(u[i] * row_weights[size_t(r)]));
        }
        detail::fake_quantize_nvfp4_block_kernel(u, gs);
        for (int i = 0; i < 16; ++i)
          ASSERT_EQ(got[size_t(r * H + blk * 16 + i)], float_to_bf16(u[i]))
              << "row " << r << " block " << blk << " element " << i;
      }
      // The bytes past the row (the record's ids and weights) are untouched.
      for (size_t j = size_t(detail::dispatch_row_bytes(H)); j < pitch; ++j)
        ASSERT_EQ(wire[size_t(r) * pitch + j], 0xAB);
    }
    EXPECT_TRUE(std::isnan(bf16_to_float(got[size_t(2 * H + 16)])));  // the NaN block stays NaN
    EXPECT_EQ(bf16_to_float(got[size_t(H)]), 0.0f);
  }
  // Bad arguments are refused before anything is written.
  std::vector<uint8_t> wire(size_t(n) * pitch);
  Status st = b->quantize_rows_nvfp4(hidden.data(), nullptr, n, 0.0f, wire.data(), pitch);
  EXPECT_TRUE(contains(st.message(), "gs = 0")) << st.message();
  st = b->quantize_rows_nvfp4(hidden.data(), nullptr, n, gs, wire.data(), size_t(H / 2));
  EXPECT_TRUE(contains(st.message(), "pitch")) << st.message();
}

// Every 2- and 4-rank config with a strategy that dispatches tokens (allgather-reducescatter, and
// alltoall, which supports it too), quantized dispatch on, experts with different input scales: each
// rank's output equals the serial sum of the partial outputs of the layer with the shared scale bit for
// bit, the single-rank reference with the shared scale within kParallelTolerance (bit for bit for
// top-1 with EP), and every rank dispatches with the largest scale of all experts.
TEST(QuantizedDispatch, MatchesTheSingleRankLayerWithTheSharedScale) {
  for (const auto& [preset, factor] : {std::pair<const char*, int>{"qwen3-30b-a3b", 3}, {"llama4-scout", 32}}) {
    const MoeProblem p = w4a4_problem(preset, factor);
    const HostMoeWeights w = make_random_weights(p, testing::test_seed() + 2);
    const HostMoeWeights w_shared = with_shared_input_scale(w);
    const float shared = largest_input_scale(w);
    ASSERT_LT(*std::min_element(w.a13_scale_2.begin(), w.a13_scale_2.end()), shared) << "the scales must differ";
    const bool single_contributor = p.top_k() == 1;
    int num_runs = 0, num_differing_from_plain = 0;
    for (int world : {2, 4}) {
      for (const ParallelConfig& c : valid_configs(p, world)) {
        std::vector<GroupData> groups;
        for (int d = 0; d < c.dp; ++d)
          groups.push_back(make_group(p, w, tokens_of_group(d, c.dp), 500 + world * 10 + d, &w_shared));
        for (Strategy s : applicable_strategies(c)) {
          if (s != Strategy::kAllGatherReduceScatter && s != Strategy::kAllToAll) continue;
          SCOPED_TRACE(::testing::Message() << p.name << " dp=" << c.dp << " tp=" << c.tp << " ep=" << c.ep << " "
                                            << to_string(s));
          std::vector<Status> st;
          std::vector<float> scales;
          const auto outs = run_parallel(p, w, c, s, groups, num_runs % 2 == 0, &st, -1, true, QuantizedDispatch::kOn,
                                         &scales);
          ++num_runs;
          std::map<int, std::vector<float>> exact;
          for (int r = 0; r < world; ++r) {
            ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
            EXPECT_EQ(scales[r], shared) << "rank " << r << " dispatches with another scale";
            const GroupData& g = groups[rank_layout(c, r).dp_rank];
            const int dp_rank = rank_layout(c, r).dp_rank;
            if (!exact.count(dp_rank)) exact[dp_rank] = serial_sum(p, w_shared, c, s, g);
            const std::vector<float>& want = exact[dp_rank];
            ASSERT_EQ(outs[r].size(), want.size());
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(outs[r][i], want[i]) << "rank " << r << " element " << i << " differs from the serial sum";
            if (g.num_tokens == 0) continue;
            EXPECT_GT(testing::l2_norm(outs[r]), 0.0) << "rank " << r;
            EXPECT_LE(testing::rel_l2(outs[r], g.reference_shared), kParallelTolerance) << "rank " << r;
            if (single_contributor && c.ep > 1) {
              for (size_t i = 0; i < want.size(); ++i)
                ASSERT_EQ(outs[r][i], g.reference_shared[i]) << "rank " << r << " element " << i << " (top-1, EP)";
            }
            if (testing::rel_l2(outs[r], g.reference) > kParallelTolerance) ++num_differing_from_plain;
          }
        }
      }
    }
    EXPECT_GE(num_runs, 4) << p.name;
    // The shared scale is a different numerics from the per-expert one: the test would not notice a
    // dispatch that ignored it otherwise.
    EXPECT_GT(num_differing_from_plain, 0) << p.name;
  }
}

// With every expert on the same input scale, quantized dispatch is the plain w4a4 layer.
TEST(QuantizedDispatch, EqualInputScalesGiveThePlainW4a4Layer) {
  const MoeProblem p = w4a4_problem("qwen3-30b-a3b", 3);
  HostMoeWeights w = make_random_weights(p, testing::test_seed() + 3);
  const float common = w.a13_scale_2[size_t(p.num_experts() / 3)];
  std::fill(w.a13_scale_2.begin(), w.a13_scale_2.end(), common);
  int num_runs = 0;
  for (int world : {2, 4}) {
    for (const ParallelConfig& c : valid_configs(p, world)) {
      if (!check_strategy(c, Strategy::kAllGatherReduceScatter).ok()) continue;
      SCOPED_TRACE(::testing::Message() << "dp=" << c.dp << " tp=" << c.tp << " ep=" << c.ep);
      std::vector<GroupData> groups;
      for (int d = 0; d < c.dp; ++d) groups.push_back(make_group(p, w, tokens_of_group(d, c.dp), 700 + world * 10 + d));
      std::vector<Status> st;
      std::vector<float> scales;
      // Default options: on for w4a4 with allgather-reducescatter.
      const auto outs = run_parallel(p, w, c, Strategy::kAllGatherReduceScatter, groups, true, &st, -1, true,
                                     QuantizedDispatch::kAuto, &scales);
      ++num_runs;
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
        EXPECT_EQ(scales[r], common) << "rank " << r;
        const GroupData& g = groups[rank_layout(c, r).dp_rank];
        const auto want = serial_sum(p, w, c, Strategy::kAllGatherReduceScatter, g);
        for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(outs[r][i], want[i]) << "rank " << r << " element " << i;
        if (g.num_tokens == 0) continue;
        EXPECT_GT(testing::l2_norm(outs[r]), 0.0) << "rank " << r;
        EXPECT_LE(testing::rel_l2(outs[r], g.reference), kParallelTolerance) << "rank " << r;
      }
    }
  }
  EXPECT_GE(num_runs, 4);
}

// CUDA-graph mode (padded_tokens) with quantized dispatch: the filler rows travel as zero codes and
// scales, and the outputs are the unpadded forward's bit for bit (a DP group with 0 tokens included).
TEST(QuantizedDispatch, PaddedTokensEqualTheUnpaddedForward) {
  const MoeProblem p = w4a4_problem("qwen3-30b-a3b", 3);
  const HostMoeWeights w = make_random_weights(p, testing::test_seed() + 4);
  int num_runs = 0;
  for (int world : {2, 4}) {
    for (const ParallelConfig& c : valid_configs(p, world)) {
      if (!check_strategy(c, Strategy::kAllGatherReduceScatter).ok()) continue;
      std::vector<GroupData> groups;
      int64_t largest = 0;
      for (int d = 0; d < c.dp; ++d) {
        groups.push_back(make_group(p, w, tokens_of_group(d, c.dp), 800 + world * 10 + d));
        largest = std::max(largest, groups.back().num_tokens);
      }
      std::vector<Status> st;
      const auto base = run_parallel(p, w, c, Strategy::kAllGatherReduceScatter, groups, true, &st, -1, true,
                                     QuantizedDispatch::kOn);
      for (int r = 0; r < world; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string();
      for (int64_t padded : {largest, p.max_tokens}) {
        for (bool check : {true, false}) {
          SCOPED_TRACE(::testing::Message() << "dp=" << c.dp << " tp=" << c.tp << " ep=" << c.ep
                                            << " padded_tokens=" << padded << " check=" << check);
          const auto outs = run_parallel(p, w, c, Strategy::kAllGatherReduceScatter, groups, true, &st, padded, check,
                                         QuantizedDispatch::kOn);
          ++num_runs;
          expect_same_bits(st, outs, base);
          if (HasFatalFailure()) return;
          for (int r = 0; r < world; ++r) {
            if (!outs[r].empty()) {
              EXPECT_GT(testing::l2_norm(outs[r]), 0.0) << "rank " << r;
            }
          }
        }
      }
    }
  }
  EXPECT_GE(num_runs, 12);
}

// Creates the layer on every rank of `c` with per-rank options; returns each rank's status.
std::vector<Status> create_on_ranks(const MoeProblem& p, const HostMoeWeights& w, const ParallelConfig& c,
                                    Strategy strategy, const std::function<QuantizedDispatch(int)>& option_of,
                                    std::vector<size_t>* record_bytes = nullptr) {
  auto world = LocalWorld::create(c.world_size(), with_timeout(10000));
  if (record_bytes) record_bytes->assign(size_t(c.world_size()), 0);
  return run_local_ranks(world, [&](int rank, Communicator& comm) -> Status {
    std::unique_ptr<ExpertBackend> backend;
    FP4MOE_RETURN_IF_ERROR(make_cpu_reference_backend(p, w, rank_layout(c, rank), {}, &backend));
    ParallelMoeOptions o;
    o.quantized_dispatch = option_of(rank);
    std::unique_ptr<ParallelMoe> layer;
    FP4MOE_RETURN_IF_ERROR(ParallelMoe::create(p, c, strategy, &comm, std::move(backend), o, &layer));
    if (record_bytes) (*record_bytes)[size_t(rank)] = layer->dispatch_record_bytes();
    return Status::Ok();
  });
}

TEST(QuantizedDispatch, OptionIsValidatedAtCreate) {
  const MoeProblem p4 = w4a4_problem("qwen3-30b-a3b", 3);
  const HostMoeWeights w4 = make_random_weights(p4, 8);
  MoeProblem p16 = p4;
  p16.mode = Mode::kW4A16;
  const HostMoeWeights w16 = make_random_weights(p16, 8);
  auto all = [](QuantizedDispatch q) { return [q](int) { return q; }; };
  const ParallelConfig dp2ep2{2, 1, 2};
  // On in w4a16: refused on every rank, naming the option and the mode.
  auto st = create_on_ranks(p16, w16, dp2ep2, Strategy::kAllGatherReduceScatter, all(QuantizedDispatch::kOn));
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "quantized_dispatch = on needs mode w4a4")) << s.message();
    EXPECT_TRUE(contains(s.message(), "mode = w4a16")) << s.message();
  }
  // On with strategies that send no tokens.
  st = create_on_ranks(p4, w4, {1, 2, 2}, Strategy::kTpAllReduce, all(QuantizedDispatch::kOn));
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "quantized_dispatch = on needs a strategy that dispatches tokens")) << s.message();
    EXPECT_TRUE(contains(s.message(), "strategy tp-allreduce sends none")) << s.message();
  }
  st = create_on_ranks(p4, w4, {1, 1, 1}, Strategy::kNone, all(QuantizedDispatch::kOn));
  EXPECT_TRUE(contains(st[0].message(), "strategy none sends none")) << st[0].message();
  // Ranks disagreeing: a configuration mismatch naming the option.
  st = create_on_ranks(p4, w4, dp2ep2, Strategy::kAllGatherReduceScatter,
                       [](int rank) { return rank == 0 ? QuantizedDispatch::kOn : QuantizedDispatch::kOff; });
  for (const Status& s : st) {
    EXPECT_TRUE(contains(s.message(), "configuration mismatch")) << s.message();
    EXPECT_TRUE(contains(s.message(), "rank 0 quantized_dispatch=on vs rank 1 quantized_dispatch=off")) << s.message();
  }
  // Accepted: what each resolves to, by the bytes of a token record (hidden part + 8 bytes per slot). An
  // NVFP4 row (9H/16 bytes) is padded to 16 bytes, which matters for H = 32 mod 64 (p96: 54 -> 64), so
  // that the GPU backend's word-wise record gathers and the ids after the row stay aligned.
  const size_t H = size_t(p4.hidden_size);
  auto nvfp4_row = [](size_t h) { return (h / 2 + h / 16 + 15) / 16 * 16; };
  MoeProblem p96 = p4;
  p96.hidden_size = 96;
  ASSERT_OK(validate(p96));
  const HostMoeWeights w96 = make_random_weights(p96, 9);
  EXPECT_EQ(nvfp4_row(96), 64u);
  using Accepted = std::tuple<const MoeProblem*, const HostMoeWeights*, ParallelConfig, Strategy, QuantizedDispatch, size_t>;
  const Accepted ok[] = {
      {&p4, &w4, dp2ep2, Strategy::kAllGatherReduceScatter, QuantizedDispatch::kAuto, nvfp4_row(H)},
      {&p4, &w4, dp2ep2, Strategy::kAllGatherReduceScatter, QuantizedDispatch::kOff, 2 * H},
      {&p4, &w4, dp2ep2, Strategy::kAllToAll, QuantizedDispatch::kAuto, 2 * H},
      {&p4, &w4, dp2ep2, Strategy::kAllToAll, QuantizedDispatch::kOn, nvfp4_row(H)},
      {&p96, &w96, dp2ep2, Strategy::kAllToAll, QuantizedDispatch::kOn, 64},
      {&p16, &w16, dp2ep2, Strategy::kAllGatherReduceScatter, QuantizedDispatch::kAuto, 2 * H},
      {&p4, &w4, {1, 2, 2}, Strategy::kTpAllReduce, QuantizedDispatch::kAuto, 2 * H},
  };
  for (const auto& [p, w, c, strategy, q, hidden_bytes] : ok) {
    SCOPED_TRACE(::testing::Message() << to_string(p->mode) << " " << to_string(strategy) << " " << to_string(q));
    std::vector<size_t> bytes;
    st = create_on_ranks(*p, *w, c, strategy, all(q), &bytes);
    for (int r = 0; r < c.world_size(); ++r) {
      ASSERT_OK(st[size_t(r)]);
      EXPECT_EQ(bytes[size_t(r)], hidden_bytes + size_t(p->top_k()) * 8) << "rank " << r;
      EXPECT_EQ(bytes[size_t(r)] % 8, 0u) << "rank " << r;
    }
  }
  // A non-positive or NaN input scale anywhere: every rank fails at create (the shared scale would be
  // meaningless), the holder of the bad expert naming it, the others through the exchanged NaN.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), 0.0f, -1.0f}) {
    HostMoeWeights w_bad = make_random_weights(p4, 8);
    w_bad.a13_scale_2[1] = bad;
    st = create_on_ranks(p4, w_bad, dp2ep2, Strategy::kAllGatherReduceScatter, all(QuantizedDispatch::kAuto));
    bool named = false;
    for (const Status& s : st) {
      EXPECT_FALSE(s.ok());
      named |= contains(s.message(), "a13_scale_2 of local expert 1") && contains(s.message(), "finite and > 0");
    }
    EXPECT_TRUE(named) << st[0].message();
  }
  QuantizedDispatch q;
  EXPECT_OK(parse_quantized_dispatch("on", &q));
  EXPECT_EQ(q, QuantizedDispatch::kOn);
  EXPECT_TRUE(contains(parse_quantized_dispatch("nvfp4", &q).message(), "'nvfp4' is not one of auto, off, on"));
}

// Off keeps bf16 dispatch in w4a4: the plain layer with per-expert scales, bit for bit the serial sum.
TEST(QuantizedDispatch, OffDispatchesBf16AndKeepsThePerExpertScales) {
  const MoeProblem p = w4a4_problem("qwen3-30b-a3b", 3);
  const HostMoeWeights w = make_random_weights(p, testing::test_seed() + 5);
  const ParallelConfig c{2, 2, 1};
  std::vector<GroupData> groups{make_group(p, w, 5, 61), make_group(p, w, 0, 62)};
  std::vector<Status> st;
  std::vector<float> scales;
  const auto outs = run_parallel(p, w, c, Strategy::kAllGatherReduceScatter, groups, false, &st, -1, true,
                                 QuantizedDispatch::kOff, &scales);
  for (int r = 0; r < 4; ++r) {
    ASSERT_OK(st[r]);
    EXPECT_EQ(scales[r], 0.0f);
    const GroupData& g = groups[rank_layout(c, r).dp_rank];
    const auto want = serial_sum(p, w, c, Strategy::kAllGatherReduceScatter, g);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(outs[r][i], want[i]) << "rank " << r << " element " << i;
    if (g.num_tokens) {
      EXPECT_GT(testing::l2_norm(outs[r]), 0.0) << "rank " << r;
      EXPECT_LE(testing::rel_l2(outs[r], g.reference), kParallelTolerance) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace fp4moe
