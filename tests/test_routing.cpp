// Routing, host side: det_math.h (exp_det, sigmoid_det, selection keys, summation order), validate(),
// and route_cpu() for the four methods: hand-computed cases whose weights are exact in fp32, tie
// breaking, the output-order contract, every validation rejection, and random inputs checked
// against an independent double-precision implementation written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "fp4moe/numerics.h"
#include "fp4moe/routing.h"
#include "src/routing/det_math.h"
#include "test_util.h"

namespace fp4moe {
namespace {

using routing::exp_det;
using routing::sigmoid_det;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int32_t kIdSentinel = -7;

// ---- Helpers -----------------------------------------------------------------------------------

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Runs route_cpu on `num_tokens` rows of fp32 logits; outputs start as sentinels (id -7, NaN) so a
// slot the router forgot to write shows up.
Status route_f32(const RoutingConfig& config, const std::vector<float>& logits, Routed* out,
                 const std::vector<float>* bias = nullptr) {
  const int64_t num_tokens = static_cast<int64_t>(logits.size()) / config.num_experts;
  out->ids.assign(num_tokens * config.top_k, kIdSentinel);
  out->weights.assign(num_tokens * config.top_k, kNaN);
  RoutingArgs args;
  args.logits = logits.data();
  args.logits_type = LogitsType::kF32;
  args.correction_bias = bias ? bias->data() : nullptr;
  args.num_tokens = num_tokens;
  args.topk_ids = out->ids.data();
  args.topk_weights = out->weights.data();
  return route_cpu(config, args);
}

Status route_bf16(const RoutingConfig& config, const std::vector<uint16_t>& logits, Routed* out,
                  const std::vector<float>* bias = nullptr) {
  const int64_t num_tokens = static_cast<int64_t>(logits.size()) / config.num_experts;
  out->ids.assign(num_tokens * config.top_k, kIdSentinel);
  out->weights.assign(num_tokens * config.top_k, kNaN);
  RoutingArgs args;
  args.logits = logits.data();
  args.logits_type = LogitsType::kBF16;
  args.correction_bias = bias ? bias->data() : nullptr;
  args.num_tokens = num_tokens;
  args.topk_ids = out->ids.data();
  args.topk_weights = out->weights.data();
  return route_cpu(config, args);
}

RoutingConfig make_config(RoutingMethod method, int num_experts, int top_k, bool renormalize = false) {
  RoutingConfig config;
  config.method = method;
  config.num_experts = num_experts;
  config.top_k = top_k;
  config.renormalize = renormalize;
  return config;
}

RoutingConfig make_deepseek(int num_experts, int top_k, int num_groups, int topk_groups, bool renormalize,
                            float scaling) {
  RoutingConfig config = make_config(RoutingMethod::kDeepSeekV3, num_experts, top_k, renormalize);
  config.num_groups = num_groups;
  config.topk_groups = topk_groups;
  config.routed_scaling_factor = scaling;
  return config;
}

// Distance in ulps between a float and an exact value, measured in the ulp of the float nearest to
// the exact value (the subnormal spacing below FLT_MIN).
double ulp_error(float got, double exact) {
  const float nearest = static_cast<float>(exact);
  if (std::isinf(nearest)) return std::isinf(got) && (got > 0) == (nearest > 0) ? 0.0 : INFINITY;
  const float mag = std::fabs(nearest);
  const double ulp = double(std::nextafter(mag, kInf)) - double(mag);
  return std::fabs(double(got) - exact) / ulp;
}

void expect_bits_eq(float got, float expected, const std::string& what) {
  EXPECT_EQ(float_bits(got), float_bits(expected)) << what << ": got " << got << " (" << std::hexfloat << got
                                                   << "), expected " << expected << std::defaultfloat;
}

void expect_message_has(const Status& status, StatusCode code, const std::string& needle) {
  EXPECT_EQ(status.code(), code) << status.to_string();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "message \"" << status.message() << "\" should contain \"" << needle << "\"";
}

// ---- det_math: exp_det / sigmoid_det -----------------------------------------------------------

TEST(DetMath, ExpSpecialValues) {
  expect_bits_eq(exp_det(0.0f), 1.0f, "exp(0)");
  expect_bits_eq(exp_det(-0.0f), 1.0f, "exp(-0)");
  expect_bits_eq(exp_det(1.0f), 0x1.5bf0a8p+1f, "exp(1) (e correctly rounded)");
  expect_bits_eq(exp_det(kInf), kInf, "exp(inf)");
  expect_bits_eq(exp_det(-kInf), 0.0f, "exp(-inf)");
  EXPECT_TRUE(std::isnan(exp_det(kNaN)));
  EXPECT_TRUE(std::isnan(exp_det(-kNaN)));
  // Overflow boundary: the largest float with a finite exp, and the next one up.
  const float last_finite = routing::kExpOverflowThreshold;
  EXPECT_TRUE(std::isfinite(exp_det(last_finite)));
  EXPECT_LE(ulp_error(exp_det(last_finite), std::exp(double(last_finite))), 1.0);
  expect_bits_eq(exp_det(std::nextafter(last_finite, kInf)), kInf, "exp just past overflow");
  expect_bits_eq(exp_det(1000.0f), kInf, "exp(1000)");
  // Underflow: subnormal results are rounded once; below -150 ln2 everything is +0.
  EXPECT_GT(exp_det(-103.0f), 0.0f);
  EXPECT_LT(exp_det(-103.0f), std::numeric_limits<float>::min());
  EXPECT_LE(ulp_error(exp_det(-103.0f), std::exp(-103.0)), 1.0);
  expect_bits_eq(exp_det(-104.0f), 0.0f, "exp(-104)");
  expect_bits_eq(exp_det(-1000.0f), 0.0f, "exp(-1000)");
}

// Tolerance: 1 ulp. Measured maximum 0.92 ulp over every 7th float of [-104, 88.8] (320M inputs,
// subnormal results included); 1 ulp is also what the design promises (degree-7 Taylor truncation
// < 0.05 ulp, one rounding in the reduced argument, ~0.5 ulp in the last FMA).
TEST(DetMath, ExpWithinOneUlp) {
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const double err = ulp_error(exp_det(x), std::exp(double(x)));
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  };
  // A stride through every binade of both signs, then random inputs in the softmax range.
  for (uint32_t u = 0; u <= float_bits(89.0f); u += 4099) check(bits_float(u));
  for (uint32_t u = 0x80000000u; u <= float_bits(-105.0f); u += 4099) check(bits_float(u));
  auto rng = testing::make_rng(101);
  for (float x : testing::random_floats(rng, 200000, -30.0f, 0.0f)) check(x);
  for (float x : testing::random_floats(rng, 200000, -104.0f, 88.7f)) check(x);
  EXPECT_LE(worst, 1.0) << "worst at x = " << std::hexfloat << worst_x;
}

// Tolerance: 3 ulp (measured maximum 2.36 ulp over every 7th float of [-120, 120]): one exp
// (< 1 ulp), an add and a division, each rounded.
TEST(DetMath, SigmoidWithinThreeUlp) {
  expect_bits_eq(sigmoid_det(0.0f), 0.5f, "sigmoid(0)");
  expect_bits_eq(sigmoid_det(-0.0f), 0.5f, "sigmoid(-0)");
  expect_bits_eq(sigmoid_det(kInf), 1.0f, "sigmoid(inf)");
  expect_bits_eq(sigmoid_det(-kInf), 0.0f, "sigmoid(-inf)");
  expect_bits_eq(sigmoid_det(30.0f), 1.0f, "sigmoid(30)");
  expect_bits_eq(sigmoid_det(-200.0f), 0.0f, "sigmoid(-200)");
  EXPECT_TRUE(std::isnan(sigmoid_det(kNaN)));
  // Far negative: e / (1 + e) keeps relative accuracy (1 / (1 + inf) would give 0).
  EXPECT_GT(sigmoid_det(-95.0f), 0.0f);

  double worst = 0;
  float worst_x = 0;
  for (uint32_t u = 0; u <= float_bits(120.0f); u += 2053) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = bits_float(u | sign);
      const double err = ulp_error(sigmoid_det(x), 1.0 / (1.0 + std::exp(-double(x))));
      if (err > worst) {
        worst = err;
        worst_x = x;
      }
    }
  }
  EXPECT_LE(worst, 3.0) << "worst at x = " << std::hexfloat << worst_x;
}

// ---- det_math: selection keys and summation order ------------------------------------------------

TEST(DetMath, OrderKeyOrdersLikeFloats) {
  auto rng = testing::make_rng(102);
  std::vector<float> values = testing::random_floats(rng, 2000, -1e6f, 1e6f);
  for (float special : {0.0f, -0.0f, kInf, -kInf, 1e-45f, -1e-45f, std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::lowest(), std::numeric_limits<float>::min()}) {
    values.push_back(special);
  }
  for (float a : values) {
    for (size_t j = 0; j < values.size(); j += 37) {
      const float b = values[j];
      EXPECT_EQ(routing::order_key(a) < routing::order_key(b), a < b) << a << " vs " << b;
      EXPECT_EQ(routing::order_key(a) == routing::order_key(b), a == b) << a << " vs " << b;
    }
    if (a != 0.0f) expect_bits_eq(routing::key_value(routing::order_key(a)), a, "key round trip");
  }
  EXPECT_EQ(routing::order_key(-0.0f), routing::order_key(0.0f));
  EXPECT_EQ(routing::order_key(kNaN), 0u);
  EXPECT_EQ(routing::order_key(-kNaN), 0u);
  EXPECT_LT(routing::order_key(kNaN), routing::order_key(-kInf));
  EXPECT_TRUE(std::isnan(routing::key_value(0u)));
}

TEST(DetMath, RankOrdersByKeyThenLowestId) {
  const uint32_t key = routing::order_key(1.5f);
  EXPECT_GT(routing::make_rank(key, 3), routing::make_rank(key, 4));
  EXPECT_GT(routing::make_rank(routing::order_key(2.0f), 511), routing::make_rank(key, 0));
  EXPECT_GT(routing::make_rank(0u, 511), 0u);  // even a NaN score is a candidate, unlike rank 0
  EXPECT_EQ(routing::rank_id(routing::make_rank(key, 317)), 317);
  EXPECT_EQ(routing::rank_key(routing::make_rank(key, 317)), key);
}

TEST(DetMath, SumInWarpOrder) {
  std::vector<float> ints(512);
  std::iota(ints.begin(), ints.end(), 0.0f);
  EXPECT_EQ(routing::sum_in_warp_order(ints.data(), 512), 130816.0f);  // exact: all partials < 2^24
  EXPECT_EQ(routing::sum_in_warp_order(ints.data(), 0), 0.0f);
  // Where the order shows: 2^24 then 31 ones. Left to right every +1 is lost (ties to even); in
  // warp order lane 0's +1 from lane 16 is lost, then it adds 2 + 4 + 8 + 16 exactly: 2^24 + 30.
  std::vector<float> v(32, 1.0f);
  v[0] = 16777216.0f;
  EXPECT_EQ(routing::sum_in_warp_order(v.data(), 32), 16777246.0f);
}

// ---- to_string / validate ----------------------------------------------------------------------

TEST(RoutingValidate, MethodNames) {
  EXPECT_STREQ(to_string(RoutingMethod::kSoftmaxTopK), "SoftmaxTopK");
  EXPECT_STREQ(to_string(RoutingMethod::kDeepSeekV3), "DeepSeekV3");
  EXPECT_STREQ(to_string(RoutingMethod::kLlama4), "Llama4");
  EXPECT_STREQ(to_string(RoutingMethod::kTopKSoftmax), "TopKSoftmax");
  EXPECT_STREQ(to_string(static_cast<RoutingMethod>(9)), "unknown RoutingMethod");
}

TEST(RoutingValidate, AcceptsModelPresets) {
  EXPECT_OK(validate(make_deepseek(256, 8, 8, 4, true, 2.5f)));        // DeepSeek-V3/R1
  EXPECT_OK(validate(make_config(RoutingMethod::kSoftmaxTopK, 128, 8, true)));  // Qwen3-MoE
  EXPECT_OK(validate(make_config(RoutingMethod::kSoftmaxTopK, 8, 2)));          // Mixtral
  EXPECT_OK(validate(make_config(RoutingMethod::kLlama4, 16, 1)));
  EXPECT_OK(validate(make_config(RoutingMethod::kTopKSoftmax, 128, 4)));        // gpt-oss
  EXPECT_OK(validate(make_config(RoutingMethod::kSoftmaxTopK, 512, 16)));       // the limits
  EXPECT_OK(validate(make_deepseek(512, 16, 512, 16, false, 1.0f)));            // groups of one
  // Group fields are DeepSeek-V3 only: other methods ignore them.
  RoutingConfig ignored = make_config(RoutingMethod::kSoftmaxTopK, 8, 2);
  ignored.num_groups = 3;
  ignored.topk_groups = 0;
  ignored.routed_scaling_factor = -1.0f;
  EXPECT_OK(validate(ignored));
}

TEST(RoutingValidate, RejectsBadConfigs) {
  expect_message_has(validate(make_config(RoutingMethod::kSoftmaxTopK, 0, 1)), StatusCode::kInvalidArgument,
                     "num_experts = 0");
  expect_message_has(validate(make_config(RoutingMethod::kSoftmaxTopK, -4, 1)), StatusCode::kInvalidArgument,
                     "num_experts = -4");
  expect_message_has(validate(make_config(RoutingMethod::kSoftmaxTopK, 513, 1)), StatusCode::kUnsupported,
                     "num_experts = 513");
  expect_message_has(validate(make_config(RoutingMethod::kSoftmaxTopK, 8, 0)), StatusCode::kInvalidArgument,
                     "top_k = 0");
  expect_message_has(validate(make_config(RoutingMethod::kSoftmaxTopK, 8, -1)), StatusCode::kInvalidArgument,
                     "top_k = -1");
  expect_message_has(validate(make_config(RoutingMethod::kSoftmaxTopK, 64, 17)), StatusCode::kUnsupported,
                     "top_k = 17");
  expect_message_has(validate(make_config(RoutingMethod::kTopKSoftmax, 8, 9)), StatusCode::kInvalidArgument,
                     "top_k = 9 must be <= num_experts = 8");
  expect_message_has(validate(make_config(RoutingMethod::kLlama4, 16, 2)), StatusCode::kInvalidArgument,
                     "top_k = 2");
  expect_message_has(validate(make_config(static_cast<RoutingMethod>(7), 8, 1)), StatusCode::kInvalidArgument,
                     "routing method = 7");

  expect_message_has(validate(make_deepseek(8, 2, 0, 1, false, 1.0f)), StatusCode::kInvalidArgument,
                     "num_groups = 0");
  expect_message_has(validate(make_deepseek(8, 2, -2, 1, false, 1.0f)), StatusCode::kInvalidArgument,
                     "num_groups = -2");
  expect_message_has(validate(make_deepseek(8, 2, 3, 1, false, 1.0f)), StatusCode::kInvalidArgument,
                     "num_groups = 3 must divide num_experts = 8");
  expect_message_has(validate(make_deepseek(8, 2, 4, 5, false, 1.0f)), StatusCode::kInvalidArgument,
                     "topk_groups = 5");
  expect_message_has(validate(make_deepseek(8, 2, 4, 0, false, 1.0f)), StatusCode::kInvalidArgument,
                     "topk_groups = 0");
  expect_message_has(validate(make_deepseek(8, 5, 4, 2, false, 1.0f)), StatusCode::kInvalidArgument,
                     "top_k = 5 must be <= topk_groups * (num_experts / num_groups) = 2 * 2 = 4");
  expect_message_has(validate(make_deepseek(8, 2, 4, 2, false, 0.0f)), StatusCode::kInvalidArgument,
                     "routed_scaling_factor = 0");
  expect_message_has(validate(make_deepseek(8, 2, 4, 2, false, -2.5f)), StatusCode::kInvalidArgument,
                     "routed_scaling_factor = -2.5");
  expect_message_has(validate(make_deepseek(8, 2, 4, 2, false, kInf)), StatusCode::kInvalidArgument,
                     "routed_scaling_factor = inf");
  expect_message_has(validate(make_deepseek(8, 2, 4, 2, false, kNaN)), StatusCode::kInvalidArgument,
                     "routed_scaling_factor = nan");
}

TEST(RoutingValidate, RejectsBadArgs) {
  const RoutingConfig config = make_config(RoutingMethod::kSoftmaxTopK, 4, 2);
  std::vector<float> logits(8, 0.0f);
  std::vector<int32_t> ids(4, kIdSentinel);
  std::vector<float> weights(4, kNaN);
  auto good_args = [&] {
    RoutingArgs args;
    args.logits = logits.data();
    args.num_tokens = 2;
    args.topk_ids = ids.data();
    args.topk_weights = weights.data();
    return args;
  };
  EXPECT_OK(route_cpu(config, good_args()));

  RoutingArgs args = good_args();
  args.num_tokens = -1;
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "num_tokens = -1");
  args = good_args();
  args.logits = nullptr;
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "logits = null");
  args = good_args();
  args.topk_ids = nullptr;
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "topk_ids = null");
  args = good_args();
  args.topk_weights = nullptr;
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "topk_weights = null");
  args = good_args();
  args.logits_type = static_cast<LogitsType>(5);
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "logits_type = 5");
  args = good_args();
  args.logits = reinterpret_cast<const char*>(logits.data()) + 2;  // fine for bf16, not for fp32
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "logits = ");
  args = good_args();
  args.topk_weights = reinterpret_cast<float*>(reinterpret_cast<char*>(weights.data()) + 1);
  expect_message_has(route_cpu(config, args), StatusCode::kInvalidArgument, "topk_weights = ");

  // DeepSeek-V3 needs its bias whatever the token count.
  const RoutingConfig deepseek = make_deepseek(4, 2, 2, 1, true, 2.5f);
  args = good_args();
  expect_message_has(route_cpu(deepseek, args), StatusCode::kInvalidArgument, "correction_bias = null");
  args.num_tokens = 0;
  expect_message_has(route_cpu(deepseek, args), StatusCode::kInvalidArgument, "correction_bias = null");

  // A bad config is reported through route_cpu too.
  expect_message_has(route_cpu(make_config(RoutingMethod::kLlama4, 4, 2), good_args()),
                     StatusCode::kInvalidArgument, "top_k = 2");

  // Nothing was written by any rejected call (the good call above wrote the first values).
  ids.assign(4, kIdSentinel);
  args = good_args();
  args.topk_weights = nullptr;
  EXPECT_FALSE(route_cpu(config, args).ok());
  EXPECT_EQ(ids, std::vector<int32_t>(4, kIdSentinel));
}

TEST(RoutingValidate, ZeroTokensIsValidAndWritesNothing) {
  const RoutingConfig config = make_config(RoutingMethod::kSoftmaxTopK, 4, 2);
  RoutingArgs args;  // all pointers null
  args.num_tokens = 0;
  EXPECT_OK(route_cpu(config, args));
  std::vector<int32_t> ids(2, kIdSentinel);
  std::vector<float> weights(2, kNaN);
  std::vector<float> logits(4, 1.0f);
  args.logits = logits.data();
  args.topk_ids = ids.data();
  args.topk_weights = weights.data();
  EXPECT_OK(route_cpu(config, args));
  EXPECT_EQ(ids, std::vector<int32_t>(2, kIdSentinel));
  EXPECT_TRUE(std::isnan(weights[0]) && std::isnan(weights[1]));
}

// ---- Hand-computed cases -------------------------------------------------------------------------

TEST(RoutingCpu, SoftmaxTopKExact) {
  Routed out;
  // Equal logits: softmax 1/4 each; the first two ids win the tie; renormalized 1/2.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 2), {7, 7, 7, 7}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.25f, 0.25f}));
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 2, true), {7, 7, 7, 7}, &out));
  EXPECT_EQ(out.weights, (std::vector<float>{0.5f, 0.5f}));
  // exp(-107) is 0 in fp32: the two 7s share the whole probability.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 2), {-100, 7, -100, 7}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.5f, 0.5f}));
  // Three equal logits, two picked: 1/3 each; renormalized over the two: exactly 1/2.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 2, true), {-300, 2, 2, 2}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.5f, 0.5f}));
}

// Weights against the closed form in double. Tolerance 4e-7 relative: exp_det < 1 ulp, a 4-term
// sum and one or two divisions, each rounded once (~5 roundings of 6e-8).
TEST(RoutingCpu, SoftmaxTopKValues) {
  Routed out;
  const double s = 1 + std::exp(-1.0) + std::exp(-2.0) + std::exp(-3.0);
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 3), {1, 3, 2, 0}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2, 0}));
  EXPECT_NEAR(out.weights[0], 1 / s, 4e-7 / s);
  EXPECT_NEAR(out.weights[1], std::exp(-1.0) / s, 4e-7 * std::exp(-1.0) / s);
  EXPECT_NEAR(out.weights[2], std::exp(-2.0) / s, 4e-7 * std::exp(-2.0) / s);

  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 2, true), {1, 3, 2, 0}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2}));
  const double r = 1 + std::exp(-1.0);
  EXPECT_NEAR(out.weights[0], 1 / r, 4e-7);
  EXPECT_NEAR(out.weights[1], std::exp(-1.0) / r, 4e-7);
}

// The softmaxes subtract the max logit first: logits near 1000 (exp would overflow) give finite
// weights, and a shift that keeps every difference exact (here by 1000) gives the same bits.
TEST(RoutingCpu, SoftmaxesSubtractTheMax) {
  for (RoutingMethod method : {RoutingMethod::kSoftmaxTopK, RoutingMethod::kTopKSoftmax}) {
    SCOPED_TRACE(to_string(method));
    Routed shifted, plain;
    ASSERT_OK(route_f32(make_config(method, 4, 2, false), {1000, 999, -1000, 998}, &shifted));
    ASSERT_OK(route_f32(make_config(method, 4, 2, false), {0, -1, -2000, -2}, &plain));
    EXPECT_EQ(shifted.ids, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(shifted.ids, plain.ids);
    EXPECT_TRUE(std::isfinite(shifted.weights[0]) && std::isfinite(shifted.weights[1]));
    EXPECT_EQ(float_bits(shifted.weights[0]), float_bits(plain.weights[0]));
    EXPECT_EQ(float_bits(shifted.weights[1]), float_bits(plain.weights[1]));
  }
}

TEST(RoutingCpu, TopKSoftmax) {
  Routed out;
  // Softmax over the k selected only: exp(-205) = 0, so 1/2, 1/2, 0 exactly.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 3, 3), {5, -200, 5}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.5f, 0.5f, 0.0f}));

  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 5, 3), {1, 4, 4, 2, -300}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2, 3}));
  const double s = 2 + std::exp(-2.0);
  EXPECT_NEAR(out.weights[0], 1 / s, 4e-7);
  EXPECT_NEAR(out.weights[1], 1 / s, 4e-7);
  EXPECT_NEAR(out.weights[2], std::exp(-2.0) / s, 4e-7 * std::exp(-2.0) / s);
  EXPECT_EQ(out.weights[0], out.weights[1]);

  // Unselected logits do not change anything (unlike SoftmaxTopK).
  Routed other;
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 5, 3), {-9, 4, 4, 2, 1.5f}, &other));
  EXPECT_EQ(other.ids, out.ids);
  EXPECT_EQ(other.weights, out.weights);
  // renormalize has nothing left to do.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 5, 3, true), {1, 4, 4, 2, -300}, &other));
  EXPECT_EQ(other.weights, out.weights);
}

TEST(RoutingCpu, Llama4) {
  Routed out;
  ASSERT_OK(route_f32(make_config(RoutingMethod::kLlama4, 4, 1), {0.5f, -1, 2, 2}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{2}));
  EXPECT_LE(ulp_error(out.weights[0], 1 / (1 + std::exp(-2.0))), 3.0);
  ASSERT_OK(route_f32(make_config(RoutingMethod::kLlama4, 3, 1), {-3, 0, -1}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.5f}));
  // The weight is sigmoid of the logit, not a softmax: a negative winner has weight < 1/2.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kLlama4, 3, 1), {-3, -200, -5}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.weights[0], sigmoid_det(-3.0f));
  EXPECT_LT(out.weights[0], 0.05f);
}

// DeepSeek-V3 with scores in {0, 1/2, 1} (logits -200, 0, 30) and dyadic biases, so every sum is
// exact. Biased scores b and groups of two (8 experts, 4 groups):
//   group 0: e0 b=2.0 (s=1),  e1 b=0.0  (s=1/2)  -> top-2 sum 2.0
//   group 1: e2 b=1.25 (s=1), e3 b=1.0  (s=1)    -> 2.25
//   group 2: e4 b=1.5 (s=0),  e5 b=0.75 (s=1/2)  -> 2.25
//   group 3: e6 b=1.0 (s=1/2), e7 b=0.5 (s=1/2)  -> 1.5
// Keeping 2 groups drops group 0 although e0 has the best biased score (a max-score group rule would
// keep it), and e4 is picked first on its bias although its weight (unbiased score) is 0.
struct DeepSeekCase {
  std::vector<float> logits{30, 0, 30, 30, -200, 0, 0, 0};
  std::vector<float> bias{1.0f, -0.5f, 0.25f, 0.0f, 1.5f, 0.25f, 0.5f, 0.0f};
};

TEST(RoutingCpu, DeepSeekV3GroupChoiceMatters) {
  const DeepSeekCase c;
  Routed out;
  ASSERT_OK(route_f32(make_deepseek(8, 3, 4, 2, true, 2.5f), c.logits, &out, &c.bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{4, 2, 3}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.0f, 1.25f, 1.25f}));  // {0, 1, 1} / 2 * 2.5
  ASSERT_OK(route_f32(make_deepseek(8, 3, 4, 2, false, 2.5f), c.logits, &out, &c.bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{4, 2, 3}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.0f, 2.5f, 2.5f}));
  ASSERT_OK(route_f32(make_deepseek(8, 3, 4, 2, true, 1.0f), c.logits, &out, &c.bias));
  EXPECT_EQ(out.weights, (std::vector<float>{0.0f, 0.5f, 0.5f}));

  // One group (no group filter): the plain top 3 of the biased scores.
  ASSERT_OK(route_f32(make_deepseek(8, 3, 1, 1, true, 2.5f), c.logits, &out, &c.bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 4, 2}));
  EXPECT_EQ(out.weights, (std::vector<float>{1.25f, 0.0f, 1.25f}));

  // Keeping one group: groups 1 and 2 tie at 2.25, the lower group id wins.
  ASSERT_OK(route_f32(make_deepseek(8, 2, 4, 1, true, 2.5f), c.logits, &out, &c.bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(out.weights, (std::vector<float>{1.25f, 1.25f}));

  // Groups of one expert score their only expert: the best 4 of 8 experts survive.
  ASSERT_OK(route_f32(make_deepseek(8, 4, 8, 4, false, 1.0f), c.logits, &out, &c.bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 4, 2, 3}));
  EXPECT_EQ(out.weights, (std::vector<float>{1.0f, 0.0f, 1.0f, 1.0f}));
}

// Group score is the sum of the top 2, not the max and not the sum of all: group 0 has four 1.0s
// (top-2 2.0, all 4.0, max 1.0), group 1 {1.5, 0.75, 0, 0} (top-2 2.25, all 2.25, max 1.5).
TEST(RoutingCpu, DeepSeekV3GroupScoreIsTopTwoSum) {
  const std::vector<float> logits{30, 30, 30, 30, 30, 0, -200, -200};
  const std::vector<float> bias{0, 0, 0, 0, 0.5f, 0.25f, 0, 0};
  Routed out;
  ASSERT_OK(route_f32(make_deepseek(8, 2, 2, 1, false, 2.5f), logits, &out, &bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(out.weights, (std::vector<float>{2.5f, 1.25f}));
}

TEST(RoutingCpu, DeepSeekV3BiasSteersSelectionNotWeights) {
  const std::vector<float> logits{1.0f, 0.5f, -0.5f, -1.0f};
  const std::vector<float> no_bias(4, 0.0f);
  const std::vector<float> bias{0.0f, 0.0f, 0.0f, 2.0f};
  Routed plain, biased;
  ASSERT_OK(route_f32(make_deepseek(4, 2, 1, 1, false, 2.5f), logits, &plain, &no_bias));
  ASSERT_OK(route_f32(make_deepseek(4, 2, 1, 1, false, 2.5f), logits, &biased, &bias));
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(biased.ids, (std::vector<int32_t>{3, 0}));
  // Expert 0 gets the same weight in both, and expert 3 its own unbiased sigmoid, times 2.5.
  EXPECT_EQ(biased.weights[1], plain.weights[0]);
  EXPECT_EQ(plain.weights[0], mul_rn(sigmoid_det(1.0f), 2.5f));
  EXPECT_EQ(biased.weights[0], mul_rn(sigmoid_det(-1.0f), 2.5f));
}

// ---- Ties, ordering, special values --------------------------------------------------------------

TEST(RoutingCpu, TiesGoToLowestIdForEveryMethod) {
  const std::vector<float> equal(16, 0.75f);
  const std::vector<float> zero_bias(16, 0.0f);
  for (RoutingMethod method : {RoutingMethod::kSoftmaxTopK, RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4,
                               RoutingMethod::kTopKSoftmax}) {
    SCOPED_TRACE(to_string(method));
    const int top_k = method == RoutingMethod::kLlama4 ? 1 : 4;
    RoutingConfig config = method == RoutingMethod::kDeepSeekV3 ? make_deepseek(16, top_k, 4, 2, true, 1.0f)
                                                                : make_config(method, 16, top_k);
    Routed out;
    ASSERT_OK(route_f32(config, equal, &out, &zero_bias));
    std::vector<int32_t> expected(top_k);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(out.ids, expected);
    for (float w : out.weights) EXPECT_EQ(w, out.weights[0]);
  }
}

TEST(RoutingCpu, OutputOrderIsDescendingScoreThenAscendingId) {
  Routed out;
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 6, 5), {1, 3, 2, 3, 3, 2}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 3, 4, 2, 5}));
  EXPECT_EQ(out.weights[0], out.weights[2]);
  EXPECT_GT(out.weights[2], out.weights[3]);
  EXPECT_EQ(out.weights[3], out.weights[4]);
  // Two tokens route independently.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 3, 2), {0, 1, 2, 2, 1, 0}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{2, 1, 0, 1}));
}

TEST(RoutingCpu, SignedZerosTieAndNaNRanksLast) {
  Routed out;
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 3, 2), {-1, 0.0f, -0.0f}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2}));
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 3, 2), {-0.0f, 0.0f, -1}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.weights, (std::vector<float>{0.5f, 0.5f}));

  // NaN is below -inf: picked only when nothing else is left.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 4, 2), {kNaN, 1, -kInf, 0}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 3}));
  EXPECT_TRUE(std::isfinite(out.weights[0]) && std::isfinite(out.weights[1]));
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, 4, 4), {kNaN, 1, -kInf, kNaN}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{1, 2, 0, 3}));
  // SoftmaxTopK sums every expert: one NaN logit makes every weight of the token NaN.
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, 4, 2), {kNaN, 1, 2, 0}, &out));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{2, 1}));
  EXPECT_TRUE(std::isnan(out.weights[0]) && std::isnan(out.weights[1]));
  // DeepSeek-V3: a NaN score loses to everything, also inside the group score.
  const std::vector<float> bias(4, 0.0f);
  ASSERT_OK(route_f32(make_deepseek(4, 2, 2, 1, true, 1.0f), {kNaN, 5, -1, -2}, &out, &bias));
  EXPECT_EQ(out.ids, (std::vector<int32_t>{2, 3}));
}

TEST(RoutingCpu, Bf16LogitsMatchTheirFp32Values) {
  auto rng = testing::make_rng(103);
  const int num_experts = 64, num_tokens = 33;
  // Values that bf16 rounds together create ties that only the bf16 input has.
  std::vector<uint16_t> logits_bf16 = testing::random_bf16(rng, num_tokens * num_experts, -3.0f, 3.0f);
  std::vector<float> logits_f32(logits_bf16.size());
  for (size_t i = 0; i < logits_bf16.size(); ++i) logits_f32[i] = bf16_to_float(logits_bf16[i]);
  std::vector<float> bias = testing::random_floats(rng, num_experts, -0.1f, 0.1f);
  for (RoutingConfig config : {make_config(RoutingMethod::kSoftmaxTopK, num_experts, 8, true),
                               make_deepseek(num_experts, 8, 8, 4, true, 2.5f),
                               make_config(RoutingMethod::kLlama4, num_experts, 1),
                               make_config(RoutingMethod::kTopKSoftmax, num_experts, 4)}) {
    SCOPED_TRACE(to_string(config.method));
    Routed from_bf16, from_f32;
    ASSERT_OK(route_bf16(config, logits_bf16, &from_bf16, &bias));
    ASSERT_OK(route_f32(config, logits_f32, &from_f32, &bias));
    EXPECT_EQ(from_bf16.ids, from_f32.ids);
    for (size_t i = 0; i < from_f32.weights.size(); ++i) {
      ASSERT_EQ(float_bits(from_bf16.weights[i]), float_bits(from_f32.weights[i])) << i;
    }
  }
}

// ---- Random inputs against an independent implementation ---------------------------------------
// The reference below selects with std::sort on (score desc, id asc) over plain floats and computes
// weights in double with std::exp. Scores for DeepSeek-V3 use sigmoid_det (the definition of the
// selection score), so ids must match exactly; weights are compared with kWeightRelTol.
//
// kWeightRelTol = 3e-6: route_cpu rounds in fp32 — exp/sigmoid (<= 3 ulp), the softmax denominator
// (16 sequential adds per lane then 5 butterfly levels: <= 21 roundings of 2^-24), a renormalizing
// sum of <= 16 terms and two divisions: ~2.5e-6 in the worst case (measured: <= 3.5e-7).
constexpr double kWeightRelTol = 3e-6;

struct Reference {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

std::vector<int> top_by_score(const std::vector<float>& score, std::vector<int> candidates, int count) {
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  candidates.resize(count);
  return candidates;
}

Reference reference_route(const RoutingConfig& config, const float* logits, const float* bias) {
  const int num_experts = config.num_experts;
  const std::vector<float> l(logits, logits + num_experts);
  std::vector<int> all(num_experts);
  std::iota(all.begin(), all.end(), 0);
  Reference ref;
  std::vector<int> ids;
  switch (config.method) {
    case RoutingMethod::kSoftmaxTopK: {
      ids = top_by_score(l, all, config.top_k);
      const double max = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (float x : l) sum += std::exp(double(x) - max);
      double selected = 0;
      for (int id : ids) selected += std::exp(double(l[id]) - max) / sum;
      for (int id : ids) {
        const double p = std::exp(double(l[id]) - max) / sum;
        ref.weights.push_back(config.renormalize ? p / selected : p);
      }
      break;
    }
    case RoutingMethod::kTopKSoftmax: {
      ids = top_by_score(l, all, config.top_k);
      double sum = 0;
      for (int id : ids) sum += std::exp(double(l[id]) - double(l[ids[0]]));
      for (int id : ids) ref.weights.push_back(std::exp(double(l[id]) - double(l[ids[0]])) / sum);
      break;
    }
    case RoutingMethod::kLlama4:
      ids = top_by_score(l, all, 1);
      ref.weights.push_back(1.0 / (1.0 + std::exp(-double(l[ids[0]]))));
      break;
    case RoutingMethod::kDeepSeekV3: {
      std::vector<float> biased(num_experts);
      for (int e = 0; e < num_experts; ++e) biased[e] = sigmoid_det(l[e]) + bias[e];
      const int group_size = num_experts / config.num_groups;
      std::vector<float> group_score(config.num_groups);
      std::vector<int> groups(config.num_groups);
      for (int g = 0; g < config.num_groups; ++g) {
        std::vector<float> members(biased.begin() + g * group_size, biased.begin() + (g + 1) * group_size);
        std::sort(members.rbegin(), members.rend());
        group_score[g] = group_size >= 2 ? members[0] + members[1] : members[0];
        groups[g] = g;
      }
      std::vector<int> candidates;
      for (int g : top_by_score(group_score, groups, config.topk_groups)) {
        for (int e = g * group_size; e < (g + 1) * group_size; ++e) candidates.push_back(e);
      }
      ids = top_by_score(biased, candidates, config.top_k);
      double sum = 0;
      for (int id : ids) sum += 1.0 / (1.0 + std::exp(-double(l[id])));
      for (int id : ids) {
        const double s = 1.0 / (1.0 + std::exp(-double(l[id])));
        ref.weights.push_back((config.renormalize ? s / sum : s) * config.routed_scaling_factor);
      }
      break;
    }
  }
  ref.ids.assign(ids.begin(), ids.end());
  return ref;
}

TEST(RoutingCpu, RandomMatchesIndependentReference) {
  auto rng = testing::make_rng(104);
  struct Shape {
    int num_experts, top_k, num_groups, topk_groups;
  };
  const Shape shapes[] = {{8, 2, 4, 2}, {16, 1, 1, 1}, {60, 6, 4, 2}, {128, 8, 8, 4}, {256, 8, 8, 4},
                          {384, 16, 8, 4}, {512, 16, 16, 3}, {256, 4, 256, 7}};
  const int num_tokens = 37;
  int64_t checked = 0;
  for (const Shape& shape : shapes) {
    for (RoutingMethod method : {RoutingMethod::kSoftmaxTopK, RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4,
                                 RoutingMethod::kTopKSoftmax}) {
      for (bool renormalize : {false, true}) {
        RoutingConfig config = make_config(method, shape.num_experts,
                                           method == RoutingMethod::kLlama4 ? 1 : shape.top_k, renormalize);
        if (method == RoutingMethod::kDeepSeekV3) {
          config = make_deepseek(shape.num_experts, shape.top_k, shape.num_groups, shape.topk_groups, renormalize,
                                 2.5f);
        }
        SCOPED_TRACE(::testing::Message() << to_string(method) << " E=" << shape.num_experts << " k="
                                          << config.top_k << " renormalize=" << renormalize);
        const std::vector<float> logits = testing::random_floats(rng, size_t(num_tokens) * shape.num_experts, -6, 6);
        const std::vector<float> bias = testing::random_floats(rng, shape.num_experts, -0.2f, 0.2f);
        Routed out;
        ASSERT_OK(route_f32(config, logits, &out, &bias));
        for (int t = 0; t < num_tokens; ++t) {
          const Reference ref = reference_route(config, logits.data() + size_t(t) * shape.num_experts, bias.data());
          for (int r = 0; r < config.top_k; ++r) {
            const size_t i = size_t(t) * config.top_k + r;
            ASSERT_EQ(out.ids[i], ref.ids[r]) << "token " << t << " rank " << r;
            ASSERT_NEAR(out.weights[i], ref.weights[r], kWeightRelTol * ref.weights[r] + 1e-30)
                << "token " << t << " rank " << r;
            ++checked;
          }
        }
        EXPECT_GT(testing::l2_norm(out.weights), 0.0);
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Softmax-type weights of a token sum to 1 when they cover the token's whole distribution.
TEST(RoutingCpu, RandomWeightSums) {
  auto rng = testing::make_rng(105);
  const int num_experts = 128, top_k = 8, num_tokens = 64;
  const std::vector<float> logits = testing::random_floats(rng, size_t(num_tokens) * num_experts, -8, 8);
  Routed renormalized, topk_softmax;
  ASSERT_OK(route_f32(make_config(RoutingMethod::kSoftmaxTopK, num_experts, top_k, true), logits, &renormalized));
  ASSERT_OK(route_f32(make_config(RoutingMethod::kTopKSoftmax, num_experts, top_k), logits, &topk_softmax));
  for (int t = 0; t < num_tokens; ++t) {
    double a = 0, b = 0;
    for (int r = 0; r < top_k; ++r) {
      a += renormalized.weights[t * top_k + r];
      b += topk_softmax.weights[t * top_k + r];
      if (r > 0) {
        EXPECT_LE(topk_softmax.weights[t * top_k + r], topk_softmax.weights[t * top_k + r - 1]);
      }
    }
    EXPECT_NEAR(a, 1.0, 1e-6);
    EXPECT_NEAR(b, 1.0, 1e-6);
  }
  EXPECT_EQ(renormalized.ids, topk_softmax.ids);  // both select on the raw logits
}

}  // namespace
}  // namespace fp4moe
