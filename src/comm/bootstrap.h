// Bootstrap: from the launcher's variables to a shared secret every rank holds (the ncclUniqueId).
//
// parse_launch_env (declared in fp4moe/parallel.h) turns torchrun / mpirun / Slurm variables into a
// LaunchInfo. tcp_broadcast_blob then moves a small byte string from rank 0 to every other rank over
// one TCP rendezvous at master_addr:master_port: rank 0 listens, the others connect (retrying until
// the deadline, since rank 0 may start last) and say who they are; rank 0 answers once all world_size - 1
// ranks have checked in, or with an error naming the bad rank (a duplicate rank, a different world size).
// Used for the ncclUniqueId (nccl_comm.cpp); plain sockets, no NCCL, so it is tested on CPU over loopback.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/parallel.h"
#include "fp4moe/status.h"

namespace fp4moe::comm {

// Rank 0: *blob is the payload (at most 64 KiB) to send. Other ranks: *blob receives it.
// Errors (kTimeout, kIoError, kInvalidArgument) name the rank, the address and the step that failed.
Status tcp_broadcast_blob(const std::string& master_addr, int master_port, int rank, int world_size,
                          std::chrono::milliseconds timeout, std::vector<uint8_t>* blob);

// A TCP port on 127.0.0.1 that was free a moment ago (0 if none): for local rendezvous in tests and
// in fp4moe-bench-parallel --nproc. Another process may take it before it is bound again.
int find_free_loopback_port();

}  // namespace fp4moe::comm
