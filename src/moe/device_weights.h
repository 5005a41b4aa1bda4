// Expert weights resident on the device, repacked into the unit-tiled layout (weight_layout.h), plus
// the per-expert epilogue constants derived from the global scales.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4moe/moe.h"
#include "src/moe/weight_layout.h"

namespace fp4moe {

struct DeviceWeights {
  layout::GemmWeightShape g1;  // w13: rows 2*I_local (gate/up interleaved), K = H
  layout::GemmWeightShape g2;  // w2:  rows H, K = I_local
  int num_local_experts = 0;
  int expert_begin = 0;        // global id of local expert 0
  int64_t inter_local = 0;
  bool mxfp4 = false;
  uint8_t* w13 = nullptr;
  uint8_t* w2 = nullptr;
  float* alpha1 = nullptr;     // [E_local] GEMM1 epilogue scale: s2 * 2^7 (/ gs_a1 in w4a4); its
                               // allocation holds 2 * E_local floats, a1_gs in the second half
  float* alpha2 = nullptr;     // [E_local]
  float* a1_gs = nullptr;      // [E_local] w4a4: encode-convention global scale of the GEMM1 input;
                               // alpha1 + E_local (one buffer with alpha1, no allocation of its own)
  float* a2_gs = nullptr;      // [E_local] w4a4: ... of the intermediate
  float* w13_bias = nullptr;   // [E_local, 2*I_local] linear order (gate rows, then up rows)
  float* w2_bias = nullptr;    // [E_local, H]
  float* routing_bias = nullptr;  // [E_global]
  size_t bytes = 0;
  std::vector<void*> allocations;

  void release();
};

// Host-side per-expert epilogue constants (alpha) from decode-convention scales.
float gemm_alpha(float weight_scale_2, float act_global_scale_encode, bool w4a4);

}  // namespace fp4moe
