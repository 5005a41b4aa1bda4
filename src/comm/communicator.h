// Communicator: the collectives the parallel MoE needs, behind one interface with two implementations.
//
//   LocalCommunicator (local_comm.h)  N ranks as threads of one process over host memory: the CI
//                                     stand-in for NCCL, deterministic (reductions in rank order).
//   NcclCommunicator  (nccl_comm.h)   one process per GPU over NCCL, device memory.
//
// Contract shared by both:
//   - Every rank of the group calls every operation, in the same order, with matching sizes; a rank
//     with nothing to send still calls (counts of 0).
//   - Counts are in elements of `type`. The v-variants take the per-rank counts, identical on every
//     rank; rank i's block sits at the prefix sum of the counts before i (no gaps).
//   - Reductions sum. Buffers may not alias unless stated.
//   - Every wait has a deadline (CommOptions::timeout). Past it the operation returns kTimeout with a
//     message naming this rank, the group, the operation and (where known) the ranks that did not
//     arrive, and the communicator is aborted: every later call on it, and on the peers, fails fast
//     (kNcclError) instead of hanging. A peer that aborts makes the others fail with kNcclError.
//   - Operations return when their result is in place (LocalCommunicator) or, for NCCL, when it is
//     complete on the communicator's stream if CommOptions::wait_each_op, else when enqueued (then
//     synchronize() waits, with the deadline).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp4moe/status.h"

namespace fp4moe::comm {

enum class DataType { kU8, kBF16, kF32, kI32, kI64 };
enum class MemorySpace { kHost, kDevice };

size_t size_of(DataType type);
const char* to_string(DataType type);

struct CommOptions {
  // Deadline of every wait (a collective's rendezvous, an NCCL completion, the bootstrap).
  std::chrono::milliseconds timeout{60000};
  // NCCL only: wait for each operation to finish (with the deadline) before returning. Off, operations
  // are only enqueued on the stream (CUDA-graph capture, overlap) and synchronize() does the waiting.
  bool wait_each_op = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Name of the group ("world", "dp", "tp", ...), used in every error message.
  virtual const std::string& name() const = 0;
  virtual MemorySpace memory_space() const = 0;

  // Collective over this group: ranks passing the same color form a new group named `name`, ordered by
  // (key, rank). color < 0: this rank joins no group (*out is null).
  virtual Status split(int color, int key, const std::string& name, std::unique_ptr<Communicator>* out) = 0;

  // recv[i] = sum over ranks of send[i]; send == recv is allowed (in place).
  virtual Status all_reduce_sum(const void* send, void* recv, size_t count, DataType type) = 0;
  // recv = concat over ranks r of rank r's send (recv_counts[r] elements); send_count == recv_counts[rank()].
  virtual Status all_gather_v(const void* send, size_t send_count, void* recv, const std::vector<size_t>& recv_counts,
                              DataType type) = 0;
  // send holds one block per rank (counts[r] elements each, concatenated); recv (counts[rank()]
  // elements) = sum over ranks of their block number rank().
  virtual Status reduce_scatter_v_sum(const void* send, const std::vector<size_t>& counts, void* recv,
                                      DataType type) = 0;
  // Rank a sends send_counts[b] elements to rank b, taken in rank order from `send`; rank b receives
  // them at the prefix sum of its recv_counts before a. send_counts[b] on rank a must equal
  // recv_counts[a] on rank b (exchange the counts first; all_to_all_v with counts of 1 does that).
  virtual Status all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                              const std::vector<size_t>& recv_counts, DataType type) = 0;
  virtual Status barrier() = 0;
  // Waits (with the deadline) for everything enqueued so far; a no-op where operations are synchronous.
  virtual Status synchronize() = 0;
  // Gives up on the group: this rank stops, and the peers' pending and later operations fail fast.
  virtual void abort(const std::string& reason) = 0;
};

// The per-rank counts of an all-gather where every rank sends `count` elements.
inline std::vector<size_t> equal_counts(int num_ranks, size_t count) { return std::vector<size_t>(num_ranks, count); }

// Checks a counts vector against the group (its length) and returns the total in *total.
Status check_counts(const Communicator& comm, const char* op, const char* what, const std::vector<size_t>& counts,
                    size_t* total);

// "rank 2 of group 'dp' (size 4)": the prefix of every communicator error.
std::string describe(const Communicator& comm);

}  // namespace fp4moe::comm
