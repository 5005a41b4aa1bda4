#include "src/gemm/sm90/tune.h"

#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>

#include "src/gemm/sm90/compiled_configs.h"

namespace fp4moe::sm90 {

const std::vector<Sm90Config>& compiled_configs() {
  static const std::vector<Sm90Config> kConfigs(std::begin(kCompiledConfigs), std::end(kCompiledConfigs));
  return kConfigs;
}

std::optional<Sm90Config> config_by_name(const std::string& name) {
  for (const auto& c : compiled_configs())
    if (c.name() == name) return c;
  return std::nullopt;
}

int64_t rows_per_expert_bucket(const ConfigInput& in) {
  const int64_t per = rows_per_local_expert(in);
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
  bool header = false, has_device = false, same_device = false;
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
      // (Trailing blanks and a CRLF line end are not part of the name: with them no entry would match.)
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
      if (name.empty()) return bad("'device' without a GPU name");
      device_ = name;
      has_device = true;
      same_device = name == device_name;
      continue;
    }
    if (!has_device) return bad("an entry before any 'device <GPU name>' line");
    int64_t h = 0, i = 0, bucket = 0;
    int e = 0, k = 0;
    std::string config;
    std::istringstream entry(line);
    if (!(entry >> h >> i >> e >> k >> bucket >> config))
      return bad("expected '<H> <I> <experts> <top-k> <bucket> <config>'");
    // (Anything after the config but a comment is a line this version does not understand: refused.)
    if (std::string extra; entry >> extra && extra[0] != '#')
      return bad("unexpected '" + extra + "' after the config (expected '<H> <I> <experts> <top-k> <bucket> <config>')");
    if (!config_by_name(config))
      return bad("config '" + config + "' has no compiled kernel (renamed or removed since the table was written?); " +
                 "measure again with fp4moe-bench --tune");
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
  f.close();  // (the buffered lines reach the file here: a full disk shows now, not never)
  if (!f) return Status(StatusCode::kIoError, detail::concat("tune file '", path, "': write failed"));
  return Status::Ok();
}

}  // namespace fp4moe::sm90
