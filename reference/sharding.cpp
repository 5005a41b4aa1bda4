#include "reference/sharding.h"

#include <cstring>

namespace fp4moe::ref {

Status validate_shard(const MoeProblem& p, const ShardSpec& s) {
  if (s.ep_size < 1) return invalid_argument("ep_size = ", s.ep_size, " must be >= 1");
  if (s.tp_size < 1) return invalid_argument("tp_size = ", s.tp_size, " must be >= 1");
  if (s.ep_rank < 0 || s.ep_rank >= s.ep_size)
    return invalid_argument("ep_rank = ", s.ep_rank, " must be in [0, ep_size = ", s.ep_size, ")");
  if (s.tp_rank < 0 || s.tp_rank >= s.tp_size)
    return invalid_argument("tp_rank = ", s.tp_rank, " must be in [0, tp_size = ", s.tp_size, ")");
  if (p.num_experts() % s.ep_size != 0)
    return invalid_argument("num_experts = ", p.num_experts(), " is not divisible by ep_size = ", s.ep_size);
  if (p.intermediate_size % s.tp_size != 0 || (p.intermediate_size / s.tp_size) % 32 != 0)
    return invalid_argument("intermediate_size = ", p.intermediate_size, " split over tp_size = ", s.tp_size,
                            " must give a multiple of 32 per rank");
  return Status::Ok();
}

ExpertRange local_experts(int num_experts, int ep_rank, int ep_size) {
  const int per_rank = num_experts / ep_size;
  return {ep_rank * per_rank, (ep_rank + 1) * per_rank};
}

IndexRange tp_slice(int64_t intermediate_size, int tp_rank, int tp_size) {
  const int64_t per_rank = intermediate_size / tp_size;
  return {tp_rank * per_rank, (tp_rank + 1) * per_rank};
}

Status shard_weights(const MoeProblem& p, const HostMoeWeights& full, const ShardSpec& s, HostMoeWeights* out) {
  return shard_weights(p, full.view(), s, out);
}

Status shard_weights(const MoeProblem& p, const MoeWeightsView& full, const ShardSpec& s, HostMoeWeights* out) {
  FP4MOE_RETURN_IF_ERROR(validate_shard(p, s));
  if (!full.w13 || !full.w13_scale || !full.w2 || !full.w2_scale)
    return invalid_argument("shard_weights: w13, w2 or their block scales are null");
  const ExpertRange ex = local_experts(p.num_experts(), s.ep_rank, s.ep_size);
  const IndexRange sl = tp_slice(p.intermediate_size, s.tp_rank, s.tp_size);
  const int64_t H = p.hidden_size, I = p.intermediate_size, Il = sl.size();
  const int bs = p.block_size();
  HostMoeWeights w;
  w.num_experts = ex.size();
  w.intermediate = Il;
  w.w13.resize(size_t(w.num_experts) * 2 * Il * H / 2);
  w.w13_scale.resize(size_t(w.num_experts) * 2 * Il * H / bs);
  w.w2.resize(size_t(w.num_experts) * H * Il / 2);
  w.w2_scale.resize(size_t(w.num_experts) * H * Il / bs);
  for (int le = 0; le < w.num_experts; ++le) {
    const int64_t e = ex.begin + le;
    for (int half = 0; half < 2; ++half) {  // gate rows, then up rows
      for (int64_t r = 0; r < Il; ++r) {
        const int64_t src_row = e * 2 * I + half * I + sl.begin + r;
        const int64_t dst_row = le * 2 * Il + half * Il + r;
        std::memcpy(&w.w13[dst_row * H / 2], &full.w13[src_row * H / 2], H / 2);
        std::memcpy(&w.w13_scale[dst_row * H / bs], &full.w13_scale[src_row * H / bs], H / bs);
      }
    }
    for (int64_t r = 0; r < H; ++r) {
      const int64_t src_row = e * H + r, dst_row = le * H + r;
      std::memcpy(&w.w2[dst_row * Il / 2], &full.w2[src_row * I / 2 + sl.begin / 2], Il / 2);
      std::memcpy(&w.w2_scale[dst_row * Il / bs], &full.w2_scale[src_row * I / bs + sl.begin / bs], Il / bs);
    }
  }
  auto per_expert = [&](const float* v) {
    return v ? std::vector<float>(v + ex.begin, v + ex.end) : std::vector<float>();
  };
  w.w13_scale_2 = per_expert(full.w13_scale_2);
  w.w2_scale_2 = per_expert(full.w2_scale_2);
  w.a13_scale_2 = per_expert(full.a13_scale_2);
  w.a2_scale_2 = per_expert(full.a2_scale_2);
  if (full.w13_bias) {
    w.w13_bias.resize(size_t(w.num_experts) * 2 * Il);
    for (int le = 0; le < w.num_experts; ++le)
      for (int half = 0; half < 2; ++half)
        for (int64_t r = 0; r < Il; ++r)
          w.w13_bias[(le * 2 + half) * Il + r] = full.w13_bias[((ex.begin + le) * 2 + half) * I + sl.begin + r];
  }
  if (full.w2_bias) {
    // The down-projection bias belongs to the full sum: only TP rank 0 adds it.
    w.w2_bias.assign(size_t(w.num_experts) * H, 0.0f);
    if (s.tp_rank == 0)
      std::memcpy(w.w2_bias.data(), &full.w2_bias[size_t(ex.begin) * H], sizeof(float) * w.w2_bias.size());
  }
  if (full.routing_bias) w.routing_bias.assign(full.routing_bias, full.routing_bias + p.num_experts());
  *out = std::move(w);
  return Status::Ok();
}

}  // namespace fp4moe::ref
