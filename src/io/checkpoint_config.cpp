// Checkpoint configuration: config.json (+ hf_quant_config.json) -> architecture, MoeProblem, MoE
// layers and quantization convention (include/fp4moe/checkpoint.h). Configuration files are
// untrusted like the shards: every value is type- and range-checked, and errors name file and key.
#include "src/io/checkpoint_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

namespace fp4moe {

const char* to_string(QuantConvention c) {
  switch (c) {
    case QuantConvention::kModeloptNvfp4: return "modelopt-nvfp4";
    case QuantConvention::kCompressedTensorsNvfp4: return "compressed-tensors-nvfp4";
    case QuantConvention::kGptOssMxfp4: return "gpt-oss-mxfp4";
  }
  return "?";
}

namespace {

template <typename... Args>
Status io_error(const Args&... args) {
  return Status(StatusCode::kIoError, detail::concat(args...));
}

}  // namespace

namespace io {

// Configuration files are small; anything larger is not a configuration file (and not read into memory).
constexpr uint64_t kMaxJsonFileBytes = 256ull << 20;

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Status read_json_file(const std::string& path, io::JsonValue* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path, ": cannot open");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || uint64_t(size) > kMaxJsonFileBytes)
    return io_error(path, ": ", size, " bytes is not a plausible JSON configuration file (limit ", kMaxJsonFileBytes, ")");
  in.seekg(0);
  std::string text(size_t(size), '\0');
  if (!in.read(text.data(), size)) return io_error(path, ": read failed");
  if (Status s = io::parse_json(text, out); !s.ok()) return io_error(path, ": ", s.message());
  return Status::Ok();
}

}  // namespace io

namespace {

using io::Arch;

// Typed access to one configuration object, errors naming the file and key.
class ConfigView {
 public:
  ConfigView(const io::JsonValue& obj, std::string file) : obj_(obj), file_(std::move(file)) {}

  bool has(std::string_view key) const {
    const io::JsonValue* v = obj_.find(key);
    return v && !v->is_null();
  }
  Status get_int(std::string_view key, int64_t* out) const {
    const io::JsonValue* v = obj_.find(key);
    if (!v || v->is_null()) return io_error(file_, ": '", key, "' is missing");
    if (!v->as_int64(out)) return io_error(file_, ": '", key, "' = ", describe(*v), " is not an integer");
    return Status::Ok();
  }
  Status get_int(std::string_view key, int64_t fallback, int64_t* out) const {
    if (!has(key)) {
      *out = fallback;
      return Status::Ok();
    }
    return get_int(key, out);
  }
  // An optional integer in [lo, hi]: a value outside is named as written (never clamped into range).
  Status get_int_in(std::string_view key, int64_t fallback, int64_t lo, int64_t hi, int64_t* out) const {
    FP4MOE_RETURN_IF_ERROR(get_int(key, fallback, out));
    if (*out < lo || *out > hi) return io_error(file_, ": '", key, "' = ", *out, " must be in [", lo, ", ", hi, "]");
    return Status::Ok();
  }
  Status get_positive_int(std::string_view key, int64_t limit, int64_t* out) const {
    FP4MOE_RETURN_IF_ERROR(get_int(key, out));
    if (*out <= 0 || *out > limit) return io_error(file_, ": '", key, "' = ", *out, " must be in [1, ", limit, "]");
    return Status::Ok();
  }
  Status get_double(std::string_view key, double fallback, double* out) const {
    const io::JsonValue* v = obj_.find(key);
    if (!v || v->is_null()) {
      *out = fallback;
      return Status::Ok();
    }
    if (!v->as_double(out)) return io_error(file_, ": '", key, "' = ", describe(*v), " is not a finite number");
    return Status::Ok();
  }
  Status get_bool(std::string_view key, bool fallback, bool* out) const {
    const io::JsonValue* v = obj_.find(key);
    if (!v || v->is_null()) {
      *out = fallback;
      return Status::Ok();
    }
    if (!v->is_bool()) return io_error(file_, ": '", key, "' = ", describe(*v), " is not a boolean");
    *out = v->boolean();
    return Status::Ok();
  }
  Status get_string(std::string_view key, std::string fallback, std::string* out) const {
    const io::JsonValue* v = obj_.find(key);
    if (!v || v->is_null()) {
      *out = std::move(fallback);
      return Status::Ok();
    }
    if (!v->is_string()) return io_error(file_, ": '", key, "' = ", describe(*v), " is not a string");
    *out = v->str();
    return Status::Ok();
  }
  const std::string& file() const { return file_; }

  static std::string describe(const io::JsonValue& v) {
    if (v.is_string()) {
      // Built by append: GCC 12 reports a false -Wrestrict on "'" + std::string.
      std::string out = "'";
      out.append(v.str(), 0, 64);
      return out.append("'");
    }
    if (v.is_number()) return v.str();
    return std::string("a JSON ") + io::to_string(v.type());
  }

 private:
  const io::JsonValue& obj_;
  std::string file_;
};

constexpr int64_t kMaxDim = int64_t(1) << 20;  // no model has a hidden or expert size near 1M

// ---- Architectures --------------------------------------------------------------------------------

// Model dimensions and MoE layer placement from the (text) config of each architecture.
Status read_model(Arch arch, const ConfigView& c, CheckpointInfo* info) {
  MoeProblem& p = info->problem;
  int64_t H, I, E, K, L;
  FP4MOE_RETURN_IF_ERROR(c.get_positive_int("hidden_size", kMaxDim, &H));
  FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_hidden_layers", 100000, &L));
  p.hidden_size = H;
  info->num_layers = int(L);
  std::vector<int>& moe = info->moe_layers;
  moe.clear();
  switch (arch) {
    case Arch::kDeepSeekV3: {
      int64_t groups, topk_groups, shared, first_dense, freq;
      double scaling;
      bool norm;
      std::string scoring, topk_method;
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("moe_intermediate_size", kMaxDim, &I));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("n_routed_experts", 4096, &E));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_experts_per_tok", 4096, &K));
      FP4MOE_RETURN_IF_ERROR(c.get_int_in("n_group", 1, 1, 4096, &groups));
      FP4MOE_RETURN_IF_ERROR(c.get_int_in("topk_group", 1, 1, 4096, &topk_groups));
      FP4MOE_RETURN_IF_ERROR(c.get_int_in("n_shared_experts", 0, 0, 4096, &shared));
      FP4MOE_RETURN_IF_ERROR(c.get_int("first_k_dense_replace", 0, &first_dense));
      FP4MOE_RETURN_IF_ERROR(c.get_int("moe_layer_freq", 1, &freq));
      FP4MOE_RETURN_IF_ERROR(c.get_double("routed_scaling_factor", 1.0, &scaling));
      FP4MOE_RETURN_IF_ERROR(c.get_bool("norm_topk_prob", true, &norm));
      FP4MOE_RETURN_IF_ERROR(c.get_string("scoring_func", "sigmoid", &scoring));
      FP4MOE_RETURN_IF_ERROR(c.get_string("topk_method", "noaux_tc", &topk_method));
      if (scoring != "sigmoid" || topk_method != "noaux_tc")
        return unsupported(c.file(), ": scoring_func = '", scoring, "', topk_method = '", topk_method,
                           "': only DeepSeek-V3 routing (sigmoid, noaux_tc) is supported");
      if (freq <= 0) return io_error(c.file(), ": 'moe_layer_freq' = ", freq, " must be positive");
      p.routing.method = RoutingMethod::kDeepSeekV3;
      p.routing.num_groups = int(groups);
      p.routing.topk_groups = int(topk_groups);
      p.routing.routed_scaling_factor = float(scaling);
      p.routing.renormalize = norm;
      p.num_shared_experts = int(shared);
      for (int64_t l = 0; l < L; ++l)
        if (l >= first_dense && l % freq == 0) moe.push_back(int(l));
      break;
    }
    case Arch::kQwen3Moe: {
      int64_t step;
      bool norm;
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("moe_intermediate_size", kMaxDim, &I));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_experts", 4096, &E));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_experts_per_tok", 4096, &K));
      FP4MOE_RETURN_IF_ERROR(c.get_int("decoder_sparse_step", 1, &step));
      FP4MOE_RETURN_IF_ERROR(c.get_bool("norm_topk_prob", false, &norm));
      if (step <= 0) return io_error(c.file(), ": 'decoder_sparse_step' = ", step, " must be positive");
      // mlp_only_layers (dense layers among them) is applied by the caller.
      p.routing.method = RoutingMethod::kSoftmaxTopK;
      p.routing.renormalize = norm;
      for (int64_t l = 0; l < L; ++l)
        if ((l + 1) % step == 0) moe.push_back(int(l));
      break;
    }
    case Arch::kMixtral: {
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("intermediate_size", kMaxDim, &I));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_local_experts", 4096, &E));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_experts_per_tok", 4096, &K));
      // Mixtral renormalizes the top-k softmax weights (its reference implementation does).
      p.routing.method = RoutingMethod::kSoftmaxTopK;
      p.routing.renormalize = true;
      for (int64_t l = 0; l < L; ++l) moe.push_back(int(l));
      break;
    }
    case Arch::kLlama4: {
      int64_t step;
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("intermediate_size", kMaxDim, &I));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_local_experts", 4096, &E));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_experts_per_tok", 4096, &K));
      FP4MOE_RETURN_IF_ERROR(c.get_int("interleave_moe_layer_step", 1, &step));
      p.routing.method = RoutingMethod::kLlama4;
      p.num_shared_experts = 1;
      // Layer l is MoE when (l + 1) % step == 0 (Scout: every layer, Maverick: every other one).
      if (step > 0)
        for (int64_t l = 0; l < L; ++l)
          if ((l + 1) % step == 0) moe.push_back(int(l));
      break;
    }
    case Arch::kGptOss: {
      double limit;
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("intermediate_size", kMaxDim, &I));
      FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_local_experts", 4096, &E));
      if (c.has("num_experts_per_tok")) {
        FP4MOE_RETURN_IF_ERROR(c.get_positive_int("num_experts_per_tok", 4096, &K));
      } else {
        FP4MOE_RETURN_IF_ERROR(c.get_positive_int("experts_per_token", 4096, &K));
      }
      FP4MOE_RETURN_IF_ERROR(c.get_double("swiglu_limit", 7.0, &limit));
      if (limit != 7.0)
        return unsupported(c.file(), ": swiglu_limit = ", limit, ": the gpt-oss activation is implemented for 7.0");
      p.routing.method = RoutingMethod::kTopKSoftmax;
      p.activation = Activation::kGptOss;
      p.has_bias = true;
      for (int64_t l = 0; l < L; ++l) moe.push_back(int(l));
      break;
    }
  }
  p.intermediate_size = I;
  p.routing.num_experts = int(E);
  p.routing.top_k = int(K);
  p.num_moe_layers = int(moe.size());
  return Status::Ok();
}

// Removes the layers listed in an optional integer array (Qwen3 mlp_only_layers) or keeps only those
// listed (Llama-4 moe_layers).
Status apply_layer_list(const io::JsonValue& cfg, const std::string& file, const char* key, bool keep,
                        std::vector<int>* moe) {
  const io::JsonValue* v = cfg.find(key);
  if (!v || v->is_null()) return Status::Ok();
  if (!v->is_array()) return io_error(file, ": '", key, "' must be a list of layer indices");
  std::vector<int> listed;
  for (const auto& e : v->elements()) {
    int64_t l;
    if (!e.as_int64(&l) || l < 0 || l > 100000) return io_error(file, ": '", key, "' holds a non-index value");
    listed.push_back(int(l));
  }
  std::vector<int> out;
  if (keep) {
    // An explicit moe_layers list is authoritative (it may differ from the interleave rule).
    out = listed;
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  } else {
    for (int l : *moe)
      if (std::find(listed.begin(), listed.end(), l) == listed.end()) out.push_back(l);
  }
  *moe = std::move(out);
  return Status::Ok();
}

// The quantization convention: hf_quant_config.json (ModelOpt) first, then config.json's
// quantization_config.
Status read_quantization(const std::string& dir, Arch arch, const io::JsonValue& config,
                         const io::JsonValue* hf_quant_json, CheckpointInfo* info) {
  const std::string hf_quant = dir + "/hf_quant_config.json";
  const std::string config_file = dir + "/config.json";
  auto check_modelopt = [&](const ConfigView& q) -> Status {
    std::string algo;
    int64_t group;
    FP4MOE_RETURN_IF_ERROR(q.get_string("quant_algo", "", &algo));
    FP4MOE_RETURN_IF_ERROR(q.get_int("group_size", 16, &group));
    if (algo != "NVFP4")
      return unsupported(q.file(), ": quant_algo = '", algo, "': only NVFP4 ModelOpt checkpoints are supported");
    if (group != 16) return unsupported(q.file(), ": group_size = ", group, ": NVFP4 uses blocks of 16");
    info->convention = QuantConvention::kModeloptNvfp4;
    return Status::Ok();
  };
  if (hf_quant_json) {
    const io::JsonValue* quant = hf_quant_json->find("quantization");
    if (!quant || !quant->is_object()) return io_error(hf_quant, ": 'quantization' object is missing");
    FP4MOE_RETURN_IF_ERROR(check_modelopt(ConfigView(*quant, hf_quant)));
  } else {
    const io::JsonValue* qc = config.find("quantization_config");
    if (!qc || qc->is_null())
      return unsupported(config_file, ": no quantization_config and no hf_quant_config.json: the checkpoint is not "
                         "quantized; fp4moe loads NVFP4 (ModelOpt, compressed-tensors) and MXFP4 (gpt-oss) experts");
    if (!qc->is_object()) return io_error(config_file, ": 'quantization_config' is not an object");
    const ConfigView q(*qc, config_file + " quantization_config");
    std::string method;
    FP4MOE_RETURN_IF_ERROR(q.get_string("quant_method", "", &method));
    if (method == "modelopt" || method == "modelopt_fp4") {
      const io::JsonValue* nested = qc->find("quantization");
      FP4MOE_RETURN_IF_ERROR(check_modelopt(nested && nested->is_object() ? ConfigView(*nested, q.file()) : q));
    } else if (method == "compressed-tensors") {
      // nvfp4-pack-quantized either globally or in a config group, with 4-bit float weights in
      // groups of 16. Other groups may quantize other modules (attention in FP8, say): the config
      // does not say which group holds the routed experts, so the loader's checks of every expert
      // tensor's dtype and shape (weight_packed U8, weight_scale F8_E4M3 per 16) refuse experts
      // quantized otherwise, by name.
      std::string format;
      FP4MOE_RETURN_IF_ERROR(q.get_string("format", "", &format));
      bool nvfp4 = format == "nvfp4-pack-quantized";
      bool nvfp4_weights = false;
      std::string other_weights;  // the first group whose weights are not NVFP4, for the refusal
      const io::JsonValue* groups = qc->find("config_groups");
      if (groups && groups->is_object()) {
        for (const auto& g : groups->members()) {
          const ConfigView gv(g.value, q.file() + " config_groups." + g.key);
          std::string gformat;
          FP4MOE_RETURN_IF_ERROR(gv.get_string("format", format, &gformat));
          if (gformat == "nvfp4-pack-quantized") nvfp4 = true;
          const io::JsonValue* w = g.value.find("weights");
          if (w && w->is_object()) {
            const ConfigView wv(*w, gv.file() + ".weights");
            int64_t bits, group;
            std::string type;
            FP4MOE_RETURN_IF_ERROR(wv.get_int("num_bits", 4, &bits));
            FP4MOE_RETURN_IF_ERROR(wv.get_int("group_size", 16, &group));
            FP4MOE_RETURN_IF_ERROR(wv.get_string("type", "float", &type));
            if (bits == 4 && group == 16 && type == "float") {
              nvfp4_weights = true;
            } else if (other_weights.empty()) {
              other_weights = detail::concat(wv.file(), ": num_bits = ", bits, ", type = '", type.substr(0, 32),
                                      "', group_size = ", group);
            }
          }
        }
      }
      if (!nvfp4_weights && !other_weights.empty())
        return unsupported(other_weights, ": no config group has NVFP4 weights (4-bit float, groups of 16), the only "
                           "compressed-tensors scheme supported");
      if (!nvfp4)
        return unsupported(q.file(), ": compressed-tensors format '", format,
                           "' is not nvfp4-pack-quantized; only NVFP4 is supported");
      info->convention = QuantConvention::kCompressedTensorsNvfp4;
    } else if (method == "mxfp4") {
      info->convention = QuantConvention::kGptOssMxfp4;
    } else {
      return unsupported(q.file(), ": quant_method = '", method.substr(0, 64),
                         "' is not supported (modelopt NVFP4, compressed-tensors NVFP4, mxfp4)");
    }
  }
  const bool mx = info->convention == QuantConvention::kGptOssMxfp4;
  if (mx != (arch == Arch::kGptOss))
    return unsupported(config_file, ": architecture ", info->architecture, " with ", to_string(info->convention),
                       " weights is not a supported combination");
  if (mx && arch == Arch::kGptOss) info->problem.weight_format = WeightFormat::kMxfp4;
  // Llama-4 in compressed-tensors (llm-compressor unfuses its experts into per-expert modules) loads
  // through the per-expert path, as Llama-4 per-expert ModelOpt exports do.
  return Status::Ok();
}

}  // namespace

namespace io {

struct ArchRow {
  const char* architecture;
  Arch arch;
};
constexpr ArchRow kArchitectures[] = {
    {"DeepseekV3ForCausalLM", Arch::kDeepSeekV3},
    {"Qwen3MoeForCausalLM", Arch::kQwen3Moe},
    {"MixtralForCausalLM", Arch::kMixtral},
    {"Llama4ForConditionalGeneration", Arch::kLlama4},
    {"Llama4ForCausalLM", Arch::kLlama4},
    {"GptOssForCausalLM", Arch::kGptOss},
};

Status find_arch(const std::string& name, Arch* out) {
  for (const auto& row : kArchitectures) {
    if (name == row.architecture) {
      *out = row.arch;
      return Status::Ok();
    }
  }
  std::string all;
  for (const auto& row : kArchitectures) all += std::string(all.empty() ? "" : ", ") + row.architecture;
  return unsupported("architecture '", name.substr(0, 100), "' is not supported; supported: ", all);
}

Arch arch_of(const CheckpointInfo& info) {
  Arch a = Arch::kDeepSeekV3;
  (void)find_arch(info.architecture, &a);  // validated by read_checkpoint_config
  return a;
}

Status checkpoint_config_from_json(const std::string& directory, const JsonValue& config, const JsonValue* hf_quant,
                                   CheckpointInfo* out) {
  CheckpointInfo info;
  info.directory = directory;
  const std::string config_file = directory + "/config.json";
  if (!config.is_object()) return io_error(config_file, ": not a JSON object");
  const io::JsonValue* archs = config.find("architectures");
  if (!archs || !archs->is_array() || archs->elements().empty() || !archs->elements()[0].is_string())
    return io_error(config_file, ": 'architectures' must be a non-empty list of names (fp4moe reads Hugging Face "
                    "checkpoints, whose config.json names the model class; gpt-oss's original/ folder is not one: "
                    "give the repository's root)");
  info.architecture = archs->elements()[0].str();
  Arch arch;
  if (Status s = find_arch(info.architecture, &arch); !s.ok()) return Status(s.code(), config_file + ": " + s.message());

  // Llama-4 multimodal checkpoints keep the language model's sizes in text_config.
  const io::JsonValue* text = &config;
  std::string text_file = config_file;
  if (const io::JsonValue* tc = config.find("text_config"); tc && tc->is_object()) {
    text = tc;
    text_file = config_file + " text_config";
  }
  const ConfigView c(*text, text_file);
  FP4MOE_RETURN_IF_ERROR(c.get_string("model_type", "", &info.model_type));
  FP4MOE_RETURN_IF_ERROR(read_model(arch, c, &info));
  if (arch == Arch::kQwen3Moe)
    FP4MOE_RETURN_IF_ERROR(apply_layer_list(*text, text_file, "mlp_only_layers", false, &info.moe_layers));
  if (arch == Arch::kLlama4)
    FP4MOE_RETURN_IF_ERROR(apply_layer_list(*text, text_file, "moe_layers", true, &info.moe_layers));
  for (int l : info.moe_layers)
    if (l >= info.num_layers)
      return io_error(text_file, ": MoE layer ", l, " is beyond num_hidden_layers = ", info.num_layers);
  info.problem.num_moe_layers = int(info.moe_layers.size());
  info.problem.name = info.model_type.empty() ? info.architecture : info.model_type;
  FP4MOE_RETURN_IF_ERROR(read_quantization(directory, arch, config, hf_quant, &info));
  if (info.moe_layers.empty()) return unsupported(config_file, ": the configuration has no MoE layers");
  if (Status s = validate(info.problem); !s.ok())
    return Status(s.code(), config_file + ": the MoE layer it describes is not supported: " + s.message());
  *out = std::move(info);
  return Status::Ok();
}

}  // namespace io

Status read_checkpoint_config(const std::string& directory, CheckpointInfo* out) {
  const std::string config_file = directory + "/config.json";
  if (!io::file_exists(config_file))
    return io_error(directory, ": no config.json (not a Hugging Face checkpoint directory?)");
  io::JsonValue config, hf_quant;
  FP4MOE_RETURN_IF_ERROR(io::read_json_file(config_file, &config));
  const std::string hf_quant_file = directory + "/hf_quant_config.json";
  const bool has_hf_quant = io::file_exists(hf_quant_file);
  if (has_hf_quant) FP4MOE_RETURN_IF_ERROR(io::read_json_file(hf_quant_file, &hf_quant));
  return io::checkpoint_config_from_json(directory, config, has_hf_quant ? &hf_quant : nullptr, out);
}

}  // namespace fp4moe
