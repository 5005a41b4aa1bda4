#include "src/gemm/sm90/tune.h"

#include <fstream>
#include <sstream>

namespace fp4moe::sm90 {

const std::vector<Sm90Config>& compiled_configs() {
  // The instantiations of launch.cuh's dispatch; select_config returns only these.
  static const std::vector<Sm90Config> kConfigs = {
      // Double-buffered A fragments: in the H200 tuning run (bench/results/2026-11-29_h200_tune_v3.txt)
      // they were faster at most points and within 0.5% at the rest (BN256 and BN32 at T=2048/8192);
      // BN64 has no double-buffered build (ptxas serialized or spilled it). Two K chunks per stage
      // ("_c2") for BN16/32/64: 1-4% faster than one at every DeepSeek-R1 and Qwen3 point T = 8..512
      // where they were the candidates (bench/results/2026-11-29_h200_tune_c2.txt), the same chunk
      // slots (stages x chunks) as the one-chunk builds they replaced.
      {16, 4, 6, 1, "decode: <= 8 rows per expert", true, 2},
      {32, 4, 5, 1, "small: <= 24 rows per expert", true, 2},
      {64, 4, 4, 1, "medium: 41-56 rows per expert", false, 2},
      {128, 2, 6, 1, "BN128 x 2 consumers (tuning candidate)", true},
      // 4 consumers: a 256-row weight tile, half the activation bytes per MMA of BN128_C2 (single-
      // buffered fragments, 112 registers a consumer; no N = 64 size for small tiles, which made
      // ptxas spill and serialize). Faster than BN128_C2 and BN256 at every Qwen3-30B (128-1024 rows
      // per expert) and gpt-oss-120b (256) point (bench/results/2026-11-29_h200_tune_prefill.txt).
      {128, 4, 5, 1, "prefill: > 80 rows per expert"},
      // Tuning candidate only (slower than BN128_C4 wherever both were measured).
      {256, 2, 4, 1, "prefill, BN256 (tuning candidate)", true},
      // A 96-token tile of the 4-consumer kind for about 64 rows per expert, where BN128 ran most
      // experts' single tile at N = 128 for 65-90 rows: 10-12% faster than the best other config at
      // 64 rows per expert for DeepSeek-R1, gpt-oss-120b, Qwen3-30B and Qwen3-235B, 6-12% slower at 128
      // (bench/results/2026-11-30_h200_tune_bn96.txt). Single-buffered: double buffering serialized.
      {96, 4, 6, 1, "large: 65-80 rows per expert"},
      // A 48-token tile (double-buffered, two chunks a stage): 7-12% faster than BN64 at 32-40 rows
      // per expert on DeepSeek-R1, Qwen3-30B and gpt-oss-120b (bench/results/2026-11-30_h200_tune_bn48.txt).
      {48, 4, 5, 1, "medium: 25-40 rows per expert", true, 2},
      // Decode over few tiles (narrow_for_few_tiles, per GEMM): 2 consumers, 8 stages of 2 chunks.
      {16, 2, 8, 1, "decode, few tiles: 2 consumers", true, 2},
      // An 80-token tile of the BN96 kind: 5-8% faster than BN96 at 64 rows per expert on Qwen3-30B and
      // gpt-oss-120b in one run (bench/results/2026-11-30_h200_tune_bn80.txt); DeepSeek-R1 T=2048 took
      // 3.59 ms with it against BN96's 4.02 in another run, on another H200. A BN112 of the same kind
      // was 2% slower than BN128_C4 at 96 rows per expert (Qwen3-30B) and was not kept.
      // 9 stages, the most that fit (6 until session 8): at DeepSeek-R1 T=2048 the consumers' waits on
      // a full stage were 8% of GEMM1's stall samples. A/B against 6 (one H200, 2 repetitions):
      // DeepSeek-R1 T=2048 -0.7%, gpt-oss-120b T=2048 -0.4%, Qwen3-30B T=1024 -2.8%. BN96 with 8
      // stages measured +1.4% at DeepSeek-R1 T=2304 in the same run and keeps 6
      // (bench/results/2026-11-30_h200_s8_run7_stages_8e1b50f.txt).
      {80, 4, 9, 1, "large: 57-64 rows per expert"},
  };
  return kConfigs;
}

std::optional<Sm90Config> config_by_name(const std::string& name) {
  for (const auto& c : compiled_configs())
    if (c.name() == name) return c;
  return std::nullopt;
}

int64_t rows_per_expert_bucket(const ConfigInput& in) {
  const int64_t rows = in.num_tokens * in.top_k;
  const int64_t per = in.num_local_experts > 0 ? (rows + in.num_local_experts - 1) / in.num_local_experts : rows;
  int64_t b = 1;
  while (b < per) b *= 2;
  return b;
}

TuneTable::Key TuneTable::key(const ConfigInput& in) {
  return {in.hidden, in.inter_local, in.num_local_experts, in.top_k, rows_per_expert_bucket(in)};
}

void TuneTable::set(const ConfigInput& in, const Sm90Config& c) { entries_[key(in)] = c.name(); }

std::optional<Sm90Config> TuneTable::lookup(const ConfigInput& in) const {
  const auto it = entries_.find(key(in));
  if (it == entries_.end()) return std::nullopt;
  auto c = config_by_name(it->second);
  if (c) c->regime = "tuned: measured by fp4moe-bench --tune";
  return c;
}

Status TuneTable::load(const std::string& path, const std::string& device_name) {
  std::ifstream f(path);
  if (!f) return Status(StatusCode::kIoError, detail::concat("tune file '", path, "' cannot be opened"));
  std::string line;
  int line_no = 0;
  bool header = false, same_device = false;
  entries_.clear();
  while (std::getline(f, line)) {
    ++line_no;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream in(line);
    std::string first;
    if (!(in >> first)) continue;
    auto bad = [&](const std::string& why) {
      return Status(StatusCode::kIoError, detail::concat("tune file '", path, "' line ", line_no, ": ", why));
    };
    if (!header) {
      std::string version;
      if (first == "fp4moe-tune" && (in >> version) && (version == "v1" || version == "v2"))
        return bad(detail::concat("a ", version, " table, from before configs were renamed (the '_db' ones in v2, "
                                  "the '_c2' ones in v3); measure again with fp4moe-bench --tune"));
      if (first != "fp4moe-tune" || version != "v3") return bad("expected 'fp4moe-tune v3'");
      header = true;
      continue;
    }
    if (first == "device") {
      std::string name;
      std::getline(in >> std::ws, name);
      device_ = name;
      same_device = name == device_name;
      continue;
    }
    int64_t h = 0, i = 0, bucket = 0;
    int e = 0, k = 0;
    std::string config;
    std::istringstream entry(line);
    if (!(entry >> h >> i >> e >> k >> bucket >> config)) return bad("expected '<H> <I> <experts> <top-k> <bucket> <config>'");
    if (!config_by_name(config)) return bad("config '" + config + "' has no compiled kernel");
    if (same_device) entries_[{h, i, e, k, bucket}] = config;
  }
  if (!header) return Status(StatusCode::kIoError, detail::concat("tune file '", path, "' is empty"));
  return Status::Ok();
}

Status TuneTable::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return Status(StatusCode::kIoError, detail::concat("tune file '", path, "' cannot be written"));
  f << "fp4moe-tune v3\n# written by fp4moe-bench --tune\ndevice " << device_ << "\n";
  f << "# H I_local local_experts top_k rows_per_expert_bucket config\n";
  for (const auto& [k, c] : entries_)
    f << std::get<0>(k) << ' ' << std::get<1>(k) << ' ' << std::get<2>(k) << ' ' << std::get<3>(k) << ' '
      << std::get<4>(k) << ' ' << c << '\n';
  if (!f) return Status(StatusCode::kIoError, detail::concat("tune file '", path, "': write failed"));
  return Status::Ok();
}

}  // namespace fp4moe::sm90
