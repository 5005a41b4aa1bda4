// LocalCommunicator: N ranks as threads of one process, communicating through host memory.
//
// The CI stand-in for NCCL (no GPU needed): the parallel MoE runs its real dispatch/combine code over
// it, so every strategy and every (dp, tp, ep) is tested against the single-rank reference on CPU.
// Each operation is a two-phase rendezvous on the group (all ranks post their buffers, each computes
// its own result from the others' posts, all ranks leave together), with the deadline of
// CommOptions::timeout on both waits. Reductions add in ascending rank order, in fp32 for bf16 (rounded
// once at the end), so results are deterministic and reproducible by a serial sum in that order.
//
// Failure injection for tests: LocalWorld::kill(rank) aborts every group the rank belongs to, as a
// crashing process would; a rank that simply stops calling makes the others time out.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "src/comm/communicator.h"

namespace fp4moe::comm {

struct LocalGroup;

// The shared state of one set of N in-process ranks.
class LocalWorld : public std::enable_shared_from_this<LocalWorld> {
 public:
  static std::shared_ptr<LocalWorld> create(int num_ranks, const CommOptions& options = {});

  int size() const { return num_ranks_; }
  const CommOptions& options() const { return options_; }
  // The world communicator of `rank` (group name "world"). One per rank; each is used by one thread.
  std::unique_ptr<Communicator> communicator(int rank);
  // Aborts every group `rank` belongs to, as if its process had died: the peers' pending and later
  // operations fail with kNcclError naming the rank.
  void kill(int rank, const std::string& reason = "killed");

  // Internal (LocalCommunicator::split): registers a group so kill() can reach it.
  void register_group(const std::shared_ptr<LocalGroup>& group);

 private:
  LocalWorld(int num_ranks, const CommOptions& options) : num_ranks_(num_ranks), options_(options) {}
  int num_ranks_;
  CommOptions options_;
  std::mutex mu_;
  std::shared_ptr<LocalGroup> world_group_;
  std::vector<std::weak_ptr<LocalGroup>> groups_;  // every group ever split, for kill()
};

// Runs fn(rank, world communicator) on one thread per rank of `world` and returns each rank's Status.
std::vector<Status> run_local_ranks(const std::shared_ptr<LocalWorld>& world,
                                    const std::function<Status(int rank, Communicator& world)>& fn);

}  // namespace fp4moe::comm
