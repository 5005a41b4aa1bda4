// Data, tensor and expert parallelism for the MoE layer: the configuration, the dispatch/combine
// strategies, their validation, and the launcher variables a multi-process run starts from.
//
// Semantics (vLLM's FusedMoEParallelConfig). The world has dp * tp ranks, one per
// GPU; world rank r sits in DP group r / tp at TP rank r % tp. The ranks of one DP group hold the same
// tokens (attention TP replicates the hidden states); different DP groups hold different tokens.
// The MoE itself is laid out over the whole world in one of two ways:
//   ep == 1  (expert parallelism off): every rank holds every expert, and the intermediate dimension of
//            each expert is split over all dp * tp ranks (the MoE's TP size is dp * tp, its TP rank is
//            the world rank). With dp > 1 the tokens of all DP groups must reach every rank.
//   ep == dp * tp (on): world rank r holds the contiguous experts [r*E/ep, (r+1)*E/ep), whole; the
//            MoE's TP size is 1. Any other ep is refused: it is the only EP size vLLM defines, and a
//            partial EP (ep < dp*tp) would need a second TP level inside the MoE.
// The sum over all ranks of their partial outputs for a token is the full layer output for it.
//
// Strategies (how tokens reach the experts and partial outputs come back), chosen by name:
//   none                     world size 1: nothing to communicate.
//   tp-allreduce             dp == 1, world > 1: tokens are already on every rank; each rank computes
//                            its partial output (its TP slice or its experts), all-reduce over the world.
//   allgather-reducescatter  dp > 1: all-gather-v of the tokens and their routing over the DP group
//                            (ranks with the same TP rank), every rank computes its partial for all of
//                            them, reduce-scatter-v back over the DP group, then all-reduce over the
//                            TP group when tp > 1 (the seed's dispatch). The tokens travel as bf16 rows
//                            (2 bytes per element), or in w4a4 mode, by default, NVFP4-quantized
//                            (0.5625 bytes per element; see below).
//   alltoall                 dp > 1 and ep > 1: each token goes, once, only to the ranks that own one of
//                            its experts (grouped send/recv), and the partial outputs come back the same
//                            way. With tp > 1 the TP ranks of a DP group split its tokens between them
//                            first and all-gather the finished outputs over the TP group at the end.
//                            bf16 rows by default; NVFP4-quantized in w4a4 when asked for.
//
// NVFP4-quantized dispatch (w4a4 only; ParallelMoeOptions::quantized_dispatch in src/moe/parallel_moe.h:
// auto = on for allgather-reducescatter, off otherwise; on is refused for w4a16 and for strategies that
// send no tokens). A token is sent as its GEMM1 input already quantized (H/2 bytes of e2m1 codes and
// H/16 e4m3 block scales, 3.56x fewer bytes than bf16). The single-rank w4a4 layer quantizes that input
// with each expert's own global scale a13_scale_2[e]; a token quantized once, before it is known which
// rank's experts use it, can have only one. So the layer uses ONE shared scale, the largest a13_scale_2
// over all experts (no expert's range saturates; every rank gets the same value: each takes the max over
// the experts it holds and the maxima are all-gathered over the world), for the dispatch and for every
// expert's GEMM1. The received codes reach GEMM1 unchanged (no second quantization). Numerics: exactly
// the single-rank w4a4 layer with every a13_scale_2[e] replaced by that shared scale (up to the
// strategy's reduction order, as for bf16 dispatch); this differs from the plain w4a4 layer wherever
// the experts' scales differ, and equals it when they are all the same.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/status.h"

namespace fp4moe {

struct ParallelConfig {
  int dp = 1;  // data-parallel groups (each with its own tokens)
  int tp = 1;  // ranks per DP group (sharing that group's tokens)
  int ep = 1;  // 1 (expert parallelism off) or dp * tp
  // dp * tp, for a config validate() accepted (it keeps dp * tp within kMaxWorldSize, so the int
  // product cannot wrap).
  int world_size() const { return dp * tp; }
};
// The most ranks a parallel layer (and valid_configs) takes.
inline constexpr int kMaxWorldSize = 1 << 16;

// Where one rank sits, derived from the config (see the header comment).
struct RankLayout {
  int rank = 0;              // world rank
  int dp_rank = 0;           // which DP group (= which tokens)
  int tp_rank = 0;           // rank inside the DP group
  int moe_ep_rank = 0, moe_ep_size = 1;  // the expert shard (LayerOptions / ref::ShardSpec semantics)
  int moe_tp_rank = 0, moe_tp_size = 1;  // the intermediate-dimension shard
};

enum class Strategy { kNone, kTpAllReduce, kAllGatherReduceScatter, kAllToAll };

// "none", "tp-allreduce", "allgather-reducescatter", "alltoall".
const char* to_string(Strategy strategy);
Status parse_strategy(std::string_view name, Strategy* out);

// Checks the config on its own and against the problem and the number of ranks actually started:
// dp, tp, ep >= 1; dp * tp == world_size; ep in {1, dp*tp}; E divisible by ep; the MoE's TP slice of the
// intermediate dimension a whole number of 32-element scale blocks. Names the bad value.
Status validate(const ParallelConfig& config, const MoeProblem& problem, int world_size);
// The first rules of validate(), which need neither the problem nor the world: dp, tp and ep >= 1 and
// dp * tp at most kMaxWorldSize (so that world_size() cannot wrap).
Status check_config_bounds(const ParallelConfig& config);
// Whether `strategy` can run `config` (see the header comment); the error says why not.
Status check_strategy(const ParallelConfig& config, Strategy strategy);
// The strategies check_strategy accepts for `config`, in enum order.
std::vector<Strategy> applicable_strategies(const ParallelConfig& config);
// Every config for `world_size` ranks that validate() accepts for `problem`, ordered by (dp, ep).
std::vector<ParallelConfig> valid_configs(const MoeProblem& problem, int world_size);

RankLayout rank_layout(const ParallelConfig& config, int rank);

// A canonical "key=value;..." text of everything that must agree across ranks (the problem's shape,
// routing, format and mode, the parallel config and the strategy). Ranks compare these at set-up so a
// mismatch fails with both texts instead of hanging or computing garbage.
std::string config_signature(const MoeProblem& problem, const ParallelConfig& config, Strategy strategy);

// ---- Launch ----------------------------------------------------------------------------------------
// Rank variables set by the usual launchers, so one binary runs under any of them:
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   mpirun (Open MPI): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE,
//                 SLURM_JOB_NODELIST / SLURM_STEP_NODELIST, SLURM_JOB_ID
// Precedence torchrun > mpirun > Slurm: torchrun is often started by srun or mpirun, one process per
// node, so the outer launcher's variables describe the node, not the worker.
// Rendezvous address: MASTER_ADDR/MASTER_PORT when set (any launcher). Otherwise Slurm's is the first
// host of the node list and port 20000 + SLURM_JOB_ID % 20000 (every task computes the same one);
// mpirun without MASTER_ADDR uses localhost only when all ranks are local (LOCAL_SIZE == SIZE).
// FP4MOE_RENDEZVOUS_PORT overrides the port. Under torchrun with TORCHELASTIC_USE_AGENT_STORE=True the
// agent's own store already listens on MASTER_PORT, so the rendezvous takes MASTER_PORT + 1.
// NCCL_COMM_ID, when set, replaces the rendezvous: NCCL derives the same unique id on every rank.
struct LaunchInfo {
  std::string launcher = "none";  // "torchrun", "mpirun", "slurm", or "none" (one process, rank 0 of 1)
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string master_addr;  // empty where not needed (world_size 1, or nccl_comm_id set)
  int master_port = 0;
  std::string nccl_comm_id;
};

// Pure function over the variables (tests pass a map); errors name the variable and its value.
Status parse_launch_env(const std::map<std::string, std::string>& env, LaunchInfo* out);
// The same over this process's environment.
Status launch_info_from_environment(LaunchInfo* out);

}  // namespace fp4moe
