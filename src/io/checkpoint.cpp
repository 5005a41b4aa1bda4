// Checkpoint directories: shard scan and the expert loaders of each convention
// (include/fp4moe/checkpoint.h; the configuration is read in checkpoint_config.cpp). Every tensor is
// checked (dtype, shape) against the problem before a byte is copied; copies touch only the rank's
// experts and TP slice, so a rank's page faults (and disk reads) scale with its share of the layer.
#include "fp4moe/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "fp4moe/numerics.h"
#include "src/io/checkpoint_config.h"
#include "src/io/json.h"

namespace fp4moe {

namespace {

template <typename... Args>
Status io_error(const Args&... args) {
  return Status(StatusCode::kIoError, detail::concat(args...));
}

using io::Arch;
using io::arch_of;
using io::file_exists;
using io::read_json_file;

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal half: exactly mant * 2^-24.
  const float v = float(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

}  // namespace

// ---- Checkpoint ------------------------------------------------------------------------------------

struct Checkpoint::Impl {
  CheckpointInfo info;
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  std::unordered_map<std::string, std::pair<int, const TensorInfo*>> tensors;  // name -> (shard, info)
  std::vector<std::string> warnings;
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;
const CheckpointInfo& Checkpoint::info() const { return impl_->info; }
const std::vector<std::string>& Checkpoint::warnings() const { return impl_->warnings; }
int Checkpoint::num_shards() const { return int(impl_->shards.size()); }
int64_t Checkpoint::num_tensors() const { return int64_t(impl_->tensors.size()); }

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& s : impl_->shards) n += s->file_bytes();
  return n;
}

std::vector<const SafetensorsFile*> Checkpoint::shards() const {
  std::vector<const SafetensorsFile*> out;
  for (const auto& s : impl_->shards) out.push_back(s.get());
  return out;
}

const TensorInfo* Checkpoint::find_tensor(std::string_view name, const SafetensorsFile** file) const {
  const auto it = impl_->tensors.find(std::string(name));
  if (it == impl_->tensors.end()) return nullptr;
  if (file) *file = impl_->shards[it->second.first].get();
  return it->second.second;
}

Status Checkpoint::open(const std::string& directory, std::unique_ptr<Checkpoint>* out) {
  auto impl = std::make_unique<Impl>();
  FP4MOE_RETURN_IF_ERROR(read_checkpoint_config(directory, &impl->info));

  std::vector<std::string> files;  // shard file names (not paths)
  if (DIR* d = opendir(directory.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0 &&
          file_exists(directory + "/" + name))
        files.push_back(name);
    }
    closedir(d);
  } else {
    return io_error(directory, ": cannot list the directory");
  }

  // The index: a cross-check, and a list of shards that must exist.
  const std::string index_file = directory + "/model.safetensors.index.json";
  io::JsonValue index;
  const io::JsonValue* weight_map = nullptr;
  if (file_exists(index_file)) {
    FP4MOE_RETURN_IF_ERROR(read_json_file(index_file, &index));
    weight_map = index.find("weight_map");
    if (!weight_map || !weight_map->is_object()) return io_error(index_file, ": 'weight_map' object is missing");
    std::unordered_set<std::string> known(files.begin(), files.end());
    for (const auto& m : weight_map->members()) {
      if (!m.value.is_string()) return io_error(index_file, ": weight_map entry '", m.key.substr(0, 100), "' is not a file name");
      const std::string& f = m.value.str();
      // Untrusted: a shard name must stay inside the directory.
      if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\0') != std::string::npos)
        return io_error(index_file, ": weight_map entry '", m.key.substr(0, 100), "' names the file '", f.substr(0, 100),
                        "', which is not a plain file name in the checkpoint directory");
      if (!known.count(f)) {
        if (!file_exists(directory + "/" + f))
          return io_error(index_file, ": weight_map names the shard '", f.substr(0, 100), "' (for tensor '",
                          m.key.substr(0, 100), "'), which does not exist");
        files.push_back(f);
        known.insert(f);
      }
    }
  }
  if (files.empty()) return io_error(directory, ": no .safetensors files");
  std::sort(files.begin(), files.end());

  for (const auto& f : files) {
    std::unique_ptr<SafetensorsFile> shard;
    FP4MOE_RETURN_IF_ERROR(SafetensorsFile::open(directory + "/" + f, &shard));
    const int shard_idx = int(impl->shards.size());
    for (const auto& t : shard->tensors()) {
      auto [it, inserted] = impl->tensors.emplace(t.name, std::make_pair(shard_idx, &t));
      if (!inserted)
        return io_error(directory, ": tensor '", t.name.substr(0, 200), "' is in two shards: ",
                        impl->shards[it->second.first]->path(), " and ", shard->path());
    }
    impl->shards.push_back(std::move(shard));
  }

  if (weight_map) {
    int64_t missing_in_index = int64_t(impl->tensors.size()), wrong_shard = 0, not_found = 0;
    std::string first_wrong, first_not_found;
    for (const auto& m : weight_map->members()) {
      const auto it = impl->tensors.find(m.key);
      if (it == impl->tensors.end()) {
        if (not_found++ == 0) first_not_found = m.key.substr(0, 200);
        continue;
      }
      --missing_in_index;
      const std::string& actual = impl->shards[it->second.first]->path();
      if (actual != directory + "/" + m.value.str() && wrong_shard++ == 0)
        first_wrong = m.key.substr(0, 200) + " (index: " + m.value.str().substr(0, 100) + ", header: " + actual + ")";
    }
    auto& w = impl->warnings;
    if (missing_in_index > 0)
      w.push_back(detail::concat(index_file, ": incomplete, ", missing_in_index, " of ", impl->tensors.size(),
                                 " tensors are found only by scanning the shard headers"));
    if (wrong_shard > 0)
      w.push_back(detail::concat(index_file, ": ", wrong_shard, " entries name the wrong shard, e.g. ", first_wrong,
                                 "; the headers are used"));
    if (not_found > 0)
      w.push_back(detail::concat(index_file, ": ", not_found, " entries name tensors that no shard holds, e.g. '",
                                 first_not_found, "'"));
  }
  *out = std::unique_ptr<Checkpoint>(new Checkpoint(std::move(impl)));
  return Status::Ok();
}

// ---- Layer loading ---------------------------------------------------------------------------------

namespace {

// Runs fn(0..n-1) on up to num_threads threads. Experts are independent (disjoint destination
// ranges), so loading them in parallel keeps more reads in flight (cold files) and more copies
// running (page cache). Errors are deterministic: the error of the lowest failing index is returned,
// as a serial loop would; indices above a failure are not started.
template <typename Fn>
Status parallel_for(int n, int num_threads, const Fn& fn) {
  num_threads = std::clamp(num_threads, 1, std::max(n, 1));
  if (num_threads == 1) {
    for (int i = 0; i < n; ++i) FP4MOE_RETURN_IF_ERROR(fn(i));
    return Status::Ok();
  }
  std::atomic<int> next{0};
  std::atomic<int> failed_at{n};  // lowest failing index so far
  std::mutex mu;
  Status first_error;
  auto worker = [&] {
    // Indices are claimed in increasing order, so every index below a failure is already claimed and
    // finishes: the lowest failing index is always found.
    for (int i; (i = next.fetch_add(1)) < n && i < failed_at.load();) {
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < failed_at.load()) {
          failed_at = i;
          first_error = std::move(s);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return first_error;
}

// One load: the tensors of one layer for one rank, with the checks and the byte accounting. The
// counters are atomic: experts load on several threads.
class LayerLoader {
 public:
  LayerLoader(const Checkpoint& ckpt, int layer, LoadReport* report) : ckpt_(ckpt), layer_(layer), report_(report) {}
  // Moves the counters into the report.
  void finish() {
    report_->bytes_read = bytes_read_.load();
    report_->num_tensors_read = num_tensors_read_.load();
  }

  bool exists(const std::string& name) const { return ckpt_.find_tensor(name) != nullptr; }

  // Looks a tensor up and checks its dtype (one of `dtypes`) and shape.
  Status get(const std::string& name, std::initializer_list<Dtype> dtypes, const std::vector<int64_t>& shape,
             const TensorInfo** t, const SafetensorsFile** f) const {
    *t = ckpt_.find_tensor(name, f);
    if (!*t) return io_error(ckpt_.info().directory, ": layer ", layer_, ": tensor '", name, "' is in no shard");
    ++num_tensors_read_;
    if (std::find(dtypes.begin(), dtypes.end(), (*t)->dtype) == dtypes.end()) {
      std::string want;
      for (Dtype d : dtypes) want += std::string(want.empty() ? "" : " or ") + to_string(d);
      return io_error((*f)->path(), ": tensor '", name, "' has dtype ", to_string((*t)->dtype), ", expected ", want);
    }
    if ((*t)->shape != shape) {
      TensorInfo expected;
      expected.shape = shape;
      return io_error((*f)->path(), ": tensor '", name, "' has shape ", (*t)->shape_string(), ", expected ",
                      expected.shape_string(), " for ", ckpt_.problem().name, " (H = ", ckpt_.problem().hidden_size,
                      ", I = ", ckpt_.problem().intermediate_size, ", E = ", ckpt_.problem().num_experts(), ")");
    }
    return Status::Ok();
  }

  // Copies `num_rows` rows: from row `src_row` of a row-major tensor with `row_bytes` per row, the bytes
  // [col_byte, col_byte + num_bytes) of each, into dst with a stride of `dst_stride` bytes.
  Status copy_rows(const SafetensorsFile& f, const TensorInfo& t, int64_t src_row, int64_t row_bytes, int64_t col_byte,
                   int64_t num_bytes, int64_t num_rows, uint8_t* dst, int64_t dst_stride) {
    if (col_byte == 0 && num_bytes == row_bytes && dst_stride == row_bytes) {
      bytes_read_ += uint64_t(num_rows * row_bytes);
      return f.read(t, uint64_t(src_row * row_bytes), uint64_t(num_rows * row_bytes), dst);
    }
    for (int64_t r = 0; r < num_rows; ++r)
      FP4MOE_RETURN_IF_ERROR(f.read(t, uint64_t((src_row + r) * row_bytes + col_byte), uint64_t(num_bytes), dst + r * dst_stride));
    bytes_read_ += uint64_t(num_rows * num_bytes);
    return Status::Ok();
  }

  // The transpose of a block of a row-major byte matrix with `row_bytes` per row: rows [src_row,
  // src_row + num_rows), bytes [col_byte, col_byte + num_cols) of each, written as
  // dst[c * dst_stride + r] (K-major checkpoints -> the [N, K/2] layout).
  Status copy_transposed(const SafetensorsFile& f, const TensorInfo& t, int64_t src_row, int64_t row_bytes,
                         int64_t col_byte, int64_t num_cols, int64_t num_rows, uint8_t* dst, int64_t dst_stride,
                         std::vector<uint8_t>* scratch) {
    scratch->resize(size_t(num_rows * num_cols));
    FP4MOE_RETURN_IF_ERROR(copy_rows(f, t, src_row, row_bytes, col_byte, num_cols, num_rows, scratch->data(), num_cols));
    const uint8_t* src = scratch->data();
    for (int64_t r = 0; r < num_rows; ++r)
      for (int64_t c = 0; c < num_cols; ++c) dst[c * dst_stride + r] = src[r * num_cols + c];
    return Status::Ok();
  }

  // Element `idx` of a float tensor (F32, BF16 or F16) as fp32 (exact for all three).
  Status read_float(const SafetensorsFile& f, const TensorInfo& t, int64_t idx, float* out) {
    const int bytes = dtype_bits(t.dtype) / 8;
    uint8_t raw[4] = {};
    FP4MOE_RETURN_IF_ERROR(f.read(t, uint64_t(idx * bytes), uint64_t(bytes), raw));
    bytes_read_ += uint64_t(bytes);
    if (t.dtype == Dtype::kF32) {
      std::memcpy(out, raw, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, raw, 2);
      *out = t.dtype == Dtype::kBF16 ? bf16_to_float(h) : half_to_float(h);
    }
    return Status::Ok();
  }

  // A per-tensor scalar (shape [] or [1]), or entry e of a per-expert vector (shape [E]).
  Status read_scale(const std::string& name, int64_t e, float* out) {
    const SafetensorsFile* f;
    const TensorInfo* t = ckpt_.find_tensor(name, &f);
    if (!t) return io_error(ckpt_.info().directory, ": layer ", layer_, ": tensor '", name, "' is in no shard");
    const int64_t E = ckpt_.problem().num_experts();
    const bool scalar = t->shape.empty() || t->shape == std::vector<int64_t>{1};
    // (A per-expert vector only where the caller reads one expert's entry: e < 0 asks for a scalar.)
    if (!scalar && (e < 0 || t->shape != std::vector<int64_t>{E}))
      return io_error(f->path(), ": tensor '", name, "' has shape ", t->shape_string(), ", expected a scalar ([] or [1])",
                      e >= 0 ? " or one value per expert ([" + std::to_string(E) + "])" : std::string());
    if (t->dtype != Dtype::kF32 && t->dtype != Dtype::kBF16 && t->dtype != Dtype::kF16)
      return io_error(f->path(), ": tensor '", name, "' has dtype ", to_string(t->dtype), ", expected F32, BF16 or F16");
    ++num_tensors_read_;
    FP4MOE_RETURN_IF_ERROR(read_float(*f, *t, scalar ? 0 : e, out));
    if (!std::isfinite(*out) || *out < 0)
      return io_error(f->path(), ": tensor '", name, "' = ", *out, " is not a finite non-negative scale");
    return Status::Ok();
  }

  const Checkpoint& ckpt_;
  int layer_;
  LoadReport* report_;  // written only from the calling thread (and by finish())
  int num_threads_ = 1;

 private:
  mutable std::atomic<uint64_t> bytes_read_{0};
  mutable std::atomic<int> num_tensors_read_{0};
};

std::string fmt_float(float v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

// Per-expert NVFP4 tensors (ModelOpt and compressed-tensors; DeepSeek-V3, Qwen3-MoE, Mixtral, Llama-4
// if exported per expert).
Status load_per_expert_nvfp4(LayerLoader& ld, const std::string& base, const char* const proj[3], bool compressed,
                             int expert_begin, int64_t slice_begin, HostMoeWeights* w) {
  const MoeProblem& p = ld.ckpt_.problem();
  const int64_t H = p.hidden_size, I = p.intermediate_size, Il = w->intermediate;
  const int64_t bs = kNvfp4BlockSize;
  const char* weight_name = compressed ? "weight_packed" : "weight";
  const char* gscale_name = compressed ? "weight_global_scale" : "weight_scale_2";
  const char* iscale_name = compressed ? "input_global_scale" : "input_scale";
  // Encode-convention scales (compressed-tensors) become decode ones with one correctly rounded
  // division, the conversion format.h uses everywhere.
  auto to_decode = [&](float v, const std::string& name, float* out) -> Status {
    if (!compressed) {
      *out = v;
      return Status::Ok();
    }
    if (!(v > 0)) return io_error(ld.ckpt_.info().directory, ": tensor '", name, "' = ", v, " must be positive (it is divided by)");
    *out = 1.0f / v;
    // (An encode scale below about 2.9e-39, a subnormal, has no finite float inverse: refused, not loaded as inf.)
    if (!std::isfinite(*out))
      return io_error(ld.ckpt_.info().directory, ": tensor '", name, "' = ", v,
                      " has no finite inverse (the decode scale 1 / value overflows float)");
    return Status::Ok();
  };
  const bool input_scales = ld.exists(base + std::to_string(expert_begin) + "." + proj[0] + "." + iscale_name);
  ld.report_->has_input_scales = input_scales;
  std::vector<std::string> differ(size_t(w->num_experts));  // per expert: the gate/up scale warning, if any
  auto load_expert = [&](int le) -> Status {
    const int e = expert_begin + le;
    const std::string eb = base + std::to_string(e) + ".";
    float s2[3] = {}, in[3] = {};
    for (int j = 0; j < 3; ++j) {
      const std::string tb = eb + proj[j] + ".";
      const bool down = j == 2;
      const int64_t rows = down ? H : I, k = down ? I : H;
      const TensorInfo *tw, *ts;
      const SafetensorsFile *fw, *fs;
      FP4MOE_RETURN_IF_ERROR(ld.get(tb + weight_name, {Dtype::kU8}, {rows, k / 2}, &tw, &fw));
      // Some exporters label the e4m3 scale bytes U8.
      FP4MOE_RETURN_IF_ERROR(ld.get(tb + "weight_scale", {Dtype::kF8E4M3, Dtype::kU8}, {rows, k / bs}, &ts, &fs));
      if (!down) {
        // Rows [slice_begin, slice_begin + Il) of gate (j = 0) or up (j = 1) -> w13 rows j*Il.. of the expert.
        const int64_t dst_row = int64_t(le) * 2 * Il + j * Il;
        FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*fw, *tw, slice_begin, H / 2, 0, H / 2, Il, &w->w13[dst_row * H / 2], H / 2));
        FP4MOE_RETURN_IF_ERROR(
            ld.copy_rows(*fs, *ts, slice_begin, H / bs, 0, H / bs, Il, &w->w13_scale[dst_row * H / bs], H / bs));
      } else {
        // Columns [slice_begin, slice_begin + Il) of every row of down.
        FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*fw, *tw, 0, I / 2, slice_begin / 2, Il / 2, H,
                                            &w->w2[int64_t(le) * H * Il / 2], Il / 2));
        FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*fs, *ts, 0, I / bs, slice_begin / bs, Il / bs, H,
                                            &w->w2_scale[int64_t(le) * H * Il / bs], Il / bs));
      }
      float v;
      FP4MOE_RETURN_IF_ERROR(ld.read_scale(tb + gscale_name, -1, &v));
      FP4MOE_RETURN_IF_ERROR(to_decode(v, tb + gscale_name, &s2[j]));
      if (input_scales) {
        FP4MOE_RETURN_IF_ERROR(ld.read_scale(tb + iscale_name, -1, &v));
        FP4MOE_RETURN_IF_ERROR(to_decode(v, tb + iscale_name, &in[j]));
      }
    }
    if (float_bits(s2[0]) != float_bits(s2[1])) {
      // vLLM's rule: one global scale for the fused gate|up, the gate's.
      differ[size_t(le)] = detail::concat(
          "layer ", ld.layer_, " expert ", e, ": ", proj[1], " ", gscale_name, " differs from ", proj[0],
          "'s; the fused gate|up uses the gate's (weight_scale_2 ", fmt_float(s2[0]), " vs ", fmt_float(s2[1]),
          "), so the up rows are scaled by ", fmt_float(s2[0] / s2[1]));
    }
    w->w13_scale_2[le] = s2[0];
    w->w2_scale_2[le] = s2[2];
    if (input_scales) {
      w->a13_scale_2[le] = std::max(in[0], in[1]);
      w->a2_scale_2[le] = in[2];
    }
    return Status::Ok();
  };
  FP4MOE_RETURN_IF_ERROR(parallel_for(w->num_experts, ld.num_threads_, load_expert));
  // The first few by name, then a count: a checkpoint can have this on every one of 256 experts.
  constexpr int kMaxListed = 8;
  int num_differ = 0;
  for (auto& msg : differ)
    if (!msg.empty() && num_differ++ < kMaxListed) ld.report_->warnings.push_back(std::move(msg));
  if (num_differ > kMaxListed)
    ld.report_->warnings.push_back(detail::concat("layer ", ld.layer_, ": ", num_differ - kMaxListed,
                                                  " more experts whose up_proj global scale differs from the gate's"));
  return Status::Ok();
}

// Llama-4 fused 3-D expert tensors (experts.gate_up_proj, experts.down_proj, their weight_scale,
// weight_scale_2 and input_scale; scales per tensor or per expert), in either orientation, told apart
// by the header shapes of gate_up_proj and its weight_scale (the weight shapes alone coincide where
// H = 4 I, the scale shapes then do not: H / 16 is I / 4 there, not 2 I):
//   K-major (ModelOpt's Llama-4 export; the [E, in, out] layout of HF's Llama4TextExperts, packed along
//            `in`): gate_up_proj U8 [E, H/2, 2I], weight_scale [E, H/16, 2I], down_proj [E, I/2, H],
//            weight_scale [E, I/16, H]. Per expert these are the byte-wise transposes of the usual
//            [N, K/2] and [N, K/16] (a byte still holds elements 2k and 2k+1 along K).
//   N-major: gate_up_proj [E, 2I, H/2], weight_scale [E, 2I, H/16], down_proj [E, H, I/2], ... (the
//            per-expert layout, stacked).
// Along N, gate_up is [gate; up] (the first I outputs are the gate). Scale tensors are looked up as
// "<name>_weight_scale" and "<name>.weight_scale" (exporters differ).
Status load_fused_nvfp4(LayerLoader& ld, const std::string& base, int expert_begin, int64_t slice_begin,
                        HostMoeWeights* w, std::string* layout_name) {
  const MoeProblem& p = ld.ckpt_.problem();
  const int64_t H = p.hidden_size, I = p.intermediate_size, Il = w->intermediate, E = p.num_experts();
  const int64_t bs = kNvfp4BlockSize;
  auto name_of = [&](const std::string& proj, const char* suffix) {
    // "<proj>" / "<proj>.weight" for the weight; "<proj>_<suffix>" or "<proj>.<suffix>" for scales.
    if (!*suffix) return ld.exists(base + proj) ? base + proj : base + proj + ".weight";
    const std::string a = base + proj + "_" + suffix;
    return ld.exists(a) ? a : base + proj + "." + suffix;
  };
  const std::string gu = "gate_up_proj", dn = "down_proj";
  using Shape = std::vector<int64_t>;
  const TensorInfo* probe = ld.ckpt_.find_tensor(name_of(gu, ""));
  const TensorInfo* probe_scale = ld.ckpt_.find_tensor(name_of(gu, "weight_scale"));
  const bool k_major_weight = probe && probe->shape == Shape{E, H / 2, 2 * I};
  const bool n_major_both = probe && probe->shape == Shape{E, 2 * I, H / 2} && probe_scale &&
                            probe_scale->shape == Shape{E, 2 * I, H / bs};
  // (Neither orientation matching both: the weight decides, and the shape checks below name the mismatch.)
  const bool k_major = k_major_weight && !n_major_both;
  *layout_name = k_major ? "fused 3-D, K-major" : "fused 3-D, N-major";
  const TensorInfo *t13, *t13s, *t2, *t2s;
  const SafetensorsFile *f13, *f13s, *f2, *f2s;
  FP4MOE_RETURN_IF_ERROR(ld.get(name_of(gu, ""), {Dtype::kU8}, k_major ? Shape{E, H / 2, 2 * I} : Shape{E, 2 * I, H / 2},
                                &t13, &f13));
  FP4MOE_RETURN_IF_ERROR(ld.get(name_of(gu, "weight_scale"), {Dtype::kF8E4M3, Dtype::kU8},
                                k_major ? Shape{E, H / bs, 2 * I} : Shape{E, 2 * I, H / bs}, &t13s, &f13s));
  FP4MOE_RETURN_IF_ERROR(ld.get(name_of(dn, ""), {Dtype::kU8}, k_major ? Shape{E, I / 2, H} : Shape{E, H, I / 2}, &t2, &f2));
  FP4MOE_RETURN_IF_ERROR(ld.get(name_of(dn, "weight_scale"), {Dtype::kF8E4M3, Dtype::kU8},
                                k_major ? Shape{E, I / bs, H} : Shape{E, H, I / bs}, &t2s, &f2s));
  const bool input_scales = ld.exists(name_of(gu, "input_scale"));
  ld.report_->has_input_scales = input_scales;
  return parallel_for(w->num_experts, ld.num_threads_, [&](int le) -> Status {
    const int64_t e = expert_begin + le;
    uint8_t* w13 = &w->w13[int64_t(le) * 2 * Il * H / 2];
    uint8_t* w13s = &w->w13_scale[int64_t(le) * 2 * Il * H / bs];
    uint8_t* w2 = &w->w2[int64_t(le) * H * Il / 2];
    uint8_t* w2s = &w->w2_scale[int64_t(le) * H * Il / bs];
    if (k_major) {
      std::vector<uint8_t> scratch;
      for (int half = 0; half < 2; ++half) {
        // Columns [half*I + slice_begin, + Il) of the expert's [H/2, 2I] (and [H/16, 2I]) matrix.
        const int64_t col = half * I + slice_begin;
        FP4MOE_RETURN_IF_ERROR(ld.copy_transposed(*f13, *t13, e * H / 2, 2 * I, col, Il, H / 2, &w13[half * Il * H / 2],
                                                  H / 2, &scratch));
        FP4MOE_RETURN_IF_ERROR(ld.copy_transposed(*f13s, *t13s, e * H / bs, 2 * I, col, Il, H / bs,
                                                  &w13s[half * Il * H / bs], H / bs, &scratch));
      }
      // Rows [slice_begin/2, + Il/2) of the expert's [I/2, H] (and [slice_begin/16, + Il/16) of [I/16, H]).
      FP4MOE_RETURN_IF_ERROR(
          ld.copy_transposed(*f2, *t2, e * I / 2 + slice_begin / 2, H, 0, H, Il / 2, w2, Il / 2, &scratch));
      FP4MOE_RETURN_IF_ERROR(
          ld.copy_transposed(*f2s, *t2s, e * I / bs + slice_begin / bs, H, 0, H, Il / bs, w2s, Il / bs, &scratch));
    } else {
      for (int half = 0; half < 2; ++half) {
        const int64_t src_row = e * 2 * I + half * I + slice_begin;
        FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*f13, *t13, src_row, H / 2, 0, H / 2, Il, &w13[half * Il * H / 2], H / 2));
        FP4MOE_RETURN_IF_ERROR(
            ld.copy_rows(*f13s, *t13s, src_row, H / bs, 0, H / bs, Il, &w13s[half * Il * H / bs], H / bs));
      }
      FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*f2, *t2, e * H, I / 2, slice_begin / 2, Il / 2, H, w2, Il / 2));
      FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*f2s, *t2s, e * H, I / bs, slice_begin / bs, Il / bs, H, w2s, Il / bs));
    }
    FP4MOE_RETURN_IF_ERROR(ld.read_scale(name_of(gu, "weight_scale_2"), e, &w->w13_scale_2[le]));
    FP4MOE_RETURN_IF_ERROR(ld.read_scale(name_of(dn, "weight_scale_2"), e, &w->w2_scale_2[le]));
    if (input_scales) {
      FP4MOE_RETURN_IF_ERROR(ld.read_scale(name_of(gu, "input_scale"), e, &w->a13_scale_2[le]));
      FP4MOE_RETURN_IF_ERROR(ld.read_scale(name_of(dn, "input_scale"), e, &w->a2_scale_2[le]));
    }
    return Status::Ok();
  });
}

// gpt-oss MXFP4: blocks [E, N, K/32, 16] (the same bytes as [E, N, K/2]), e8m0 scales [E, N, K/32],
// biases [E, N]; gate_up rows interleave gate (even) and up (odd).
Status load_gpt_oss(LayerLoader& ld, const std::string& base, int expert_begin, int64_t slice_begin, bool add_w2_bias,
                    HostMoeWeights* w) {
  const MoeProblem& p = ld.ckpt_.problem();
  const int64_t H = p.hidden_size, I = p.intermediate_size, Il = w->intermediate, E = p.num_experts();
  const int64_t bs = kMxfp4BlockSize;
  const TensorInfo *t13, *t13s, *t13b, *t2, *t2s, *t2b;
  const SafetensorsFile *f13, *f13s, *f13b, *f2, *f2s, *f2b;
  FP4MOE_RETURN_IF_ERROR(ld.get(base + "gate_up_proj_blocks", {Dtype::kU8}, {E, 2 * I, H / bs, 16}, &t13, &f13));
  FP4MOE_RETURN_IF_ERROR(ld.get(base + "gate_up_proj_scales", {Dtype::kU8, Dtype::kF8E8M0}, {E, 2 * I, H / bs}, &t13s, &f13s));
  FP4MOE_RETURN_IF_ERROR(
      ld.get(base + "gate_up_proj_bias", {Dtype::kBF16, Dtype::kF32, Dtype::kF16}, {E, 2 * I}, &t13b, &f13b));
  FP4MOE_RETURN_IF_ERROR(ld.get(base + "down_proj_blocks", {Dtype::kU8}, {E, H, I / bs, 16}, &t2, &f2));
  FP4MOE_RETURN_IF_ERROR(ld.get(base + "down_proj_scales", {Dtype::kU8, Dtype::kF8E8M0}, {E, H, I / bs}, &t2s, &f2s));
  FP4MOE_RETURN_IF_ERROR(ld.get(base + "down_proj_bias", {Dtype::kBF16, Dtype::kF32, Dtype::kF16}, {E, H}, &t2b, &f2b));
  w->w13_bias.assign(size_t(w->num_experts) * 2 * Il, 0.0f);
  w->w2_bias.assign(size_t(w->num_experts) * H, 0.0f);
  return parallel_for(w->num_experts, ld.num_threads_, [&](int le) -> Status {
    const int64_t e = expert_begin + le;
    for (int half = 0; half < 2; ++half) {
      for (int64_t r = 0; r < Il; ++r) {
        // Gate row i is source row 2i, up row i is 2i + 1.
        const int64_t src_row = e * 2 * I + 2 * (slice_begin + r) + half, dst_row = int64_t(le) * 2 * Il + half * Il + r;
        FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*f13, *t13, src_row, H / 2, 0, H / 2, 1, &w->w13[dst_row * H / 2], H / 2));
        FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*f13s, *t13s, src_row, H / bs, 0, H / bs, 1, &w->w13_scale[dst_row * H / bs], H / bs));
        FP4MOE_RETURN_IF_ERROR(ld.read_float(*f13b, *t13b, src_row, &w->w13_bias[dst_row]));
      }
    }
    FP4MOE_RETURN_IF_ERROR(ld.copy_rows(*f2, *t2, e * H, I / 2, slice_begin / 2, Il / 2, H, &w->w2[int64_t(le) * H * Il / 2], Il / 2));
    FP4MOE_RETURN_IF_ERROR(
        ld.copy_rows(*f2s, *t2s, e * H, I / bs, slice_begin / bs, Il / bs, H, &w->w2_scale[int64_t(le) * H * Il / bs], Il / bs));
    // The down bias belongs to the full sum over TP ranks: rank 0 adds it.
    if (add_w2_bias)
      for (int64_t c = 0; c < H; ++c) FP4MOE_RETURN_IF_ERROR(ld.read_float(*f2b, *t2b, e * H + c, &w->w2_bias[le * H + c]));
    return Status::Ok();
  });
}

}  // namespace

Status Checkpoint::load_moe_layer(int layer, const LoadOptions& shard, HostMoeWeights* out, LoadReport* report) const {
  const CheckpointInfo& info = impl_->info;
  const MoeProblem& p = info.problem;
  LoadReport local_report;
  if (!report) report = &local_report;
  *report = LoadReport();
  if (std::find(info.moe_layers.begin(), info.moe_layers.end(), layer) == info.moe_layers.end()) {
    std::string list;
    for (size_t i = 0; i < info.moe_layers.size() && i < 16; ++i) list += (i ? ", " : "") + std::to_string(info.moe_layers[i]);
    if (info.moe_layers.size() > 16) list += ", ...";
    return invalid_argument("layer = ", layer, " is not a MoE layer of ", info.directory, " (", info.num_layers,
                            " layers; MoE layers: ", list, ")");
  }
  // The sharding rules of reference/sharding.h, checked here without depending on the oracle.
  if (shard.ep_size < 1 || shard.ep_rank < 0 || shard.ep_rank >= shard.ep_size)
    return invalid_argument("ep_rank = ", shard.ep_rank, ", ep_size = ", shard.ep_size, ": need 0 <= ep_rank < ep_size");
  if (shard.tp_size < 1 || shard.tp_rank < 0 || shard.tp_rank >= shard.tp_size)
    return invalid_argument("tp_rank = ", shard.tp_rank, ", tp_size = ", shard.tp_size, ": need 0 <= tp_rank < tp_size");
  if (p.num_experts() % shard.ep_size != 0)
    return invalid_argument("num_experts = ", p.num_experts(), " is not divisible by ep_size = ", shard.ep_size);
  if (p.intermediate_size % shard.tp_size != 0 || (p.intermediate_size / shard.tp_size) % 32 != 0)
    return invalid_argument("intermediate_size = ", p.intermediate_size, " split over tp_size = ", shard.tp_size,
                            " must give a multiple of 32 per rank");
  const int num_local = p.num_experts() / shard.ep_size;
  const int expert_begin = shard.ep_rank * num_local;
  const int64_t Il = p.intermediate_size / shard.tp_size;
  const int64_t slice_begin = shard.tp_rank * Il;
  const int64_t H = p.hidden_size;
  const int bs = p.block_size();

  // Module names of the routed experts within a layer, per architecture.
  const Arch arch = arch_of(info);
  const char* module = arch == Arch::kMixtral ? "block_sparse_moe" : arch == Arch::kLlama4 ? "feed_forward" : "mlp";
  static const char* const kProj[3] = {"gate_proj", "up_proj", "down_proj"};
  static const char* const kMixtralProj[3] = {"w1", "w3", "w2"};
  const char* const* proj = arch == Arch::kMixtral ? kMixtralProj : kProj;
  const bool compressed = info.convention == QuantConvention::kCompressedTensorsNvfp4;
  const std::string per_expert_probe =
      std::string("experts.") + std::to_string(expert_begin) + "." + proj[0] + "." + (compressed ? "weight_packed" : "weight");

  // The prefix before "layers." differs between text-only and multimodal exports: find the one the
  // headers hold.
  static const char* const kPrefixes[] = {"model.", "language_model.model.", "model.language_model.", ""};
  LayerLoader ld(*this, layer, report);
  // 8 threads keep enough reads queued on NVMe and saturate the page-cache copy bandwidth of a socket;
  // more only add contention.
  constexpr int kDefaultMaxThreads = 8;
  ld.num_threads_ = shard.num_threads > 0
                        ? shard.num_threads
                        : std::min<int>(kDefaultMaxThreads, int(std::max(1u, std::thread::hardware_concurrency())));
  std::string base;
  enum class Layout { kNone, kPerExpert, kFused, kGptOss } layout = Layout::kNone;
  std::vector<std::string> probes;
  for (const char* prefix : kPrefixes) {
    const std::string b = std::string(prefix) + "layers." + std::to_string(layer) + "." + module + ".";
    if (arch == Arch::kGptOss) {
      probes.push_back(b + "experts.gate_up_proj_blocks");
      if (ld.exists(probes.back())) layout = Layout::kGptOss;
    } else {
      probes.push_back(b + per_expert_probe);
      if (ld.exists(probes.back())) layout = Layout::kPerExpert;
      if (arch == Arch::kLlama4 && layout == Layout::kNone) {
        probes.push_back(b + "experts.gate_up_proj");
        if (ld.exists(probes.back()) || ld.exists(probes.back() + ".weight")) layout = Layout::kFused;
      }
    }
    if (layout != Layout::kNone) {
      base = b + "experts.";
      break;
    }
  }
  if (layout == Layout::kNone) {
    std::string tried;
    for (size_t i = 0; i < probes.size() && i < 4; ++i) tried += std::string(i ? ", " : "") + "'" + probes[i] + "'";
    return io_error(info.directory, ": layer ", layer, ": no routed-expert tensors found for ", info.architecture, " (",
                    to_string(info.convention), "); looked for ", tried);
  }

  // The sizes come from config.json, which is untrusted: before allocating, the rank's expert bytes
  // must fit in what the shards hold, so a hostile configuration cannot ask for terabytes.
  const int64_t expert_bytes_needed = int64_t(num_local) * 3 * H * Il / 2 + int64_t(num_local) * 3 * H * Il / bs;
  if (uint64_t(expert_bytes_needed) > total_bytes())
    return io_error(info.directory, ": layer ", layer, ": the configuration (H = ", H, ", I = ", p.intermediate_size,
                    ", E = ", p.num_experts(), ") implies ", expert_bytes_needed, " bytes of expert weights for this rank, "
                    "but the checkpoint holds only ", total_bytes(), " bytes");
  // Loads straight into *out. Its vectors keep their memory when the sizes already match (layer after
  // layer into the same staging buffers): fresh allocations cost a page fault and zeroing per 4 KiB,
  // which alone ran at 1.7 GB/s here, slower than reading the checkpoint from the page cache.
  HostMoeWeights& w = *out;
  w.num_experts = num_local;
  w.intermediate = Il;
  w.w13.resize(size_t(num_local) * 2 * Il * H / 2);
  w.w13_scale.resize(size_t(num_local) * 2 * Il * H / bs);
  w.w2.resize(size_t(num_local) * H * Il / 2);
  w.w2_scale.resize(size_t(num_local) * H * Il / bs);
  const bool nvfp4 = p.weight_format == WeightFormat::kNvfp4;
  const size_t num_scalars = nvfp4 ? size_t(num_local) : 0;
  w.w13_scale_2.resize(num_scalars);
  w.w2_scale_2.resize(num_scalars);
  w.a13_scale_2.resize(num_scalars);
  w.a2_scale_2.resize(num_scalars);
  w.w13_bias.clear();
  w.w2_bias.clear();
  w.routing_bias.clear();

  Status loaded;
  if (layout == Layout::kPerExpert) {
    report->expert_layout = "per-expert";
    loaded = load_per_expert_nvfp4(ld, base, proj, compressed, expert_begin, slice_begin, &w);
  } else if (layout == Layout::kFused) {
    loaded = load_fused_nvfp4(ld, base, expert_begin, slice_begin, &w, &report->expert_layout);
  } else {
    report->expert_layout = "gpt-oss blocks";
    loaded = load_gpt_oss(ld, base, expert_begin, slice_begin, shard.tp_rank == 0, &w);
  }
  ld.finish();
  FP4MOE_RETURN_IF_ERROR(loaded);
  if (!report->has_input_scales) {
    w.a13_scale_2.clear();
    w.a2_scale_2.clear();
  }

  if (p.routing.method == RoutingMethod::kDeepSeekV3) {
    // The selection bias of DeepSeek-V3 routing covers every expert, whatever the rank holds.
    const std::string name = base.substr(0, base.size() - std::string("experts.").size()) + "gate.e_score_correction_bias";
    const TensorInfo* t;
    const SafetensorsFile* f;
    FP4MOE_RETURN_IF_ERROR(ld.get(name, {Dtype::kF32, Dtype::kBF16, Dtype::kF16}, {p.num_experts()}, &t, &f));
    w.routing_bias.resize(p.num_experts());
    for (int e = 0; e < p.num_experts(); ++e) FP4MOE_RETURN_IF_ERROR(ld.read_float(*f, *t, e, &w.routing_bias[e]));
    ld.finish();
  }
  return Status::Ok();
}

}  // namespace fp4moe
