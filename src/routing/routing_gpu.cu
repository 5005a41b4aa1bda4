// Routing kernels: router logits [T, E] (fp32, or bf16 as uint16 bits) -> topk_ids [T, k] int32 and
// topk_weights [T, k] fp32, for the four methods of include/fp4moe/routing.h. Any sm_90a-era GPU; no
// architecture-specific instructions.
//
// One warp routes one token: lane l holds experts l, l+32, ... (kSlots of them) in registers, the k
// winners come from k rounds of a warp-wide max over (score key, id) ranks, and lane r ends up with
// winner r and writes output slot r. DeepSeek-V3 stages its biased scores in shared memory to score
// the expert groups. Reference: route_cpu() in routing_cpu.cpp, matched bit for bit in ids AND
// weights: scores use det_math.h, the softmax denominator is summed in the order sum_in_warp_order()
// reproduces, sums over the k winners go left to right in output order. No atomics, so reruns are
// bit-identical; no allocation or host synchronization, so route_gpu can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "fp4moe/numerics.h"
#include "fp4moe/routing.h"
#include "src/common/cuda_utils.h"
#include "src/common/pdl.h"
#include "src/common/trace.h"
#include "src/routing/det_math.h"
#include "src/routing/routing_gpu.h"

namespace fp4moe {
namespace routing {

// Defined in routing_cpu.cpp: the argument checks shared by route_cpu and route_gpu.
Status validate_args(const RoutingConfig& config, const RoutingArgs& args);

namespace {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;

struct RoutingParams {
  const void* logits;            // [num_tokens, num_experts] float or uint16 (bf16 bits)
  const float* correction_bias;  // [num_experts], DeepSeek-V3 only
  int32_t* topk_ids;             // [num_tokens, top_k]
  float* topk_weights;           // [num_tokens, top_k]
  int64_t num_tokens;
  int num_experts;
  int top_k;
  bool renormalize;
  int num_groups;
  int topk_groups;
  float routed_scaling_factor;
  bool start_dependents;      // griddepcontrol.launch_dependents at the start (the forward's plan)
  unsigned long long* trace;  // the forward's trace words (trace builds), or null
};

template <RoutingMethod kMethod, int kSlots>
struct RoutingTraits {
  // Experts per lane: one warp covers up to kSlots * 32 experts of a token.
  static constexpr int kExpertsPerWarp = kSlots * kWarpSize;
  // 4 tokens per block: small blocks keep the tail of a short batch (decode: T = 1..8) cheap.
  static constexpr int kWarpsPerBlock = 4;
  static constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;
  // Only DeepSeek-V3 needs shared memory: per warp, the biased scores and the group scores
  // (num_groups <= num_experts <= kExpertsPerWarp).
  static constexpr bool kUsesScratch = kMethod == RoutingMethod::kDeepSeekV3;
  static constexpr int kScratchFloats = kUsesScratch ? kExpertsPerWarp : 1;
  static constexpr int kSmemBytes = 2 * kWarpsPerBlock * kScratchFloats * int(sizeof(float));
  // Grid-stride over tokens beyond this many blocks; any T fits in the grid's x dimension.
  static constexpr int64_t kMaxBlocks = 1 << 16;

  static_assert(kSlots >= 1 && kExpertsPerWarp <= kMaxExperts, "more slots than experts can fill");
  static_assert(kMaxTopK <= kWarpSize, "lane r holds winner r");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
};

__device__ __forceinline__ float load_logit(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_logit(const uint16_t* p) { return bf16_to_float(__ldg(p)); }

__device__ __forceinline__ uint64_t warp_max(uint64_t v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset >= 1; offset /= 2) {
    const uint64_t other = __shfl_xor_sync(kFullWarpMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// The XOR butterfly of sum_in_warp_order(): every lane returns the same bits.
__device__ __forceinline__ float warp_sum_butterfly(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset >= 1; offset /= 2) {
    v = add_rn(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  }
  return v;
}

// Sum of lanes 0..count-1, left to right (the CPU's sum over the k winners in output order).
__device__ __forceinline__ float sum_first_lanes(float v, int count) {
  float sum = __shfl_sync(kFullWarpMask, v, 0);
  for (int r = 1; r < count; ++r) sum = add_rn(sum, __shfl_sync(kFullWarpMask, v, r));
  return sum;
}

// Keep the two largest keys seen (with multiplicity).
__device__ __forceinline__ void insert_top2(uint32_t key, uint32_t& top1, uint32_t& top2) {
  if (key > top1) {
    top2 = top1;
    top1 = key;
  } else if (key > top2) {
    top2 = key;
  }
}

template <RoutingMethod kMethod, typename LogitT, int kSlots>
__global__ void __launch_bounds__(RoutingTraits<kMethod, kSlots>::kThreadsPerBlock)
    route_kernel(const RoutingParams params) {
  using Traits = RoutingTraits<kMethod, kSlots>;
  FP4MOE_TRACE_CTA(params.trace, kTraceRoute);
  // In a forward (launched normally, its first kernel): the plan may be scheduled now and run its
  // prologue; it waits for this grid in its pdl_wait(). Not for route_gpu's own callers, whose next
  // kernel is theirs.
  if (params.start_dependents) pdl_launch_dependents();

  // Shared memory (DeepSeek-V3 only): per warp, biased score per expert and score per group.
  __shared__ float smem_biased[Traits::kWarpsPerBlock][Traits::kScratchFloats];
  __shared__ float smem_group_score[Traits::kWarpsPerBlock][Traits::kScratchFloats];

  const int lane_idx = threadIdx.x % kWarpSize;
  const int warp_idx = threadIdx.x / kWarpSize;
  const int num_experts = params.num_experts;
  const int top_k = params.top_k;
  const int64_t token_stride = int64_t(gridDim.x) * Traits::kWarpsPerBlock;

  for (int64_t token_idx = int64_t(blockIdx.x) * Traits::kWarpsPerBlock + warp_idx;
       token_idx < params.num_tokens; token_idx += token_stride) {
    // ---- Load: slot j of lane l is expert l + 32*j; coalesced per slot
    const LogitT* row = static_cast<const LogitT*>(params.logits) + token_idx * num_experts;
    float logit[kSlots];
    uint64_t rank[kSlots];    // selection rank; 0 = not a candidate
    float payload[kSlots];    // what the weight is computed from: the logit, or DeepSeek's sigmoid
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int expert_idx = lane_idx + j * kWarpSize;
      logit[j] = expert_idx < num_experts ? load_logit(row + expert_idx) : 0.0f;
      rank[j] = expert_idx < num_experts ? make_rank(order_key(logit[j]), expert_idx) : 0;
      payload[j] = logit[j];
    }

    // ---- DeepSeek-V3: sigmoid scores, biased selection, group filter
    if constexpr (kMethod == RoutingMethod::kDeepSeekV3) {
      float* biased = smem_biased[warp_idx];
      float* group_score = smem_group_score[warp_idx];
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int expert_idx = lane_idx + j * kWarpSize;
        if (expert_idx < num_experts) {
          payload[j] = sigmoid_det(logit[j]);
          const float biased_score = add_rn(payload[j], __ldg(params.correction_bias + expert_idx));
          biased[expert_idx] = biased_score;
          rank[j] = make_rank(order_key(biased_score), expert_idx);
        }
      }
      __syncwarp();

      // Group score = sum of the group's top-2 biased scores. A group is split over the largest
      // power-of-two number of lanes that fits (DeepSeek's 8 groups of 32: 4 lanes of 8 experts);
      // each lane keeps a top-2 of its share and an XOR merge inside the aligned lane segment
      // combines them. More than 32 groups take several passes of one lane per group.
      const int num_groups = params.num_groups;
      const int experts_per_group = num_experts / num_groups;
      int lanes_per_group = 1;
      while (lanes_per_group * 2 * num_groups <= kWarpSize && lanes_per_group * 2 <= experts_per_group) {
        lanes_per_group *= 2;
      }
      const int groups_per_pass = kWarpSize / lanes_per_group;
      for (int first_group = 0; first_group < num_groups; first_group += groups_per_pass) {
        const int group_idx = first_group + lane_idx / lanes_per_group;
        const int sub_idx = lane_idx % lanes_per_group;
        // Key 0 is both "empty" and NaN; with >= 2 experts per group the true top-2 fills both
        // places, so a 0 left there is a NaN score, as on the CPU.
        uint32_t top1 = 0, top2 = 0;
        if (group_idx < num_groups) {
          for (int i = sub_idx; i < experts_per_group; i += lanes_per_group) {
            insert_top2(order_key(biased[group_idx * experts_per_group + i]), top1, top2);
          }
        }
        for (int offset = lanes_per_group / 2; offset >= 1; offset /= 2) {
          const uint32_t other1 = __shfl_xor_sync(kFullWarpMask, top1, offset);
          const uint32_t other2 = __shfl_xor_sync(kFullWarpMask, top2, offset);
          const uint32_t low1 = other1 < top1 ? other1 : top1;
          const uint32_t high2 = other2 > top2 ? other2 : top2;
          top1 = other1 > top1 ? other1 : top1;
          top2 = low1 > high2 ? low1 : high2;
        }
        if (group_idx < num_groups && sub_idx == 0) {
          group_score[group_idx] =
              experts_per_group >= 2 ? add_rn(key_value(top1), key_value(top2)) : key_value(top1);
        }
      }
      __syncwarp();

      // Keep the topk_groups best groups (ties: lower group id). Ranks are unique, so a group is
      // kept exactly when its rank is >= the rank of the last group picked.
      uint64_t group_rank[kSlots];
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int group_idx = lane_idx + j * kWarpSize;
        group_rank[j] = group_idx < num_groups ? make_rank(order_key(group_score[group_idx]), group_idx) : 0;
      }
      uint64_t last_kept_rank = 0;
      for (int r = 0; r < params.topk_groups; ++r) {
        uint64_t best = 0;
#pragma unroll
        for (int j = 0; j < kSlots; ++j) best = group_rank[j] > best ? group_rank[j] : best;
        best = warp_max(best);
#pragma unroll
        for (int j = 0; j < kSlots; ++j) group_rank[j] = group_rank[j] == best ? 0 : group_rank[j];
        last_kept_rank = best;
      }
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        const int expert_idx = lane_idx + j * kWarpSize;
        if (expert_idx < num_experts) {
          const int group_idx = expert_idx / experts_per_group;
          if (make_rank(order_key(group_score[group_idx]), group_idx) < last_kept_rank) rank[j] = 0;
        }
      }
      // The scratch is rewritten by the next token of this warp.
      __syncwarp();
    }

    // ---- Top-k: k rounds of a warp max; lane r keeps winner r and its payload
    int selected_id = 0;
    float selected_payload = 0.0f;
    for (int r = 0; r < top_k; ++r) {
      uint64_t best = 0;
#pragma unroll
      for (int j = 0; j < kSlots; ++j) best = rank[j] > best ? rank[j] : best;
      best = warp_max(best);
      // validate() guarantees at least k candidates, so best != 0 here.
      float winner_payload = 0.0f;
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        if (rank[j] == best) {
          winner_payload = payload[j];
          rank[j] = 0;
        }
      }
      const int winner_id = rank_id(best);
      winner_payload = __shfl_sync(kFullWarpMask, winner_payload, winner_id % kWarpSize);
      if (lane_idx == r) {
        selected_id = winner_id;
        selected_payload = winner_payload;
      }
    }

    // ---- Weights (lanes >= k compute throwaway values so that every shuffle has all lanes)
    float weight;
    if constexpr (kMethod == RoutingMethod::kSoftmaxTopK) {
      const float max_logit = __shfl_sync(kFullWarpMask, selected_payload, 0);
      float partial = 0.0f;
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        if (lane_idx + j * kWarpSize < num_experts) partial = add_rn(partial, exp_det(add_rn(logit[j], -max_logit)));
      }
      const float denominator = warp_sum_butterfly(partial);
      weight = div_rn(exp_det(add_rn(selected_payload, -max_logit)), denominator);
      if (params.renormalize) weight = div_rn(weight, sum_first_lanes(weight, top_k));
    } else if constexpr (kMethod == RoutingMethod::kTopKSoftmax) {
      const float max_logit = __shfl_sync(kFullWarpMask, selected_payload, 0);
      const float numerator = exp_det(add_rn(selected_payload, -max_logit));
      weight = div_rn(numerator, sum_first_lanes(numerator, top_k));
    } else if constexpr (kMethod == RoutingMethod::kLlama4) {
      weight = sigmoid_det(selected_payload);
    } else {
      weight = selected_payload;
      if (params.renormalize) weight = div_rn(weight, sum_first_lanes(weight, top_k));
      weight = mul_rn(weight, params.routed_scaling_factor);
    }

    if (lane_idx < top_k) {
      params.topk_ids[token_idx * top_k + lane_idx] = selected_id;
      params.topk_weights[token_idx * top_k + lane_idx] = weight;
    }
  }
}

template <RoutingMethod kMethod, typename LogitT, int kSlots>
Status launch_route_kernel(const RoutingParams& params, cudaStream_t stream) {
  using Traits = RoutingTraits<kMethod, kSlots>;
  const int64_t blocks_needed = (params.num_tokens + Traits::kWarpsPerBlock - 1) / Traits::kWarpsPerBlock;
  const int num_blocks = static_cast<int>(blocks_needed < Traits::kMaxBlocks ? blocks_needed : Traits::kMaxBlocks);
  route_kernel<kMethod, LogitT, kSlots><<<num_blocks, Traits::kThreadsPerBlock, 0, stream>>>(params);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError,
                  detail::concat("route_kernel<", to_string(kMethod), ", slots ", kSlots, "> launch (T = ",
                                 params.num_tokens, ", E = ", params.num_experts, ") failed: ",
                                 cudaGetErrorName(err), ": ", cudaGetErrorString(err), " at ", __FILE__, ":",
                                 __LINE__));
  }
  return Status::Ok();
}

template <RoutingMethod kMethod, typename LogitT>
Status dispatch_slots(const RoutingParams& params, cudaStream_t stream) {
  static_assert(16 * kWarpSize >= kMaxExperts, "the largest instantiation must hold kMaxExperts");
  const int num_slots = (params.num_experts + kWarpSize - 1) / kWarpSize;
  if (num_slots <= 1) return launch_route_kernel<kMethod, LogitT, 1>(params, stream);
  if (num_slots <= 2) return launch_route_kernel<kMethod, LogitT, 2>(params, stream);
  if (num_slots <= 4) return launch_route_kernel<kMethod, LogitT, 4>(params, stream);
  if (num_slots <= 8) return launch_route_kernel<kMethod, LogitT, 8>(params, stream);
  if (num_slots <= 16) return launch_route_kernel<kMethod, LogitT, 16>(params, stream);
  return internal_error("route_gpu: num_experts = ", params.num_experts, " has no kernel instantiation");
}

template <RoutingMethod kMethod>
Status dispatch_logits(const RoutingParams& params, LogitsType logits_type, cudaStream_t stream) {
  switch (logits_type) {
    case LogitsType::kF32: return dispatch_slots<kMethod, float>(params, stream);
    case LogitsType::kBF16: return dispatch_slots<kMethod, uint16_t>(params, stream);
  }
  return internal_error("route_gpu: logits_type = ", static_cast<int>(logits_type), " has no kernel");
}

}  // namespace
}  // namespace routing

Status route_gpu(const RoutingConfig& config, const RoutingArgs& args, cudaStream_t stream) {
  FP4MOE_RETURN_IF_ERROR(routing::validate_args(config, args));
  if (args.num_tokens == 0) return Status::Ok();
  FP4MOE_RETURN_IF_ERROR(check_reachable("route_gpu", stream,
                                         {{"logits", args.logits}, {"correction_bias", args.correction_bias},
                                          {"topk_ids", args.topk_ids}, {"topk_weights", args.topk_weights}}));
  return route_gpu_in_forward(config, args, stream, false, nullptr);
}

Status route_gpu_in_forward(const RoutingConfig& config, const RoutingArgs& args, cudaStream_t stream,
                            bool start_dependents, unsigned long long* trace) {
  FP4MOE_RETURN_IF_ERROR(routing::validate_args(config, args));
  if (args.num_tokens == 0) return Status::Ok();

  routing::RoutingParams params;
  params.logits = args.logits;
  params.correction_bias = args.correction_bias;
  params.topk_ids = args.topk_ids;
  params.topk_weights = args.topk_weights;
  params.num_tokens = args.num_tokens;
  params.num_experts = config.num_experts;
  params.top_k = config.top_k;
  params.renormalize = config.renormalize;
  params.num_groups = config.num_groups;
  params.topk_groups = config.topk_groups;
  params.routed_scaling_factor = config.routed_scaling_factor;
  params.start_dependents = start_dependents;
  params.trace = trace;

  switch (config.method) {
    case RoutingMethod::kSoftmaxTopK:
      return routing::dispatch_logits<RoutingMethod::kSoftmaxTopK>(params, args.logits_type, stream);
    case RoutingMethod::kDeepSeekV3:
      return routing::dispatch_logits<RoutingMethod::kDeepSeekV3>(params, args.logits_type, stream);
    case RoutingMethod::kLlama4:
      return routing::dispatch_logits<RoutingMethod::kLlama4>(params, args.logits_type, stream);
    case RoutingMethod::kTopKSoftmax:
      return routing::dispatch_logits<RoutingMethod::kTopKSoftmax>(params, args.logits_type, stream);
  }
  return internal_error("route_gpu: routing method = ", static_cast<int>(config.method), " has no kernel");
}

}  // namespace fp4moe
