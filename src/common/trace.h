// Kernel timeline of one forward, for trace builds only (cmake -DFP4MOE_TRACE=ON; everything here
// compiles to nothing otherwise, so the kernels of a normal build are unchanged). Each traced
// kernel records in the workspace's trace words (WorkspaceLayout::trace), in %globaltimer
// nanoseconds: the first and the last CTA's start, the first and the last return from
// griddepcontrol.wait, and the first and the last CTA's end. `fp4moe-bench --trace` prints them for
// one CUDA-graph replay: where a forward's time goes between kernels under programmatic dependent
// launch, which Nsight Compute (one kernel at a time) does not show and the GPU machine has no
// Nsight Systems for.
#pragma once

#include <cstdint>

namespace fp4moe {

enum TraceKernel : int {
  kTraceRoute,       // the routing kernel (when the forward routes from logits)
  kTracePlan,        // the one-CTA plan
  kTracePlanCount,   // the multi-CTA plan's three launches
  kTracePlanScan,
  kTracePlanAssign,
  kTracePlanPermute, // the plan and the permute in one kernel (few routed pairs)
  kTracePermute,
  kTraceGemm1,
  kTraceGemm1Tail,
  kTraceGemm2,
  kTraceGemm2Tail,
  kTraceFinalize,
  kTraceKernels
};
inline constexpr const char* kTraceKernelNames[kTraceKernels] = {
    "route", "plan",       "plan_count", "plan_scan",  "plan_assign", "plan_permute",
    "permute", "gemm1",    "gemm1_tail", "gemm2",      "gemm2_tail",  "finalize"};
// Words per kernel, all maxima so that a zeroed buffer is an empty trace: ~(first start),
// ~(first wait return), last wait return, last end, last start, ~(first end). A kernel that did not
// run keeps zeros. Then sums, written by the sm90 GEMMs only (SM clock cycles, thread 0 of each
// warpgroup): the consumers' waits for full stages, the consumers' time, the producer's waits for
// empty stages, the producer's time, the consumers' time in K loops (their waits included); and
// per tile, the consumers' time finding it (the loop's lookup), from the tile's start to its K loop,
// in the whole tile (K loop and epilogue included), and the count of tiles; the producer's time in
// its per-unit setup (the tile's lookup, and with the overlap its wait for GEMM1's rows) and in
// issuing its stages (from each empty wait's return to the stage's last copy instruction); the
// part of the setup up to the tile's lookup (its coordinates in registers), and the producer's time
// taking the dynamic kernels' next unit from the scheduling thread (take_unit).
constexpr int kTraceWords = 19;
enum TraceSum : int {
  kTraceConsumerWait = 6,
  kTraceConsumerTime,
  kTraceProducerWait,
  kTraceProducerTime,
  kTraceConsumerKLoop,
  kTraceConsumerFind,
  kTraceConsumerPre,
  kTraceConsumerTile,
  kTraceConsumerTiles,
  kTraceProducerSetup,
  kTraceProducerIssue,
  kTraceProducerLookup,
  kTraceProducerTake
};
constexpr int kTraceBytes = kTraceKernels * kTraceWords * 8;

#if defined(FP4MOE_TRACE) && FP4MOE_TRACE && defined(__CUDACC__)
__device__ __forceinline__ uint64_t trace_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ int* trace_exited_warps() {
  __shared__ int exited;
  return &exited;
}

// One per CTA, constructed by every thread at the kernel's top (it synchronizes the CTA once); the
// CTA's end is when the last of its warps' lane 0 leaves the kernel (the destructor runs at every
// return). A null trace (route_gpu called on its own) records nothing.
class TraceCta {
 public:
  __device__ TraceCta(unsigned long long* trace, int kernel) : slot_(trace ? trace + kernel * kTraceWords : nullptr) {
    if (threadIdx.x == 0 && slot_) {
      *trace_exited_warps() = 0;
      const uint64_t t = trace_now();
      atomicMax(slot_ + 0, ~t);
      atomicMax(slot_ + 4, t);
    }
    __syncthreads();
  }
  // This kernel's trace words (null without a trace), for sums a kernel adds itself (TraceSum).
  __device__ unsigned long long* slot() const { return slot_; }
  __device__ void waited() const {
    if (threadIdx.x != 0 || !slot_) return;
    const uint64_t t = trace_now();
    atomicMax(slot_ + 1, ~t);
    atomicMax(slot_ + 2, t);
  }
  __device__ ~TraceCta() {
    if (threadIdx.x % 32 != 0 || !slot_) return;
    const int warps = int(blockDim.x + 31) / 32;
    if (atomicAdd(trace_exited_warps(), 1) == warps - 1) {
      const uint64_t t = trace_now();
      atomicMax(slot_ + 3, t);
      atomicMax(slot_ + 5, ~t);
    }
  }

 private:
  unsigned long long* slot_;
};
#define FP4MOE_TRACE_CTA(trace, kernel) ::fp4moe::TraceCta fp4moe_trace_cta_((trace), (kernel))
#define FP4MOE_TRACE_WAITED() fp4moe_trace_cta_.waited()
#define FP4MOE_TRACE_SLOT() fp4moe_trace_cta_.slot()
#define FP4MOE_TRACE_ONLY(...) __VA_ARGS__
#else
#define FP4MOE_TRACE_ONLY(...)
#define FP4MOE_TRACE_CTA(trace, kernel) static_cast<void>(0)
#define FP4MOE_TRACE_WAITED() static_cast<void>(0)
#endif

}  // namespace fp4moe
