// Expert and tensor parallel sharding as pure functions of (rank, size), with vLLM's semantics:
// EP gives rank r the contiguous experts [r*E/ep, (r+1)*E/ep); TP gives rank r the slice
// [r*I/tp, (r+1)*I/tp) of every expert's intermediate dimension (rows of gate and of up in w13,
// columns of w2). The sum over all ranks of their partial outputs is the full layer output; the w2
// bias is added by tp rank 0 only.
#pragma once

#include <cstdint>

#include "fp4moe/moe.h"

namespace fp4moe::ref {

struct ShardSpec {
  int ep_rank = 0, ep_size = 1;
  int tp_rank = 0, tp_size = 1;
};

struct ExpertRange {
  int begin = 0, end = 0;  // global expert ids [begin, end)
  int size() const { return end - begin; }
  bool contains(int e) const { return e >= begin && e < end; }
};

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Checks E % ep == 0, I % tp == 0 with whole scale blocks (I/tp a multiple of 32), ranks in range.
Status validate_shard(const MoeProblem& problem, const ShardSpec& shard);
ExpertRange local_experts(int num_experts, int ep_rank, int ep_size);
IndexRange tp_slice(int64_t intermediate_size, int tp_rank, int tp_size);

// The weights a rank holds: its experts, and for each the TP slice of the intermediate dimension.
// `full` holds all experts with the full intermediate size. routing_bias stays global.
Status shard_weights(const MoeProblem& problem, const HostMoeWeights& full, const ShardSpec& shard,
                     HostMoeWeights* out);
// The same from a view of the full weights (all experts, full intermediate size; null tensors stay empty).
Status shard_weights(const MoeProblem& problem, const MoeWeightsView& full, const ShardSpec& shard,
                     HostMoeWeights* out);

}  // namespace fp4moe::ref
