// Tiny checkpoints in each convention (see checkpoint_writer.h). Tensor names and layouts follow
// BRIEF section 3 and the public model configurations; JSON is formatted by hand.
#include "tests/data/checkpoint_writer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fp4moe/numerics.h"

namespace fp4moe::testing {

namespace {

Status write_error(const std::string& path, const char* what) {
  return Status(StatusCode::kIoError, path + ": " + what);
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return out ? Status::Ok() : write_error(path, "write failed");
}

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string float_json(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

void SafetensorsWriter::add(const std::string& name, const char* dtype, std::vector<int64_t> shape, const void* data,
                            size_t bytes) {
  Entry e{name, dtype, std::move(shape), std::vector<uint8_t>(bytes)};
  if (bytes) std::memcpy(e.data.data(), data, bytes);
  entries_.push_back(std::move(e));
  names_.push_back(name);
}

Status SafetensorsWriter::write(const std::string& path) const {
  std::string header = "{\"__metadata__\": {\"format\": \"pt\"}";
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header += ", \"" + e.name + "\": {\"dtype\": \"" + e.dtype + "\", \"shape\": " + shape_json(e.shape) +
              ", \"data_offsets\": [" + std::to_string(offset) + ", " + std::to_string(offset + e.data.size()) + "]}";
    offset += e.data.size();
  }
  header += "}";
  while (header.size() % 8) header += ' ';  // writers align the data buffer to 8 bytes
  std::ofstream out(path, std::ios::binary);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out << header;
  for (const auto& e : entries_) out.write(reinterpret_cast<const char*>(e.data.data()), std::streamsize(e.data.size()));
  return out ? Status::Ok() : write_error(path, "write failed");
}

std::vector<int> moe_layers_of(const CheckpointSpec& spec) {
  std::vector<int> layers;
  for (int l = 0; l < spec.num_layers; ++l) {
    if (spec.model == Model::kDeepSeekV3 && l < spec.first_dense_layers) continue;
    if (spec.model == Model::kLlama4 && (l + 1) % 2 != 0) continue;  // interleave_moe_layer_step 2
    layers.push_back(l);
  }
  return layers;
}

HostMoeWeights representable(const HostMoeWeights& w, Convention convention) {
  HostMoeWeights r = w;
  if (convention == Convention::kCompressedTensors) {
    for (auto* v : {&r.w13_scale_2, &r.w2_scale_2, &r.a13_scale_2, &r.a2_scale_2}) {
      for (float& x : *v) {
        for (int i = 0; i < 8 && 1.0f / (1.0f / x) != x; ++i) x = 1.0f / (1.0f / x);
      }
    }
  }
  if (convention == Convention::kModeloptFused3dKMajor) {
    for (auto* v : {&r.w13_scale_2, &r.w2_scale_2, &r.a13_scale_2, &r.a2_scale_2})
      for (float& x : *v) x = v->front();
  }
  if (convention == Convention::kGptOssMxfp4) {
    for (auto* v : {&r.w13_bias, &r.w2_bias})
      for (float& x : *v) x = bf16_to_float(float_to_bf16(x));
  }
  return r;
}

namespace {

std::string config_json(const CheckpointSpec& spec) {
  const MoeProblem& p = spec.problem;
  const std::string H = std::to_string(p.hidden_size), I = std::to_string(p.intermediate_size),
                    E = std::to_string(p.num_experts()), K = std::to_string(p.top_k()),
                    L = std::to_string(spec.num_layers);
  std::string quant;
  if (spec.convention == Convention::kCompressedTensors) {
    quant = R"(, "quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
  "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": false},
    "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"}}},
  "ignore": ["lm_head"], "quantization_status": "compressed"})";
  } else if (spec.convention == Convention::kGptOssMxfp4) {
    quant = R"(, "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})";
  }
  switch (spec.model) {
    case Model::kDeepSeekV3:
      return R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": )" + H +
             R"(, "intermediate_size": )" + std::to_string(4 * p.hidden_size) + R"(, "moe_intermediate_size": )" + I +
             R"(, "n_routed_experts": )" + E + R"(, "num_experts_per_tok": )" + K + R"(, "n_group": )" +
             std::to_string(p.routing.num_groups) + R"(, "topk_group": )" + std::to_string(p.routing.topk_groups) +
             R"(, "routed_scaling_factor": )" + float_json(p.routing.routed_scaling_factor) +
             R"(, "norm_topk_prob": true, "n_shared_experts": 1, "first_k_dense_replace": )" +
             std::to_string(spec.first_dense_layers) + R"(, "moe_layer_freq": 1, "num_hidden_layers": )" + L +
             R"(, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rms_norm_eps": 1e-06, "rope_scaling": {"type": "yarn", "factor": 40}, "torch_dtype": "bfloat16")" +
             quant + "}\n";
    case Model::kQwen3Moe:
      return R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": )" + H +
             R"(, "moe_intermediate_size": )" + I + R"(, "num_experts": )" + E + R"(, "num_experts_per_tok": )" + K +
             R"(, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": )" + L +
             R"(, "rope_scaling": null, "tie_word_embeddings": false)" + quant + "}\n";
    case Model::kMixtral:
      return R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": )" + H +
             R"(, "intermediate_size": )" + I + R"(, "num_local_experts": )" + E + R"(, "num_experts_per_tok": )" + K +
             R"(, "num_hidden_layers": )" + L + R"(, "router_aux_loss_coef": 0.02)" + quant + "}\n";
    case Model::kLlama4:
      return R"({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": {"model_type": "llama4_text", "hidden_size": )" +
             H + R"(, "intermediate_size": )" + I + R"(, "intermediate_size_mlp": )" + std::to_string(2 * p.intermediate_size) +
             R"(, "num_local_experts": )" + E + R"(, "num_experts_per_tok": )" + K +
             R"(, "interleave_moe_layer_step": 2, "num_hidden_layers": )" + L +
             R"(}, "vision_config": {"hidden_size": 64, "model_type": "llama4_vision_model"})" + quant + "}\n";
    case Model::kGptOss:
      return R"({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": )" + H +
             R"(, "intermediate_size": )" + I + R"(, "num_local_experts": )" + E + R"(, "num_experts_per_tok": )" + K +
             R"(, "experts_per_token": )" + K + R"(, "swiglu_limit": 7.0, "num_hidden_layers": )" + L + quant + "}\n";
  }
  return "{}";
}

// Adds `tensor` to the writer of its shard (round robin over all tensors written).
class ShardedOut {
 public:
  ShardedOut(const CheckpointSpec& spec, std::string dir)
      : spec_(spec), dir_(std::move(dir)), shards_(spec.shard_per_layer ? 1 : size_t(spec.num_shards)) {}
  template <typename T>
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
    add_raw(name, dtype, std::move(shape), v.data(), v.size() * sizeof(T));
  }
  void add_raw(const std::string& name, const char* dtype, std::vector<int64_t> shape, const void* data, size_t bytes) {
    if (spec_.skip_tensor && spec_.skip_tensor(name)) return;
    shards_[next_++ % shards_.size()].add(name, dtype, std::move(shape), data, bytes);
  }
  // shard_per_layer: writes the current shard and starts the next one.
  Status flush_shard() {
    if (!spec_.shard_per_layer || shards_.back().num_tensors() == 0) return Status::Ok();
    const std::string file = "layer-" + std::to_string(flushed_.size()) + ".safetensors";
    FP4MOE_RETURN_IF_ERROR(shards_.back().write(dir_ + "/" + file));
    flushed_.emplace_back(file, shards_.back().names());
    shards_.back() = SafetensorsWriter();
    return Status::Ok();
  }
  void add_scalar(const std::string& name, float v, bool as_vector1) {
    add_raw(name, "F32", as_vector1 ? std::vector<int64_t>{1} : std::vector<int64_t>{}, &v, 4);
  }
  Status write() {
    const std::string& dir = dir_;
    std::vector<std::pair<std::string, std::vector<std::string>>> files;
    if (spec_.shard_per_layer) {
      FP4MOE_RETURN_IF_ERROR(flush_shard());
      files = flushed_;
    } else {
      for (size_t s = 0; s < shards_.size(); ++s) {
        FP4MOE_RETURN_IF_ERROR(shards_[s].write(dir + "/" + shard_name(s)));
        files.emplace_back(shard_name(s), shards_[s].names());
      }
    }
    std::string weight_map;
    int64_t n = 0, total = 0;
    for (const auto& [file, names] : files) {
      for (const auto& name : names) {
        ++total;
        if (spec_.index_drop_every > 0 && total % spec_.index_drop_every == 0) continue;
        weight_map += std::string(n++ ? ",\n    " : "\n    ") + "\"" + name + "\": \"" + file + "\"";
      }
    }
    if (spec_.write_index)
      FP4MOE_RETURN_IF_ERROR(write_text(dir + "/model.safetensors.index.json",
                                        "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {" + weight_map + "\n}}\n"));
    return Status::Ok();
  }
  std::string shard_name(size_t s) const {
    if (shards_.size() == 1) return "model.safetensors";
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", s + 1, shards_.size());
    return buf;
  }

 private:
  const CheckpointSpec& spec_;
  std::string dir_;
  std::vector<SafetensorsWriter> shards_;
  std::vector<std::pair<std::string, std::vector<std::string>>> flushed_;  // shard_per_layer: written files
  size_t next_ = 0;
};

std::vector<uint8_t> slice_rows(const std::vector<uint8_t>& v, int64_t row0, int64_t num_rows, int64_t row_bytes) {
  return std::vector<uint8_t>(v.begin() + row0 * row_bytes, v.begin() + (row0 + num_rows) * row_bytes);
}

std::vector<uint16_t> to_bf16(const float* v, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

void write_layer(ShardedOut& out, const CheckpointSpec& spec, const std::string& P, int l, const HostMoeWeights& w) {
  const MoeProblem& p = spec.problem;
  const int64_t H = p.hidden_size, I = p.intermediate_size, E = p.num_experts();
  const std::string lp = P + "layers." + std::to_string(l) + ".";
  std::vector<uint16_t> norm(size_t(H), float_to_bf16(1.0f));
  out.add(lp + "input_layernorm.weight", "BF16", {H}, norm);
  out.add(lp + "post_attention_layernorm.weight", "BF16", {H}, norm);
  std::vector<uint8_t> attn(size_t(H * H / 2), 0x11);
  out.add(lp + "self_attn.o_proj.weight", "U8", {H, H / 2}, attn);
  std::vector<uint16_t> router(size_t(E * H), float_to_bf16(0.01f));

  switch (spec.convention) {
    case Convention::kModelopt:
    case Convention::kCompressedTensors: {
      const bool ct = spec.convention == Convention::kCompressedTensors;
      const bool mixtral = spec.model == Model::kMixtral;
      const std::string module = mixtral ? "block_sparse_moe." : spec.model == Model::kLlama4 ? "feed_forward." : "mlp.";
      const char* proj[3] = {"gate_proj", "up_proj", "down_proj"};
      if (mixtral) proj[0] = "w1", proj[1] = "w3", proj[2] = "w2";
      out.add(lp + module + "gate.weight", "BF16", {E, H}, router);
      if (spec.model == Model::kDeepSeekV3) out.add(lp + module + "gate.e_score_correction_bias", "F32", {E}, w.routing_bias);
      const bool inputs = spec.input_scales && !w.a13_scale_2.empty();
      for (int64_t e = 0; e < E; ++e) {
        const std::string eb = lp + module + "experts." + std::to_string(e) + ".";
        for (int j = 0; j < 3; ++j) {
          const std::string tb = eb + proj[j] + ".";
          const bool down = j == 2;
          const int64_t rows = down ? H : I, k = down ? I : H;
          const auto& q = down ? w.w2 : w.w13;
          const auto& s = down ? w.w2_scale : w.w13_scale;
          const int64_t row0 = down ? e * H : e * 2 * I + j * I;
          out.add(tb + (ct ? "weight_packed" : "weight"), "U8", {rows, k / 2}, slice_rows(q, row0, rows, k / 2));
          out.add(tb + "weight_scale", "F8_E4M3", {rows, k / 16}, slice_rows(s, row0, rows, k / 16));
          float s2 = down ? w.w2_scale_2[e] : w.w13_scale_2[e];
          if (j == 1) s2 *= spec.up_scale_factor;
          // Input scale: gate and up get {a, a/2} in alternating order, so the loader's max picks a.
          float in = 0;
          if (inputs) in = down ? w.a2_scale_2[e] : ((e + j) % 2 == 0 ? w.a13_scale_2[e] : w.a13_scale_2[e] / 2);
          if (ct) {
            out.add_scalar(tb + "weight_global_scale", 1.0f / s2, true);
            if (inputs) out.add_scalar(tb + "input_global_scale", 1.0f / in, true);
          } else {
            out.add_scalar(tb + "weight_scale_2", s2, false);
            if (inputs) out.add_scalar(tb + "input_scale", in, false);
          }
        }
      }
      if (spec.model == Model::kLlama4) {
        std::vector<uint8_t> shared(size_t(I * H / 2), 0x22);
        out.add(lp + "feed_forward.shared_expert.gate_proj.weight", "U8", {I, H / 2}, shared);
      }
      break;
    }
    case Convention::kModeloptFused3dKMajor: {
      // Per expert the byte-wise transpose of [N, K/2] / [N, K/16]: out[e][k][n] = in[e][n][k].
      auto transpose = [](const std::vector<uint8_t>& in, int64_t num_e, int64_t n, int64_t k) {
        std::vector<uint8_t> out(in.size());
        for (int64_t e = 0; e < num_e; ++e)
          for (int64_t r = 0; r < n; ++r)
            for (int64_t c = 0; c < k; ++c) out[(e * k + c) * n + r] = in[(e * n + r) * k + c];
        return out;
      };
      const std::string b = lp + "feed_forward.experts.";
      out.add(lp + "feed_forward.router.weight", "BF16", {E, H}, router);
      out.add(b + "gate_up_proj", "U8", {E, H / 2, 2 * I}, transpose(w.w13, E, 2 * I, H / 2));
      out.add(b + "gate_up_proj_weight_scale", "F8_E4M3", {E, H / 16, 2 * I}, transpose(w.w13_scale, E, 2 * I, H / 16));
      out.add_scalar(b + "gate_up_proj_weight_scale_2", w.w13_scale_2[0], false);
      out.add(b + "down_proj", "U8", {E, I / 2, H}, transpose(w.w2, E, H, I / 2));
      out.add(b + "down_proj_weight_scale", "F8_E4M3", {E, I / 16, H}, transpose(w.w2_scale, E, H, I / 16));
      out.add_scalar(b + "down_proj_weight_scale_2", w.w2_scale_2[0], false);
      if (spec.input_scales && !w.a13_scale_2.empty()) {
        out.add_scalar(b + "gate_up_proj_input_scale", w.a13_scale_2[0], false);
        out.add_scalar(b + "down_proj_input_scale", w.a2_scale_2[0], false);
      }
      std::vector<uint8_t> shared(size_t(I * H / 2), 0x22);
      out.add(lp + "feed_forward.shared_expert.gate_proj.weight", "U8", {I, H / 2}, shared);
      break;
    }
    case Convention::kModeloptFused3d: {
      const std::string b = lp + "feed_forward.experts.";
      out.add(lp + "feed_forward.router.weight", "BF16", {E, H}, router);
      out.add(b + "gate_up_proj", "U8", {E, 2 * I, H / 2}, w.w13);
      out.add(b + "gate_up_proj_weight_scale", "F8_E4M3", {E, 2 * I, H / 16}, w.w13_scale);
      out.add(b + "gate_up_proj_weight_scale_2", "F32", {E}, w.w13_scale_2);
      out.add(b + "down_proj", "U8", {E, H, I / 2}, w.w2);
      out.add(b + "down_proj_weight_scale", "F8_E4M3", {E, H, I / 16}, w.w2_scale);
      out.add(b + "down_proj_weight_scale_2", "F32", {E}, w.w2_scale_2);
      if (spec.input_scales && !w.a13_scale_2.empty()) {
        out.add(b + "gate_up_proj_input_scale", "F32", {E}, w.a13_scale_2);
        out.add(b + "down_proj_input_scale", "F32", {E}, w.a2_scale_2);
      }
      std::vector<uint8_t> shared(size_t(I * H / 2), 0x22);
      out.add(lp + "feed_forward.shared_expert.gate_proj.weight", "U8", {I, H / 2}, shared);
      break;
    }
    case Convention::kGptOssMxfp4: {
      const std::string b = lp + "mlp.experts.";
      out.add(lp + "mlp.router.weight", "BF16", {E, H}, router);
      // Interleave: checkpoint row 2i is gate row i, row 2i + 1 is up row i.
      std::vector<uint8_t> blocks(w.w13.size()), scales(w.w13_scale.size());
      std::vector<float> bias(w.w13_bias.size());
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t i = 0; i < I; ++i) {
          for (int half = 0; half < 2; ++half) {
            const int64_t src = e * 2 * I + half * I + i, dst = e * 2 * I + 2 * i + half;
            std::memcpy(&blocks[dst * H / 2], &w.w13[src * H / 2], H / 2);
            std::memcpy(&scales[dst * H / 32], &w.w13_scale[src * H / 32], H / 32);
            bias[dst] = w.w13_bias[src];
          }
        }
      }
      out.add(b + "gate_up_proj_blocks", "U8", {E, 2 * I, H / 32, 16}, blocks);
      out.add(b + "gate_up_proj_scales", "U8", {E, 2 * I, H / 32}, scales);
      out.add(b + "gate_up_proj_bias", "BF16", {E, 2 * I}, to_bf16(bias.data(), bias.size()));
      out.add(b + "down_proj_blocks", "U8", {E, H, I / 32, 16}, w.w2);
      out.add(b + "down_proj_scales", "U8", {E, H, I / 32}, w.w2_scale);
      out.add(b + "down_proj_bias", "BF16", {E, H}, to_bf16(w.w2_bias.data(), w.w2_bias.size()));
      break;
    }
  }
}

}  // namespace

Status write_checkpoint(const std::string& dir, const CheckpointSpec& spec, const std::vector<HostMoeWeights>& layers) {
  const size_t num_moe = moe_layers_of(spec).size();
  if (num_moe != layers.size())
    return invalid_argument("write_checkpoint: ", num_moe, " MoE layers but ", layers.size(), " weight sets");
  return write_checkpoint(dir, spec, [&](size_t i) -> const HostMoeWeights& { return layers[i]; });
}

Status write_checkpoint(const std::string& dir, const CheckpointSpec& spec,
                        const std::function<const HostMoeWeights&(size_t moe_layer_idx)>& layer) {
  mkdir(dir.c_str(), 0755);
  const std::vector<int> moe = moe_layers_of(spec);
  FP4MOE_RETURN_IF_ERROR(write_text(dir + "/config.json", config_json(spec)));
  if (spec.convention == Convention::kModelopt || spec.convention == Convention::kModeloptFused3d ||
      spec.convention == Convention::kModeloptFused3dKMajor)
    FP4MOE_RETURN_IF_ERROR(write_text(
        dir + "/hf_quant_config.json",
        R"({"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16, "exclude_modules": ["lm_head"]}})"
        "\n"));
  const std::string P = spec.model == Model::kLlama4 && spec.multimodal_prefix ? "language_model.model." : "model.";
  const int64_t H = spec.problem.hidden_size;
  ShardedOut out(spec, dir);
  std::vector<uint16_t> embed(size_t(16 * H), float_to_bf16(0.5f));
  out.add(P + "embed_tokens.weight", "BF16", {16, H}, embed);
  for (int l = 0; l < spec.num_layers; ++l) {
    const auto it = std::find(moe.begin(), moe.end(), l);
    if (it == moe.end()) {
      // A dense layer: an MLP whose names resemble the experts' but are not.
      std::vector<uint8_t> dense(size_t(64 * H / 2), 0x33);
      out.add(P + "layers." + std::to_string(l) + (spec.model == Model::kLlama4 ? ".feed_forward" : ".mlp") + ".gate_proj.weight",
              "U8", {64, H / 2}, dense);
      continue;
    }
    write_layer(out, spec, P, l, layer(size_t(it - moe.begin())));
    FP4MOE_RETURN_IF_ERROR(out.flush_shard());
  }
  std::vector<uint16_t> norm(size_t(H), float_to_bf16(1.0f));
  out.add(P + "norm.weight", "BF16", {H}, norm);
  return out.write();
}

}  // namespace fp4moe::testing
