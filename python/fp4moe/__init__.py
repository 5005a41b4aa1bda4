"""fp4moe: the fused Mixture-of-Experts layer with NVFP4 / MXFP4 expert weights.

Python binding of the C++/CUDA library. Arrays cross by DLPack without copies, so NumPy arrays,
PyTorch tensors and other DLPack arrays all work; where they live picks the implementation:

* host arrays (NumPy, CPU tensors) run the CPU codec and the C++ fp64 reference of the layer
  (reference/moe_reference.h), the oracle every kernel is checked against;
* CUDA arrays run the GPU codec and kernels, asynchronously on the caller's stream.

Main entry points::

    problem = fp4moe.preset("qwen3-30b-a3b")             # a Problem (dict-like)
    moe = fp4moe.MoE(problem, weights)                     # weights in the checkpoint layout
    moe = fp4moe.MoE.dummy(problem, seed=0, device="cuda")
    y = moe(hidden_states, router_logits)                  # or topk_ids=..., topk_weights=...
    moe.kernel_info(num_tokens)                            # which kernels ran, and why

    packed, scales = fp4moe.quantize_nvfp4(x, gs, "encode", recipe="kernel")
    x_hat = fp4moe.dequantize_nvfp4(packed, scales, gs, "encode")
    topk_ids, topk_weights = fp4moe.route(logits, problem, correction_bias=bias)

    ckpt = fp4moe.Checkpoint("/models/Qwen3-30B-A3B-NVFP4")        # config + shard headers
    moe = fp4moe.MoE.from_checkpoint(ckpt, layer=0, device="cuda")

    fp4moe.valid_parallel_configs(problem, world_size=4)   # [ParallelConfig(dp=1, tp=4, ep=1), ...]
    outs = fp4moe.parallel.run_local(problem, (2, 1, 2), "alltoall", seed_or_weights,
                                     hidden_states=[x0, x1], router_logits=[l0, l1])  # CPU ranks
    pmoe = fp4moe.ParallelMoE(problem, (2, 1, 2), "alltoall")  # one GPU per torchrun/mpirun/srun rank

Errors raise fp4moe.Fp4moeError (subclasses InvalidArgumentError, UnsupportedError, CudaError,
IoError) with the C++ Status message, which names the argument and its value.

With PyTorch installed, the forward is also the custom op ``torch.ops.fp4moe.moe_forward``, which
MoE.forward uses for torch tensors, so torch.compile and CUDA-graph capture see one opaque op. Set
FP4MOE_NO_TORCH=1 to keep fp4moe from importing torch.
"""

from __future__ import annotations

import itertools
import operator
import weakref

import numpy as np

from . import _arrays, _ext
from ._ext import (
    Checkpoint,
    CudaError,
    Fp4moeError,
    InvalidArgumentError,
    IoError,
    Problem,
    RoutingConfig,
    UnsupportedError,
    preset_names,
)

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "CudaError",
    "Fp4moeError",
    "InvalidArgumentError",
    "IoError",
    "MoE",
    "ParallelConfig",
    "ParallelMoE",
    "Problem",
    "RoutingConfig",
    "UnsupportedError",
    "applicable_strategies",
    "cuda_device_count",
    "dequantize_mxfp4",
    "dequantize_nvfp4",
    "global_scale_from_amax",
    "has_cuda",
    "has_nccl",
    "launch_info",
    "preset",
    "preset_names",
    "quantize_mxfp4",
    "quantize_nvfp4",
    "random_weights",
    "rank_layout",
    "route",
    "swizzle_scales",
    "unswizzle_scales",
    "valid_parallel_configs",
]

#: True when the extension was built with the CUDA kernels.
has_cuda: bool = _ext.has_cuda
#: True when the extension was built with NCCL (ParallelMoE can run; the CPU ranks of
#: fp4moe.parallel.run_local run in every build).
has_nccl: bool = _ext.has_nccl


def cuda_device_count() -> int:
    """Number of visible CUDA devices (0 without a driver or a GPU)."""
    return _ext.cuda_device_count()


def _round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


# ---- Formats -------------------------------------------------------------------------------------


def global_scale_from_amax(amax: float, convention: str) -> float:
    """The NVFP4 global scale of a tensor whose largest magnitude is `amax`:
    ``'encode'`` gs = 2688/amax (vLLM, FlashInfer, compressed-tensors ``*_global_scale``) or
    ``'decode'`` s2 = amax/2688 (ModelOpt ``weight_scale_2``, ``input_scale``)."""
    return _ext.global_scale_from_amax(_real(amax, "amax"), convention)


def quantize_nvfp4(
    x, global_scale: float, convention: str, *, recipe: str = "kernel", layout: str = "linear", stream=None
):
    """Quantize `x` ([..., cols] float32 or bfloat16, cols a multiple of 16) to NVFP4. (NumPy has no
    bfloat16 that DLPack carries: an ml_dtypes bfloat16 array is widened to float32 first, exactly.)

    global_scale / convention: the tensor's fp32 global scale and which convention it is in
    ('encode' or 'decode', see global_scale_from_amax); there is no default, because the two differ
    by a reciprocal. recipe: 'kernel' (the vLLM / TensorRT-LLM activation kernels, bit-exact
    including rcp.approx) or 'modelopt' (ModelOpt's weight recipe). layout: 'linear' scales
    [..., cols/16] as in checkpoints, or 'swizzled' (the 128x4 layout of Blackwell block-scaled
    MMA; x must be 2-d, scales are [round_up(rows, 128), round_up(cols/16, 4)], padding 0).

    Returns (packed uint8 [..., cols/2], element 2i in the low nibble; scales uint8 e4m3 bytes).
    """
    place = _arrays.place_of(x, "x")
    shape = _arrays.shape_of(x, "x")
    if len(shape) == 0:
        raise InvalidArgumentError("x is a 0-d array; expected [rows, cols] (or [..., cols])")
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if cols % 16 != 0:
        raise InvalidArgumentError(
            f"x: last dimension = {cols} must be a positive multiple of 16 (the NVFP4 block size)"
        )
    packed = _arrays.empty(x, place, shape[:-1] + (cols // 2,), "uint8")
    if layout in ("swizzled", "swizzled128x4"):
        scale_shape = (_round_up(rows, 128), _round_up(cols // 16, 4))
    else:
        scale_shape = shape[:-1] + (cols // 16,)
    scales = _arrays.empty(x, place, scale_shape, "uint8")
    _ext.quantize_nvfp4(
        _arrays.export(x, "x", bf16=True),
        _arrays.export(packed, "packed", writable=True),
        _arrays.export(scales, "scales", writable=True),
        _real(global_scale, "global_scale"),
        convention,
        recipe,
        layout,
        _arrays.stream_handle(stream, place),
    )
    return packed, scales


def dequantize_nvfp4(packed, scales, global_scale: float, convention: str, *, layout: str = "linear", stream=None):
    """Decode NVFP4 to float32: x = e2m1 * float(e4m3 scale) / gs ('encode') or * s2 ('decode').

    packed [..., cols/2] uint8; scales uint8 (or float8_e4m3fn) in `layout` ('linear' [..., cols/16],
    'swizzled' [round_up(rows, 128), round_up(cols/16, 4)]). Returns float32 [..., cols]."""
    place = _arrays.place_of(packed, "packed")
    shape = _arrays.shape_of(packed, "packed")
    if len(shape) == 0:
        raise InvalidArgumentError("packed is a 0-d array; expected [rows, cols/2]")
    out = _arrays.empty(packed, place, shape[:-1] + (2 * shape[-1],), "float32")
    _ext.dequantize_nvfp4(
        _arrays.export(packed, "packed"),
        _arrays.export(_arrays.as_bytes(scales, "scales", _E4M3), "scales"),
        _arrays.export(out, "out", writable=True),
        _real(global_scale, "global_scale"),
        convention,
        layout,
        _arrays.stream_handle(stream, place),
    )
    return out


def quantize_mxfp4(x, *, stream=None):
    """Quantize `x` ([..., cols] float32 or bfloat16, cols a multiple of 32) to MXFP4 (OCP MX: e2m1,
    blocks of 32, e8m0 scales, no global scale). Returns (packed uint8 [..., cols/2], scales uint8
    [..., cols/32])."""
    place = _arrays.place_of(x, "x")
    shape = _arrays.shape_of(x, "x")
    if len(shape) == 0:
        raise InvalidArgumentError("x is a 0-d array; expected [rows, cols] (or [..., cols])")
    cols = shape[-1]
    if cols % 32 != 0:
        raise InvalidArgumentError(
            f"x: last dimension = {cols} must be a positive multiple of 32 (the MXFP4 block size)"
        )
    packed = _arrays.empty(x, place, shape[:-1] + (cols // 2,), "uint8")
    scales = _arrays.empty(x, place, shape[:-1] + (cols // 32,), "uint8")
    _ext.quantize_mxfp4(
        _arrays.export(x, "x", bf16=True),
        _arrays.export(packed, "packed", writable=True),
        _arrays.export(scales, "scales", writable=True),
        _arrays.stream_handle(stream, place),
    )
    return packed, scales


def dequantize_mxfp4(packed, scales, *, stream=None):
    """Decode MXFP4 to float32: x = e2m1 * 2^(scale - 127). Returns float32 [..., cols]."""
    place = _arrays.place_of(packed, "packed")
    shape = _arrays.shape_of(packed, "packed")
    if len(shape) == 0:
        raise InvalidArgumentError("packed is a 0-d array; expected [rows, cols/2]")
    out = _arrays.empty(packed, place, shape[:-1] + (2 * shape[-1],), "float32")
    _ext.dequantize_mxfp4(
        _arrays.export(packed, "packed"),
        _arrays.export(_arrays.as_bytes(scales, "scales", _E8M0), "scales"),
        _arrays.export(out, "out", writable=True),
        _arrays.stream_handle(stream, place),
    )
    return out


def swizzle_scales(linear, *, stream=None):
    """NVFP4 scales [rows, num_scale_cols] linear -> the 128x4 swizzled layout
    [round_up(rows, 128), round_up(num_scale_cols, 4)] (padding 0)."""
    place = _arrays.place_of(linear, "linear")
    shape = _arrays.shape_of(linear, "linear", ndim=2)
    out = _arrays.empty(linear, place, (_round_up(shape[0], 128), _round_up(shape[1], 4)), "uint8")
    _ext.swizzle_scales(
        _arrays.export(_arrays.as_bytes(linear, "linear", _E4M3), "linear"),
        _arrays.export(out, "out", writable=True),
        _arrays.stream_handle(stream, place),
    )
    return out


def unswizzle_scales(swizzled, rows: int, num_scale_cols: int, *, stream=None):
    """The inverse of swizzle_scales: [rows, num_scale_cols] linear scales."""
    place = _arrays.place_of(swizzled, "swizzled")
    rows, num_scale_cols = _index(rows, "rows"), _index(num_scale_cols, "num_scale_cols")
    if rows < 0 or num_scale_cols <= 0:
        raise InvalidArgumentError(
            f"rows = {rows}, num_scale_cols = {num_scale_cols}: need rows >= 0 and num_scale_cols > 0"
        )
    out = _arrays.empty(swizzled, place, (rows, num_scale_cols), "uint8")
    _ext.unswizzle_scales(
        _arrays.export(_arrays.as_bytes(swizzled, "swizzled", _E4M3), "swizzled"),
        _arrays.export(out, "out", writable=True),
        _arrays.stream_handle(stream, place),
    )
    return out


# ---- Problems and routing ------------------------------------------------------------------------


def preset(name: str) -> Problem:
    """The MoE layer of a known model (see preset_names()): a Problem whose fields read like a dict
    (``p["hidden_size"]``, ``p.to_dict()``) and can be changed (``p.mode = "w4a4"``,
    ``p.replace(max_tokens=4096)``, ``p.scaled(8)`` for a small copy with the same routing)."""
    return _ext.preset(name)


def route(router_logits, config=None, *, correction_bias=None, stream=None, **fields):
    """Top-k routing of router_logits [T, E] (float32 or bfloat16).

    config: a RoutingConfig, a Problem (its routing), or None to build one from `fields`
    (method='softmax_topk' | 'deepseek_v3' | 'llama4' | 'topk_softmax', top_k, renormalize,
    num_groups, topk_groups, routed_scaling_factor; num_experts defaults to E).
    correction_bias: [E] float32, DeepSeek-V3's e_score_correction_bias (that method only).

    Returns (topk_ids int32 [T, k], topk_weights float32 [T, k]); ids in descending selection score,
    ties to the lowest expert id. CPU and GPU results are bit-identical.
    """
    place = _arrays.place_of(router_logits, "router_logits")
    shape = _arrays.shape_of(router_logits, "router_logits", ndim=2)
    if config is None:
        fields.setdefault("num_experts", shape[1])
        config = RoutingConfig(**_routing_fields(fields))
    elif fields:
        raise InvalidArgumentError(f"route: give either config or keyword fields, not both (got {sorted(fields)})")
    if isinstance(config, Problem):
        config = config.routing
    if not isinstance(config, RoutingConfig):
        raise InvalidArgumentError(f"config is a {type(config).__name__}; expected a RoutingConfig or a Problem")
    config.validate()  # (before the outputs are sized by its top_k)
    ids = _arrays.empty(router_logits, place, (shape[0], config.top_k), "int32")
    weights = _arrays.empty(router_logits, place, (shape[0], config.top_k), "float32")
    bias = None if correction_bias is None else _arrays.export(correction_bias, "correction_bias")
    _ext.route(
        config,
        _arrays.export(router_logits, "router_logits", bf16=True),
        bias,
        _arrays.export(ids, "topk_ids", writable=True),
        _arrays.export(weights, "topk_weights", writable=True),
        _arrays.stream_handle(stream, place),
    )
    return ids, weights


def random_weights(
    problem: Problem, seed: int = 0, *, ep_rank: int = 0, ep_size: int = 1, tp_rank: int = 0, tp_size: int = 1
) -> dict:
    """The deterministic random weights of MoE.dummy(problem, seed) as NumPy arrays in the checkpoint
    layout (the keys of MoE's `weights`), sharded like a layer with these parallel options."""
    shard = _shard(ep_rank, ep_size, tp_rank, tp_size)
    return _ext.random_weights(problem, _seed(seed), *shard)


# ---- Weights -------------------------------------------------------------------------------------

# Accepted names -> the canonical names of C++ MoeWeightsView (include/fp4moe/moe.h). Global scales
# in the decode convention (ModelOpt weight_scale_2 / input_scale) are taken as they are.
_ALIASES = {
    "w13_weight": "w13",
    "w13_weight_packed": "w13",
    "w13_weight_scale": "w13_scale",
    "w13_weight_scale_2": "w13_scale_2",
    "w2_weight": "w2",
    "w2_weight_packed": "w2",
    "w2_weight_scale": "w2_scale",
    "w2_weight_scale_2": "w2_scale_2",
    "w13_input_scale": "a13_scale_2",
    "w2_input_scale": "a2_scale_2",
    "e_score_correction_bias": "routing_bias",
}
# Encode-convention global scales (compressed-tensors weight_global_scale = 1/weight_scale_2,
# input_global_scale = 1/input_scale): converted with one correctly rounded fp32 division.
_RECIPROCALS = {
    "w13_weight_global_scale": "w13_scale_2",
    "w2_weight_global_scale": "w2_scale_2",
    "w13_input_global_scale": "a13_scale_2",
    "w2_input_global_scale": "a2_scale_2",
}
_FLOAT32_KEYS = {"w13_scale_2", "w2_scale_2", "w13_bias", "w2_bias", "a13_scale_2", "a2_scale_2", "routing_bias"}


def _flag(value, name: str) -> bool:
    """A bool argument, taken only as a bool: bool("False") would be True."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{name} = {value!r} must be a bool")
    return bool(value)


def _index(value, name: str) -> int:
    """An int argument, taken only as an int (operator.index): int(2.9) would be 2."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{name} = {value!r} must be an int")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} = {value!r} must be an int") from None


def _real(value, name: str) -> float:
    """A float argument, taken only from a number (Python, NumPy, or a one-element array or tensor such
    as ``w.abs().max()``): float("1.5") would parse a string, and float(True) is 1.0."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or not hasattr(type(value), "__float__"):
        raise InvalidArgumentError(f"{name} = {value!r} must be a float")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} = {value!r} must be a float (one number)") from None


def _seed(value, name: str = "seed") -> int:
    """A random-weights seed: an int in [0, 2**64) (the C++ uint64_t)."""
    seed = _index(value, name)
    if not 0 <= seed < 2**64:
        raise InvalidArgumentError(f"{name} = {seed} must be in [0, 2**64)")
    return seed


def _shard(ep_rank, ep_size, tp_rank, tp_size) -> tuple:
    """The (ep_rank, ep_size, tp_rank, tp_size) arguments as ints (their ranges are the C++ checks')."""
    names = ("ep_rank", "ep_size", "tp_rank", "tp_size")
    return tuple(_index(v, n) for v, n in zip((ep_rank, ep_size, tp_rank, tp_size), names))


_ROUTING_FIELDS = (
    "method",
    "num_experts",
    "top_k",
    "renormalize",
    "num_groups",
    "topk_groups",
    "routed_scaling_factor",
)


def _routing_fields(fields: dict) -> dict:
    """route()'s keyword fields, checked by name and type before RoutingConfig(**fields)."""
    out = {}
    for key, value in fields.items():
        if key not in _ROUTING_FIELDS:
            raise InvalidArgumentError(f"route: '{key}' is not a routing field; fields: {', '.join(_ROUTING_FIELDS)}")
        if key == "method":
            if not isinstance(value, str):
                raise InvalidArgumentError(f"method = {value!r} must be a str")
        elif key == "renormalize":
            value = _flag(value, key)
        elif key == "routed_scaling_factor":
            value = _real(value, key)
        else:
            value = _index(value, key)
        out[key] = value
    return out


_E4M3, _E8M0 = ("float8_e4m3fn",), ("float8_e8m0fnu",)


def _canonical_weights(weights, weight_format: str) -> dict:
    """The weights dict with canonical names; 1-byte float scales viewed as bytes where their type is
    the format's (e4m3 for NVFP4, e8m0 for MXFP4), codes as uint8 only."""
    if not hasattr(weights, "items"):
        raise InvalidArgumentError(f"weights is a {type(weights).__name__}; expected a dict of arrays")
    out, source = {}, {}
    for key, value in weights.items():
        if value is None:
            continue
        key = str(key)
        if key in _RECIPROCALS:
            name = _RECIPROCALS[key]
            gs = _arrays.host_float32(value, f"weights['{key}']")
            if not np.all(np.isfinite(gs)) or np.any(gs <= 0):
                raise InvalidArgumentError(f"weights['{key}'] has values that are not finite and > 0: {gs.ravel()[:8]}")
            value = _arrays.like(np.float32(1.0) / gs, value)
        else:
            name = _ALIASES.get(key, key)
            if name in _FLOAT32_KEYS and _is_other_float(value):
                value = _arrays.like(_arrays.host_float32(value, f"weights['{key}']"), value)
            else:
                scale_type = _E8M0 if weight_format == "mxfp4" else _E4M3
                allowed = scale_type if name in ("w13_scale", "w2_scale") else ()
                value = _arrays.as_bytes(value, f"weights['{key}']", allowed)
        if name in out:
            raise InvalidArgumentError(f"weights['{key}'] and weights['{source[name]}'] both give {name}")
        out[name], source[name] = value, key
    return {name: _arrays.export(v, f"weights['{source[name]}']") for name, v in out.items()}


def _is_other_float(x) -> bool:
    """A floating array that is not float32 (bf16 biases, float64 scales, NumPy bfloat16 of ml_dtypes):
    converted once to float32."""
    if _arrays.is_torch_tensor(x):
        return x.dtype.is_floating_point and x.dtype != _arrays.torch.float32
    dtype = getattr(x, "dtype", None)
    if not isinstance(dtype, np.dtype) or dtype == np.float32:
        return False
    # ml_dtypes' floats (bfloat16, float8_*, ...) are NumPy extension types, of kind 'V'.
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name)


def _parse_device(device) -> tuple[str, int]:
    text = str(device)
    if text == "cpu":
        return "cpu", 0
    if text == "cuda":
        return "cuda", -1
    if text.startswith("cuda:") and text[5:].isdigit():
        return "cuda", int(text[5:])
    raise InvalidArgumentError(f"device = {device!r} is not one of: 'cpu', 'cuda', 'cuda:N'")


# ---- The layer -----------------------------------------------------------------------------------

_layer_ids = itertools.count(1)
_layers: "weakref.WeakValueDictionary[int, MoE]" = weakref.WeakValueDictionary()


def _layer_by_id(layer_id: int) -> "MoE":
    moe = _layers.get(layer_id)
    if moe is None:
        raise InvalidArgumentError(f"fp4moe layer id {layer_id} does not exist (the MoE was garbage-collected)")
    return moe


class MoE:
    """One fused MoE layer: routing, the two grouped FP4 expert GEMMs with the activation, and the
    router-weighted combine.

    MoE(problem, weights, device=None, path='auto', ep_rank=0, ep_size=1, tp_rank=0, tp_size=1)

    weights: a dict of arrays in the checkpoint ("linear") layout of C++ MoeWeightsView, stacked
    over the experts this shard holds (E_local = E/ep_size, I_local = I/tp_size)::

        w13 uint8 [E_local, 2*I_local, H/2]     rows 0..I-1 gate, I..2I-1 up (fused gate|up)
        w13_scale uint8|float8 [E_local, 2*I_local, H/bs]   (bs 16 NVFP4 e4m3, 32 MXFP4 e8m0)
        w13_scale_2 float32 [E_local]           NVFP4 global scale, decode convention
        w2 uint8 [E_local, H, I_local/2], w2_scale [E_local, H, I_local/bs], w2_scale_2 [E_local]
        w13_bias [E_local, 2*I_local], w2_bias [E_local, H]     has_bias (gpt-oss) only
        a13_scale_2, a2_scale_2 [E_local]       mode w4a4: activation global scales (decode)
        routing_bias [E]                        deepseek_v3: e_score_correction_bias

    Checkpoint names are accepted too: ModelOpt ``w13_weight``, ``w13_weight_scale``,
    ``w13_weight_scale_2``, ``w13_input_scale`` (same for w2) and compressed-tensors
    ``w13_weight_packed``, ``w13_weight_global_scale``, ``w13_input_global_scale`` (encode convention,
    converted to 1/x), ``e_score_correction_bias``.

    device: 'cpu' runs the C++ reference (fp64 over exactly dequantized weights); 'cuda' / 'cuda:N'
    repacks the weights onto that GPU once. Default: where weights['w13'] lives.
    path: GPU kernel path 'auto' | 'sm90' | 'simt' (kernel_info() tells what runs).
    tune_file: GPU only, config choices measured by ``fp4moe-bench --tune FILE`` on this GPU.
    split_k: GPU only, LayerOptions::split_k: at one or two tokens on few experts (Llama-4, Mixtral,
        gpt-oss), cut the decode GEMMs' K over otherwise idle SMs. Deterministic, within the
        reference tolerance, but the output bits then depend on the batch's token count; off by
        default (then they do not).
    max_sms: GPU only, LayerOptions::max_sms: each GEMM launch's persistent grid on at most this many
        SMs, leaving the others to kernels that run beside the layer (0: every SM). Per launch: the
        second GEMM's CTAs may become resident beside the first's. Same bits either way.
    tokens_routed_here: GPU only, LayerOptions::tokens_routed_here: every token given to forward() has
        at least one of its ids among this shard's experts, as after an expert-parallel all-to-all
        dispatch of your own (ep_size > 1). The config choice then expects more rows per local expert
        than T * k / E. Speed only: the same bits either way.
    """

    def __init__(
        self,
        problem: Problem,
        weights,
        *,
        device=None,
        path: str = "auto",
        tune_file=None,
        split_k: bool = False,
        max_sms: int = 0,
        tokens_routed_here: bool = False,
        ep_rank: int = 0,
        ep_size: int = 1,
        tp_rank: int = 0,
        tp_size: int = 1,
        _layer=None,
    ):
        if not isinstance(problem, Problem):
            raise InvalidArgumentError(
                f"problem is a {type(problem).__name__}; expected fp4moe.Problem "
                "(fp4moe.preset(name) or fp4moe.Problem(**fields))"
            )
        if _layer is None:
            canonical = _canonical_weights(weights, problem.weight_format)
            if device is None:
                w13 = weights.get("w13", weights.get("w13_weight", weights.get("w13_weight_packed")))
                if w13 is None:
                    raise InvalidArgumentError("weights['w13'] is missing: every layer needs its expert weights")
                place = _arrays.place_of(w13, "weights['w13']")
                kind, index = ("cuda", place.index) if place.cuda else ("cpu", 0)
            else:
                kind, index = _parse_device(device)
            shard = _shard(ep_rank, ep_size, tp_rank, tp_size)
            _layer = _ext.Layer.from_weights(
                problem,
                canonical,
                kind,
                index,
                *shard,
                path,
                str(tune_file or ""),
                _flag(split_k, "split_k"),
                _index(max_sms, "max_sms"),
                _flag(tokens_routed_here, "tokens_routed_here"),
            )
        self._layer = _layer
        self._problem = _layer.problem
        self._cuda = _layer.device != "cpu"
        self._id = next(_layer_ids)
        _layers[self._id] = self

    @classmethod
    def dummy(
        cls,
        problem: Problem,
        seed: int = 0,
        *,
        device="cuda",
        path: str = "auto",
        tune_file=None,
        split_k: bool = False,
        max_sms: int = 0,
        tokens_routed_here: bool = False,
        ep_rank: int = 0,
        ep_size: int = 1,
        tp_rank: int = 0,
        tp_size: int = 1,
    ) -> "MoE":
        """A layer with the deterministic random weights of random_weights(problem, seed), generated
        on the device without a host copy (device='cuda') or on the host (device='cpu')."""
        if not isinstance(problem, Problem):
            raise InvalidArgumentError(f"problem is a {type(problem).__name__}; expected fp4moe.Problem")
        kind, index = _parse_device(device)
        shard = _shard(ep_rank, ep_size, tp_rank, tp_size)
        layer = _ext.Layer.dummy(
            problem,
            _seed(seed),
            kind,
            index,
            *shard,
            path,
            str(tune_file or ""),
            _flag(split_k, "split_k"),
            _index(max_sms, "max_sms"),
            _flag(tokens_routed_here, "tokens_routed_here"),
        )
        return cls(problem, None, _layer=layer)

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint,
        layer: int,
        *,
        device="cuda",
        path: str = "auto",
        tune_file=None,
        split_k: bool = False,
        max_sms: int = 0,
        tokens_routed_here: bool = False,
        mode: str = "w4a16",
        max_tokens: int = 8192,
        ep_rank: int = 0,
        ep_size: int = 1,
        tp_rank: int = 0,
        tp_size: int = 1,
    ) -> "MoE":
        """The routed experts of transformer layer `layer` of a quantized checkpoint directory (a path,
        str or os.PathLike, or an fp4moe.Checkpoint): ModelOpt or compressed-tensors NVFP4, gpt-oss
        MXFP4; DeepSeek-V3, Qwen3-MoE, Mixtral, Llama-4, gpt-oss (include/fp4moe/checkpoint.h). Only
        this rank's experts and TP slice are read. The problem comes from the checkpoint's config with
        `mode` and `max_tokens` set; w4a4 needs the checkpoint's input scales."""
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = Checkpoint(checkpoint)  # a str or os.PathLike
        problem = checkpoint.problem.replace(mode=mode, max_tokens=_index(max_tokens, "max_tokens"))
        weights, _ = checkpoint.load_layer(_index(layer, "layer"), *_shard(ep_rank, ep_size, tp_rank, tp_size))
        return cls(
            problem,
            weights,
            device=device,
            path=path,
            tune_file=tune_file,
            split_k=split_k,
            max_sms=max_sms,
            tokens_routed_here=tokens_routed_here,
            ep_rank=ep_rank,
            ep_size=ep_size,
            tp_rank=tp_rank,
            tp_size=tp_size,
        )

    # -- properties --
    @property
    def problem(self) -> Problem:
        """A copy of the layer's Problem."""
        return self._layer.problem

    @property
    def device(self) -> str:
        return self._layer.device

    @property
    def workspace_bytes(self) -> int:
        """Scratch memory the layer holds for forward() (sized for problem.max_tokens; 0 on the CPU)."""
        return self._layer.workspace_bytes

    @property
    def weight_bytes(self) -> int:
        return self._layer.weight_bytes

    @property
    def num_local_experts(self) -> int:
        return self._layer.num_local_experts

    @property
    def local_intermediate_size(self) -> int:
        return self._layer.local_intermediate_size

    @property
    def parallel(self) -> dict:
        return self._layer.parallel

    def kernel_info(self, num_tokens: int) -> dict:
        """Which kernels forward() runs for `num_tokens` tokens: {'path', 'gemm1', 'gemm2', 'regime'}
        ('reference' on the CPU)."""
        return self._layer.kernel_info(_index(num_tokens, "num_tokens"))

    def check_device_errors(self, stream=None) -> None:
        """Raises if the last forward saw precomputed expert ids outside [0, E) (their slots were
        skipped). Synchronizes the stream."""
        place = _arrays.Place(self._cuda, int(self.device[5:]) if self._cuda else 0)
        self._layer.check_device_errors(_arrays.stream_handle(stream, place))

    def __repr__(self):
        return f"MoE({self._problem.name!r}, device={self.device!r}, path={self.kernel_info(1)['path']!r})"

    # -- forward --
    def forward(self, hidden_states, router_logits=None, *, topk_ids=None, topk_weights=None, out=None, stream=None):
        """The layer on hidden_states [T, H] with router_logits [T, E] (float32 or bfloat16), or with
        precomputed routing topk_ids int32 [T, k] and topk_weights float32 [T, k].

        GPU: bfloat16 in and out, asynchronous on `stream` (default: torch's current stream, else
        the legacy default stream), no host synchronization; capturable in a CUDA graph.
        CPU: float32 or bfloat16 in (rounded to bf16, the layer's input type; a NumPy bfloat16 array
        of ml_dtypes is widened to float32 first, exactly), float32 out (the reference's sum before
        any output rounding).
        T <= problem.max_tokens on both devices (InvalidArgumentError otherwise).
        `out` (optional): the output array to write (writable, not read-only), not overlapping the
        inputs (no in-place forward; the GPU layer refuses an overlap by name).

        PyTorch tensors without out/stream go through torch.ops.fp4moe.moe_forward.
        """
        if _torch_op is not None and out is None and stream is None and _arrays.is_torch_tensor(hidden_states):
            return _torch_op(self._id, hidden_states, router_logits, topk_ids, topk_weights)
        return self._forward(hidden_states, router_logits, topk_ids, topk_weights, out, stream)

    __call__ = forward

    def _forward(self, hidden_states, router_logits, topk_ids, topk_weights, out, stream):
        place, shape = _arrays.check_forward_arrays(hidden_states, router_logits, topk_ids, topk_weights, out)
        if out is None:
            out = _arrays.empty(
                hidden_states, place, (shape[0], self._problem.hidden_size), "bfloat16" if place.cuda else "float32"
            )
        self._layer.forward(
            *_arrays.export_forward_arrays(hidden_states, router_logits, topk_ids, topk_weights, out),
            _arrays.stream_handle(stream, place),
        )
        return out


# NOTE: a plain `_torch_ops = None` default would shadow the submodule in `from . import _torch_ops`.
_torch_op = None
if _arrays.torch is not None:
    from ._torch_ops import moe_forward as _torch_op  # noqa: E402  (registers torch.ops.fp4moe.moe_forward)

torch_unavailable_reason = _arrays.torch_unavailable_reason

# The parallel layer (fp4moe.parallel); imported last: it uses _canonical_weights above.
from . import parallel  # noqa: E402
from .parallel import (  # noqa: E402
    ParallelConfig,
    ParallelMoE,
    applicable_strategies,
    launch_info,
    rank_layout,
    valid_parallel_configs,
)
