#pragma once

#include <cuda_runtime_api.h>

#include "fp4moe/moe.h"
#include "src/moe/device_weights.h"

namespace fp4moe {

// Which part of the full layer a DeviceWeights holds.
struct WeightShard {
  int expert_begin = 0;
  int num_local_experts = 0;
  int64_t inter_begin = 0;  // TP slice of the intermediate dimension
  int64_t inter_local = 0;
  bool add_w2_bias = true;  // only TP rank 0 adds the down-projection bias
};

// Repacks host weights in the linear layout that already hold exactly this shard (its experts and
// intermediate slice, as reference::shard_weights produces). Synchronous.
Status upload_weights(const MoeProblem& problem, const MoeWeightsView& host, const WeightShard& shard,
                      DeviceWeights* out);

// The shard of make_random_weights(problem, seed), generated on the device. Synchronous.
Status make_dummy_weights(const MoeProblem& problem, uint64_t seed, const WeightShard& shard, DeviceWeights* out);

}  // namespace fp4moe
