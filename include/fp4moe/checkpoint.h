// Quantized MoE checkpoints as they come from the hub: a directory of .safetensors shards with
// config.json (+ hf_quant_config.json, + model.safetensors.index.json).
//
//   Checkpoint::open(dir)            reads the configuration into a MoeProblem and scans every shard's
//                                    header (the index is used as a cross-check only: real indexes can
//                                    be incomplete);
//   checkpoint->load_moe_layer(L)    copies one layer's routed experts, or one EP/TP rank's part of
//                                    them, into HostMoeWeights in the linear layout of moe.h.
//
// Architectures (config.json "architectures"): DeepseekV3ForCausalLM, Qwen3MoeForCausalLM,
// MixtralForCausalLM, Llama4ForConditionalGeneration / Llama4ForCausalLM, GptOssForCausalLM. Anything
// else, and unquantized or otherwise-quantized checkpoints, is kUnsupported with the reason.
//
// Checkpoint conventions, detected from hf_quant_config.json / quantization_config:
//   kModeloptNvfp4           per expert {gate,up,down}: weight U8 [N, K/2], weight_scale F8_E4M3
//                            [N, K/16], weight_scale_2 F32 (decode convention), input_scale F32
//                            (optional). Llama-4 stores fused 3-D tensors instead
//                            (experts.gate_up_proj, experts.down_proj and their scales), K-major as
//                            ModelOpt exports them ([E, H/2, 2I], [E, I/2, H]) or N-major ([E, 2I, H/2],
//                            [E, H, I/2]); the orientation is read from the header shapes.
//   kCompressedTensorsNvfp4  weight_packed, weight_scale, weight_global_scale (encode convention:
//                            weight_scale_2 = 1 / weight_global_scale, one correctly rounded fp32
//                            division), input_global_scale (= 1 / input_scale); per expert for
//                            Llama-4 too (llm-compressor unfuses its experts).
//   kGptOssMxfp4             experts.{gate_up,down}_proj_{blocks,scales,bias}; gate_up rows interleave
//                            gate (even) and up (odd), de-interleaved into [gate rows; up rows].
// Fused gate|up global scale (NVFP4 per-expert): the gate's weight_scale_2 is used for the whole w13,
// as vLLM does; a warning names every expert whose up_proj scale differs. The GEMM1 input scale is the
// max of the gate's and up's input_scale; GEMM2's is down's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/safetensors.h"
#include "fp4moe/status.h"

namespace fp4moe {

enum class QuantConvention { kModeloptNvfp4, kCompressedTensorsNvfp4, kGptOssMxfp4 };
const char* to_string(QuantConvention convention);

struct CheckpointInfo {
  std::string directory;
  std::string architecture;  // config.json architectures[0]
  std::string model_type;    // config.json model_type (of text_config for Llama-4)
  QuantConvention convention = QuantConvention::kModeloptNvfp4;
  // name = model_type; sizes, routing, activation, format from the config. mode stays w4a16 and
  // max_tokens at its default: those are the caller's choice.
  MoeProblem problem;
  int num_layers = 0;
  std::vector<int> moe_layers;  // layer indices that have routed experts, ascending
};

// Reads config.json and hf_quant_config.json only (no shard is opened).
Status read_checkpoint_config(const std::string& directory, CheckpointInfo* out);

// Which part of the experts a rank loads (reference/sharding.h semantics: EP rank r holds the
// contiguous experts [r*E/ep, (r+1)*E/ep), TP rank r the slice [r*I/tp, (r+1)*I/tp) of every expert's
// intermediate dimension; the w2 bias goes to TP rank 0 only), and with how many threads.
struct LoadOptions {
  int ep_rank = 0, ep_size = 1;
  int tp_rank = 0, tp_size = 1;
  int num_threads = 0;  // experts load in parallel; 0: min(8, hardware threads)
};
// The name of the first version (the Python binding uses it).
using ShardOptions = LoadOptions;

struct LoadReport {
  std::string expert_layout;   // "per-expert", "fused 3-D, K-major", "fused 3-D, N-major", "gpt-oss blocks"
  int num_tensors_read = 0;
  uint64_t bytes_read = 0;     // bytes copied out of the shards (only the rank's experts / slice)
  bool has_input_scales = false;  // a13_scale_2 / a2_scale_2 were filled (w4a4 possible)
  std::vector<std::string> warnings;
};

class Checkpoint {
 public:
  // Reads the configuration, then maps and validates every *.safetensors file of the directory and every
  // file the index names. Errors: a shard that fails validation, a file the index names that does not
  // exist, a tensor present in two shards. Index entries that disagree with the headers are warnings.
  static Status open(const std::string& directory, std::unique_ptr<Checkpoint>* out);
  ~Checkpoint();

  const CheckpointInfo& info() const;
  const MoeProblem& problem() const { return info().problem; }
  // Warnings from open(): index entries missing or pointing at the wrong shard.
  const std::vector<std::string>& warnings() const;
  int num_shards() const;
  int64_t num_tensors() const;
  // Total bytes of all shards.
  uint64_t total_bytes() const;
  // A tensor by name over all shards; *file (if given) receives its shard.
  const TensorInfo* find_tensor(std::string_view name, const SafetensorsFile** file = nullptr) const;
  // The shards, in directory order (for whole-file benchmarks).
  std::vector<const SafetensorsFile*> shards() const;

  // Loads the routed experts of layer `layer` (a transformer layer index; it must be one of
  // info().moe_layers). `out` holds the shard's experts (num_experts = E / ep_size) and TP slice
  // (intermediate = I / tp_size); routing_bias (DeepSeek-V3) always covers all experts. The vectors of
  // *out are reused when their sizes match (load layer after layer into the same buffers); on error
  // *out holds unspecified, partly loaded weights.
  Status load_moe_layer(int layer, const LoadOptions& options, HostMoeWeights* out, LoadReport* report = nullptr) const;

  struct Impl;

 private:
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4moe
