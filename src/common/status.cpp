#include "fp4moe/status.h"

namespace fp4moe {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kCudaError: return "CUDA error";
    case StatusCode::kNcclError: return "NCCL error";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(fp4moe::to_string(code_)) + ": " + message_;
}

}  // namespace fp4moe
