// Writes tiny quantized MoE checkpoints in each hub convention, from weights in the linear layout of
// moe.h: the generator the checkpoint tests (and fp4moe-check / load-rate runs) load from.
//
// Independent of the reader on purpose: JSON is produced by string formatting, and each convention's
// layout (tensor names, shapes, inverted global scales, interleaved gpt-oss rows, bf16 biases) is
// written out here from BRIEF section 3, not derived from src/io. A misunderstanding would have to
// be made twice, the same way, to go unnoticed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/status.h"

namespace fp4moe::testing {

// One .safetensors file, tensors written in insertion order, header padded with spaces to 8 bytes.
class SafetensorsWriter {
 public:
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape, const void* data, size_t bytes);
  template <typename T>
  void add_vec(const std::string& name, const char* dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
    add(name, dtype, std::move(shape), v.data(), v.size() * sizeof(T));
  }
  size_t num_tensors() const { return entries_.size(); }
  const std::vector<std::string>& names() const { return names_; }
  Status write(const std::string& path) const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Entry> entries_;
  std::vector<std::string> names_;
};

enum class Model { kDeepSeekV3, kQwen3Moe, kMixtral, kLlama4, kGptOss };
enum class Convention {
  kModelopt,           // per expert gate/up/down (Mixtral: w1/w3/w2)
  kCompressedTensors,  // per expert, weight_packed + inverted global scales
  kModeloptFused3d,    // Llama-4 fused, N-major [E, 2I, H/2], per-expert [E] global and input scales
  kModeloptFused3dKMajor,  // Llama-4 fused as ModelOpt exports it: K-major [E, H/2, 2I], scalar scales
  kGptOssMxfp4,
};

struct CheckpointSpec {
  Model model = Model::kDeepSeekV3;
  Convention convention = Convention::kModelopt;
  MoeProblem problem;           // sizes and routing written into config.json
  int num_layers = 2;           // transformer layers; which are MoE follows the model's config rules
  int first_dense_layers = 0;   // DeepSeek first_k_dense_replace
  int num_shards = 1;
  bool write_index = false;
  int index_drop_every = 0;     // > 0: leave every n-th tensor out of the index (an incomplete index)
  bool multimodal_prefix = false;  // Llama-4: "language_model.model." instead of "model."
  // ModelOpt: write the up_proj's weight_scale_2 as this multiple of the gate's (1: identical).
  float up_scale_factor = 1.0f;
  bool input_scales = true;     // NVFP4: write input_scale / input_global_scale
  // Instead of spreading tensors round robin over num_shards files, write one shard per transformer
  // layer (plus one for the rest), each flushed before the next layer is generated: multi-GB
  // checkpoints then need one layer of memory.
  bool shard_per_layer = false;
  std::function<bool(const std::string&)> skip_tensor;  // drop tensors (error-path tests)
};

// The MoE layer indices of `spec` (what config.json implies).
std::vector<int> moe_layers_of(const CheckpointSpec& spec);

// Writes config.json (+ hf_quant_config.json for ModelOpt), the shards and optionally the index.
// `layers[i]` are the full weights (all experts, full I) of moe_layers_of(spec)[i]; besides the experts,
// every layer gets a few unrelated tensors (norms, attention, router) so the loader must pick its own.
Status write_checkpoint(const std::string& dir, const CheckpointSpec& spec, const std::vector<HostMoeWeights>& layers);
// The same with the weights of MoE layer i produced on demand (each used before the next is asked for).
Status write_checkpoint(const std::string& dir, const CheckpointSpec& spec,
                        const std::function<const HostMoeWeights&(size_t moe_layer_idx)>& layer);

// The weights as a checkpoint in `convention` can represent them, for bit-exact round trips:
// compressed-tensors global scales survive 1/(1/s) only for some s, so those are nudged to a fixed
// point of the inversion; gpt-oss biases are stored in bf16; the K-major Llama-4 export has one global
// (and input) scale per tensor, so every expert gets expert 0's. Everything else is unchanged.
HostMoeWeights representable(const HostMoeWeights& w, Convention convention);

}  // namespace fp4moe::testing
