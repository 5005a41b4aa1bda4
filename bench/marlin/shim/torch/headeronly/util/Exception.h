// Stand-in for PyTorch's header-only STD_TORCH_CHECK, so that vLLM's Marlin MoE sources (the
// ScalarType header and the host launcher) build without PyTorch for bench/peers_marlin.py. A failed
// check throws std::runtime_error with the condition and the message pieces; the C entry point in
// bench/marlin/marlin_peer.cu turns it into an error string.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace fp4moe_marlin_shim {

template <typename... Parts>
[[noreturn]] inline void fail(const char* condition, const Parts&... parts) {
  std::ostringstream os;
  os << "check failed: " << condition;
  if constexpr (sizeof...(Parts) > 0) {
    os << ": ";
    (os << ... << parts);
  }
  throw std::runtime_error(os.str());
}

}  // namespace fp4moe_marlin_shim

#define STD_TORCH_CHECK(cond, ...) \
  do {                             \
    if (!(cond)) ::fp4moe_marlin_shim::fail(#cond, ##__VA_ARGS__); \
  } while (0)
