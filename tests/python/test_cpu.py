"""fp4moe's Python binding on the CPU with NumPy arrays (runs in CI, no GPU, no torch needed).

Checks the codec against the NumPy decoders/encoders of numpy_ref.py (bit for bit), the routing
against hand-computed cases and a NumPy router, the CPU MoE (the C++ reference) against a plain
NumPy MoE on dequantized weights, the dict-like Problem, and every error path of the binding.
"""

import math

import numpy as np
import pytest

import fp4moe
import numpy_ref as ref
import seeding


def rng(seed=0):
    """Fresh numbers each run (seeding.BASE_SEED); `seed` keeps call sites' streams apart."""
    return np.random.default_rng(seeding.seed(seed))


def gaussian(shape, seed=0, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def bits(a):
    """Bit patterns, so NaNs compare equal to NaNs."""
    return np.asarray(a, dtype=np.float32).view(np.uint32)


# ---- NVFP4 codec ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 16), (7, 48), (127, 64), (3, 5, 32)])
@pytest.mark.parametrize("recipe", ["kernel", "modelopt"])
@pytest.mark.parametrize("convention", ["encode", "decode"])
def test_nvfp4_roundtrip_matches_numpy_decode(shape, recipe, convention):
    x = gaussian(shape, seed=sum(shape), scale=3.0)
    gs = fp4moe.global_scale_from_amax(np.abs(x).max(), convention)
    packed, scales = fp4moe.quantize_nvfp4(x, gs, convention, recipe=recipe)
    assert packed.dtype == np.uint8 and packed.shape == shape[:-1] + (shape[-1] // 2,)
    assert scales.dtype == np.uint8 and scales.shape == shape[:-1] + (shape[-1] // 16,)
    got = fp4moe.dequantize_nvfp4(packed, scales, gs, convention)
    assert got.dtype == np.float32 and got.shape == shape
    want = ref.nvfp4_decode(packed, scales, gs, convention)
    np.testing.assert_array_equal(bits(got), bits(want))
    assert np.linalg.norm(got) > 0
    # A round trip lands within half an e2m1 step of the block's grid: the largest gap (4 -> 6) is 2,
    # so |x - x_hat| <= 1 * block scale / gs, plus the e4m3 rounding of the scale (<= 1/16 of amax).
    block_scale = np.repeat(ref.e4m3_decode(scales), 16, axis=-1)
    step = block_scale / np.float32(gs) if convention == "encode" else block_scale * np.float32(gs)
    assert np.all(np.abs(x - got) <= step * 1.0 + np.abs(x) / 8)


@pytest.mark.parametrize("shape", [(1, 16), (9, 80), (4, 2, 64)])
def test_nvfp4_modelopt_recipe_is_bit_exact(shape):
    x = gaussian(shape, seed=7, scale=0.02)
    s2 = np.float32(np.abs(x).max()) / np.float32(2688.0)
    packed, scales = fp4moe.quantize_nvfp4(x, s2, "decode", recipe="modelopt")
    want_packed, want_scales = ref.nvfp4_quantize_modelopt(x, s2)
    np.testing.assert_array_equal(scales, want_scales)
    np.testing.assert_array_equal(packed, want_packed)


def test_nvfp4_recipes_differ_only_at_rounding_ties():
    # BRIEF: the kernel recipe (rcp.approx) and ModelOpt's (true division) differ by about one ulp of
    # the scaled value, so a code can differ only where the scaled value sits on a rounding boundary.
    x = gaussian((64, 256), seed=3)
    amax = np.abs(x).max()
    gs = fp4moe.global_scale_from_amax(amax, "encode")
    s2 = fp4moe.global_scale_from_amax(amax, "decode")
    pk, sk = fp4moe.quantize_nvfp4(x, gs, "encode", recipe="kernel")
    pm, sm = fp4moe.quantize_nvfp4(x, s2, "decode", recipe="modelopt")
    codes_k, codes_m = ref.unpack_codes(pk), ref.unpack_codes(pm)
    # (Most blocks get the same scale from both: otherwise the code check below would be vacuous.)
    assert (sk == sm).mean() > 0.9
    same_scale = np.repeat(sk == sm, 16, axis=-1)
    differ = (codes_k != codes_m) & same_scale
    assert differ.mean() < 1e-3
    # Where they differ, both codes are the neighbours of one rounding boundary.
    assert np.all(np.abs(ref.e2m1_decode(codes_k)[differ] - ref.e2m1_decode(codes_m)[differ]) <= 2.0)


def test_nvfp4_special_values():
    x = np.zeros((3, 16), dtype=np.float32)
    x[0, 5] = np.nan  # NaN block: scale 0x7f, codes 0 -> the whole block decodes to NaN
    x[1, :] = 1.0
    x[1, 3] = np.inf  # inf saturates the block: scale 448, inf -> +6
    x[2, :] = -1e-30  # tiny negatives round to -0 and keep the sign
    x[2, 0] = 1.0
    for recipe, convention, gs in (("kernel", "encode", 1.0), ("modelopt", "decode", 1.0)):
        packed, scales = fp4moe.quantize_nvfp4(x, gs, convention, recipe=recipe)
        assert scales[0, 0] == 0x7F and np.all(packed[0] == 0)
        out = fp4moe.dequantize_nvfp4(packed, scales, gs, convention)
        assert np.all(np.isnan(out[0]))
        assert scales[1, 0] == 0x7E and ref.unpack_codes(packed[1])[3] == 7
        codes = ref.unpack_codes(packed[2])
        assert np.all(codes[1:] == 8)


def test_nvfp4_zero_block_scales():
    x = np.zeros((2, 32), dtype=np.float32)
    x[1, 16:] = 1.0
    _, sk = fp4moe.quantize_nvfp4(x, 2688.0, "encode", recipe="kernel")
    _, sm = fp4moe.quantize_nvfp4(x, 1.0 / 2688.0, "decode", recipe="modelopt")
    assert sk[0, 0] == 0x00 and sk[0, 1] == 0x00  # kernel recipe: zero block -> scale byte 0
    assert sm[0, 0] == 0x38 and sm[0, 1] == 0x38  # ModelOpt: zero block -> 1.0


def test_nvfp4_global_scale_conventions_are_reciprocal():
    x = gaussian((8, 64), seed=11)
    amax = float(np.abs(x).max())
    gs = fp4moe.global_scale_from_amax(amax, "encode")
    s2 = fp4moe.global_scale_from_amax(amax, "decode")
    assert gs == pytest.approx(2688.0 / amax, rel=1e-7)
    assert s2 == pytest.approx(amax / 2688.0, rel=1e-7)
    # The same quantized tensor, read with either convention, gives (nearly) the same values.
    packed, scales = fp4moe.quantize_nvfp4(x, gs, "encode")
    a = fp4moe.dequantize_nvfp4(packed, scales, gs, "encode")
    b = fp4moe.dequantize_nvfp4(packed, scales, 1.0 / gs, "decode")
    np.testing.assert_allclose(a, b, rtol=2e-7, atol=0)


def test_nvfp4_swizzled_layout():
    rows, cols = 130, 80  # neither a multiple of 128 rows nor of 4 scale columns
    x = gaussian((rows, cols), seed=5)
    gs = fp4moe.global_scale_from_amax(np.abs(x).max(), "encode")
    packed_l, lin = fp4moe.quantize_nvfp4(x, gs, "encode", layout="linear")
    packed_s, swz = fp4moe.quantize_nvfp4(x, gs, "encode", layout="swizzled")
    np.testing.assert_array_equal(packed_l, packed_s)
    assert swz.shape == (256, 8)
    flat = swz.reshape(-1)
    num_sf = cols // 16
    want = np.zeros(256 * 8, dtype=np.uint8)
    r, c = np.meshgrid(np.arange(rows), np.arange(num_sf), indexing="ij")
    want[ref.swizzled_offset(r, c, num_sf)] = lin
    np.testing.assert_array_equal(flat, want)
    np.testing.assert_array_equal(fp4moe.swizzle_scales(lin), swz)
    np.testing.assert_array_equal(fp4moe.unswizzle_scales(swz, rows, num_sf), lin)
    np.testing.assert_array_equal(
        bits(fp4moe.dequantize_nvfp4(packed_s, swz, gs, "encode", layout="swizzled")),
        bits(fp4moe.dequantize_nvfp4(packed_l, lin, gs, "encode")),
    )


def test_read_only_and_sliced_contiguous_inputs_are_accepted():
    x = gaussian((4, 64), seed=2)
    x.setflags(write=False)
    packed, scales = fp4moe.quantize_nvfp4(x, 1.0, "encode")
    big = np.zeros((8, 64), dtype=np.float32)
    big[2:6] = x
    p2, s2 = fp4moe.quantize_nvfp4(big[2:6], 1.0, "encode")  # offset view, still contiguous
    np.testing.assert_array_equal(packed, p2)
    np.testing.assert_array_equal(scales, s2)


# ---- MXFP4 codec ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 32), (5, 96), (2, 3, 64)])
def test_mxfp4_roundtrip_is_bit_exact(shape):
    x = gaussian(shape, seed=len(shape), scale=10.0)
    if x.size > 32:
        x.reshape(-1)[:32] = 0.0  # a zero block: scale 127 (1.0)
    packed, scales = fp4moe.quantize_mxfp4(x)
    want_packed, want_scales = ref.mxfp4_quantize(x)
    np.testing.assert_array_equal(scales, want_scales)
    np.testing.assert_array_equal(packed, want_packed)
    got = fp4moe.dequantize_mxfp4(packed, scales)
    np.testing.assert_array_equal(bits(got), bits(ref.mxfp4_decode(packed, scales)))
    assert np.linalg.norm(got) > 0


# ---- Routing -------------------------------------------------------------------------------------


def test_route_softmax_topk_hand_computed():
    logits = np.log(np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32))
    ids, w = fp4moe.route(logits, method="softmax_topk", top_k=2)
    assert ids.dtype == np.int32 and w.dtype == np.float32
    np.testing.assert_array_equal(ids, [[3, 2]])
    np.testing.assert_allclose(w, [[0.4, 0.3]], rtol=1e-6)
    ids, w = fp4moe.route(logits, method="softmax_topk", top_k=2, renormalize=True)
    np.testing.assert_allclose(w, [[4 / 7, 3 / 7]], rtol=1e-6)


def test_route_ties_go_to_the_lowest_id():
    logits = np.zeros((2, 6), dtype=np.float32)
    logits[1] = [1, 3, 2, 3, 3, 0]
    ids, _ = fp4moe.route(logits, method="softmax_topk", top_k=3)
    np.testing.assert_array_equal(ids, [[0, 1, 2], [1, 3, 4]])


def test_route_topk_softmax_hand_computed():
    logits = np.array([[1.0, 3.0, 2.0, 3.0]], dtype=np.float32)
    ids, w = fp4moe.route(logits, method="topk_softmax", top_k=2)
    np.testing.assert_array_equal(ids, [[1, 3]])
    np.testing.assert_allclose(w, [[0.5, 0.5]], rtol=1e-6)
    ids, w = fp4moe.route(logits, method="topk_softmax", top_k=3)
    e = math.exp(1.0)
    np.testing.assert_allclose(w, [[e / (2 * e + 1), e / (2 * e + 1), 1 / (2 * e + 1)]], rtol=1e-6)


def test_route_llama4_hand_computed():
    logits = np.array([[0.5, -1.0, 2.0, 2.0]], dtype=np.float32)
    ids, w = fp4moe.route(logits, method="llama4", top_k=1)
    np.testing.assert_array_equal(ids, [[2]])
    np.testing.assert_allclose(w, [[1 / (1 + math.exp(-2.0))]], rtol=1e-6)


def test_route_deepseek_v3_hand_computed():
    # 8 experts in 4 groups of 2, keep 2 groups, top-2 experts, bias only for selection.
    logits = np.array([[0, 0, 2, -2, 1, 1, -3, -3]], dtype=np.float32)
    bias = np.array([0, 0, 0, 0, 0, 0, 0, 1.0], dtype=np.float32)
    sig = [1 / (1 + math.exp(-v)) for v in logits[0]]
    # Biased scores: groups sum to 1.0, 1.0, 1.46, 1.10 -> groups 2 and 3; experts 7 (0.047 + 1) and
    # then 4 (0.731; ties with 5 -> lowest id).
    ids, w = fp4moe.route(
        logits,
        method="deepseek_v3",
        top_k=2,
        num_groups=4,
        topk_groups=2,
        renormalize=True,
        routed_scaling_factor=2.5,
        correction_bias=bias,
    )
    np.testing.assert_array_equal(ids, [[7, 4]])
    total = sig[7] + sig[4]
    np.testing.assert_allclose(w, [[2.5 * sig[7] / total, 2.5 * sig[4] / total]], rtol=1e-6)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-r1", "gpt-oss-20b", "llama4-maverick"])
def test_route_matches_numpy_router(name):
    p = fp4moe.preset(name)
    logits = gaussian((33, p.num_experts), seed=4, scale=2.0)
    bias = gaussian((p.num_experts,), seed=5, scale=0.1) if p.routing_method == "deepseek_v3" else None
    ids, w = fp4moe.route(logits, p, correction_bias=bias)
    want_ids, want_w = ref.route(
        logits, p.routing_method, p.top_k, p.renormalize, p.num_groups, p.topk_groups, p.routed_scaling_factor, bias
    )
    np.testing.assert_array_equal(ids, want_ids)
    # fp32 scores (deterministic exp) vs float64 here: a few fp32 ulps.
    np.testing.assert_allclose(w, want_w, rtol=2e-6, atol=1e-8)
    # A RoutingConfig gives the same as the Problem.
    ids2, w2 = fp4moe.route(logits, p.routing, correction_bias=bias)
    np.testing.assert_array_equal(ids, ids2)
    np.testing.assert_array_equal(w, w2)


def test_route_zero_tokens():
    ids, w = fp4moe.route(np.zeros((0, 8), np.float32), method="softmax_topk", top_k=2)
    assert ids.shape == (0, 2) and w.shape == (0, 2)


# ---- Problems ------------------------------------------------------------------------------------


def test_presets_are_dict_like():
    assert set(fp4moe.preset_names()) >= {"deepseek-r1", "qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b"}
    p = fp4moe.preset("deepseek-r1")
    assert (p["hidden_size"], p["intermediate_size"], p["num_experts"], p["top_k"]) == (7168, 2048, 256, 8)
    assert p.routing_method == "deepseek_v3" and p.num_groups == 8 and p.topk_groups == 4
    assert p.routed_scaling_factor == pytest.approx(2.5)
    d = p.to_dict()
    assert list(d) == p.keys() and d["weight_format"] == "nvfp4" and d["mode"] == "w4a16"
    g = fp4moe.preset("gpt-oss-120b")
    assert g["weight_format"] == "mxfp4" and g["activation"] == "gpt-oss" and g["has_bias"]
    q = p.replace(mode="w4a4", max_tokens=128)
    assert q.mode == "w4a4" and q.max_tokens == 128 and p.mode == "w4a16"
    p["max_tokens"] = 64
    assert p.max_tokens == 64
    s = p.scaled(16)
    assert (s.hidden_size, s.intermediate_size) == (512, 128) and s.num_experts == 256
    assert fp4moe.Problem(**d) == fp4moe.preset("deepseek-r1") != p


def test_custom_problem_and_validation():
    p = fp4moe.Problem(hidden_size=256, intermediate_size=128, num_experts=8, top_k=2)
    assert p.name == "custom" and p.routing_method == "softmax_topk"
    p.validate()
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"hidden_size = 100 must be a positive multiple of 32"):
        p.replace(hidden_size=100).validate()
    with pytest.raises(fp4moe.InvalidArgumentError, match="top_k = 9 must be <= num_experts = 8"):
        p.replace(top_k=9).validate()
    with pytest.raises(fp4moe.UnsupportedError, match="w4a4 needs NVFP4"):
        p.replace(weight_format="mxfp4", mode="w4a4").validate()


# ---- The CPU MoE ---------------------------------------------------------------------------------

# Both sides are fp64 over identical, exactly dequantized weights with the same routing (fp4moe's
# fp32 ids and weights), the same bf16 rounding of the input and the intermediate and the same
# combine order; only the summation order of the dot products differs (~1e-16 relative), which can
# move an fp32 output by one ulp (6e-8) or, with negligible probability, flip one bf16 rounding.
MOE_TOLERANCE = 1e-6

SCALED = [("qwen3-30b-a3b", 8), ("deepseek-r1", 16), ("gpt-oss-20b", 16), ("llama4-scout", 32), ("mixtral-8x7b", 32)]


def scaled_problem(name, factor):
    p = fp4moe.preset(name).scaled(factor)
    p.max_tokens = 256
    return p


def inputs(p, num_tokens, seed=0):
    x = gaussian((num_tokens, p.hidden_size), seed=seed)
    logits = gaussian((num_tokens, p.num_experts), seed=seed + 1, scale=2.0)
    return x, logits


@pytest.mark.parametrize("name,factor", SCALED)
@pytest.mark.parametrize("num_tokens", [1, 7])
def test_cpu_moe_matches_numpy_moe(name, factor, num_tokens):
    p = scaled_problem(name, factor)
    weights = fp4moe.random_weights(p, seed=3)
    moe = fp4moe.MoE(p, weights)
    assert moe.device == "cpu" and moe.workspace_bytes == 0 and moe.kernel_info(num_tokens)["path"] == "reference"
    x, logits = inputs(p, num_tokens, seed=num_tokens)
    out = moe(x, logits)
    assert out.dtype == np.float32 and out.shape == (num_tokens, p.hidden_size)
    ids, w = fp4moe.route(logits, p, correction_bias=weights.get("routing_bias"))
    want = ref.moe_forward(p, weights, x, ids, w)
    assert ref.normalized_error(out, want) <= MOE_TOLERANCE
    # Precomputed routing gives the identical result.
    np.testing.assert_array_equal(moe(x, topk_ids=ids, topk_weights=w), out)


def test_cpu_moe_dummy_equals_random_weights():
    p = scaled_problem("qwen3-30b-a3b", 8)
    x, logits = inputs(p, 5)
    a = fp4moe.MoE.dummy(p, seed=9, device="cpu")(x, logits)
    b = fp4moe.MoE(p, fp4moe.random_weights(p, 9))(x, logits)
    np.testing.assert_array_equal(a, b)
    assert np.linalg.norm(a) > 0


def test_cpu_moe_rounds_float32_input_to_bf16():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, seed=1, device="cpu")
    x, logits = inputs(p, 3)
    np.testing.assert_array_equal(moe(x, logits), moe(ref.bf16_round(x), logits))


def test_cpu_moe_zero_tokens_and_out_argument():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, seed=1, device="cpu")
    x, logits = inputs(p, 0)
    assert moe(x, logits).shape == (0, p.hidden_size)
    x, logits = inputs(p, 4)
    out = np.full((4, p.hidden_size), np.nan, dtype=np.float32)  # poisoned: must be fully written
    assert moe.forward(x, logits, out=out) is out
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out, moe(x, logits))


def test_cpu_moe_expert_and_tensor_parallel_shards_sum_to_the_layer():
    p = scaled_problem("qwen3-30b-a3b", 8)
    x, logits = inputs(p, 6)
    full = fp4moe.MoE.dummy(p, seed=2, device="cpu")(x, logits)
    for ep, tp in ((4, 1), (1, 2), (2, 2)):
        total = np.zeros_like(full, dtype=np.float64)
        for e in range(ep):
            for t in range(tp):
                shard = fp4moe.random_weights(p, 2, ep_rank=e, ep_size=ep, tp_rank=t, tp_size=tp)
                assert shard["w13"].shape == (p.num_experts // ep, 2 * p.intermediate_size // tp, p.hidden_size // 2)
                moe = fp4moe.MoE(p, shard, ep_rank=e, ep_size=ep, tp_rank=t, tp_size=tp)
                assert moe.num_local_experts == p.num_experts // ep
                total += moe(x, logits)
        # Partial sums in fp32 per rank: the ranks' roundings add up (a few ulps of the output).
        assert ref.normalized_error(total, full) <= 1e-6


def test_cpu_moe_w4a4_runs_close_to_w4a16():
    p = scaled_problem("qwen3-30b-a3b", 8)
    x, logits = inputs(p, 5)
    a16 = fp4moe.MoE.dummy(p, seed=4, device="cpu")(x, logits)
    a4 = fp4moe.MoE.dummy(p.replace(mode="w4a4"), seed=4, device="cpu")(x, logits)
    # NVFP4 activations (both GEMM inputs) add ~10% relative RMS error per GEMM; no NumPy oracle
    # here because the kernel recipe's rcp.approx has no plain NumPy equivalent.
    err = ref.normalized_error(a4, a16)
    assert 0 < err < 0.3


def test_cpu_moe_checkpoint_names_and_global_scale_conventions():
    p = scaled_problem("qwen3-30b-a3b", 8)
    w = fp4moe.random_weights(p, 6)
    x, logits = inputs(p, 4)
    base = fp4moe.MoE(p, w)(x, logits)
    modelopt = {
        "w13_weight": w["w13"],
        "w13_weight_scale": w["w13_scale"],
        "w13_weight_scale_2": w["w13_scale_2"],
        "w2_weight": w["w2"],
        "w2_weight_scale": w["w2_scale"],
        "w2_weight_scale_2": w["w2_scale_2"],
    }
    np.testing.assert_array_equal(fp4moe.MoE(p, modelopt)(x, logits), base)
    # compressed-tensors stores gs = 1/weight_scale_2; pick scales whose reciprocal is exact so the
    # converted layer is bit-identical.
    w2 = dict(w)
    w2["w13_scale_2"] = np.exp2(np.round(np.log2(w["w13_scale_2"]))).astype(np.float32)
    w2["w2_scale_2"] = np.exp2(np.round(np.log2(w["w2_scale_2"]))).astype(np.float32)
    want = fp4moe.MoE(p, w2)(x, logits)
    ct = {
        "w13_weight_packed": w["w13"],
        "w13_weight_scale": w["w13_scale"],
        "w13_weight_global_scale": (1.0 / w2["w13_scale_2"]).astype(np.float32),
        "w2_weight_packed": w["w2"],
        "w2_weight_scale": w["w2_scale"],
        "w2_weight_global_scale": (1.0 / w2["w2_scale_2"]).astype(np.float32),
    }
    np.testing.assert_array_equal(fp4moe.MoE(p, ct)(x, logits), want)
    # float64 global scales are taken as float32.
    w3 = dict(w)
    w3["w13_scale_2"] = w["w13_scale_2"].astype(np.float64)
    np.testing.assert_array_equal(fp4moe.MoE(p, w3)(x, logits), base)


# ---- Errors --------------------------------------------------------------------------------------


def test_error_classes():
    assert issubclass(fp4moe.InvalidArgumentError, fp4moe.Fp4moeError)
    assert issubclass(fp4moe.InvalidArgumentError, ValueError)
    assert issubclass(fp4moe.UnsupportedError, fp4moe.Fp4moeError)
    assert issubclass(fp4moe.CudaError, fp4moe.Fp4moeError)
    assert issubclass(fp4moe.Fp4moeError, RuntimeError)
    with pytest.raises(fp4moe.InvalidArgumentError) as e:
        fp4moe.preset("nope")
    # The C++ Status message, unchanged.
    assert str(e.value).startswith("preset = 'nope' is unknown; presets: deepseek-r1, ")
    assert e.value.code == "invalid argument"


X = np.zeros((4, 64), np.float32)
P, S = fp4moe.quantize_nvfp4(X, 1.0, "encode")

CODEC_ERRORS = [
    (
        lambda: fp4moe.quantize_nvfp4(X.astype(np.float64), 1.0, "encode"),
        "x has dtype float64; expected float32 or bfloat16",
    ),
    (lambda: fp4moe.quantize_nvfp4(X.astype(np.float16), 1.0, "encode"), "x has dtype float16"),
    (
        lambda: fp4moe.quantize_nvfp4(np.zeros((4, 40), np.float32), 1.0, "encode"),
        "last dimension = 40 must be a positive multiple of 16",
    ),
    (lambda: fp4moe.quantize_nvfp4(np.zeros((4, 128), np.float32)[:, ::2], 1.0, "encode"), "x is not C-contiguous"),
    (lambda: fp4moe.quantize_nvfp4(np.zeros((128, 4), np.float32).T, 1.0, "encode"), "x is not C-contiguous"),
    (lambda: fp4moe.quantize_nvfp4([[0.0] * 16], 1.0, "encode"), "x is a builtins.list, not an array"),
    (lambda: fp4moe.quantize_nvfp4(np.float32(1.0), 1.0, "encode"), "0-d"),
    (lambda: fp4moe.quantize_nvfp4(X, 1.0, "encoded"), "convention = 'encoded' is not one of: encode"),
    (lambda: fp4moe.quantize_nvfp4(X, 1.0, "encode", recipe="vllm"), "recipe = 'vllm' is not one of: kernel, modelopt"),
    (lambda: fp4moe.quantize_nvfp4(X, 1.0, "encode", layout="tiled"), "layout = 'tiled' is not one of"),
    (lambda: fp4moe.quantize_nvfp4(X, 0.0, "encode"), "global_scale = 0 must be finite and > 0"),
    (lambda: fp4moe.quantize_nvfp4(X, float("nan"), "decode"), "global_scale = nan must be finite and > 0"),
    (
        lambda: fp4moe.quantize_nvfp4(np.zeros((2, 2, 32), np.float32), 1.0, "encode", layout="swizzled"),
        "swizzled layout needs a 2-d",
    ),
    (lambda: fp4moe.dequantize_nvfp4(P.astype(np.int8), S, 1.0, "encode"), "packed has dtype int8; expected uint8"),
    (
        lambda: fp4moe.dequantize_nvfp4(P, S[:, :3], 1.0, "encode"),
        r"scales has shape \[4, 3\]; expected \[dim = 4, cols/16 = 4\]",
    ),
    (lambda: fp4moe.dequantize_nvfp4(P, S.astype(np.float32), 1.0, "encode"), "scales has dtype float32"),
    (
        lambda: fp4moe.dequantize_nvfp4(P, S, 1.0, "encode", layout="swizzled"),
        r"scales has shape \[4, 4\]; expected \[round_up\(rows, 128\) = 128",
    ),
    (
        lambda: fp4moe.dequantize_nvfp4(P[:, :4], S, 1.0, "encode"),
        "out: last dimension = 8 must be a positive multiple of 16",
    ),
    (
        lambda: fp4moe.quantize_mxfp4(np.zeros((2, 48), np.float32)),
        "last dimension = 48 must be a positive multiple of 32",
    ),
    (lambda: fp4moe.dequantize_mxfp4(P, S), r"scales has shape \[4, 4\]; expected \[dim = 4, cols/32 = 2\]"),
    (lambda: fp4moe.swizzle_scales(S.reshape(-1)), "linear has shape"),
    (lambda: fp4moe.unswizzle_scales(S, 4, 4), r"swizzled has shape \[4, 4\]; expected \[round_up\(rows, 128\) = 128"),
    (lambda: fp4moe.global_scale_from_amax(-1.0, "encode"), "amax = -1 must be finite and >= 0"),
    (lambda: fp4moe.global_scale_from_amax(1e-44, "encode"), "not finite and > 0: too small an amax"),
    (lambda: fp4moe.global_scale_from_amax(1e-42, "decode"), "not finite and > 0: too small an amax"),
    # 1-byte types other than the format's scale type are refused, not read as bytes of the wrong format.
    (
        lambda: fp4moe.dequantize_nvfp4(P, S.view("S1"), 1.0, "encode"),
        "scales is bytes8; expected uint8 or float8_e4m3fn",
    ),
    (lambda: fp4moe.dequantize_mxfp4(P, S.view("S1")), "scales is bytes8; expected uint8 or float8_e8m0fnu"),
    (lambda: fp4moe.swizzle_scales(S.view("S1")), "linear is bytes8; expected uint8 or float8_e4m3fn"),
]


@pytest.mark.parametrize("call,message", CODEC_ERRORS, ids=[m[:40] for _, m in CODEC_ERRORS])
def test_codec_errors(call, message):
    with pytest.raises(fp4moe.InvalidArgumentError, match=message):
        call()


L = np.zeros((3, 8), np.float32)

ROUTE_ERRORS = [
    (lambda: fp4moe.route(L[0], method="softmax_topk", top_k=2), r"router_logits has shape \[8\]; expected a 2-d"),
    (lambda: fp4moe.route(L.astype(np.float64), method="softmax_topk", top_k=2), "router_logits has dtype float64"),
    (lambda: fp4moe.route(L, method="softmax", top_k=2), "routing method = 'softmax' is not one of"),
    (lambda: fp4moe.route(L, method="softmax_topk", top_k=9), "top_k = 9 must be <= num_experts = 8"),
    (
        lambda: fp4moe.route(L, fp4moe.preset("qwen3-30b-a3b")),
        r"router_logits has shape \[3, 8\]; expected \[num_tokens = 3, num_experts = 128\]",
    ),
    (
        lambda: fp4moe.route(L, method="softmax_topk", top_k=2, correction_bias=np.zeros(8, np.float32)),
        "correction_bias is only used by routing method deepseek_v3",
    ),
    (lambda: fp4moe.route(L, method="deepseek_v3", top_k=2, num_groups=4, topk_groups=2), "needs correction_bias"),
    (
        lambda: fp4moe.route(
            L, method="deepseek_v3", top_k=2, num_groups=4, topk_groups=2, correction_bias=np.zeros(7, np.float32)
        ),
        r"correction_bias has shape \[7\]",
    ),
    (lambda: fp4moe.route(L, "qwen"), "config is a str"),
    (lambda: fp4moe.route(L, method="softmax_topk", top_k=-1), "top_k = -1 must be > 0"),
    (lambda: fp4moe.route(L, fp4moe.preset("qwen3-30b-a3b").routing, top_k=2), "not both"),
]


@pytest.mark.parametrize("call,message", ROUTE_ERRORS, ids=[m[:40] for _, m in ROUTE_ERRORS])
def test_route_errors(call, message):
    with pytest.raises(fp4moe.InvalidArgumentError, match=message):
        call()


def small_problem():
    return fp4moe.Problem(hidden_size=128, intermediate_size=64, num_experts=4, top_k=2, max_tokens=16)


def test_moe_construction_errors():
    p = small_problem()
    w = fp4moe.random_weights(p, 0)
    cases = [
        (lambda: fp4moe.MoE({"hidden_size": 128}, w), "problem is a dict; expected fp4moe.Problem"),
        (lambda: fp4moe.MoE(p, [w]), "weights is a list; expected a dict of arrays"),
        (lambda: fp4moe.MoE(p, {k: v for k, v in w.items() if k != "w2_scale"}), r"weights\['w2_scale'\] is missing"),
        (
            lambda: fp4moe.MoE(p, {k: v for k, v in w.items() if k != "w13_scale_2"}),
            r"weights\['w13_scale_2'\] is missing: NVFP4 weights need their global scale",
        ),
        (lambda: fp4moe.MoE(p, dict(w, w13_gate=w["w13"])), r"weights\['w13_gate'\] is not a weight name"),
        (
            lambda: fp4moe.MoE(p, dict(w, w13=w["w13"][:, :64])),
            r"weights\['w13'\] has shape \[4, 64, 64\]; expected \[experts = 4, 2\*intermediate = 128, hidden/2 = 64\]",
        ),
        (
            lambda: fp4moe.MoE(p, dict(w, w2=w["w2"].astype(np.int32))),
            r"weights\['w2'\] has dtype int32; expected uint8",
        ),
        (lambda: fp4moe.MoE(p, dict(w, w13=np.asfortranarray(w["w13"]))), r"weights\['w13'\] is not C-contiguous"),
        (
            lambda: fp4moe.MoE(p, dict(w, w13_weight=w["w13"])),
            r"weights\['w13_weight'\] and weights\['w13'\] both give w13",
        ),
        (
            lambda: fp4moe.MoE(p, dict(w, w2_bias=np.zeros((4, 128), np.float32))),
            r"weights\['w2_bias'\] is given but problem.has_bias is False",
        ),
        (
            lambda: fp4moe.MoE(p, dict(w, routing_bias=np.zeros(4, np.float32))),
            r"weights\['routing_bias'\] is given but routing method softmax_topk",
        ),
        (
            lambda: fp4moe.MoE(p, dict(w, w13_weight_global_scale=np.zeros(4, np.float32))),
            r"weights\['w13_weight_global_scale'\] has values that are not finite and > 0",
        ),
        (lambda: fp4moe.MoE(p, dict(w, w13="abc")), r"weights\['w13'\] is a builtins.str, not an array"),
        (lambda: fp4moe.MoE(p.replace(hidden_size=100), w), "hidden_size = 100 must be a positive multiple of 32"),
        (lambda: fp4moe.MoE(p, w, device="tpu"), "device = 'tpu' is not one of"),
        (lambda: fp4moe.MoE(p, w, device="cpu", path="sm90"), "path = 'sm90' is a GPU kernel path"),
        (lambda: fp4moe.MoE(p, w, device="cpu", tune_file="t.json"), "tune_file = 't.json' tunes the GPU kernels"),
        (lambda: fp4moe.MoE(p, w, device="cpu", split_k=True), "split_k = True is a GPU kernel option"),
        (lambda: fp4moe.MoE(p, w, device="cpu", max_sms=4), "max_sms = 4 is a GPU kernel option"),
        (lambda: fp4moe.MoE(p, w, device="cpu", max_sms=-1), "max_sms = -1 must be >= 0"),
        (
            lambda: fp4moe.MoE(p, w, device="cpu", tokens_routed_here=True),
            "tokens_routed_here = True informs the GPU kernels' config choice",
        ),
        (lambda: fp4moe.MoE(p, w, tokens_routed_here=1), "tokens_routed_here = 1 must be a bool"),
        (lambda: fp4moe.MoE(p, w, device="cpu", split_k="False"), "split_k = 'False' must be a bool"),
        (lambda: fp4moe.MoE(p, dict(w, w13=w["w13"].view("S1"))), r"weights\['w13'\] is bytes8; expected uint8$"),
        (
            lambda: fp4moe.MoE(p, dict(w, w2_scale=w["w2_scale"].view("S1"))),
            r"weights\['w2_scale'\] is bytes8; expected uint8 or float8_e4m3fn",
        ),
        # Decode-convention global scales by value (0 would zero the expert, NaN, inf or < 0 poison it).
        (
            lambda: fp4moe.MoE(p, dict(w, w2_scale_2=-w["w2_scale_2"])),
            r"w2_scale_2\[0\] = -[0-9.e-]+ must be finite and >= 0",
        ),
        (
            lambda: fp4moe.MoE(p, dict(w, w13_scale_2=np.full(4, np.nan, np.float32))),
            r"w13_scale_2\[0\] = nan must be finite and >= 0",
        ),
        (lambda: fp4moe.MoE(p, w, ep_size=3), "num_experts = 4 is not divisible by ep_size = 3"),
        (lambda: fp4moe.MoE.dummy(p, 0, device="cpu", tp_size=4, tp_rank=4), "tp_rank"),
        (lambda: fp4moe.Problem(hidden_sise=128), "Problem has no field 'hidden_sise'"),
        (lambda: fp4moe.Problem(hidden_size="big"), "hidden_size = 'big' has the wrong type"),
        (lambda: fp4moe.Problem(mode="w8a8"), "mode = 'w8a8' is not one of: w4a16, w4a4"),
        (lambda: fp4moe.Problem(activation="gelu"), "activation = 'gelu' is not one of"),
    ]
    for call, message in cases:
        with pytest.raises(fp4moe.InvalidArgumentError, match=message):
            call()
    mx = fp4moe.preset("gpt-oss-20b").scaled(32)
    wm = fp4moe.random_weights(mx, 0)
    with pytest.raises(
        fp4moe.InvalidArgumentError, match=r"weights\['w13_scale_2'\] is given but MXFP4 weights have no global scale"
    ):
        fp4moe.MoE(mx, dict(wm, w13_scale_2=np.ones(mx.num_experts, np.float32)))
    with pytest.raises(
        fp4moe.InvalidArgumentError, match=r"weights\['w13_bias'\] is missing: problem.has_bias is True"
    ):
        fp4moe.MoE(mx, {k: v for k, v in wm.items() if k != "w13_bias"})
    ds = fp4moe.preset("deepseek-r1").scaled(32)
    wd = fp4moe.random_weights(ds, 0)
    with pytest.raises(fp4moe.InvalidArgumentError, match="routing method deepseek_v3 needs e_score_correction_bias"):
        fp4moe.MoE(ds, {k: v for k, v in wd.items() if k != "routing_bias"})
    with pytest.raises(KeyError, match="Problem has no field 'size'"):
        p["size"]


def test_moe_device_errors_without_gpu():
    if fp4moe.cuda_device_count() > 0:
        pytest.skip("a CUDA device is visible: this checks the no-GPU error")
    p = small_problem()
    message = "no CUDA device is visible; use device='cpu'" if fp4moe.has_cuda else "build has no CUDA support"
    with pytest.raises(fp4moe.UnsupportedError, match=message):
        fp4moe.MoE.dummy(p, 0, device="cuda")
    with pytest.raises(fp4moe.UnsupportedError):
        fp4moe.MoE(p, fp4moe.random_weights(p, 0), device="cuda:0")


def test_forward_errors():
    p = small_problem()
    moe = fp4moe.MoE.dummy(p, 0, device="cpu")
    x = np.zeros((3, 128), np.float32)
    logits = np.zeros((3, 4), np.float32)
    ids = np.zeros((3, 2), np.int32)
    w = np.ones((3, 2), np.float32)
    cases = [
        (lambda: moe(x[0], logits), r"hidden_states has shape \[128\]; expected a 2-d"),
        (
            lambda: moe(x[:, :64], logits),
            r"hidden_states has shape \[3, 64\]; expected \[num_tokens = 3, hidden_size = 128\]",
        ),
        (lambda: moe(x.astype(np.float64), logits), "hidden_states has dtype float64; expected float32 or bfloat16"),
        (lambda: moe(np.zeros((3, 256), np.float32)[:, ::2], logits), "hidden_states is not C-contiguous"),
        (lambda: moe(x, logits[:2]), r"router_logits has shape \[2, 4\]; expected \[num_tokens = 3, num_experts = 4\]"),
        (lambda: moe(x, logits.astype(np.float16)), "router_logits has dtype float16"),
        (lambda: moe(x), "got neither"),
        (lambda: moe(x, logits, topk_ids=ids, topk_weights=w), "not both"),
        (lambda: moe(x, topk_ids=ids), "topk_ids given without topk_weights"),
        (lambda: moe(x, topk_weights=w), "topk_weights given without topk_ids"),
        (lambda: moe(x, topk_ids=ids.astype(np.int64), topk_weights=w), "topk_ids has dtype int64; expected int32"),
        (
            lambda: moe(x, topk_ids=ids[:, :1], topk_weights=w),
            r"topk_ids has shape \[3, 1\]; expected \[num_tokens = 3, top_k = 2\]",
        ),
        (
            lambda: moe(x, topk_ids=np.full((3, 2), 4, np.int32), topk_weights=w),
            r"topk_ids\[0\] = 4 is outside \[0, num_experts = 4\)",
        ),
        (lambda: moe(x, topk_ids=np.full((3, 2), -1, np.int32), topk_weights=w), r"topk_ids\[0\] = -1 is outside"),
        (lambda: moe.forward(x, logits, out=np.zeros((3, 128), np.float64)), "out has dtype float64; expected float32"),
        (lambda: moe.forward(x, logits, out=np.zeros((3, 64), np.float32)), r"out has shape \[3, 64\]"),
        (lambda: moe.forward(x, logits, out=[0.0]), "out is a builtins.list, not an array"),
        (lambda: moe(x.tolist(), logits), "hidden_states is a builtins.list, not an array"),
        (lambda: moe.forward(x, logits, stream="fast"), None),  # host calls ignore the stream
    ]
    for call, message in cases:
        if message is None:
            call()
            continue
        with pytest.raises(fp4moe.InvalidArgumentError, match=message):
            call()


def swapped(a):
    """`a` in the other byte order (big-endian here): the same values, an array DLPack cannot carry."""
    return a.astype(a.dtype.newbyteorder("S"))


def test_arrays_nanobind_cannot_import_raise_invalid_argument_naming_them():
    # Each of these reached nanobind, which raised a bare TypeError ("incompatible function
    # arguments") that named neither the argument nor the reason.
    p = small_problem()
    moe = fp4moe.MoE.dummy(p, 3, device="cpu")
    x, logits = gaussian((5, 128), seed=41), gaussian((5, 4), seed=42, scale=2.0)
    ids, w = fp4moe.route(logits, p)
    gs = fp4moe.global_scale_from_amax(np.abs(x).max(), "encode")
    packed, scales = fp4moe.quantize_nvfp4(x, gs, "encode")
    mx_packed, mx_scales = fp4moe.quantize_mxfp4(x)
    read_only = np.zeros((5, 128), np.float32)
    read_only.setflags(write=False)
    order = r"is (big|little)-endian"
    L8 = gaussian((5, 8), seed=43)
    ds = {"method": "deepseek_v3", "top_k": 2, "num_groups": 4, "topk_groups": 2}
    cases = [
        (lambda: moe(x, logits, out=read_only), "out is read-only, and the call writes it"),
        (lambda: moe(swapped(x), logits), rf"hidden_states {order} float32 .*astype\('<f4'\)"),
        (lambda: moe(x, swapped(logits)), f"router_logits {order} float32"),
        (lambda: moe(x, topk_ids=swapped(ids), topk_weights=w), f"topk_ids {order} int32"),
        (lambda: moe(x, topk_ids=ids, topk_weights=swapped(w)), f"topk_weights {order} float32"),
        (lambda: fp4moe.quantize_nvfp4(swapped(x), gs, "encode"), f"x {order} float32"),
        (lambda: fp4moe.quantize_mxfp4(swapped(x)), f"x {order} float32"),
        (lambda: fp4moe.route(swapped(logits), p), f"router_logits {order} float32"),
        (lambda: fp4moe.route(L8, correction_bias=[0.0] * 8, **ds), "correction_bias is a builtins.list, not an array"),
        (lambda: fp4moe.route(L8, correction_bias=swapped(np.zeros(8, np.float32)), **ds), f"correction_bias {order}"),
        (lambda: fp4moe.dequantize_nvfp4(packed, scales.tolist(), gs, "encode"), "scales is a builtins.list, not an"),
        (lambda: fp4moe.dequantize_mxfp4(mx_packed, mx_scales.tolist()), "scales is a builtins.list, not an array"),
        (lambda: fp4moe.dequantize_nvfp4(packed.tolist(), scales, gs, "encode"), "packed is a builtins.list"),
        (lambda: fp4moe.MoE.dummy(p, -1, device="cpu"), r"seed = -1 must be in \[0, 2\*\*64\)"),
        (lambda: fp4moe.MoE.dummy(p, 2**64, device="cpu"), r"seed = 18446744073709551616 must be in \[0, 2\*\*64\)"),
        (lambda: fp4moe.MoE.dummy(p, 1.5, device="cpu"), "seed = 1.5 must be an int"),
        (lambda: fp4moe.random_weights(p, -3), r"seed = -3 must be in \[0, 2\*\*64\)"),
        (lambda: fp4moe.random_weights(p, 0, ep_size=2.0), "ep_size = 2.0 must be an int"),
        (lambda: fp4moe.route(L8, method="softmax_topk", topk=2), "route: 'topk' is not a routing field; fields: method"),
        (lambda: fp4moe.route(L8, method="softmax_topk", top_k=2.0), "top_k = 2.0 must be an int"),
        (lambda: fp4moe.route(L8, top_k=2, renormalize="yes"), "renormalize = 'yes' must be a bool"),
        (lambda: fp4moe.route(L8, top_k=2, routed_scaling_factor="2"), "routed_scaling_factor = '2' must be a float"),
        (lambda: fp4moe.route(L8, method=3, top_k=2), "method = 3 must be a str"),
        (lambda: fp4moe.unswizzle_scales(fp4moe.swizzle_scales(scales), 5.7, 8), "rows = 5.7 must be an int"),
        (lambda: fp4moe.unswizzle_scales(fp4moe.swizzle_scales(scales), 5, "8"), "num_scale_cols = '8' must be an int"),
        (lambda: moe.kernel_info(2.5), "num_tokens = 2.5 must be an int"),
        (lambda: fp4moe.global_scale_from_amax("6.0", "encode"), "amax = '6.0' must be a float"),
        (lambda: fp4moe.quantize_nvfp4(x, str(gs), "encode"), "global_scale = '.*' must be a float"),
        (lambda: fp4moe.dequantize_nvfp4(packed, scales, None, "encode"), "global_scale = None must be a float"),
        (lambda: fp4moe.global_scale_from_amax(np.ones(2), "encode"), r"must be a float \(one number\)"),
    ]
    for call, message in cases:
        with pytest.raises(fp4moe.InvalidArgumentError, match=message):
            call()
    # The remedies the messages give work, with the same results as the native arrays.
    np.testing.assert_array_equal(moe(swapped(x).astype("<f4"), logits), moe(x, logits))
    np.testing.assert_array_equal(fp4moe.route(L8, method="softmax_topk", top_k=2, renormalize=True)[0],
                                  fp4moe.route(L8, fp4moe.RoutingConfig(num_experts=8, top_k=2, renormalize=True))[0])
    np.testing.assert_array_equal(fp4moe.unswizzle_scales(fp4moe.swizzle_scales(scales), np.int64(5), 8), scales)
    # A one-element array is a number (as a torch tensor's w.abs().max() is).
    assert fp4moe.global_scale_from_amax(np.array(6.0), "encode") == fp4moe.global_scale_from_amax(6.0, "encode")


def test_extension_says_why_an_array_cannot_be_imported():
    # Past the Python layer's checks (a direct call of the extension), the C++ fallback said "is a
    # ndarray, not an array"; it names the dtype and the possible reasons instead.
    p = small_problem()
    w = fp4moe.random_weights(p, 44)
    bad = dict(w, w13_scale_2=swapped(w["w13_scale_2"]))
    with pytest.raises(
        fp4moe.InvalidArgumentError,
        match=r"weights\['w13_scale_2'\] is a ndarray of dtype >f4 that neither DLPack nor the buffer protocol can",
    ):
        fp4moe._ext.Layer.from_weights(p, bad, "cpu", 0, 0, 1, 0, 1, "auto", "", False, 0, False)
    # Through fp4moe.MoE the float global scale is converted to float32 first, like any float type.
    x, logits = gaussian((2, 128), seed=45), gaussian((2, 4), seed=46)
    np.testing.assert_array_equal(fp4moe.MoE(p, bad)(x, logits), fp4moe.MoE(p, w)(x, logits))


def test_cpu_moe_refuses_more_tokens_than_max_tokens():
    # As the GPU layer (MoeLayer::validate) does: the CPU reference used to run any token count.
    p = small_problem()  # max_tokens 16
    moe = fp4moe.MoE.dummy(p, 8, device="cpu")
    x, logits = inputs(p, p.max_tokens + 3, seed=51)
    message = rf"hidden_states: num_tokens = {p.max_tokens + 3} must be in \[0, max_tokens = {p.max_tokens}\]"
    with pytest.raises(fp4moe.InvalidArgumentError, match=message):
        moe(x, logits)
    ids, w = fp4moe.route(logits, p)
    with pytest.raises(fp4moe.InvalidArgumentError, match=message):
        moe(x, topk_ids=ids, topk_weights=w)
    # max_tokens itself is fine, and a layer made for more tokens takes them (rows are independent).
    head = moe(x[: p.max_tokens], logits[: p.max_tokens])
    everything = fp4moe.MoE.dummy(p.replace(max_tokens=p.max_tokens + 3), 8, device="cpu")(x, logits)
    assert np.linalg.norm(head) > 0
    np.testing.assert_array_equal(everything[: p.max_tokens], head)


def test_numpy_bfloat16_arrays_are_taken_as_their_float32_values():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 12, device="cpu")
    x, logits = inputs(p, 6, seed=61)
    xb, lb = x.astype(bf16), logits.astype(bf16)
    x32, l32 = xb.astype(np.float32), lb.astype(np.float32)  # the same values
    want = moe(x32, l32)
    assert np.linalg.norm(want) > 0
    np.testing.assert_array_equal(moe(xb, lb), want)
    np.testing.assert_array_equal(moe(xb, l32), want)
    ids, w = fp4moe.route(lb, p)
    want_ids, want_w = fp4moe.route(l32, p)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(w, want_w)
    gs = fp4moe.global_scale_from_amax(np.abs(x32).max(), "encode")
    for got, expected in zip(fp4moe.quantize_nvfp4(xb, gs, "encode"), fp4moe.quantize_nvfp4(x32, gs, "encode")):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip(fp4moe.quantize_mxfp4(xb), fp4moe.quantize_mxfp4(x32)):
        np.testing.assert_array_equal(got, expected)
    # bf16 global scales in the weights are converted to float32 like float64 ones.
    weights = fp4moe.random_weights(p, 12)
    s2 = weights["w2_scale_2"].astype(bf16)
    np.testing.assert_array_equal(
        fp4moe.MoE(p, dict(weights, w2_scale_2=s2))(x, logits),
        fp4moe.MoE(p, dict(weights, w2_scale_2=s2.astype(np.float32)))(x, logits),
    )
    # Where bfloat16 is not a dtype the argument takes, the array is refused, naming it and why.
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"topk_weights has dtype bfloat16 \(ml_dtypes\)"):
        moe(x, topk_ids=ids, topk_weights=w.astype(bf16))
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"out has dtype bfloat16 \(ml_dtypes\), which NumPy"):
        moe(x, logits, out=np.zeros((6, p.hidden_size), bf16))


# ---- Checkpoints ---------------------------------------------------------------------------------


def checkpoint_problem():
    return fp4moe.Problem(
        name="qwen3_moe", hidden_size=256, intermediate_size=128, num_experts=8, top_k=2, renormalize=True
    )


@pytest.mark.parametrize("convention", ["modelopt", "compressed-tensors"])
def test_checkpoint_layers_load_into_the_moe(tmp_path, convention):
    p = checkpoint_problem()
    layers = [fp4moe.random_weights(p, seed) for seed in (10, 11)]
    if convention == "compressed-tensors":
        # weight_global_scale = 1/s2 in the file and s2 = 1/gs back: exact for powers of two only.
        for w in layers:
            for k in ("w13_scale_2", "w2_scale_2"):
                w[k] = np.exp2(np.round(np.log2(w[k]))).astype(np.float32)
    ref.write_qwen3_checkpoint(str(tmp_path), p, layers, convention=convention, input_scale=5.0 / 2688)
    ckpt = fp4moe.Checkpoint(str(tmp_path))
    info = ckpt.info
    assert info["architecture"] == "Qwen3MoeForCausalLM" and info["moe_layers"] == [0, 1]
    assert info["num_shards"] == 2
    assert info["convention"] == ("modelopt-nvfp4" if convention == "modelopt" else "compressed-tensors-nvfp4")
    q = ckpt.problem
    assert (q.hidden_size, q.intermediate_size, q.num_experts, q.top_k, q.routing_method, q.renormalize) == (
        256,
        128,
        8,
        2,
        "softmax_topk",
        True,
    )
    weights, report = ckpt.load_layer(1)
    assert report["expert_layout"] == "per-expert" and report["has_input_scales"]
    for k in ("w13", "w13_scale", "w13_scale_2", "w2", "w2_scale", "w2_scale_2"):
        np.testing.assert_array_equal(weights[k], layers[1][k], err_msg=k)
    np.testing.assert_allclose(weights["a13_scale_2"], 5.0 / 2688, rtol=1e-7)
    # An EP rank reads only its experts.
    half, _ = ckpt.load_layer(1, ep_rank=1, ep_size=2)
    np.testing.assert_array_equal(half["w2"], layers[1]["w2"][4:])
    x, logits = inputs(p, 5)
    want = fp4moe.MoE(p, layers[1])(x, logits)
    np.testing.assert_array_equal(fp4moe.MoE.from_checkpoint(ckpt, 1, device="cpu")(x, logits), want)
    np.testing.assert_array_equal(fp4moe.MoE.from_checkpoint(str(tmp_path), 1, device="cpu")(x, logits), want)
    w4a4 = fp4moe.MoE.from_checkpoint(ckpt, 0, device="cpu", mode="w4a4", max_tokens=64)
    assert w4a4.problem.mode == "w4a4" and w4a4.problem.max_tokens == 64


def test_checkpoint_errors(tmp_path):
    with pytest.raises(fp4moe.IoError, match="no config.json"):
        fp4moe.Checkpoint(str(tmp_path))
    p = checkpoint_problem()
    ref.write_qwen3_checkpoint(str(tmp_path), p, [fp4moe.random_weights(p, 1)])
    with pytest.raises(fp4moe.InvalidArgumentError, match="mode w4a4 needs the activation global scales"):
        fp4moe.MoE.from_checkpoint(str(tmp_path), 0, device="cpu", mode="w4a4")
    with pytest.raises(fp4moe.InvalidArgumentError, match="layer = 5 is not a MoE layer"):
        fp4moe.Checkpoint(str(tmp_path)).load_layer(5)


def test_checkpoint_paths_may_be_path_like(tmp_path):
    with pytest.raises(fp4moe.IoError, match="no config.json"):
        fp4moe.Checkpoint(tmp_path)  # a pathlib.Path
    with pytest.raises(fp4moe.InvalidArgumentError, match="directory is a int; expected a path"):
        fp4moe.Checkpoint(5)
    p = checkpoint_problem()
    weights = fp4moe.random_weights(p, 71)
    ref.write_qwen3_checkpoint(str(tmp_path), p, [weights])
    ckpt = fp4moe.Checkpoint(tmp_path)
    assert ckpt.info["moe_layers"] == [0]
    loaded, _ = ckpt.load_layer(0)
    np.testing.assert_array_equal(loaded["w13"], weights["w13"])
    x, logits = inputs(p, 3, seed=72)
    want = fp4moe.MoE(p, weights)(x, logits)
    assert np.linalg.norm(want) > 0
    np.testing.assert_array_equal(fp4moe.MoE.from_checkpoint(tmp_path, 0, device="cpu")(x, logits), want)


def test_stream_objects_of_another_device_are_refused():
    """stream_handle's device check on stream objects (the GPU test passes one to a forward): a
    torch-style `device` or a CuPy-style `device_id` other than the arrays' device is refused by
    name; the arrays' own device, or an object that names none, gives its handle."""
    from fp4moe import _arrays

    class Stream:
        def __init__(self, **attrs):
            self.cuda_stream = 4242
            for k, v in attrs.items():
                setattr(self, k, v)

        def __repr__(self):
            return "<stream>"

    class Device:
        type = "cuda"

        def __init__(self, index):
            self.index = index

    on_0 = _arrays.Place(True, 0)
    for other in (Stream(device=Device(3)), Stream(device_id=3)):
        message = r"stream = <stream> is a stream of cuda:3; the arrays are on cuda:0"
        with pytest.raises(fp4moe.InvalidArgumentError, match=message):
            _arrays.stream_handle(other, on_0)
    for same in (Stream(device=Device(0)), Stream(device_id=0), Stream(), Stream(device_id=True)):
        assert _arrays.stream_handle(same, on_0) == 4242
    # Host calls take no stream: nothing is checked.
    assert _arrays.stream_handle(Stream(device_id=3), _arrays.Place(False)) == 0
