// Launcher variables -> LaunchInfo (a pure function, unit-tested), and the TCP rendezvous that moves the
// ncclUniqueId from rank 0 to the others (see bootstrap.h).
#include "src/comm/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

extern char** environ;

namespace fp4moe {

namespace {

const std::string* find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// A whole-string decimal integer in [lo, hi]; the error names the variable and its value.
Status parse_int(const std::map<std::string, std::string>& env, const char* name, int lo, int hi, int* out) {
  const std::string* v = find(env, name);
  if (!v) return invalid_argument(name, " is not set");
  int x = 0;
  const char* end = v->data() + v->size();
  auto [ptr, ec] = std::from_chars(v->data(), end, x);
  if (v->empty() || ec != std::errc() || ptr != end)
    return invalid_argument(name, " = '", *v, "' is not an integer");
  if (x < lo || x > hi) return invalid_argument(name, " = ", x, " must be in [", lo, ", ", hi, "]");
  *out = x;
  return Status::Ok();
}

Status parse_optional_int(const std::map<std::string, std::string>& env, const char* name, int lo, int hi, int dflt,
                          int* out) {
  if (!find(env, name)) {
    *out = dflt;
    return Status::Ok();
  }
  return parse_int(env, name, lo, hi, out);
}

constexpr int kMaxRanks = 1 << 20;

// First host of a Slurm node list: "gpu[03-04,07],cpu1" -> "gpu03"; each bracket group contributes its
// first entry with its zero padding kept.
std::string first_slurm_host(const std::string& list) {
  std::string host;
  int depth = 0;
  bool in_first_entry = true;  // inside a bracket, only the first element (up to ',' or '-') counts
  for (char c : list) {
    if (depth == 0 && c == ',') break;
    if (c == '[') {
      ++depth;
      in_first_entry = true;
      continue;
    }
    if (c == ']') {
      --depth;
      continue;
    }
    if (depth > 0) {
      if (c == ',' || c == '-') in_first_entry = false;
      if (in_first_entry) host += c;
      continue;
    }
    host += c;
  }
  return host;
}

// SLURM_TASKS_PER_NODE ("4(x2),3") expanded to one count per node.
bool expand_tasks_per_node(const std::string& s, std::vector<int>* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    int n = 0, rep = 1;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), n);
    if (ec != std::errc()) return false;
    i = p - s.data();
    if (i < s.size() && s[i] == '(') {
      if (s.compare(i, 2, "(x") != 0) return false;
      auto [q, ec2] = std::from_chars(s.data() + i + 2, s.data() + s.size(), rep);
      if (ec2 != std::errc() || q == s.data() + s.size() || *q != ')') return false;
      i = q - s.data() + 1;
    }
    out->insert(out->end(), rep, n);
    if (i < s.size()) {
      if (s[i] != ',') return false;
      ++i;
    }
  }
  return !out->empty();
}

}  // namespace

Status parse_launch_env(const std::map<std::string, std::string>& env, LaunchInfo* out) {
  if (!out) return invalid_argument("parse_launch_env: out is null");
  LaunchInfo info;
  if (const std::string* id = find(env, "NCCL_COMM_ID")) info.nccl_comm_id = *id;
  bool derive_slurm_address = false;
  bool all_local = false;
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) {
    info.launcher = "torchrun";
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "WORLD_SIZE", 1, kMaxRanks, &info.world_size));
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "RANK", 0, info.world_size - 1, &info.rank));
    FP4MOE_RETURN_IF_ERROR(parse_optional_int(env, "LOCAL_WORLD_SIZE", 1, info.world_size, 1, &info.local_world_size));
    FP4MOE_RETURN_IF_ERROR(parse_optional_int(env, "LOCAL_RANK", 0, info.local_world_size - 1, 0, &info.local_rank));
  } else if (find(env, "OMPI_COMM_WORLD_RANK") || find(env, "OMPI_COMM_WORLD_SIZE")) {
    info.launcher = "mpirun";
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks, &info.world_size));
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "OMPI_COMM_WORLD_RANK", 0, info.world_size - 1, &info.rank));
    FP4MOE_RETURN_IF_ERROR(
        parse_optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, info.world_size, 1, &info.local_world_size));
    FP4MOE_RETURN_IF_ERROR(
        parse_optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, info.local_world_size - 1, 0, &info.local_rank));
    all_local = info.local_world_size == info.world_size;
  } else if (find(env, "SLURM_PROCID") || find(env, "SLURM_NTASKS")) {
    info.launcher = "slurm";
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "SLURM_NTASKS", 1, kMaxRanks, &info.world_size));
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "SLURM_PROCID", 0, info.world_size - 1, &info.rank));
    if (find(env, "SLURM_NTASKS_PER_NODE")) {
      FP4MOE_RETURN_IF_ERROR(parse_int(env, "SLURM_NTASKS_PER_NODE", 1, info.world_size, &info.local_world_size));
    } else if (const std::string* tpn = find(env, "SLURM_TASKS_PER_NODE")) {
      std::vector<int> per_node;
      if (!expand_tasks_per_node(*tpn, &per_node))
        return invalid_argument("SLURM_TASKS_PER_NODE = '", *tpn, "' is not a list like '4(x2),3'");
      int node = 0;
      FP4MOE_RETURN_IF_ERROR(parse_optional_int(env, "SLURM_NODEID", 0, kMaxRanks, 0, &node));
      if (node >= int(per_node.size()))
        return invalid_argument("SLURM_NODEID = ", node, " but SLURM_TASKS_PER_NODE = '", *tpn, "' lists ",
                                per_node.size(), " nodes");
      info.local_world_size = per_node[node];
    }
    FP4MOE_RETURN_IF_ERROR(parse_optional_int(env, "SLURM_LOCALID", 0, info.local_world_size - 1, 0, &info.local_rank));
    derive_slurm_address = true;
  } else {
    *out = info;  // one process: rank 0 of 1, nothing to rendezvous with
    return Status::Ok();
  }

  // The rendezvous address, needed only when there are peers and NCCL_COMM_ID does not replace it.
  if (info.world_size == 1 || !info.nccl_comm_id.empty()) {
    *out = info;
    return Status::Ok();
  }
  if (const std::string* addr = find(env, "MASTER_ADDR")) {
    if (addr->empty()) return invalid_argument("MASTER_ADDR is set but empty");
    info.master_addr = *addr;
  } else if (derive_slurm_address) {
    const std::string* list = find(env, "SLURM_STEP_NODELIST");
    if (!list) list = find(env, "SLURM_JOB_NODELIST");
    if (!list) return invalid_argument("Slurm: neither MASTER_ADDR nor SLURM_STEP_NODELIST/SLURM_JOB_NODELIST is set");
    info.master_addr = first_slurm_host(*list);
    if (info.master_addr.empty()) return invalid_argument("Slurm node list '", *list, "' names no host");
  } else if (all_local) {
    info.master_addr = "127.0.0.1";
  } else {
    return invalid_argument(info.launcher, ": MASTER_ADDR is not set (needed for world size ", info.world_size,
                            " across nodes, or set NCCL_COMM_ID)");
  }
  if (find(env, "FP4MOE_RENDEZVOUS_PORT")) {
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "FP4MOE_RENDEZVOUS_PORT", 1, 65535, &info.master_port));
  } else if (find(env, "MASTER_PORT")) {
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "MASTER_PORT", 1, 65535, &info.master_port));
    // NOTE: torchrun's agent keeps its own TCPStore listening on MASTER_PORT when it says so through
    // TORCHELASTIC_USE_AGENT_STORE; binding it again would fail, so take the next port.
    const std::string* agent_store = find(env, "TORCHELASTIC_USE_AGENT_STORE");
    if (info.launcher == "torchrun" && agent_store && (*agent_store == "True" || *agent_store == "1")) {
      if (info.master_port == 65535) return invalid_argument("MASTER_PORT = 65535 leaves no port for the rendezvous");
      ++info.master_port;
    }
  } else if (derive_slurm_address) {
    int job_id = 0;
    FP4MOE_RETURN_IF_ERROR(parse_int(env, "SLURM_JOB_ID", 0, 0x7fffffff, &job_id));
    info.master_port = 20000 + job_id % 20000;  // same on every task of the job, differs between jobs
  } else {
    return invalid_argument(info.launcher, ": MASTER_PORT is not set (or set FP4MOE_RENDEZVOUS_PORT or NCCL_COMM_ID)");
  }
  *out = info;
  return Status::Ok();
}

Status launch_info_from_environment(LaunchInfo* out) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace(std::string(*e, size_t(eq - *e)), std::string(eq + 1));
  }
  return parse_launch_env(env, out);
}

namespace comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0xF4E0B007u;
constexpr size_t kMaxBlob = 64 * 1024;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<long long>(left, 1 << 30));
}

Status io_error(const std::string& what) { return Status(StatusCode::kIoError, what + ": " + std::strerror(errno)); }

// Sends or receives exactly n bytes before the deadline (non-blocking socket + poll).
Status transfer(int fd, void* buf, size_t n, bool sending, Clock::time_point deadline, const std::string& who) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    pollfd pfd{fd, short(sending ? POLLOUT : POLLIN), 0};
    const int left = ms_left(deadline);
    const int r = ::poll(&pfd, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error(who + ": poll");
    if (r == 0) return Status(StatusCode::kTimeout, who + ": timed out " + (sending ? "sending" : "receiving"));
    const ssize_t k = sending ? ::send(fd, p + done, n - done, MSG_NOSIGNAL) : ::recv(fd, p + done, n - done, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k < 0) return io_error(who + (sending ? ": send" : ": recv"));
    if (k == 0) return Status(StatusCode::kIoError, who + ": the peer closed the connection");
    done += size_t(k);
  }
  return Status::Ok();
}

void put_u32(uint8_t* p, uint32_t v) {
  v = htonl(v);
  std::memcpy(p, &v, 4);
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

Status set_nonblocking(int fd, const std::string& who) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return io_error(who + ": fcntl");
  return Status::Ok();
}

// A non-blocking connect, so an unreachable host costs at most the deadline (not the kernel's SYN
// retries). An invalid Fd when it fails.
Fd connect_before(const addrinfo* ai, Clock::time_point deadline) {
  Fd s(::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
  if (s.get() < 0 || !set_nonblocking(s.get(), "").ok()) return Fd();
  if (::connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) return s;
  if (errno != EINPROGRESS) return Fd();
  pollfd pfd{s.get(), POLLOUT, 0};
  if (::poll(&pfd, 1, ms_left(deadline)) != 1) return Fd();
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) return Fd();
  return s;
}

// Hello (client -> rank 0): magic, rank, world size. Reply: magic, status (0 ok), length, payload
// (the blob, or the error message).
Status serve(int port, int world_size, Clock::time_point deadline, const std::string& who,
             const std::vector<uint8_t>& blob) {
  Fd listener(::socket(AF_INET6, SOCK_STREAM, 0));
  bool v6 = listener.get() >= 0;
  if (!v6) listener = Fd(::socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) return io_error(who + ": socket");
  const int one = 1, zero = 0;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (v6) {
    ::setsockopt(listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // accept IPv4 peers too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    rc = ::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    rc = ::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc < 0) return io_error(detail::concat(who, ": bind to port ", port));
  if (::listen(listener.get(), 128) < 0) return io_error(who + ": listen");
  FP4MOE_RETURN_IF_ERROR(set_nonblocking(listener.get(), who));

  std::vector<Fd> peers(world_size);
  Fd rejected;
  std::string error;
  for (int joined = 0; joined < world_size - 1;) {
    pollfd pfd{listener.get(), POLLIN, 0};
    const int r = ::poll(&pfd, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error(who + ": poll");
    if (r == 0) {
      std::string missing;
      for (int i = 1; i < world_size; ++i)
        if (peers[i].get() < 0) missing += detail::concat(missing.empty() ? "" : ", ", i);
      return Status(StatusCode::kTimeout, detail::concat(who, ": timed out waiting for rank(s) ", missing,
                                                         " to connect to port ", port));
    }
    Fd conn(::accept(listener.get(), nullptr, nullptr));
    if (conn.get() < 0) continue;  // the peer went away between poll and accept
    FP4MOE_RETURN_IF_ERROR(set_nonblocking(conn.get(), who));
    uint8_t hello[12];
    if (!transfer(conn.get(), hello, sizeof(hello), false, deadline, who).ok() || get_u32(hello) != kMagic)
      continue;  // not one of ours (a port scan, a stale client): ignore it
    const int peer_rank = int(get_u32(hello + 4)), peer_world = int(get_u32(hello + 8));
    if (peer_world != world_size)
      error = detail::concat("rank ", peer_rank, " was started with world size ", peer_world, ", rank 0 with ",
                             world_size);
    else if (peer_rank < 1 || peer_rank >= world_size)
      error = detail::concat("a peer claims rank ", peer_rank, ", outside [1, ", world_size, ")");
    else if (peers[peer_rank].get() >= 0)
      error = detail::concat("two peers claim rank ", peer_rank);
    if (!error.empty()) {
      rejected = std::move(conn);  // told, with everyone connected so far, below
      break;
    }
    peers[peer_rank] = std::move(conn);
    ++joined;
  }
  const std::vector<uint8_t> payload = error.empty() ? blob : std::vector<uint8_t>(error.begin(), error.end());
  std::vector<uint8_t> reply(12 + payload.size());
  put_u32(reply.data(), kMagic);
  put_u32(reply.data() + 4, error.empty() ? 0 : 1);
  put_u32(reply.data() + 8, uint32_t(payload.size()));
  std::copy(payload.begin(), payload.end(), reply.begin() + 12);
  if (!error.empty()) {
    // Best effort: the peers learn why instead of timing out; rank 0's own error is what matters.
    for (int i = 1; i < world_size; ++i)
      if (peers[i].get() >= 0) (void)transfer(peers[i].get(), reply.data(), reply.size(), true, deadline, who);
    if (rejected.get() >= 0) (void)transfer(rejected.get(), reply.data(), reply.size(), true, deadline, who);
    return invalid_argument(who, ": ", error);
  }
  for (int i = 1; i < world_size; ++i)
    FP4MOE_RETURN_IF_ERROR(
        transfer(peers[i].get(), reply.data(), reply.size(), true, deadline, detail::concat(who, ": reply to rank ", i)));
  return Status::Ok();
}

Status join(const std::string& addr, int port, int rank, int world_size, Clock::time_point deadline,
            const std::string& who, std::vector<uint8_t>* blob) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const int gai = ::getaddrinfo(addr.c_str(), port_text.c_str(), &hints, &res);
  if (gai != 0) return Status(StatusCode::kIoError, who + ": cannot resolve '" + addr + "': " + gai_strerror(gai));
  Fd conn;
  // Rank 0 may not be listening yet: retry until the deadline.
  for (;;) {
    for (addrinfo* ai = res; ai && conn.get() < 0; ai = ai->ai_next) conn = connect_before(ai, deadline);
    if (conn.get() >= 0 || ms_left(deadline) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, ms_left(deadline))));
  }
  ::freeaddrinfo(res);
  if (conn.get() < 0)
    return Status(StatusCode::kTimeout, detail::concat(who, ": timed out connecting to rank 0 at ", addr, ":", port));
  const int one = 1;
  ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  uint8_t hello[12];
  put_u32(hello, kMagic);
  put_u32(hello + 4, uint32_t(rank));
  put_u32(hello + 8, uint32_t(world_size));
  FP4MOE_RETURN_IF_ERROR(transfer(conn.get(), hello, sizeof(hello), true, deadline, who + ": hello"));
  uint8_t head[12];
  FP4MOE_RETURN_IF_ERROR(transfer(conn.get(), head, sizeof(head), false, deadline, who + ": waiting for rank 0"));
  const uint32_t len = get_u32(head + 8);
  if (get_u32(head) != kMagic || len > kMaxBlob)
    return Status(StatusCode::kIoError, detail::concat(who, ": ", addr, ":", port, " answered with a bad header"));
  std::vector<uint8_t> payload(len);
  if (len) FP4MOE_RETURN_IF_ERROR(transfer(conn.get(), payload.data(), len, false, deadline, who + ": payload"));
  if (get_u32(head + 4) != 0)
    return invalid_argument(who, ": rank 0 refused the rendezvous: ", std::string(payload.begin(), payload.end()));
  *blob = std::move(payload);
  return Status::Ok();
}

}  // namespace

Status tcp_broadcast_blob(const std::string& master_addr, int master_port, int rank, int world_size,
                          std::chrono::milliseconds timeout, std::vector<uint8_t>* blob) {
  const std::string who = detail::concat("bootstrap rank ", rank, " of ", world_size, " (", master_addr, ":", master_port, ")");
  if (!blob) return invalid_argument(who, ": blob is null");
  if (world_size < 1) return invalid_argument("bootstrap: world_size = ", world_size, " must be >= 1");
  if (rank < 0 || rank >= world_size) return invalid_argument("bootstrap: rank = ", rank, " must be in [0, ", world_size, ")");
  if (master_port < 1 || master_port > 65535) return invalid_argument(who, ": master_port = ", master_port, " must be in [1, 65535]");
  if (rank == 0 && blob->size() > kMaxBlob)
    return invalid_argument(who, ": blob of ", blob->size(), " bytes exceeds ", kMaxBlob);
  if (world_size == 1) return Status::Ok();
  const Clock::time_point deadline = Clock::now() + timeout;
  if (rank == 0) return serve(master_port, world_size, deadline, who, *blob);
  return join(master_addr, master_port, rank, world_size, deadline, who, blob);
}

int find_free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

}  // namespace comm
}  // namespace fp4moe
