// Checkpoint loading: tiny checkpoints written by tests/data/checkpoint_writer in every convention
// load back bit-exactly (whole layer and every EP/TP shard, against ref::shard_weights), the
// reference layer on the loaded weights equals the one on the source weights, sharded checkpoints
// with an incomplete index load, and every malformed or unsupported checkpoint gives its error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fp4moe/checkpoint.h"
#include "moe_test_util.h"
#include "reference/moe_reference.h"
#include "reference/sharding.h"
#include "tests/data/checkpoint_writer.h"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;
using testing::CheckpointSpec;
using testing::Convention;
using testing::Model;


std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void replace_in_file(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = read_text(path);
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  s.replace(at, from.size(), to);
  std::ofstream(path) << s;
}

// Small problems with the structure of each model family. H and I hold whole blocks of both formats
// and I/2 splits into whole MXFP4 blocks (tp = 2).
MoeProblem tiny_problem(Model model) {
  MoeProblem p;
  p.hidden_size = 128;
  p.intermediate_size = 64;
  p.max_tokens = 64;
  switch (model) {
    case Model::kDeepSeekV3:
      p.routing = {RoutingMethod::kDeepSeekV3, 8, 2, true, 4, 2, 2.5f};
      p.num_shared_experts = 1;
      break;
    case Model::kQwen3Moe:
      p.routing = {RoutingMethod::kSoftmaxTopK, 8, 2, true, 1, 1, 1.0f};
      break;
    case Model::kMixtral:
      p.routing = {RoutingMethod::kSoftmaxTopK, 4, 2, true, 1, 1, 1.0f};
      break;
    case Model::kLlama4:
      p.routing = {RoutingMethod::kLlama4, 4, 1, false, 1, 1, 1.0f};
      p.num_shared_experts = 1;
      break;
    case Model::kGptOss:
      p.routing = {RoutingMethod::kTopKSoftmax, 4, 2, false, 1, 1, 1.0f};
      p.activation = Activation::kGptOss;
      p.has_bias = true;
      p.weight_format = WeightFormat::kMxfp4;
      break;
  }
  return p;
}

struct Case {
  const char* name;
  Model model;
  Convention convention;
  int num_layers, first_dense, num_shards;
  bool multimodal_prefix;
};

const Case kCases[] = {
    {"deepseek_modelopt", Model::kDeepSeekV3, Convention::kModelopt, 3, 1, 1, false},
    {"qwen3_compressed_tensors", Model::kQwen3Moe, Convention::kCompressedTensors, 2, 0, 1, false},
    {"mixtral_modelopt", Model::kMixtral, Convention::kModelopt, 1, 0, 1, false},
    {"llama4_modelopt_fused", Model::kLlama4, Convention::kModeloptFused3d, 4, 0, 2, true},
    {"llama4_modelopt_fused_k_major", Model::kLlama4, Convention::kModeloptFused3dKMajor, 2, 0, 1, true},
    {"llama4_modelopt_per_expert", Model::kLlama4, Convention::kModelopt, 2, 0, 1, false},
    {"gpt_oss_mxfp4", Model::kGptOss, Convention::kGptOssMxfp4, 2, 0, 1, false},
    // llm-compressor's Llama-4 export: the fused experts unfused into per-expert modules.
    {"llama4_compressed_tensors", Model::kLlama4, Convention::kCompressedTensors, 2, 0, 1, true},
};

// Source weights for every MoE layer of a spec: random valid weights with w4a4 activation scales (so
// the input-scale conventions are exercised), made representable in the convention.
std::vector<HostMoeWeights> source_layers(const CheckpointSpec& spec) {
  MoeProblem gen = spec.problem;
  if (gen.weight_format == WeightFormat::kNvfp4) gen.mode = Mode::kW4A4;
  std::vector<HostMoeWeights> layers;
  for (int l : testing::moe_layers_of(spec))
    layers.push_back(testing::representable(make_random_weights(gen, 1000 + l), spec.convention));
  return layers;
}

CheckpointSpec spec_of(const Case& c) {
  CheckpointSpec spec;
  spec.model = c.model;
  spec.convention = c.convention;
  spec.problem = tiny_problem(c.model);
  spec.num_layers = c.num_layers;
  spec.first_dense_layers = c.first_dense;
  spec.num_shards = c.num_shards;
  spec.write_index = c.num_shards > 1;
  spec.multimodal_prefix = c.multimodal_prefix;
  return spec;
}

template <typename T>
void expect_bytes_equal(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0) << what << " differs";
}

void expect_same_weights(const HostMoeWeights& a, const HostMoeWeights& b) {
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.intermediate, b.intermediate);
  expect_bytes_equal(a.w13, b.w13, "w13");
  expect_bytes_equal(a.w13_scale, b.w13_scale, "w13_scale");
  expect_bytes_equal(a.w2, b.w2, "w2");
  expect_bytes_equal(a.w2_scale, b.w2_scale, "w2_scale");
  expect_bytes_equal(a.w13_scale_2, b.w13_scale_2, "w13_scale_2");
  expect_bytes_equal(a.w2_scale_2, b.w2_scale_2, "w2_scale_2");
  expect_bytes_equal(a.w13_bias, b.w13_bias, "w13_bias");
  expect_bytes_equal(a.w2_bias, b.w2_bias, "w2_bias");
  expect_bytes_equal(a.a13_scale_2, b.a13_scale_2, "a13_scale_2");
  expect_bytes_equal(a.a2_scale_2, b.a2_scale_2, "a2_scale_2");
  expect_bytes_equal(a.routing_bias, b.routing_bias, "routing_bias");
}

class CheckpointRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointRoundTrip, LoadsBitExactlyAndMatchesTheReference) {
  const Case& c = GetParam();
  const CheckpointSpec spec = spec_of(c);
  const std::vector<HostMoeWeights> layers = source_layers(spec);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));

  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  const MoeProblem& p = ckpt->problem();
  const MoeProblem& want = spec.problem;
  EXPECT_EQ(p.hidden_size, want.hidden_size);
  EXPECT_EQ(p.intermediate_size, want.intermediate_size);
  EXPECT_EQ(p.routing.method, want.routing.method);
  EXPECT_EQ(p.num_experts(), want.num_experts());
  EXPECT_EQ(p.top_k(), want.top_k());
  EXPECT_EQ(p.routing.renormalize, want.routing.renormalize);
  if (want.routing.method == RoutingMethod::kDeepSeekV3) {
    EXPECT_EQ(p.routing.num_groups, want.routing.num_groups);
    EXPECT_EQ(p.routing.topk_groups, want.routing.topk_groups);
    EXPECT_EQ(p.routing.routed_scaling_factor, want.routing.routed_scaling_factor);
  }
  EXPECT_EQ(p.activation, want.activation);
  EXPECT_EQ(p.has_bias, want.has_bias);
  EXPECT_EQ(p.weight_format, want.weight_format);
  EXPECT_EQ(p.num_shared_experts, want.num_shared_experts);
  EXPECT_EQ(ckpt->info().moe_layers, testing::moe_layers_of(spec));
  EXPECT_EQ(ckpt->num_shards(), c.num_shards);

  const std::vector<int> moe = testing::moe_layers_of(spec);
  HostMoeWeights loaded;  // reused across layers, as a layer-by-layer loader would
  for (size_t i = 0; i < moe.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(moe[i]));
    LoadReport report;
    ASSERT_OK(ckpt->load_moe_layer(moe[i], {}, &loaded, &report));
    EXPECT_TRUE(report.warnings.empty()) << report.warnings[0];
    EXPECT_EQ(report.has_input_scales, want.weight_format == WeightFormat::kNvfp4);
    EXPECT_EQ(report.expert_layout, c.convention == Convention::kModeloptFused3d         ? "fused 3-D, N-major"
                                    : c.convention == Convention::kModeloptFused3dKMajor ? "fused 3-D, K-major"
                                    : c.convention == Convention::kGptOssMxfp4           ? "gpt-oss blocks"
                                                                                         : "per-expert");
    expect_same_weights(loaded, layers[i]);
    // Thread count changes nothing but speed.
    for (int threads : {1, 3, 16}) {
      HostMoeWeights again;
      LoadOptions options;
      options.num_threads = threads;
      ASSERT_OK(ckpt->load_moe_layer(moe[i], options, &again));
      expect_same_weights(again, layers[i]);
    }

    // The layer itself: the reference on the loaded weights is the reference on the source weights.
    MoeProblem run = p;
    if (run.weight_format == WeightFormat::kNvfp4) run.mode = Mode::kW4A4;  // uses the input scales too
    auto rng = testing::make_rng(7 + i);
    const int64_t T = 7;
    const auto hidden = testing::random_hidden(rng, T, p.hidden_size);
    const auto logits = testing::random_logits(rng, T, p.num_experts());
    std::vector<float> out_loaded(size_t(T * p.hidden_size), NAN), out_source(out_loaded.size(), NAN);
    ASSERT_OK(ref::moe_forward(run, loaded.view(), {}, hidden.data(), logits.data(), LogitsType::kF32, T,
                               out_loaded.data()));
    ASSERT_OK(ref::moe_forward(run, layers[i].view(), {}, hidden.data(), logits.data(), LogitsType::kF32, T,
                               out_source.data()));
    EXPECT_GT(testing::l2_norm(out_loaded), 0.0);
    expect_bytes_equal(out_loaded, out_source, "layer output");
  }
}

INSTANTIATE_TEST_SUITE_P(Conventions, CheckpointRoundTrip, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// H = 4 I: the fused 3-D weights of the two orientations have the same shape ([E, 2I, 2I]); the scale
// shapes tell them apart, and both load bit-exactly.
TEST(CheckpointFused3d, OrientationWhereTheWeightShapesCoincide) {
  for (const Case& c : {kCases[3], kCases[4]}) {
    SCOPED_TRACE(c.name);
    CheckpointSpec spec = spec_of(c);
    spec.problem.intermediate_size = spec.problem.hidden_size / 4;
    const std::vector<HostMoeWeights> layers = source_layers(spec);
    testing::TempDir dir("fp4moe_test_ckpt");
    ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));
    std::unique_ptr<Checkpoint> ckpt;
    ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
    ASSERT_EQ(ckpt->problem().intermediate_size * 4, ckpt->problem().hidden_size);
    HostMoeWeights loaded;
    LoadReport report;
    ASSERT_OK(ckpt->load_moe_layer(testing::moe_layers_of(spec)[0], {}, &loaded, &report));
    EXPECT_EQ(report.expert_layout, c.convention == Convention::kModeloptFused3d ? "fused 3-D, N-major"
                                                                                   : "fused 3-D, K-major");
    expect_same_weights(loaded, layers[0]);
  }
}

// Every EP/TP rank reads exactly its part: equal to ref::shard_weights of the full layer.
TEST(CheckpointShards, EveryRankLoadsItsShard) {
  for (const Case& c : {kCases[0], kCases[3], kCases[4], kCases[6]}) {
    SCOPED_TRACE(c.name);
    CheckpointSpec spec = spec_of(c);
    spec.num_shards = 3;
    spec.write_index = true;
    const std::vector<HostMoeWeights> layers = source_layers(spec);
    testing::TempDir dir("fp4moe_test_ckpt");
    ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));
    std::unique_ptr<Checkpoint> ckpt;
    ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
    const int layer = testing::moe_layers_of(spec)[0];
    HostMoeWeights full;
    LoadReport full_report;
    ASSERT_OK(ckpt->load_moe_layer(layer, {}, &full, &full_report));
    HostMoeWeights loaded = full;  // reused: every shard shape overwrites buffers of another shape
    for (auto [ep, tp] : {std::pair{2, 1}, {1, 2}, {2, 2}, {4, 1}}) {
      for (int er = 0; er < ep; ++er) {
        for (int tr = 0; tr < tp; ++tr) {
          SCOPED_TRACE(::testing::Message() << "ep " << er << "/" << ep << " tp " << tr << "/" << tp);
          HostMoeWeights expected;
          ASSERT_OK(ref::shard_weights(ckpt->problem(), layers[0], {er, ep, tr, tp}, &expected));
          LoadReport report;
          ASSERT_OK(ckpt->load_moe_layer(layer, {er, ep, tr, tp}, &loaded, &report));
          expect_same_weights(loaded, expected);
          // A rank copies about its share of the expert bytes (the scalars and routing bias aside).
          EXPECT_LT(report.bytes_read, full_report.bytes_read / uint64_t(ep * tp) + 4096);
        }
      }
    }
  }
}

TEST(CheckpointShards, RejectsBadLoadOptions) {
  CheckpointSpec spec = spec_of(kCases[2]);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  HostMoeWeights w;
  Status s = ckpt->load_moe_layer(0, {0, 3, 0, 1}, &w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ep_size = 3"), std::string::npos) << s.message();
  s = ckpt->load_moe_layer(0, {0, 1, 0, 4}, &w);  // 64 / 4 = 16: not whole MXFP4-size blocks
  EXPECT_NE(s.message().find("tp_size = 4"), std::string::npos) << s.message();
  s = ckpt->load_moe_layer(0, {0, 1, 2, 2}, &w);
  EXPECT_NE(s.message().find("tp_rank = 2"), std::string::npos) << s.message();
  s = ckpt->load_moe_layer(5, {}, &w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer = 5 is not a MoE layer"), std::string::npos) << s.message();
}

TEST(CheckpointIndex, IncompleteIndexIsCompletedFromTheHeaders) {
  CheckpointSpec spec = spec_of(kCases[0]);
  spec.num_shards = 4;
  spec.write_index = true;
  spec.index_drop_every = 3;
  const auto layers = source_layers(spec);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  ASSERT_EQ(ckpt->warnings().size(), 1u);
  EXPECT_NE(ckpt->warnings()[0].find("incomplete"), std::string::npos) << ckpt->warnings()[0];
  EXPECT_EQ(ckpt->num_shards(), 4);
  const auto moe = testing::moe_layers_of(spec);
  for (size_t i = 0; i < moe.size(); ++i) {
    HostMoeWeights w;
    ASSERT_OK(ckpt->load_moe_layer(moe[i], {}, &w));
    expect_same_weights(w, layers[i]);
  }
}

TEST(CheckpointIndex, WrongOrMissingShardEntries) {
  CheckpointSpec spec = spec_of(kCases[0]);
  spec.num_shards = 2;
  spec.write_index = true;
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
  const std::string index = dir.path() + "/model.safetensors.index.json";
  const std::string original = read_text(index);
  std::unique_ptr<Checkpoint> ckpt;

  // An entry naming the other shard: the header wins, with a warning.
  replace_in_file(index, "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"",
                  "\"model.embed_tokens.weight\": \"model-00002-of-00002.safetensors\"");
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  ASSERT_EQ(ckpt->warnings().size(), 1u);
  EXPECT_NE(ckpt->warnings()[0].find("name the wrong shard"), std::string::npos) << ckpt->warnings()[0];

  // A shard the index names must exist.
  std::ofstream(index) << original;
  replace_in_file(index, "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"",
                  "\"model.embed_tokens.weight\": \"model-00003-of-00002.safetensors\"");
  Status s = Checkpoint::open(dir.path(), &ckpt);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("model-00003-of-00002.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.message();

  // Shard names stay inside the directory.
  std::ofstream(index) << original;
  replace_in_file(index, "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"",
                  "\"model.embed_tokens.weight\": \"../model-00001-of-00002.safetensors\"");
  s = Checkpoint::open(dir.path(), &ckpt);
  EXPECT_NE(s.message().find("not a plain file name"), std::string::npos) << s.message();

  // Tensors the index names that no shard holds: a warning.
  std::ofstream(index) << original;
  replace_in_file(index, "\"weight_map\": {", "\"weight_map\": {\"ghost.weight\": \"model-00001-of-00002.safetensors\", ");
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  ASSERT_EQ(ckpt->warnings().size(), 1u);
  EXPECT_NE(ckpt->warnings()[0].find("'ghost.weight'"), std::string::npos) << ckpt->warnings()[0];

  // Malformed index JSON.
  std::ofstream(index) << "{\"weight_map\": {";
  s = Checkpoint::open(dir.path(), &ckpt);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("model.safetensors.index.json: JSON error"), std::string::npos) << s.message();
}

TEST(CheckpointFiles, CorruptOrDuplicatedShards) {
  CheckpointSpec spec = spec_of(kCases[1]);
  spec.num_shards = 2;
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
  const std::string shard = dir.path() + "/model-00002-of-00002.safetensors";
  std::unique_ptr<Checkpoint> ckpt;

  // Two shards holding the same tensor.
  fs::copy_file(shard, dir.path() + "/copy.safetensors");
  Status s = Checkpoint::open(dir.path(), &ckpt);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("is in two shards"), std::string::npos) << s.message();
  fs::remove(dir.path() + "/copy.safetensors");

  // A truncated shard is named.
  fs::resize_file(shard, fs::file_size(shard) - 100);
  s = Checkpoint::open(dir.path(), &ckpt);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(shard), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();

  // No shards at all.
  testing::TempDir empty("fp4moe_test_ckpt");
  std::ofstream(empty.path() + "/config.json") << read_text(dir.path() + "/config.json");
  s = Checkpoint::open(empty.path(), &ckpt);
  EXPECT_NE(s.message().find("no .safetensors files"), std::string::npos) << s.message();
  s = Checkpoint::open(empty.path() + "/nope", &ckpt);
  EXPECT_NE(s.message().find("no config.json"), std::string::npos) << s.message();
}

TEST(CheckpointTensors, MissingOrMisshapenTensorsAreNamed) {
  CheckpointSpec spec = spec_of(kCases[0]);
  spec.skip_tensor = [](const std::string& n) { return n == "model.layers.1.mlp.experts.5.up_proj.weight_scale"; };
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  HostMoeWeights w;
  Status s = ckpt->load_moe_layer(1, {}, &w);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("'model.layers.1.mlp.experts.5.up_proj.weight_scale' is in no shard"), std::string::npos)
      << s.message();
  // EP rank 0 holds experts 0..3 and never needs expert 5.
  EXPECT_OK(ckpt->load_moe_layer(1, {0, 2, 0, 1}, &w));

  // A checkpoint whose config disagrees with its tensors (I = 64 on disk, 96 in the config).
  replace_in_file(dir.path() + "/config.json", "\"moe_intermediate_size\": 64", "\"moe_intermediate_size\": 96");
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  s = ckpt->load_moe_layer(2, {}, &w);
  EXPECT_NE(s.message().find("'model.layers.2.mlp.experts.0.gate_proj.weight' has shape [64, 64], expected [96, 64]"),
            std::string::npos)
      << s.message();

  // A configuration that implies far more expert bytes than the files hold fails before allocating.
  replace_in_file(dir.path() + "/config.json", "\"hidden_size\": 128", "\"hidden_size\": 1048576");
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  s = ckpt->load_moe_layer(2, {}, &w);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("but the checkpoint holds only"), std::string::npos) << s.message();

  // A layer without expert tensors says what it looked for.
  CheckpointSpec none = spec_of(kCases[2]);
  none.skip_tensor = [](const std::string& n) { return n.find(".experts.") != std::string::npos; };
  testing::TempDir dir2("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir2.path(), none, source_layers(none)));
  ASSERT_OK(Checkpoint::open(dir2.path(), &ckpt));
  s = ckpt->load_moe_layer(0, {}, &w);
  EXPECT_NE(s.message().find("no routed-expert tensors found"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.layers.0.block_sparse_moe.experts.0.w1.weight"), std::string::npos) << s.message();
}

TEST(CheckpointConventions, FusedGateUpUsesTheGateScaleAndWarns) {
  CheckpointSpec spec = spec_of(kCases[2]);
  spec.up_scale_factor = 2.0f;
  const auto layers = source_layers(spec);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  HostMoeWeights w;
  LoadReport report;
  ASSERT_OK(ckpt->load_moe_layer(0, {}, &w, &report));
  expect_same_weights(w, layers[0]);  // the gate's global scale, as written
  ASSERT_EQ(report.warnings.size(), size_t(spec.problem.num_experts()));
  EXPECT_NE(report.warnings[0].find("uses the gate's"), std::string::npos) << report.warnings[0];
  EXPECT_NE(report.warnings[0].find("scaled by 0.5"), std::string::npos) << report.warnings[0];
}

// Overwrites the F32 scalar `name` of an open checkpoint's shard in place (header untouched).
void poke_f32(const Checkpoint& ckpt, const std::string& name, float value) {
  const SafetensorsFile* f = nullptr;
  const TensorInfo* t = ckpt.find_tensor(name, &f);
  ASSERT_TRUE(t && f) << name;
  ASSERT_EQ(t->dtype, Dtype::kF32) << name;
  std::fstream io(f->path(), std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  io.read(reinterpret_cast<char*>(&header), 8);
  io.seekp(std::streamoff(8 + header + t->data_begin));
  io.write(reinterpret_cast<const char*>(&value), 4);
  ASSERT_TRUE(io.good()) << f->path();
}

// compressed-tensors stores encode scales: one whose inverse overflows float is refused by name
// (it loaded as an infinite decode scale, and the layer's output was NaN).
TEST(CheckpointConventions, EncodeScaleWithoutAFiniteInverseIsRefused) {
  const CheckpointSpec spec = spec_of(kCases[1]);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  const int layer = testing::moe_layers_of(spec)[0];
  const std::string name = "model.layers." + std::to_string(layer) + ".mlp.experts.3.down_proj.weight_global_scale";
  poke_f32(*ckpt, name, 1e-40f);  // subnormal: 1 / 1e-40 is above FLT_MAX
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  HostMoeWeights w;
  const Status s = ckpt->load_moe_layer(layer, {}, &w);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("'" + name + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("has no finite inverse"), std::string::npos) << s.message();
}

TEST(CheckpointConventions, InputScalesAreOptional) {
  CheckpointSpec spec = spec_of(kCases[1]);
  spec.input_scales = false;
  const auto layers = source_layers(spec);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  HostMoeWeights w;
  LoadReport report;
  ASSERT_OK(ckpt->load_moe_layer(0, {}, &w, &report));
  EXPECT_FALSE(report.has_input_scales);
  EXPECT_TRUE(w.a13_scale_2.empty());
  expect_bytes_equal(w.w13, layers[0].w13, "w13");
}

// compressed-tensors with a second scheme for other modules (attention in FP8): the experts' NVFP4
// group loads; with the NVFP4 group gone, the refusal names the other group's weights.
TEST(CheckpointConfig, CompressedTensorsWithAnotherGroupForOtherModules) {
  const CheckpointSpec spec = spec_of(kCases[1]);
  const auto layers = source_layers(spec);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, layers));
  const std::string config = dir.path() + "/config.json";
  replace_in_file(config, "\"config_groups\": {",
                  "\"config_groups\": {\"group_attn\": {\"targets\": [\"re:.*self_attn.*\"], \"format\": "
                  "\"float-quantized\", \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
                  "\"tensor\", \"group_size\": null, \"symmetric\": true, \"dynamic\": false}}, ");
  std::unique_ptr<Checkpoint> ckpt;
  ASSERT_OK(Checkpoint::open(dir.path(), &ckpt));
  EXPECT_EQ(ckpt->info().convention, QuantConvention::kCompressedTensorsNvfp4);
  const int layer = testing::moe_layers_of(spec)[0];
  HostMoeWeights w;
  ASSERT_OK(ckpt->load_moe_layer(layer, {}, &w));
  expect_same_weights(w, layers[0]);

  // The NVFP4 group's weights made int4: no group is NVFP4 any more.
  replace_in_file(config, "\"num_bits\": 4, \"type\": \"float\"", "\"num_bits\": 4, \"type\": \"int\"");
  const Status s = Checkpoint::open(dir.path(), &ckpt);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("config_groups.group_attn.weights: num_bits = 8"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no config group has NVFP4 weights"), std::string::npos) << s.message();
}

TEST(CheckpointConfig, UnsupportedCheckpointsSayWhy) {
  struct Edit {
    const Case* base;
    std::string file, from, to;
    StatusCode code;
    std::string message;
  };
  const std::vector<Edit> edits = {
      {&kCases[2], "config.json", "MixtralForCausalLM", "BertModel", StatusCode::kUnsupported,
       "architecture 'BertModel' is not supported"},
      // A config.json that is not a Hugging Face one (gpt-oss's original/ folder has no 'architectures').
      {&kCases[2], "config.json", "\"architectures\": [\"MixtralForCausalLM\"], ", "", StatusCode::kIoError,
       "fp4moe reads Hugging Face checkpoints"},
      {&kCases[2], "hf_quant_config.json", "\"NVFP4\"", "\"FP8\"", StatusCode::kUnsupported, "quant_algo = 'FP8'"},
      {&kCases[2], "hf_quant_config.json", "\"group_size\": 16", "\"group_size\": 32", StatusCode::kUnsupported,
       "group_size = 32"},
      {&kCases[1], "config.json", "\"num_bits\": 4, \"type\": \"float\"", "\"num_bits\": 4, \"type\": \"int\"",
       StatusCode::kUnsupported, "type = 'int'"},
      {&kCases[1], "config.json", "\"quant_method\": \"compressed-tensors\"", "\"quant_method\": \"awq\"",
       StatusCode::kUnsupported, "quant_method = 'awq'"},
      {&kCases[6], "config.json", "\"swiglu_limit\": 7.0", "\"swiglu_limit\": 5.0", StatusCode::kUnsupported,
       "swiglu_limit = 5"},
      {&kCases[0], "config.json", "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"",
       StatusCode::kUnsupported, "scoring_func = 'softmax'"},
      {&kCases[0], "config.json", "\"n_routed_experts\": 8", "\"n_routed_experts\": \"8\"", StatusCode::kIoError,
       "'n_routed_experts' = '8' is not an integer"},
      {&kCases[0], "config.json", "\"hidden_size\": 128", "\"hidden_size\": 100", StatusCode::kInvalidArgument,
       "hidden_size = 100"},
      {&kCases[0], "config.json", "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 2,", StatusCode::kIoError,
       "config.json: JSON error"},
      // Named as written, not clamped into range first (it read "num_groups = 0 must be > 0").
      {&kCases[0], "config.json", "\"n_group\": 4", "\"n_group\": -3", StatusCode::kIoError,
       "'n_group' = -3 must be in [1, 4096]"},
  };
  for (const auto& e : edits) {
    SCOPED_TRACE(e.message);
    const CheckpointSpec spec = spec_of(*e.base);
    testing::TempDir dir("fp4moe_test_ckpt");
    ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
    replace_in_file(dir.path() + "/" + e.file, e.from, e.to);
    std::unique_ptr<Checkpoint> ckpt;
    const Status s = Checkpoint::open(dir.path(), &ckpt);
    EXPECT_EQ(s.code(), e.code) << s.to_string();
    EXPECT_NE(s.message().find(e.message), std::string::npos) << s.message();
  }

  // Not quantized at all.
  const CheckpointSpec spec = spec_of(kCases[2]);
  testing::TempDir dir("fp4moe_test_ckpt");
  ASSERT_OK(testing::write_checkpoint(dir.path(), spec, source_layers(spec)));
  fs::remove(dir.path() + "/hf_quant_config.json");
  CheckpointInfo info;
  const Status s = read_checkpoint_config(dir.path(), &info);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("not quantized"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp4moe
