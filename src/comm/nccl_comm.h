// NcclCommunicator: the Communicator over NCCL (2.28, from the CUDA toolkit), one process per GPU,
// device buffers, one CUDA stream.
//
// STATUS: compiled only. It has not run yet: the machine it was written on has no GPU. The lead runs
// tests/test_parallel_gpu.cpp on the GPU machines.
//
// Failure handling (the reason for the design): communicators are created non-blocking
// (ncclConfig_t::blocking = 0), so no NCCL call can hang the host. Every call's completion is polled
// with ncclCommGetAsyncError (set-up, split, group launches) and cudaStreamQuery (the operations on the
// stream) until CommOptions::timeout; past it the communicator is aborted (ncclCommAbort) and the call
// returns kTimeout naming the rank, the group and the operation. A peer that dies leaves its collectives
// unfinished, which is exactly that case.
//
// Collectives without an NCCL counterpart: all-gather-v = one ncclBroadcast per root inside a group
// (ncclAllGather when all counts are equal), reduce-scatter-v = one ncclReduce per root (ncclReduceScatter
// when equal), all-to-all-v = grouped ncclSend/ncclRecv.
//
// NVLink multicast (NVLS) is off on our GPU machines: NCCL_NVLS_ENABLE=0 is set in the environment before
// the first communicator unless the caller set it; nothing here calls cuMulticastCreate.
// Kernel code never includes this header (STYLE.md): only communicator and launcher code does.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "fp4moe/parallel.h"
#include "src/comm/communicator.h"

namespace fp4moe::comm {

class NcclCommunicator final : public Communicator {
 public:
  // A new world communicator of `size` ranks from a unique id every rank holds (nccl_unique_id below).
  // The current CUDA device is the one it uses.
  static Status create(const ncclUniqueId& id, int rank, int size, cudaStream_t stream, const CommOptions& options,
                       std::unique_ptr<NcclCommunicator>* out);
  // Wraps a communicator the caller owns (engine integration). It is not destroyed with this object; it
  // is aborted on a timeout (it could not be used again anyway). If it is a blocking communicator, the
  // deadlines still hold for the stream's completion, but not inside NCCL calls that block.
  static Status wrap(ncclComm_t comm, cudaStream_t stream, const std::string& name, const CommOptions& options,
                     std::unique_ptr<NcclCommunicator>* out);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  ncclComm_t handle() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

  Status split(int color, int key, const std::string& name, std::unique_ptr<Communicator>* out) override;
  Status all_reduce_sum(const void* send, void* recv, size_t count, DataType type) override;
  Status all_gather_v(const void* send, size_t send_count, void* recv, const std::vector<size_t>& recv_counts,
                      DataType type) override;
  Status reduce_scatter_v_sum(const void* send, const std::vector<size_t>& counts, void* recv,
                              DataType type) override;
  Status all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                      const std::vector<size_t>& recv_counts, DataType type) override;
  Status barrier() override;
  Status synchronize() override;
  void abort(const std::string& reason) override;

 private:
  NcclCommunicator(ncclComm_t comm, bool owned, int rank, int size, std::string name, cudaStream_t stream,
                   const CommOptions& options);
  std::string who() const;
  // Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress (deadline: options_.timeout).
  Status wait_ready(const char* op);
  // After enqueueing `op`: waits for the communicator, then (wait_each_op) for the stream.
  Status finish(const char* op);
  Status check(ncclResult_t r, const char* op, const char* expr, const char* file, int line);
  Status timeout(const char* op, const char* what);

  ncclComm_t comm_ = nullptr;
  bool owned_ = false;
  bool aborted_ = false;
  int rank_ = 0, size_ = 1;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  CommOptions options_;
  void* barrier_buf_ = nullptr;  // one int on the device for barrier()
};

// The unique id every rank passes to NcclCommunicator::create: with NCCL_COMM_ID set NCCL derives it on
// every rank itself; otherwise rank 0 makes one and tcp_broadcast_blob (bootstrap.h) sends it to the
// others at info.master_addr:master_port, within options.timeout.
Status nccl_unique_id(const LaunchInfo& info, const CommOptions& options, ncclUniqueId* out);

// The usual start of a process: cudaSetDevice(info.local_rank), the unique id, the world communicator.
Status create_nccl_world(const LaunchInfo& info, cudaStream_t stream, const CommOptions& options,
                         std::unique_ptr<NcclCommunicator>* out);

}  // namespace fp4moe::comm
