// Measured config choices (fp4moe-bench --tune), cached in a text file and consulted before the
// heuristic of select_config(). Candidates are only the precompiled configs (kConfigs): tuning never
// compiles anything. A table is tied to the GPU it was measured on; entries for another device name
// are ignored.
//
// File format (text, one entry a line; '#' starts a comment):
//   fp4moe-tune v3          (v1 and v2, written before configs were renamed, are refused: measure again)
//   device <name of the GPU>
//   <H> <I per rank> <local experts> <top-k> <rows-per-expert bucket> <config name>
// The bucket is the smallest power of two >= ceil(tokens * top_k / local experts).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "fp4moe/status.h"
#include "src/gemm/sm90/config.h"

namespace fp4moe::sm90 {

// Every config with a compiled kernel: the table of compiled_configs.h, which launch.cuh instantiates
// in the same order (select_config and narrow_for_few_tiles index it; tests/test_config.cpp pins
// the names).
const std::vector<Sm90Config>& compiled_configs();
// Looks a config up by its name() (e.g. "BN64_C4_S4_x1_c2").
std::optional<Sm90Config> config_by_name(const std::string& name);

int64_t rows_per_expert_bucket(const ConfigInput& in);

class TuneTable {
 public:
  Status load(const std::string& path, const std::string& device_name);
  Status save(const std::string& path) const;
  void set(const ConfigInput& in, const Sm90Config& c);
  std::optional<Sm90Config> lookup(const ConfigInput& in) const;
  size_t size() const { return entries_.size(); }
  void set_device(const std::string& name) { device_ = name; }

 private:
  using Key = std::tuple<int64_t, int64_t, int, int, int64_t>;
  static Key key(const ConfigInput& in);
  std::string device_;
  std::map<Key, std::string> entries_;
};

}  // namespace fp4moe::sm90
