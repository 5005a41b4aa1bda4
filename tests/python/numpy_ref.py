"""Plain NumPy implementations the binding is tested against, written from the format definitions
(BRIEF section 2, include/fp4moe/format.h) and not from the C++ code: e2m1 / e4m3 / e8m0 decoding,
the ModelOpt NVFP4 recipe and the OCP MXFP4 rule, the 128x4 scale swizzle, bf16 rounding, the four
routing methods and the MoE layer on dequantized weights.

Format arithmetic is done in float32 where the definition is in fp32 (NumPy's float32 operations
are correctly rounded IEEE operations); the layer is done in float64.
"""

import numpy as np

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _e4m3_positive_values():
    """Values of the e4m3fn codes 0x00..0x7e (0x7f is NaN), increasing with the code."""
    codes = np.arange(0x7F)
    exp, mant = codes >> 3, codes & 7
    normal = (1.0 + mant / 8.0) * np.exp2(exp - 7.0)
    subnormal = mant / 8.0 * 2.0**-6
    return np.where(exp == 0, subnormal, normal)


E4M3_VALUES = _e4m3_positive_values()


# ---- Decoding ------------------------------------------------------------------------------------


def unpack_codes(packed):
    """uint8 [..., n] -> 4-bit codes [..., 2n]: element 2i is the low nibble of byte i."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.uint8)
    codes[..., 0::2] = packed & 0xF
    codes[..., 1::2] = packed >> 4
    return codes


def pack_codes(codes):
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def e2m1_decode(codes):
    codes = np.asarray(codes, dtype=np.uint8)
    mag = E2M1_VALUES[codes & 7]
    return np.where(codes & 8, -mag, mag).astype(np.float32)


def e4m3_decode(b):
    b = np.asarray(b, dtype=np.uint8)
    low = b & 0x7F
    mag = np.where(low == 0x7F, np.nan, E4M3_VALUES[np.minimum(low, 0x7E)])
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


def e8m0_decode(b):
    b = np.asarray(b, dtype=np.uint8).astype(np.int64)
    return np.where(b == 0xFF, np.nan, np.exp2(b - 127.0)).astype(np.float32)


def nvfp4_decode(packed, scales, global_scale, convention):
    """float32 [..., cols] from packed [..., cols/2] and linear e4m3 scales [..., cols/16]:
    (e2m1 * scale), exact in fp32, then / gs ('encode') or * s2 ('decode') in fp32."""
    v = e2m1_decode(unpack_codes(packed)) * np.repeat(e4m3_decode(scales), 16, axis=-1)
    g = np.float32(global_scale)
    return (v / g) if convention == "encode" else (v * g)


def mxfp4_decode(packed, scales):
    return e2m1_decode(unpack_codes(packed)) * np.repeat(e8m0_decode(scales), 32, axis=-1)


# ---- Encoding ------------------------------------------------------------------------------------


def _round_to_grid(mag, grid):
    """Index of the nearest grid value to each magnitude, ties to the even index (= even code:
    round-to-nearest-even on a grid whose codes increase with the value); above the grid saturates."""
    mag = np.asarray(mag, dtype=np.float64)
    hi = np.clip(np.searchsorted(grid, mag, side="left"), 0, len(grid) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - grid[lo], grid[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    idx = np.where(pick_hi, hi, lo)
    return np.where(mag >= grid[-1], len(grid) - 1, idx)


def e2m1_encode(x):
    """Round-to-nearest-even onto e2m1 with saturation; negatives keep the sign bit (also at 0)."""
    x = np.asarray(x, dtype=np.float32)
    idx = _round_to_grid(np.where(np.isnan(x), 0.0, np.abs(x)), E2M1_VALUES)
    return (idx | np.where(np.signbit(x) & ~np.isnan(x), 8, 0)).astype(np.uint8)


def e4m3_encode(x):
    """Round-to-nearest-even fp32 -> e4m3fn, saturating to 448; for non-negative inputs (scales)."""
    x = np.asarray(x, dtype=np.float32)
    return _round_to_grid(x, E4M3_VALUES).astype(np.uint8)


def nvfp4_quantize_modelopt(x, s2):
    """ModelOpt's weight recipe, x [..., cols] float32, s2 the decode-convention global scale:
    scale = e4m3(amax / (6 * s2)) (a zero scale becomes 1.0 = 0x38), q = e2m1(x / (scale * s2))."""
    x = np.asarray(x, dtype=np.float32)
    s2 = np.float32(s2)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 16, 16))
    amax = np.abs(blocks).max(axis=-1)
    sf8 = e4m3_encode(amax / (np.float32(6.0) * s2))
    sf8 = np.where((sf8 & 0x7F) == 0, np.uint8(0x38), sf8).astype(np.uint8)
    denom = e4m3_decode(sf8) * s2
    codes = e2m1_encode(blocks / denom[..., None]).reshape(x.shape)
    return pack_codes(codes), sf8


def mxfp4_quantize(x):
    """OCP MX rule: scale exponent floor(log2(amax)) - 2 (from the fp32 exponent field), clamped to
    [0, 254] biased; a zero block has scale 127 (1.0); q = e2m1(x / 2^(s - 127))."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    amax = np.abs(blocks).max(axis=-1)
    exp_field = ((amax.view(np.uint32) >> 23) & 0xFF).astype(np.int64)
    biased = np.where(amax == 0, 127, np.clip(exp_field - 2, 0, 254)).astype(np.uint8)
    scale = np.ldexp(np.float32(1.0), biased.astype(np.int32) - 127).astype(np.float32)
    codes = e2m1_encode(blocks / scale[..., None]).reshape(x.shape)
    return pack_codes(codes), biased


def swizzled_offset(row, col, num_scale_cols):
    """BRIEF's 128x4 layout: off = ((m/128)*(Ksf/4) + k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + k%4,
    Ksf padded to a multiple of 4."""
    padded = (num_scale_cols + 3) // 4 * 4
    return ((row // 128) * (padded // 4) + col // 4) * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4


def bf16_round(x):
    """fp32 -> nearest bf16 (ties to even), returned as float32. Inputs here are finite."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


# ---- Routing (float64) ---------------------------------------------------------------------------


def _topk(scores, k):
    """Indices of the k largest scores per row, descending, ties to the lowest index."""
    return np.argsort(-scores, axis=-1, kind="stable")[:, :k]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def route(logits, method, top_k, renormalize=False, num_groups=1, topk_groups=1, scaling=1.0, bias=None):
    logits = np.asarray(logits, dtype=np.float64)
    rows = np.arange(logits.shape[0])[:, None]
    if method == "softmax_topk":
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        ids = _topk(p, top_k)
        w = p[rows, ids]
        if renormalize:
            w = w / w.sum(axis=1, keepdims=True)
    elif method == "topk_softmax":
        ids = _topk(logits, top_k)
        sel = logits[rows, ids]
        w = np.exp(sel - sel.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
    elif method == "llama4":
        ids = _topk(logits, 1)
        w = _sigmoid(logits[rows, ids])
    elif method == "deepseek_v3":
        s = _sigmoid(logits)
        b = s + np.asarray(bias, dtype=np.float64)[None, :]
        T, E = b.shape
        grouped = b.reshape(T, num_groups, E // num_groups)
        top2 = -np.sort(-grouped, axis=2)[:, :, :2].sum(axis=2)
        keep = _topk(top2, topk_groups)
        mask = np.zeros((T, num_groups), dtype=bool)
        mask[np.arange(T)[:, None], keep] = True
        masked = np.where(np.repeat(mask, E // num_groups, axis=1), b, -np.inf)
        ids = _topk(masked, top_k)
        w = s[rows, ids]
        if renormalize:
            w = w / w.sum(axis=1, keepdims=True)
        w = w * scaling
    else:
        raise ValueError(method)
    return ids.astype(np.int32), w


# ---- The layer (float64 over dequantized weights) --------------------------------------------------


def dequantize_expert(weights, problem, e):
    """Expert e's w13 [2I, H] and w2 [H, I] in float64, decoded here from the linear layout. The
    product e2m1 * scale * global scale is exact in fp64 (at most 2 + 4 + 24 significant bits)."""

    def decode(codes, scales, global_scale, bs, scale_decode):
        v = e2m1_decode(unpack_codes(codes)).astype(np.float64)
        return v * np.repeat(scale_decode(scales).astype(np.float64), bs, axis=-1) * float(global_scale)

    if problem["weight_format"] == "nvfp4":
        w13 = decode(weights["w13"][e], weights["w13_scale"][e], weights["w13_scale_2"][e], 16, e4m3_decode)
        w2 = decode(weights["w2"][e], weights["w2_scale"][e], weights["w2_scale_2"][e], 16, e4m3_decode)
    else:
        w13 = decode(weights["w13"][e], weights["w13_scale"][e], 1.0, 32, e8m0_decode)
        w2 = decode(weights["w2"][e], weights["w2_scale"][e], 1.0, 32, e8m0_decode)
    return w13, w2


def activation(name, gate, up):
    if name == "swiglu":
        return gate / (1.0 + np.exp(-gate)) * up
    g = np.minimum(gate, 7.0)
    lin = np.clip(up, -7.0, 7.0)
    return g / (1.0 + np.exp(-1.702 * g)) * (lin + 1.0)


def moe_forward(problem, weights, hidden, topk_ids, topk_weights):
    """The MoE layer (w4a16) in float64: hidden [T, H] float32 (rounded to bf16 here), routing given.
    The intermediate is rounded to bf16 (fp64 -> fp32 -> bf16), as the kernels feed it to a bf16 GEMM;
    Llama-4 multiplies the input by the router weight in fp32 and rounds it to bf16."""
    x = bf16_round(hidden)
    T, H = x.shape
    I = problem["intermediate_size"]
    on_input = problem["routing_method"] == "llama4"
    experts = {int(e): dequantize_expert(weights, problem, int(e)) for e in np.unique(topk_ids)}
    out = np.zeros((T, H), dtype=np.float64)
    for t in range(T):
        for k in range(topk_ids.shape[1]):
            e, w = int(topk_ids[t, k]), topk_weights[t, k]
            w13, w2 = experts[e]
            xin = bf16_round(x[t] * np.float32(w)) if on_input else x[t]
            acc = w13 @ xin.astype(np.float64)
            if problem["has_bias"]:
                acc = acc + weights["w13_bias"][e]
            h = bf16_round(activation(problem["activation"], acc[:I], acc[I:]).astype(np.float32))
            y = w2 @ h.astype(np.float64)
            if problem["has_bias"]:
                y = y + weights["w2_bias"][e]
            out[t] += y if on_input else float(w) * y
    return out.astype(np.float32)


def normalized_error(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    norm = np.linalg.norm(want)
    assert norm > 0, "reference output is all zeros: the comparison would prove nothing"
    return float(np.linalg.norm(got - want) / norm)


# ---- Checkpoints ---------------------------------------------------------------------------------


def write_safetensors(path, tensors):
    """A .safetensors file: 8-byte little-endian header length, the JSON header (padded with spaces
    to 8 bytes), then the tensors back to back. tensors: {name: (dtype, shape, numpy array)}."""
    import json
    import struct

    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, array) in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_qwen3_checkpoint(directory, problem, layer_weights, convention="modelopt", input_scale=None):
    """A Qwen3-MoE NVFP4 checkpoint with one shard per layer: per expert gate/up/down_proj tensors,
    ModelOpt names (weight, weight_scale F8_E4M3, weight_scale_2 = s2) or compressed-tensors names
    (weight_packed, weight_scale, weight_global_scale = 1/s2)."""
    import json
    import os

    H, I, E = problem.hidden_size, problem.intermediate_size, problem.num_experts
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": H,
        "num_hidden_layers": len(layer_weights),
        "moe_intermediate_size": I,
        "num_experts": E,
        "num_experts_per_tok": problem.top_k,
        "norm_topk_prob": problem.renormalize,
        "decoder_sparse_step": 1,
    }
    if convention == "compressed-tensors":
        config["quantization_config"] = {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
        }
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    if convention == "modelopt":
        with open(os.path.join(directory, "hf_quant_config.json"), "w") as f:
            json.dump({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}, f)
    names = (
        {"w": "weight", "g": "weight_global_scale", "i": "input_global_scale"}
        if convention != "modelopt"
        else {"w": "weight", "g": "weight_scale_2", "i": "input_scale"}
    )
    if convention != "modelopt":
        names["w"] = "weight_packed"
    for layer, w in enumerate(layer_weights):
        tensors = {}
        for e in range(E):
            base = f"model.layers.{layer}.mlp.experts.{e}."
            parts = (
                ("gate_proj", w["w13"][e, :I], w["w13_scale"][e, :I], w["w13_scale_2"][e]),
                ("up_proj", w["w13"][e, I:], w["w13_scale"][e, I:], w["w13_scale_2"][e]),
                ("down_proj", w["w2"][e], w["w2_scale"][e], w["w2_scale_2"][e]),
            )
            for proj, codes, scales, s2 in parts:
                gs = np.float32(s2) if convention == "modelopt" else np.float32(1.0) / np.float32(s2)
                tensors[base + proj + "." + names["w"]] = ("U8", codes.shape, codes)
                tensors[base + proj + ".weight_scale"] = ("F8_E4M3", scales.shape, scales)
                tensors[base + proj + "." + names["g"]] = ("F32", [], np.array(gs, dtype=np.float32))
                if input_scale is not None:
                    v = (
                        np.float32(input_scale)
                        if convention == "modelopt"
                        else np.float32(1.0) / np.float32(input_scale)
                    )
                    tensors[base + proj + "." + names["i"]] = ("F32", [], np.array(v, dtype=np.float32))
        write_safetensors(
            os.path.join(directory, f"model-{layer + 1:05d}-of-{len(layer_weights):05d}.safetensors"), tensors
        )
