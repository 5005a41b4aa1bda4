// The routings of one fp4moe-bench token count, written for bench/peers_torch.py so that the peers
// time the same (token, expert, weight) assignments as fp4moe (`fp4moe-bench --dump-routing DIR`,
// `peers_torch.py --routing-dir DIR`). fp4moe-bench times a rotation of input sets, each with its own
// routing; one file per preset, token count and set: DIR/<preset>_T<T>.routing for set 0 (the only
// file before session 43), DIR/<preset>_T<T>_set<S>.routing for set S >= 1. Format:
//   one ASCII line "fp4moe-routing v1 T=<T> K=<K> E=<E>\n",
//   then T*K int32 expert ids, then T*K float32 router weights, little-endian, token-major (slot k of
//   token t at t*K + k).
// bench/routing_file.py reads it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fp4moe::tools {

inline std::string routing_file_path(const std::string& dir, const std::string& preset, int64_t T, int set = 0) {
  return dir + "/" + preset + "_T" + std::to_string(T) + (set > 0 ? "_set" + std::to_string(set) : "") + ".routing";
}

// Writes the file; false (and errno set by stdio) when it cannot.
inline bool write_routing_file(const std::string& path, int64_t T, int K, int E, const std::vector<int32_t>& ids,
                               const std::vector<float>& weights) {
  if (ids.size() != size_t(T) * size_t(K) || weights.size() != ids.size()) return false;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const std::string header = "fp4moe-routing v1 T=" + std::to_string(T) + " K=" + std::to_string(K) +
                             " E=" + std::to_string(E) + "\n";
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  // (the hosts fp4moe builds for are little-endian: x86-64 and aarch64)
  if (ok && !ids.empty()) ok = std::fwrite(ids.data(), 4, ids.size(), f) == ids.size();
  if (ok && !weights.empty()) ok = std::fwrite(weights.data(), 4, weights.size(), f) == weights.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace fp4moe::tools
