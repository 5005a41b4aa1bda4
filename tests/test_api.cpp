// Public API: presets and validate() rejections, each naming the bad field and its value.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>

#include "fp4moe/moe.h"
#include "src/common/device_code.h"
#include "test_util.h"

namespace fp4moe {
namespace {

TEST(Presets, EveryModelOfTheBriefIsThereAndValid) {
  const std::vector<std::string> want = {"deepseek-r1",     "qwen3-30b-a3b", "qwen3-235b-a22b", "llama4-scout",
                                         "llama4-maverick", "mixtral-8x7b",  "gpt-oss-120b",    "gpt-oss-20b"};
  EXPECT_EQ(preset_names(), want);
  for (const auto& n : preset_names()) {
    MoeProblem p;
    ASSERT_OK(get_preset(n, &p));
    EXPECT_EQ(p.name, n);
    EXPECT_OK(validate(p));
    EXPECT_OK(validate(scaled_preset(p, 16)));
  }
}

TEST(Presets, ShapesMatchTheBrief) {
  MoeProblem p;
  ASSERT_OK(get_preset("deepseek-r1", &p));
  EXPECT_EQ(p.hidden_size, 7168);
  EXPECT_EQ(p.intermediate_size, 2048);
  EXPECT_EQ(p.num_experts(), 256);
  EXPECT_EQ(p.top_k(), 8);
  EXPECT_EQ(p.routing.method, RoutingMethod::kDeepSeekV3);
  EXPECT_EQ(p.routing.num_groups, 8);
  EXPECT_EQ(p.routing.topk_groups, 4);
  EXPECT_FLOAT_EQ(p.routing.routed_scaling_factor, 2.5f);
  // 3 * 7168 * 2048 FP4 values: half a byte each plus one e4m3 scale per 16.
  EXPECT_EQ(p.expert_weight_bytes(), 3 * 7168 * 2048 / 2 + 3 * 7168 * 2048 / 16);
  ASSERT_OK(get_preset("gpt-oss-120b", &p));
  EXPECT_EQ(p.weight_format, WeightFormat::kMxfp4);
  EXPECT_EQ(p.activation, Activation::kGptOss);
  EXPECT_TRUE(p.has_bias);
  EXPECT_EQ(p.expert_weight_bytes(), 3 * 2880 * 2880 / 2 + 3 * 2880 * 2880 / 32);
  ASSERT_OK(get_preset("llama4-maverick", &p));
  EXPECT_TRUE(p.apply_router_weight_on_input());
  Status s = get_preset("deepseek-v4", &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'deepseek-v4'"), std::string::npos);
  EXPECT_NE(s.message().find("gpt-oss-20b"), std::string::npos);  // lists the presets
}

// Each mutation must be rejected with a message containing `needle`.
void expect_rejected(MoeProblem p, const std::string& needle, StatusCode code = StatusCode::kInvalidArgument) {
  Status s = validate(p);
  EXPECT_EQ(s.code(), code) << needle << " -> " << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "'" << s.message() << "' lacks '" << needle << "'";
}

TEST(Validate, RejectsEachBadField) {
  MoeProblem base;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &base));
  MoeProblem p = base;
  p.hidden_size = 2040;  // K of GEMM1 not a multiple of 32
  expect_rejected(p, "hidden_size = 2040");
  p = base;
  p.hidden_size = 0;
  expect_rejected(p, "hidden_size = 0");
  p = base;
  p.intermediate_size = 776;  // K of GEMM2 not a multiple of 32
  expect_rejected(p, "intermediate_size = 776");
  p = base;
  p.intermediate_size = 32 * ((int64_t(1) << 55) / 3);  // H x I wrapped around in int64
  expect_rejected(p, "intermediate_size = " + std::to_string(p.intermediate_size));
  p = base;
  p.hidden_size = int64_t(1) << 21;
  expect_rejected(p, "hidden_size = 2097152");
  p = base;
  p.routing.num_experts = 8;
  p.routing.top_k = 9;  // top-k larger than the expert count
  expect_rejected(p, "top_k = 9");
  p = base;
  p.routing.top_k = 129;  // beyond the routing kernels' limit
  expect_rejected(p, "top_k = 129", StatusCode::kUnsupported);
  p = base;
  p.routing.num_experts = 0;
  expect_rejected(p, "num_experts = 0");
  p = base;
  p.max_tokens = 0;
  expect_rejected(p, "max_tokens = 0");
  p = base;
  p.max_tokens = int64_t(1) << 28;  // times top_k 8 overflows the pair index
  expect_rejected(p, "max_tokens = 268435456");
  p = base;
  p.max_tokens = int64_t(1) << 61;  // times top_k 8 wraps to 0 in int64: the check must not multiply
  expect_rejected(p, "max_tokens = 2305843009213693952");
  p = base;
  p.max_tokens = std::numeric_limits<int64_t>::max();
  expect_rejected(p, "max_tokens = 9223372036854775807");
  p = base;
  p.routing.method = RoutingMethod::kDeepSeekV3;
  p.routing.num_groups = 3;  // 128 experts in 3 groups
  expect_rejected(p, "num_groups = 3");
  p = base;
  p.routing.method = RoutingMethod::kLlama4;
  p.routing.top_k = 2;
  expect_rejected(p, "top_k = 2");
  p = base;
  p.mode = Mode(7);  // an integer cast into the enum (a C API, a binding): named, not run as w4a16
  expect_rejected(p, "mode = 7");
  p = base;
  p.activation = Activation(9);
  expect_rejected(p, "activation = 9");
  p = base;
  p.weight_format = WeightFormat(3);
  expect_rejected(p, "weight_format = 3");
  p = base;
  p.num_shared_experts = -1;
  expect_rejected(p, "num_shared_experts = -1");
  ASSERT_OK(get_preset("gpt-oss-20b", &p));
  p.mode = Mode::kW4A4;
  expect_rejected(p, "w4a4", StatusCode::kUnsupported);
}

TEST(Presets, ScaledBelowOneIsThePreset) {
  MoeProblem base;
  ASSERT_OK(get_preset("deepseek-r1", &base));
  for (int factor : {0, -4}) {  // (a division by zero before)
    const MoeProblem s = scaled_preset(base, factor);
    EXPECT_EQ(s.hidden_size, base.hidden_size);
    EXPECT_EQ(s.intermediate_size, base.intermediate_size);
  }
  EXPECT_EQ(scaled_preset(base, 16).hidden_size, 512);
}

TEST(Validate, ParsesNames) {
  Mode m;
  EXPECT_OK(parse_mode("w4a4", &m));
  EXPECT_EQ(m, Mode::kW4A4);
  Status s = parse_mode("w8a8", &m);
  EXPECT_NE(s.message().find("'w8a8'"), std::string::npos);
}

// Global scales are checked by value before any layer takes them (0, NaN, inf, negative: all-zero,
// all-NaN or sign-flipped outputs otherwise), naming the array and the expert.
TEST(Validate, GlobalScalesByValue) {
  MoeProblem p;
  ASSERT_OK(get_preset("qwen3-30b-a3b", &p));
  p = scaled_preset(p, 32);
  const HostMoeWeights w = make_random_weights(p, 4);
  const int64_t E = p.num_experts();
  EXPECT_OK(validate_global_scales(p, w.view(), E));
  for (float bad : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    HostMoeWeights v = w;
    v.w2_scale_2[3] = bad;
    const Status s = validate_global_scales(p, v.view(), E);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("w2_scale_2[3] = "), std::string::npos) << s.message();
  }
  HostMoeWeights zero = w;
  zero.w13_scale_2[0] = 0.0f;  // an all-zero expert
  EXPECT_OK(validate_global_scales(p, zero.view(), E));
  // w4a4's input scales must be > 0; in w4a16 they are not used.
  MoeProblem p4 = p;
  p4.mode = Mode::kW4A4;
  HostMoeWeights w4 = make_random_weights(p4, 4);
  EXPECT_OK(validate_global_scales(p4, w4.view(), E));
  w4.a13_scale_2[1] = 0.0f;
  const Status s = validate_global_scales(p4, w4.view(), E);
  EXPECT_NE(s.message().find("a13_scale_2[1] = 0 must be finite and > 0"), std::string::npos) << s.message();
  EXPECT_OK(validate_global_scales(p, w4.view(), E));
}

// The device check MoeLayer creation runs first (a device without this build's device code gets
// Unsupported, naming it, before anything is allocated there).
TEST(DeviceCode, OnlyHopperRunsThisBuildAndOtherDevicesAreNamed) {
  EXPECT_OK(check_device_code(0, "NVIDIA H200", 9, 0));
  for (auto [major, minor, name] : {std::tuple{8, 0, "NVIDIA A100-SXM4-80GB"}, std::tuple{8, 9, "NVIDIA L40S"},
                                    std::tuple{10, 0, "NVIDIA B200"}, std::tuple{12, 0, "NVIDIA RTX PRO 6000"}}) {
    const Status s = check_device_code(3, name, major, minor);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << name;
    const std::string cc = std::to_string(major) + "." + std::to_string(minor);
    const std::string parts[] = {std::string("device 3 (") + name + ")", "compute capability " + cc, "sm_90a"};
    for (const std::string& part : parts)
      EXPECT_NE(s.message().find(part), std::string::npos) << s.message() << " lacks '" << part << "'";
  }
}

}  // namespace
}  // namespace fp4moe
