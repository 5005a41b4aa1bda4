// The GPUs this build's device code runs on. CMakeLists.txt compiles every kernel, the plain `simt`
// path's included, for sm_90a alone (wgmma and setmaxnreg need the arch-specific target, which runs
// on compute capability 9.0 only, and no PTX is embedded): on any other device no kernel of this
// build can launch. MoeLayer creation checks the device first, so that such a device gets this
// Unsupported status before anything is allocated there, instead of a CUDA "no kernel image" error
// from whichever kernel happens to run first.
#pragma once

#include "fp4moe/status.h"

namespace fp4moe {

inline constexpr int kDeviceCodeMajor = 9;
inline constexpr int kDeviceCodeMinor = 0;

inline Status check_device_code(int device, const char* name, int major, int minor) {
  if (major == kDeviceCodeMajor && minor == kDeviceCodeMinor) return Status::Ok();
  return unsupported("device ", device, " (", name, ") has compute capability ", major, ".", minor,
                     ", and this build of fp4moe has device code for sm_90a only (Hopper, compute capability ",
                     kDeviceCodeMajor, ".", kDeviceCodeMinor,
                     "): none of its kernels, the simt path's included, can run there");
}

}  // namespace fp4moe
