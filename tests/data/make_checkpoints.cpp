// fp4moe-make-checkpoint: writes a synthetic quantized MoE checkpoint in one hub convention, for
// fp4moe-check and load-rate measurements (the tests call the same writer directly).
//
//   fp4moe-make-checkpoint --out DIR --model deepseek-v3|qwen3-moe|mixtral|llama4|gpt-oss
//       [--convention modelopt|compressed-tensors|modelopt-fused|modelopt-fused-k-major|gpt-oss]
//       [--preset NAME [--scale F]]
//       [--layers L] [--shards S | --shard-per-layer] [--index] [--index-drop-every N]
//       [--reuse-weights] [--seed S]
//
// Sizes come from --preset (BRIEF section 5, optionally divided by --scale) or default to a tiny
// layer. Weights are make_random_weights (w4a4 activation scales included for NVFP4), made
// representable in the convention; --reuse-weights writes the first MoE layer's weights for every
// layer (for multi-GB load-rate checkpoints, where generating is slower than writing).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "fp4moe/moe.h"
#include "tests/data/checkpoint_writer.h"
#include "tools/cli_args.h"

using namespace fp4moe;
using namespace fp4moe::testing;

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "fp4moe-make-checkpoint: %s\n"
               "usage: fp4moe-make-checkpoint --out DIR --model deepseek-v3|qwen3-moe|mixtral|llama4|gpt-oss\n"
               "  [--convention modelopt|compressed-tensors|modelopt-fused|modelopt-fused-k-major|gpt-oss]\n"
               "  [--preset NAME [--scale F]]\n"
               "  [--layers L] [--shards S | --shard-per-layer] [--index] [--index-drop-every N]\n"
               "  [--reuse-weights] [--seed S]\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, model_name, convention_name, preset;
  int scale = 1, layers = 2, shards = 1, drop_every = 0;
  bool index = false, per_layer = false, reuse = false;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    // (checked and bounded: a typo or a huge count fails here, not after writing gigabytes)
    auto number = [&](int64_t lo, int64_t hi) {
      int64_t x = 0;
      const std::string err = cli::parse_int(a, value(), lo, hi, &x);
      if (!err.empty()) usage(err.c_str());
      return x;
    };
    if (a == "--out") out = value();
    else if (a == "--model") model_name = value();
    else if (a == "--convention") convention_name = value();
    else if (a == "--preset") preset = value();
    else if (a == "--scale") scale = int(number(1, 1 << 10));
    else if (a == "--layers") layers = int(number(1, 1 << 10));
    else if (a == "--shards") shards = int(number(1, 1 << 10));
    else if (a == "--shard-per-layer") per_layer = true;
    else if (a == "--index") index = true;
    else if (a == "--index-drop-every") drop_every = int(number(0, 1 << 20));
    else if (a == "--reuse-weights") reuse = true;
    else if (a == "--seed") seed = uint64_t(number(0, INT64_MAX));
    else usage(("unknown argument " + a).c_str());
  }
  if (out.empty() || model_name.empty()) usage("--out and --model are required");
  if (scale != 1 && preset.empty()) usage("--scale divides a --preset's sizes: give --preset NAME");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);  // the directory may exist already
  if (ec) {
    std::fprintf(stderr, "fp4moe-make-checkpoint: cannot create --out directory '%s': %s\n", out.c_str(),
                 ec.message().c_str());
    return 1;
  }

  CheckpointSpec spec;
  MoeProblem& p = spec.problem;
  p.hidden_size = 128;
  p.intermediate_size = 64;
  if (model_name == "deepseek-v3") {
    spec.model = Model::kDeepSeekV3;
    spec.convention = Convention::kModelopt;
    p.routing = {RoutingMethod::kDeepSeekV3, 16, 4, true, 4, 2, 2.5f};
  } else if (model_name == "qwen3-moe") {
    spec.model = Model::kQwen3Moe;
    spec.convention = Convention::kCompressedTensors;
    p.routing = {RoutingMethod::kSoftmaxTopK, 16, 4, true, 1, 1, 1.0f};
  } else if (model_name == "mixtral") {
    spec.model = Model::kMixtral;
    spec.convention = Convention::kModelopt;
    p.routing = {RoutingMethod::kSoftmaxTopK, 8, 2, true, 1, 1, 1.0f};
  } else if (model_name == "llama4") {
    spec.model = Model::kLlama4;
    spec.convention = Convention::kModeloptFused3dKMajor;  // as ModelOpt exports Llama-4
    p.routing = {RoutingMethod::kLlama4, 16, 1, false, 1, 1, 1.0f};
  } else if (model_name == "gpt-oss") {
    spec.model = Model::kGptOss;
    spec.convention = Convention::kGptOssMxfp4;
    p.routing = {RoutingMethod::kTopKSoftmax, 8, 4, false, 1, 1, 1.0f};
    p.activation = Activation::kGptOss;
    p.has_bias = true;
    p.weight_format = WeightFormat::kMxfp4;
  } else {
    usage(("unknown --model " + model_name).c_str());
  }
  if (!preset.empty()) {
    MoeProblem full;
    if (Status s = get_preset(preset, &full); !s.ok()) usage(s.message().c_str());
    if (scale > 1) full = scaled_preset(full, scale);
    p = full;
  }
  if (!convention_name.empty()) {
    if (convention_name == "modelopt") spec.convention = Convention::kModelopt;
    else if (convention_name == "compressed-tensors") spec.convention = Convention::kCompressedTensors;
    else if (convention_name == "modelopt-fused") spec.convention = Convention::kModeloptFused3d;
    else if (convention_name == "modelopt-fused-k-major") spec.convention = Convention::kModeloptFused3dKMajor;
    else if (convention_name == "gpt-oss") spec.convention = Convention::kGptOssMxfp4;
    else usage(("unknown --convention " + convention_name).c_str());
  }
  spec.num_layers = layers;
  spec.num_shards = shards;
  spec.shard_per_layer = per_layer;
  spec.write_index = index;
  spec.index_drop_every = drop_every;
  if (Status s = validate(p); !s.ok()) usage(s.to_string().c_str());

  MoeProblem gen = p;
  if (gen.weight_format == WeightFormat::kNvfp4) gen.mode = Mode::kW4A4;  // writes input scales too
  HostMoeWeights current;
  size_t current_idx = ~size_t(0);
  const Status s = write_checkpoint(out, spec, [&](size_t i) -> const HostMoeWeights& {
    if (current_idx == ~size_t(0) || (!reuse && i != current_idx)) {
      current = representable(make_random_weights(gen, seed + i), spec.convention);
      current_idx = i;
    }
    return current;
  });
  if (!s.ok()) {
    std::fprintf(stderr, "fp4moe-make-checkpoint: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("wrote %s: %s, H=%lld I=%lld E=%d top-%d, %d layers (%zu MoE)\n", out.c_str(), model_name.c_str(),
              (long long)p.hidden_size, (long long)p.intermediate_size, p.num_experts(), p.top_k(), layers,
              moe_layers_of(spec).size());
  return 0;
}
