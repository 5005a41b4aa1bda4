// C entry point over vLLM's Marlin MoE GEMM (csrc/moe/marlin_moe_wna16, fetched by
// bench/marlin/build.sh from the vLLM sdist on PyPI), for bench/peers_marlin.py to call by ctypes
// with PyTorch's buffers and stream. It passes what vLLM's torch wrapper passes for an NVFP4 or an
// MXFP4 MoE GEMM with bf16 activations (fp32 global reduce, no atomics, no bias, no zero points,
// the launcher choosing its own thread config) and turns a failed check into a message.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "core/scalar_type.hpp"

// vLLM's host launcher (ops.cu), declared from its own definition by bench/marlin/build.sh
#include "marlin_mm_decl.h"

namespace {
void write_error(char* err, int err_len, const char* msg) {
  if (err == nullptr || err_len <= 0) return;
  std::snprintf(err, size_t(err_len), "%s", msg);
}
}  // namespace

// scale_kind: 0 = NVFP4 (e4m3 scales per 16, a global scale per expert), 1 = MXFP4 (ue8m0 per 32).
// Returns 0, or 1 with a message in err. The launch is asynchronous on `stream`.
extern "C" int fp4moe_marlin_moe_gemm(const void* a, void* c, void* c_tmp, const void* b, const void* b_scales,
                                      const void* global_scale, const void* sorted_token_ids, const void* expert_ids,
                                      const void* num_tokens_past_padded, const void* topk_weights, void* workspace,
                                      int moe_block_size, int num_experts, int top_k, int mul_topk_weights,
                                      int size_m, int size_n, int size_k, int scale_kind, void* stream, char* err,
                                      int err_len) {
  try {
    if (scale_kind != 0 && scale_kind != 1) {
      write_error(err, err_len, "scale_kind must be 0 (nvfp4) or 1 (mxfp4)");
      return 1;
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
      write_error(err, err_len, "cudaGetDevice failed");
      return 1;
    }
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) {
      write_error(err, err_len, "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount) failed");
      return 1;
    }
    const vllm::ScalarType& s_type = scale_kind == 0 ? vllm::kFE4M3fn : vllm::kFE8M0fnu;
    const int group_size = scale_kind == 0 ? 16 : 32;
    marlin_moe_wna16::marlin_mm(a, b, c, c_tmp, nullptr, const_cast<void*>(b_scales),
                                const_cast<void*>(global_scale), nullptr, const_cast<void*>(sorted_token_ids),
                                const_cast<void*>(expert_ids), const_cast<void*>(num_tokens_past_padded),
                                const_cast<void*>(topk_weights), moe_block_size, num_experts, top_k,
                                mul_topk_weights != 0, size_m, size_n, size_k, workspace, vllm::kBFloat16,
                                vllm::kFE2M1f, vllm::kBFloat16, s_type, /*has_bias=*/false, /*has_zp=*/false,
                                group_size, dev, static_cast<cudaStream_t>(stream), -1, -1, sms, -1,
                                /*use_atomic_add=*/false, /*use_fp32_reduce=*/true, /*is_zp_float=*/false);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      write_error(err, err_len, cudaGetErrorString(e));
      return 1;
    }
    return 0;
  } catch (const std::exception& ex) {
    write_error(err, err_len, ex.what());
    return 1;
  } catch (...) {
    write_error(err, err_len, "unknown exception from Marlin's launcher");
    return 1;
  }
}
