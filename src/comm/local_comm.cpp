// LocalCommunicator: in-process ranks over host memory (see local_comm.h for the contract).
//
// Every operation is: post (this rank's buffers and sizes into its slot) -> arrive (wait until every rank
// has posted) -> compute (this rank reads the others' posts and builds its result in a private buffer)
// -> depart (wait until every rank has finished reading) -> copy the result out. The result is copied
// only after departing because a peer may still be reading this rank's send buffer, which may be the
// receive buffer too (in-place all-reduce). Two barriers per operation are enough for the slots to be
// reused by the next one: nobody posts again before everyone has departed from the previous operation.
#include "src/comm/local_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <string>
#include <system_error>
#include <thread>

#include "fp4moe/numerics.h"

namespace fp4moe::comm {

namespace {

// What one rank contributes to an operation. Pointers stay valid until the rank departs.
struct Post {
  const char* op = "";
  uint64_t seq = 0;  // the rank's operation counter on this group: all ranks must agree
  DataType type = DataType::kU8;
  const void* send = nullptr;
  size_t count = 0;
  const std::vector<size_t>* counts = nullptr;       // per-rank counts (v-collectives, send side of a2a)
  const std::vector<size_t>* recv_counts = nullptr;  // all_to_all_v receive side
  int color = 0, key = 0;                            // split
};

using Clock = std::chrono::steady_clock;

}  // namespace

struct LocalGroup {
  std::string name;
  std::vector<int> world_ranks;  // group rank -> world rank
  CommOptions options;

  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;  // completed barriers
  int num_arrived = 0;
  std::vector<char> arrived;
  bool aborted = false;
  std::string abort_reason;
  std::vector<Post> posts;
  // split: the child group of each color, created by the first member to get there.
  std::map<int, std::shared_ptr<LocalGroup>> children;
  int children_taken = 0;

  int size() const { return int(world_ranks.size()); }
};

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, std::shared_ptr<LocalGroup> group, int rank)
      : world_(std::move(world)), group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  const std::string& name() const override { return group_->name; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  Status split(int color, int key, const std::string& name, std::unique_ptr<Communicator>* out) override;
  Status all_reduce_sum(const void* send, void* recv, size_t count, DataType type) override;
  Status all_gather_v(const void* send, size_t send_count, void* recv, const std::vector<size_t>& recv_counts,
                      DataType type) override;
  Status reduce_scatter_v_sum(const void* send, const std::vector<size_t>& counts, void* recv,
                              DataType type) override;
  Status all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                      const std::vector<size_t>& recv_counts, DataType type) override;
  Status barrier() override;
  Status synchronize() override { return Status::Ok(); }
  void abort(const std::string& reason) override { world_->kill(group_->world_ranks[rank_], reason); }

 private:
  std::string who() const {
    return detail::concat("rank ", rank_, " (world rank ", group_->world_ranks[rank_], ") of group '", group_->name,
                          "' (size ", size(), ")");
  }
  // A bad argument on one rank would leave the others waiting: abort the group so they fail fast too.
  Status fail_locally(Status s) {
    abort_group(s.message());
    return s;
  }
  void abort_group(const std::string& reason) {
    std::lock_guard<std::mutex> lk(group_->mu);
    if (!group_->aborted) {
      group_->aborted = true;
      group_->abort_reason = reason;
    }
    group_->cv.notify_all();
  }
  Status sync_point(const std::string& op, const char* phase, Clock::time_point deadline);
  // post -> arrive -> compute(posts) -> depart; `compute` fills the private result, copied out by the caller.
  Status rendezvous(Post post, const std::function<Status(const std::vector<Post>&)>& compute);

  std::shared_ptr<LocalWorld> world_;
  std::shared_ptr<LocalGroup> group_;
  int rank_;
  uint64_t seq_ = 0;
};

Status LocalCommunicator::sync_point(const std::string& op, const char* phase, Clock::time_point deadline) {
  LocalGroup& g = *group_;
  std::unique_lock<std::mutex> lk(g.mu);
  auto aborted_status = [&] {
    return Status(StatusCode::kNcclError, detail::concat(who(), ": ", op, " failed: group aborted: ", g.abort_reason));
  };
  if (g.aborted) return aborted_status();
  const uint64_t gen = g.generation;
  g.arrived[rank_] = 1;
  if (++g.num_arrived == g.size()) {
    g.num_arrived = 0;
    std::fill(g.arrived.begin(), g.arrived.end(), 0);
    ++g.generation;
    g.cv.notify_all();
    return Status::Ok();
  }
  while (g.generation == gen && !g.aborted) {
    if (g.cv.wait_until(lk, deadline) == std::cv_status::timeout && g.generation == gen && !g.aborted) {
      std::string missing;
      for (int r = 0; r < g.size(); ++r)
        if (!g.arrived[r])
          missing += detail::concat(missing.empty() ? "" : ", ", "rank ", r, " (world rank ", g.world_ranks[r], ")");
      const std::string msg =
          detail::concat(who(), ": ", op, " (", phase, ") timed out after ", g.options.timeout.count(),
                         " ms waiting for ", missing);
      g.aborted = true;
      g.abort_reason = msg;
      g.cv.notify_all();
      return Status(StatusCode::kTimeout, msg);
    }
  }
  if (g.generation != gen) return Status::Ok();  // completed, even if an abort came right after
  return aborted_status();
}

Status LocalCommunicator::rendezvous(Post post, const std::function<Status(const std::vector<Post>&)>& compute) {
  LocalGroup& g = *group_;
  post.seq = ++seq_;
  const std::string op = detail::concat(post.op, " #", post.seq);
  const Clock::time_point deadline = Clock::now() + g.options.timeout;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    g.posts[rank_] = post;
  }
  FP4MOE_RETURN_IF_ERROR(sync_point(op, "arrive", deadline));
  // Posts are stable between the two barriers: read them without the lock.
  Status s;
  for (int r = 0; r < g.size() && s.ok(); ++r) {
    const Post& p = g.posts[r];
    if (p.seq != post.seq || std::strcmp(p.op, post.op) != 0 || p.type != post.type)
      s = internal_error(who(), ": ", op, " (", to_string(post.type), ") met rank ", r, " calling ", p.op, " #", p.seq,
                         " (", to_string(p.type), "): the ranks issue different operations");
  }
  if (s.ok()) s = compute(g.posts);
  const Status depart = sync_point(op, "depart", deadline);
  if (!s.ok()) {
    abort_group(s.message());
    return s;
  }
  return depart;
}

// ---- Reductions ----------------------------------------------------------------------------------
// out[i] = sum over ranks (ascending) of src_r[offset + i]; bf16 accumulates in fp32, rounded once.
Status reduce_posts(const std::vector<Post>& posts, size_t offset, size_t count, DataType type,
                    std::vector<uint8_t>* out) {
  out->resize(count * size_of(type));
  switch (type) {
    case DataType::kF32: {
      auto* o = reinterpret_cast<float*>(out->data());
      for (size_t i = 0; i < count; ++i) {
        float acc = 0.0f;
        for (size_t r = 0; r < posts.size(); ++r) {
          const float v = static_cast<const float*>(posts[r].send)[offset + i];
          acc = r == 0 ? v : acc + v;  // (starting from rank 0's value keeps -0.0 when every addend is -0.0)
        }
        o[i] = acc;
      }
      return Status::Ok();
    }
    case DataType::kBF16: {
      auto* o = reinterpret_cast<uint16_t*>(out->data());
      for (size_t i = 0; i < count; ++i) {
        float acc = 0.0f;
        for (size_t r = 0; r < posts.size(); ++r) {
          const float v = bf16_to_float(static_cast<const uint16_t*>(posts[r].send)[offset + i]);
          acc = r == 0 ? v : acc + v;
        }
        o[i] = float_to_bf16(acc);
      }
      return Status::Ok();
    }
    case DataType::kI32: {
      auto* o = reinterpret_cast<int32_t*>(out->data());
      for (size_t i = 0; i < count; ++i) {
        int64_t acc = 0;
        for (const Post& p : posts) acc += static_cast<const int32_t*>(p.send)[offset + i];
        o[i] = int32_t(acc);
      }
      return Status::Ok();
    }
    case DataType::kI64: {
      auto* o = reinterpret_cast<int64_t*>(out->data());
      for (size_t i = 0; i < count; ++i) {
        int64_t acc = 0;
        for (const Post& p : posts) acc += static_cast<const int64_t*>(p.send)[offset + i];
        o[i] = acc;
      }
      return Status::Ok();
    }
    case DataType::kU8: break;
  }
  return invalid_argument("sum over type ", to_string(type), " is not supported (f32, bf16, i32, i64)");
}

Status LocalCommunicator::all_reduce_sum(const void* send, void* recv, size_t count, DataType type) {
  if (count > 0 && (!send || !recv)) return fail_locally(invalid_argument(who(), ": all_reduce_sum: null buffer"));
  if (type == DataType::kU8) return fail_locally(invalid_argument(who(), ": all_reduce_sum: type u8 cannot be summed"));
  Post p{.op = "all_reduce_sum", .type = type, .send = send, .count = count};
  std::vector<uint8_t> result;
  FP4MOE_RETURN_IF_ERROR(rendezvous(p, [&](const std::vector<Post>& posts) -> Status {
    for (size_t r = 0; r < posts.size(); ++r)
      if (posts[r].count != count)
        return invalid_argument(who(), ": all_reduce_sum: count = ", count, " but rank ", r, " passed ", posts[r].count);
    return reduce_posts(posts, 0, count, type, &result);
  }));
  if (count) std::memcpy(recv, result.data(), result.size());
  return Status::Ok();
}

Status LocalCommunicator::all_gather_v(const void* send, size_t send_count, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType type) {
  size_t total = 0;
  Status s = check_counts(*this, "all_gather_v", "recv_counts", recv_counts, &total);
  if (s.ok() && recv_counts[rank_] != send_count)
    s = invalid_argument(who(), ": all_gather_v: send_count = ", send_count, " but recv_counts[", rank_,
                         "] = ", recv_counts[rank_]);
  if (s.ok() && ((send_count && !send) || (total && !recv))) s = invalid_argument(who(), ": all_gather_v: null buffer");
  if (!s.ok()) return fail_locally(s);
  Post p{.op = "all_gather_v", .type = type, .send = send, .count = send_count, .counts = &recv_counts};
  const size_t es = size_of(type);
  std::vector<uint8_t> result(total * es);
  FP4MOE_RETURN_IF_ERROR(rendezvous(p, [&](const std::vector<Post>& posts) -> Status {
    size_t off = 0;
    for (size_t r = 0; r < posts.size(); ++r) {
      if (*posts[r].counts != recv_counts)
        return invalid_argument(who(), ": all_gather_v: recv_counts differ from those of rank ", r);
      if (recv_counts[r]) std::memcpy(result.data() + off * es, posts[r].send, recv_counts[r] * es);
      off += recv_counts[r];
    }
    return Status::Ok();
  }));
  if (total) std::memcpy(recv, result.data(), result.size());
  return Status::Ok();
}

Status LocalCommunicator::reduce_scatter_v_sum(const void* send, const std::vector<size_t>& counts, void* recv,
                                               DataType type) {
  size_t total = 0;
  Status s = check_counts(*this, "reduce_scatter_v_sum", "counts", counts, &total);
  if (s.ok() && ((total && !send) || (counts[rank_] && !recv)))
    s = invalid_argument(who(), ": reduce_scatter_v_sum: null buffer");
  if (s.ok() && type == DataType::kU8) s = invalid_argument(who(), ": reduce_scatter_v_sum: type u8 cannot be summed");
  if (!s.ok()) return fail_locally(s);
  Post p{.op = "reduce_scatter_v_sum", .type = type, .send = send, .counts = &counts};
  std::vector<uint8_t> result;
  FP4MOE_RETURN_IF_ERROR(rendezvous(p, [&](const std::vector<Post>& posts) -> Status {
    for (size_t r = 0; r < posts.size(); ++r)
      if (*posts[r].counts != counts)
        return invalid_argument(who(), ": reduce_scatter_v_sum: counts differ from those of rank ", r);
    size_t offset = 0;
    for (int r = 0; r < rank_; ++r) offset += counts[r];
    return reduce_posts(posts, offset, counts[rank_], type, &result);
  }));
  if (counts[rank_]) std::memcpy(recv, result.data(), result.size());
  return Status::Ok();
}

Status LocalCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType type) {
  size_t send_total = 0, recv_total = 0;
  Status s = check_counts(*this, "all_to_all_v", "send_counts", send_counts, &send_total);
  if (s.ok()) s = check_counts(*this, "all_to_all_v", "recv_counts", recv_counts, &recv_total);
  if (s.ok() && ((send_total && !send) || (recv_total && !recv))) s = invalid_argument(who(), ": all_to_all_v: null buffer");
  if (!s.ok()) return fail_locally(s);
  Post p{.op = "all_to_all_v", .type = type, .send = send, .counts = &send_counts, .recv_counts = &recv_counts};
  const size_t es = size_of(type);
  std::vector<uint8_t> result(recv_total * es);
  FP4MOE_RETURN_IF_ERROR(rendezvous(p, [&](const std::vector<Post>& posts) -> Status {
    size_t off = 0;
    for (size_t a = 0; a < posts.size(); ++a) {
      const std::vector<size_t>& theirs = *posts[a].counts;
      if (theirs[rank_] != recv_counts[a])
        return invalid_argument(who(), ": all_to_all_v: recv_counts[", a, "] = ", recv_counts[a], " but rank ", a,
                                " sends ", theirs[rank_]);
      size_t src_off = 0;
      for (int b = 0; b < rank_; ++b) src_off += theirs[b];
      if (recv_counts[a])
        std::memcpy(result.data() + off * es, static_cast<const uint8_t*>(posts[a].send) + src_off * es,
                    recv_counts[a] * es);
      off += recv_counts[a];
    }
    return Status::Ok();
  }));
  if (recv_total) std::memcpy(recv, result.data(), result.size());
  return Status::Ok();
}

Status LocalCommunicator::barrier() {
  return rendezvous(Post{.op = "barrier"}, [](const std::vector<Post>&) { return Status::Ok(); });
}

Status LocalCommunicator::split(int color, int key, const std::string& name, std::unique_ptr<Communicator>* out) {
  if (!out) return fail_locally(invalid_argument(who(), ": split: out is null"));
  out->reset();
  Post p{.op = "split", .color = color, .key = key};
  std::shared_ptr<LocalGroup> child;
  int child_rank = -1;
  FP4MOE_RETURN_IF_ERROR(rendezvous(p, [&](const std::vector<Post>& posts) -> Status {
    if (color < 0) return Status::Ok();
    std::vector<std::pair<int, int>> members;  // (key, group rank)
    for (int r = 0; r < int(posts.size()); ++r)
      if (posts[r].color == color) members.push_back({posts[r].key, r});
    std::sort(members.begin(), members.end());
    LocalGroup& g = *group_;
    std::lock_guard<std::mutex> lk(g.mu);
    auto& slot = g.children[color];
    if (!slot) {
      slot = std::make_shared<LocalGroup>();
      slot->name = name;
      slot->options = g.options;
      for (const auto& m : members) slot->world_ranks.push_back(g.world_ranks[m.second]);
      slot->arrived.assign(members.size(), 0);
      slot->posts.resize(members.size());
      world_->register_group(slot);
    }
    child = slot;
    for (int i = 0; i < int(members.size()); ++i)
      if (members[i].second == rank_) child_rank = i;
    // The last member of the last color to pick its group up clears the table for the next split.
    int num_joining = 0;
    for (const Post& q : posts) num_joining += q.color >= 0;
    if (++g.children_taken == num_joining) {
      g.children.clear();
      g.children_taken = 0;
    }
    if (child->name != name)
      return invalid_argument(who(), ": split: name '", name, "' but another member named the group '", child->name, "'");
    return Status::Ok();
  }));
  if (child) *out = std::make_unique<LocalCommunicator>(world_, child, child_rank);
  return Status::Ok();
}

}  // namespace

std::shared_ptr<LocalWorld> LocalWorld::create(int num_ranks, const CommOptions& options) {
  auto world = std::shared_ptr<LocalWorld>(new LocalWorld(std::max(1, num_ranks), options));
  auto g = std::make_shared<LocalGroup>();
  g->name = "world";
  g->options = options;
  for (int r = 0; r < world->num_ranks_; ++r) g->world_ranks.push_back(r);
  g->arrived.assign(world->num_ranks_, 0);
  g->posts.resize(world->num_ranks_);
  world->register_group(g);
  return world;
}

std::unique_ptr<Communicator> LocalWorld::communicator(int rank) {
  std::lock_guard<std::mutex> lk(mu_);
  if (rank < 0 || rank >= num_ranks_) return nullptr;
  return std::make_unique<LocalCommunicator>(shared_from_this(), world_group_, rank);
}

void LocalWorld::register_group(const std::shared_ptr<LocalGroup>& group) {
  std::lock_guard<std::mutex> lk(mu_);
  // The first group registered is the world group (create()); the world keeps it alive so
  // communicator() can hand it out at any time. Split groups live as long as their communicators.
  if (!world_group_) world_group_ = group;
  groups_.push_back(group);
}

void LocalWorld::kill(int rank, const std::string& reason) {
  std::vector<std::shared_ptr<LocalGroup>> live;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& w : groups_)
      if (auto g = w.lock()) live.push_back(g);
  }
  for (auto& g : live) {
    if (std::find(g->world_ranks.begin(), g->world_ranks.end(), rank) == g->world_ranks.end()) continue;
    std::lock_guard<std::mutex> lk(g->mu);
    if (!g->aborted) {
      g->aborted = true;
      g->abort_reason = detail::concat("world rank ", rank, " aborted (", reason, ")");
    }
    g->cv.notify_all();
  }
}

std::vector<Status> run_local_ranks(const std::shared_ptr<LocalWorld>& world,
                                    const std::function<Status(int rank, Communicator& world)>& fn) {
  const int n = world->size();
  std::vector<Status> results(n);
  std::vector<std::unique_ptr<Communicator>> comms(n);
  for (int r = 0; r < n; ++r) comms[r] = world->communicator(r);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    try {
      threads.emplace_back([&, r] { results[r] = fn(r, *comms[r]); });
    } catch (const std::system_error& e) {
      // No thread for this rank (the process's thread limit): it and the ranks after it fail now, and
      // the ranks already running learn it from the abort instead of waiting for their deadline.
      const std::string reason = detail::concat("no thread for rank ", r, " of ", n, ": ", e.what());
      for (int q = r; q < n; ++q) {
        results[q] = Status(StatusCode::kUnsupported, reason);
        world->kill(q, reason);
      }
      break;
    }
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace fp4moe::comm
