// Status: the error type of the whole public API. Every fallible call returns one; a non-ok Status
// carries a code and a message that names the offending argument and its value.
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace fp4moe {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // a caller-supplied value is wrong (shape, dtype, pointer, range)
  kUnsupported,      // valid request this build or device cannot serve
  kCudaError,        // a CUDA runtime/driver call failed
  kNcclError,        // an NCCL call failed or a peer aborted
  kTimeout,          // a wait passed its deadline
  kIoError,          // file system or file format problem
  kInternal,         // a broken invariant inside fp4moe (a bug)
};

const char* to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // e.g. "invalid argument: hidden_size = 100 must be a positive multiple of 32"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

template <typename... Args>
Status invalid_argument(const Args&... args) {
  return Status(StatusCode::kInvalidArgument, detail::concat(args...));
}
template <typename... Args>
Status unsupported(const Args&... args) {
  return Status(StatusCode::kUnsupported, detail::concat(args...));
}
template <typename... Args>
Status internal_error(const Args&... args) {
  return Status(StatusCode::kInternal, detail::concat(args...));
}

}  // namespace fp4moe

#define FP4MOE_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::fp4moe::Status fp4moe_status_ = (expr);         \
    if (!fp4moe_status_.ok()) return fp4moe_status_;  \
  } while (0)
