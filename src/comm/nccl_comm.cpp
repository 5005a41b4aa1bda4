// NcclCommunicator (see nccl_comm.h). Compiled only so far: not yet run on a GPU.
#include "src/comm/nccl_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "src/comm/bootstrap.h"

namespace fp4moe::comm {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kU8: return ncclUint8;
    case DataType::kBF16: return ncclBfloat16;
    case DataType::kF32: return ncclFloat32;
    case DataType::kI32: return ncclInt32;
    case DataType::kI64: return ncclInt64;
  }
  return ncclUint8;
}

// Poll interval: short enough that a finished collective is noticed within a few microseconds of work,
// and the thread yields so a spinning rank does not starve the proxy threads NCCL runs.
void pause_briefly() { std::this_thread::yield(); }

// NVLink multicast is off on the GPU machines this project runs on; keep NCCL from probing it.
void disable_nvls_unless_set() { ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Waits until `comm` leaves ncclInProgress; on the deadline aborts it. Used before the object exists.
Status wait_comm(ncclComm_t comm, const std::string& who, const char* op, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) {
      const std::string last = ncclGetLastError(comm);
      ncclCommAbort(comm);
      return Status(StatusCode::kNcclError,
                    detail::concat(who, ": ", op, " failed: ", ncclGetErrorString(state), last.empty() ? "" : " (", last,
                                   last.empty() ? "" : ")"));
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      return Status(StatusCode::kTimeout,
                    detail::concat(who, ": ", op, " timed out after ", timeout.count(), " ms (communicator aborted)"));
    }
    pause_briefly();
  }
}

}  // namespace

#define FP4MOE_NCCL_CHECK(op, expr) FP4MOE_RETURN_IF_ERROR(check((expr), op, #expr, __FILE__, __LINE__))

NcclCommunicator::NcclCommunicator(ncclComm_t comm, bool owned, int rank, int size, std::string name,
                                   cudaStream_t stream, const CommOptions& options)
    : comm_(comm), owned_(owned), rank_(rank), size_(size), name_(std::move(name)), stream_(stream),
      options_(options) {}

NcclCommunicator::~NcclCommunicator() {
  if (barrier_buf_) cudaFree(barrier_buf_);
  if (!owned_ || !comm_) return;
  if (aborted_) return;  // ncclCommAbort already freed it
  // Finalize flushes outstanding work; bounded by the deadline, else abort (never hang in a destructor).
  ncclResult_t r = ncclCommFinalize(comm_);
  if ((r == ncclSuccess || r == ncclInProgress) && wait_comm(comm_, who(), "finalize", options_.timeout).ok()) {
    ncclCommDestroy(comm_);
  }
  // (wait_comm aborted it on failure.)
}

std::string NcclCommunicator::who() const {
  return detail::concat("rank ", rank_, " of NCCL group '", name_, "' (size ", size_, ")");
}

Status NcclCommunicator::check(ncclResult_t r, const char* op, const char* expr, const char* file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();  // in progress: finish() waits
  const std::string last = comm_ ? ncclGetLastError(comm_) : "";
  abort(detail::concat(op, " failed"));
  return Status(StatusCode::kNcclError, detail::concat(who(), ": ", op, ": ", expr, " failed: ", ncclGetErrorString(r),
                                                       last.empty() ? "" : " (" + last + ")", " at ", file, ":", line));
}

Status NcclCommunicator::timeout(const char* op, const char* what) {
  const std::string msg = detail::concat(who(), ": ", op, " timed out after ", options_.timeout.count(), " ms ", what,
                                         " (communicator aborted; a peer is dead, hung or issuing other operations)");
  abort(msg);
  return Status(StatusCode::kTimeout, msg);
}

Status NcclCommunicator::wait_ready(const char* op) {
  if (aborted_) return Status(StatusCode::kNcclError, detail::concat(who(), ": ", op, ": communicator was aborted"));
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) return check(state, op, "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (Clock::now() >= deadline) return timeout(op, "waiting for NCCL to accept it");
    pause_briefly();
  }
}

Status NcclCommunicator::synchronize() {
  if (aborted_) return Status(StatusCode::kNcclError, who() + ": synchronize: communicator was aborted");
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return Status::Ok();
    if (e != cudaErrorNotReady) {
      abort("CUDA error");
      return Status(StatusCode::kCudaError,
                    detail::concat(who(), ": cudaStreamQuery while waiting for NCCL: ", cudaGetErrorString(e)));
    }
    // A peer's failure shows up here as an asynchronous error rather than a finished stream.
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
      return check(state, "synchronize", "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (Clock::now() >= deadline) return timeout("synchronize", "waiting for the stream");
    pause_briefly();
  }
}

Status NcclCommunicator::finish(const char* op) {
  FP4MOE_RETURN_IF_ERROR(wait_ready(op));
  if (!options_.wait_each_op) return Status::Ok();
  Status s = synchronize();
  if (!s.ok() && s.code() == StatusCode::kTimeout)
    return Status(StatusCode::kTimeout, detail::concat(s.message(), " [in ", op, "]"));
  return s;
}

void NcclCommunicator::abort(const std::string& reason) {
  (void)reason;  // NCCL has no way to pass it on; the peers time out or see their own errors
  if (aborted_ || !comm_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

Status NcclCommunicator::create(const ncclUniqueId& id, int rank, int size, cudaStream_t stream,
                                const CommOptions& options, std::unique_ptr<NcclCommunicator>* out) {
  if (!out) return invalid_argument("NcclCommunicator::create: out is null");
  if (size < 1 || rank < 0 || rank >= size)
    return invalid_argument("NcclCommunicator::create: rank = ", rank, " must be in [0, size = ", size, ")");
  disable_nvls_unless_set();
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const std::string who = detail::concat("rank ", rank, " of NCCL group 'world' (size ", size, ")");
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm) ncclCommAbort(comm);
    return Status(StatusCode::kNcclError, detail::concat(who, ": ncclCommInitRankConfig failed: ", ncclGetErrorString(r)));
  }
  FP4MOE_RETURN_IF_ERROR(wait_comm(comm, who, "ncclCommInitRankConfig", options.timeout));
  out->reset(new NcclCommunicator(comm, /*owned=*/true, rank, size, "world", stream, options));
  return Status::Ok();
}

Status NcclCommunicator::wrap(ncclComm_t comm, cudaStream_t stream, const std::string& name,
                              const CommOptions& options, std::unique_ptr<NcclCommunicator>* out) {
  if (!out) return invalid_argument("NcclCommunicator::wrap: out is null");
  if (!comm) return invalid_argument("NcclCommunicator::wrap: comm is null");
  int rank = 0, size = 0;
  ncclResult_t r = ncclCommUserRank(comm, &rank);
  if (r == ncclSuccess) r = ncclCommCount(comm, &size);
  if (r != ncclSuccess)
    return Status(StatusCode::kNcclError, detail::concat("NcclCommunicator::wrap: rank/count of the caller's communicator: ",
                                                         ncclGetErrorString(r)));
  out->reset(new NcclCommunicator(comm, /*owned=*/false, rank, size, name, stream, options));
  return Status::Ok();
}

Status NcclCommunicator::split(int color, int key, const std::string& name, std::unique_ptr<Communicator>* out) {
  if (!out) return invalid_argument(who(), ": split: out is null");
  out->reset();
  FP4MOE_RETURN_IF_ERROR(wait_ready("split"));
  ncclConfig_t config = nonblocking_config();
  ncclComm_t child = nullptr;
  FP4MOE_NCCL_CHECK("split", ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config));
  FP4MOE_RETURN_IF_ERROR(wait_ready("split"));
  if (color < 0 || !child) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(wait_comm(child, detail::concat(who(), " -> '", name, "'"), "ncclCommSplit", options_.timeout));
  int rank = 0, size = 0;
  ncclResult_t r = ncclCommUserRank(child, &rank);
  if (r == ncclSuccess) r = ncclCommCount(child, &size);
  if (r != ncclSuccess) {
    ncclCommAbort(child);
    return check(r, "split", "ncclCommUserRank/ncclCommCount", __FILE__, __LINE__);
  }
  out->reset(new NcclCommunicator(child, /*owned=*/true, rank, size, name, stream_, options_));
  return Status::Ok();
}

Status NcclCommunicator::all_reduce_sum(const void* send, void* recv, size_t count, DataType type) {
  if (type == DataType::kU8) return invalid_argument(who(), ": all_reduce_sum: type u8 cannot be summed");
  FP4MOE_RETURN_IF_ERROR(wait_ready("all_reduce_sum"));
  if (count == 0) return Status::Ok();  // every rank has the same count: all skip together
  FP4MOE_NCCL_CHECK("all_reduce_sum", ncclAllReduce(send, recv, count, nccl_type(type), ncclSum, comm_, stream_));
  return finish("all_reduce_sum");
}

Status NcclCommunicator::all_gather_v(const void* send, size_t send_count, void* recv,
                                      const std::vector<size_t>& recv_counts, DataType type) {
  size_t total = 0;
  FP4MOE_RETURN_IF_ERROR(check_counts(*this, "all_gather_v", "recv_counts", recv_counts, &total));
  if (recv_counts[rank_] != send_count)
    return invalid_argument(who(), ": all_gather_v: send_count = ", send_count, " but recv_counts[", rank_, "] = ",
                            recv_counts[rank_]);
  FP4MOE_RETURN_IF_ERROR(wait_ready("all_gather_v"));
  if (total == 0) return Status::Ok();
  const size_t es = size_of(type);
  const bool equal = std::all_of(recv_counts.begin(), recv_counts.end(), [&](size_t c) { return c == recv_counts[0]; });
  if (equal) {
    FP4MOE_NCCL_CHECK("all_gather_v", ncclAllGather(send, recv, send_count, nccl_type(type), comm_, stream_));
  } else {
    // Byte-typed broadcasts: the blocks need no arithmetic, and u8 keeps any element type's offsets exact.
    FP4MOE_NCCL_CHECK("all_gather_v", ncclGroupStart());
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      if (recv_counts[r]) {
        ncclResult_t res = ncclBroadcast(r == rank_ ? send : nullptr, static_cast<uint8_t*>(recv) + offset * es,
                                         recv_counts[r] * es, ncclUint8, r, comm_, stream_);
        if (res != ncclSuccess && res != ncclInProgress) {
          ncclGroupEnd();
          return check(res, "all_gather_v", "ncclBroadcast", __FILE__, __LINE__);
        }
      }
      offset += recv_counts[r];
    }
    FP4MOE_NCCL_CHECK("all_gather_v", ncclGroupEnd());
  }
  return finish("all_gather_v");
}

Status NcclCommunicator::reduce_scatter_v_sum(const void* send, const std::vector<size_t>& counts, void* recv,
                                              DataType type) {
  size_t total = 0;
  FP4MOE_RETURN_IF_ERROR(check_counts(*this, "reduce_scatter_v_sum", "counts", counts, &total));
  if (type == DataType::kU8) return invalid_argument(who(), ": reduce_scatter_v_sum: type u8 cannot be summed");
  FP4MOE_RETURN_IF_ERROR(wait_ready("reduce_scatter_v_sum"));
  if (total == 0) return Status::Ok();
  const size_t es = size_of(type);
  const bool equal = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
  if (equal) {
    FP4MOE_NCCL_CHECK("reduce_scatter_v_sum",
                      ncclReduceScatter(send, recv, counts[0], nccl_type(type), ncclSum, comm_, stream_));
  } else {
    FP4MOE_NCCL_CHECK("reduce_scatter_v_sum", ncclGroupStart());
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      if (counts[r]) {
        // recvbuff matters on the root only.
        ncclResult_t res = ncclReduce(static_cast<const uint8_t*>(send) + offset * es, r == rank_ ? recv : nullptr,
                                      counts[r], nccl_type(type), ncclSum, r, comm_, stream_);
        if (res != ncclSuccess && res != ncclInProgress) {
          ncclGroupEnd();
          return check(res, "reduce_scatter_v_sum", "ncclReduce", __FILE__, __LINE__);
        }
      }
      offset += counts[r];
    }
    FP4MOE_NCCL_CHECK("reduce_scatter_v_sum", ncclGroupEnd());
  }
  return finish("reduce_scatter_v_sum");
}

Status NcclCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                      const std::vector<size_t>& recv_counts, DataType type) {
  size_t send_total = 0, recv_total = 0;
  FP4MOE_RETURN_IF_ERROR(check_counts(*this, "all_to_all_v", "send_counts", send_counts, &send_total));
  FP4MOE_RETURN_IF_ERROR(check_counts(*this, "all_to_all_v", "recv_counts", recv_counts, &recv_total));
  FP4MOE_RETURN_IF_ERROR(wait_ready("all_to_all_v"));
  const size_t es = size_of(type);
  // NOTE: ranks with nothing to exchange still enter the (empty) group, so the call stays collective in
  // shape; NCCL matches each send with the peer's recv of the same size, which the counts contract gives.
  FP4MOE_NCCL_CHECK("all_to_all_v", ncclGroupStart());
  size_t send_off = 0, recv_off = 0;
  for (int peer = 0; peer < size_; ++peer) {
    ncclResult_t res = ncclSuccess;
    if (send_counts[peer])
      res = ncclSend(static_cast<const uint8_t*>(send) + send_off * es, send_counts[peer] * es, ncclUint8, peer, comm_,
                     stream_);
    if ((res == ncclSuccess || res == ncclInProgress) && recv_counts[peer])
      res = ncclRecv(static_cast<uint8_t*>(recv) + recv_off * es, recv_counts[peer] * es, ncclUint8, peer, comm_, stream_);
    if (res != ncclSuccess && res != ncclInProgress) {
      ncclGroupEnd();
      return check(res, "all_to_all_v", "ncclSend/ncclRecv", __FILE__, __LINE__);
    }
    send_off += send_counts[peer];
    recv_off += recv_counts[peer];
  }
  FP4MOE_NCCL_CHECK("all_to_all_v", ncclGroupEnd());
  return finish("all_to_all_v");
}

Status NcclCommunicator::barrier() {
  if (!barrier_buf_) {
    const cudaError_t e = cudaMalloc(&barrier_buf_, sizeof(int32_t));
    if (e != cudaSuccess)
      return Status(StatusCode::kCudaError, detail::concat(who(), ": barrier: cudaMalloc: ", cudaGetErrorString(e)));
    cudaMemsetAsync(barrier_buf_, 0, sizeof(int32_t), stream_);
  }
  FP4MOE_RETURN_IF_ERROR(wait_ready("barrier"));
  FP4MOE_NCCL_CHECK("barrier", ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, stream_));
  FP4MOE_RETURN_IF_ERROR(wait_ready("barrier"));
  return synchronize();  // a barrier waits whatever wait_each_op says
}

Status nccl_unique_id(const LaunchInfo& info, const CommOptions& options, ncclUniqueId* out) {
  if (!out) return invalid_argument("nccl_unique_id: out is null");
  // With NCCL_COMM_ID every rank's ncclGetUniqueId encodes that address; rank 0's init listens there.
  if (info.world_size == 1 || !info.nccl_comm_id.empty()) {
    if (!info.nccl_comm_id.empty()) ::setenv("NCCL_COMM_ID", info.nccl_comm_id.c_str(), /*overwrite=*/0);
    const ncclResult_t r = ncclGetUniqueId(out);
    if (r != ncclSuccess)
      return Status(StatusCode::kNcclError, detail::concat("rank ", info.rank, ": ncclGetUniqueId: ", ncclGetErrorString(r)));
    return Status::Ok();
  }
  std::vector<uint8_t> blob;
  if (info.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(out);
    if (r != ncclSuccess)
      return Status(StatusCode::kNcclError, detail::concat("rank 0: ncclGetUniqueId: ", ncclGetErrorString(r)));
    blob.assign(out->internal, out->internal + sizeof(out->internal));
  }
  FP4MOE_RETURN_IF_ERROR(
      tcp_broadcast_blob(info.master_addr, info.master_port, info.rank, info.world_size, options.timeout, &blob));
  if (blob.size() != sizeof(out->internal))
    return Status(StatusCode::kIoError, detail::concat("rank ", info.rank, ": the unique id from rank 0 has ", blob.size(),
                                                       " bytes, expected ", sizeof(out->internal)));
  std::copy(blob.begin(), blob.end(), out->internal);
  return Status::Ok();
}

Status create_nccl_world(const LaunchInfo& info, cudaStream_t stream, const CommOptions& options,
                         std::unique_ptr<NcclCommunicator>* out) {
  int num_devices = 0;
  cudaError_t e = cudaGetDeviceCount(&num_devices);
  if (e != cudaSuccess) return Status(StatusCode::kCudaError, detail::concat("cudaGetDeviceCount: ", cudaGetErrorString(e)));
  if (info.local_rank >= num_devices)
    return invalid_argument("local_rank = ", info.local_rank, " but this node has ", num_devices,
                            " GPUs (one process per GPU)");
  e = cudaSetDevice(info.local_rank);
  if (e != cudaSuccess)
    return Status(StatusCode::kCudaError, detail::concat("cudaSetDevice(", info.local_rank, "): ", cudaGetErrorString(e)));
  ncclUniqueId id;
  FP4MOE_RETURN_IF_ERROR(nccl_unique_id(info, options, &id));
  return NcclCommunicator::create(id, info.rank, info.world_size, stream, options, out);
}

}  // namespace fp4moe::comm
