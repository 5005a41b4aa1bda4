"""Framework plumbing of the binding: where an array lives, how it crosses into the extension
(DLPack, no copies), how outputs are allocated, which CUDA stream a call runs on.

Arrays are anything the extension can read through DLPack or the buffer protocol: NumPy arrays,
PyTorch tensors, CuPy/JAX arrays. PyTorch tensors are exported with ``__dlpack__(stream=-1)``: the
array-API default would make torch synchronise the legacy default stream with the current one,
which is wrong for a call that runs on the current stream and illegal inside CUDA-graph capture.
"""

from __future__ import annotations

import os

import numpy as np

from . import _ext

_DLPACK_CPU = (1, 3)  # kDLCPU, kDLCUDAHost (pinned host memory)
_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged

torch = None
torch_unavailable_reason = None
if os.environ.get("FP4MOE_NO_TORCH", "") not in ("", "0"):
    torch_unavailable_reason = "FP4MOE_NO_TORCH is set"
else:
    try:
        import torch  # noqa: F811  (optional: custom op, current stream, output allocation)
    except Exception as e:  # a broken torch install must not break fp4moe
        torch = None
        torch_unavailable_reason = f"import torch failed: {type(e).__name__}: {e}"


def is_torch_tensor(x) -> bool:
    return torch is not None and isinstance(x, torch.Tensor)


class Place:
    """Device of an array: ``cuda`` False for host memory, else the CUDA device index."""

    __slots__ = ("cuda", "index")

    def __init__(self, cuda: bool, index: int = 0):
        self.cuda = cuda
        self.index = index if cuda else 0

    def __eq__(self, other):
        return isinstance(other, Place) and self.cuda == other.cuda and self.index == other.index

    def __repr__(self):
        return f"cuda:{self.index}" if self.cuda else "cpu"


def place_of(x, name: str) -> Place:
    """Where `x` lives; a clear error naming `name` for objects that are not arrays."""
    if isinstance(x, np.ndarray):
        return Place(False)
    if is_torch_tensor(x):
        if x.device.type == "cpu":
            return Place(False)
        if x.device.type == "cuda":
            return Place(True, x.device.index if x.device.index is not None else torch.cuda.current_device())
        raise _ext.InvalidArgumentError(f"{name} is on torch device '{x.device}'; fp4moe takes CPU or CUDA tensors")
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        device_type, device_id = dev()
        if int(device_type) in _DLPACK_CPU:
            return Place(False)
        if int(device_type) in _DLPACK_CUDA:
            return Place(True, int(device_id))
        raise _ext.InvalidArgumentError(
            f"{name} is on DLPack device type {int(device_type)}; fp4moe takes CPU or CUDA arrays"
        )
    if hasattr(x, "__array_interface__") or hasattr(x, "__buffer__"):
        return Place(False)
    raise _ext.InvalidArgumentError(
        f"{name} is a {type(x).__module__}.{type(x).__qualname__}, not an array "
        "(pass a NumPy array, a PyTorch tensor or any DLPack array)"
    )


def shape_of(x, name: str, ndim: int | None = None) -> tuple:
    shape = tuple(int(s) for s in x.shape)
    if ndim is not None and len(shape) != ndim:
        raise _ext.InvalidArgumentError(f"{name} has shape {list(shape)}; expected a {ndim}-d array")
    return shape


def export(x, name: str, *, writable: bool = False, bf16: bool = False):
    """The object handed to the extension: a DLPack capsule for torch tensors, else `x` itself.

    First the checks the extension cannot name the argument in (nanobind would raise a bare
    TypeError): not an array; a NumPy array that neither DLPack nor the buffer protocol can carry
    (a non-native byte order; a dtype such as ml_dtypes' bfloat16 or float8, kind 'V'); a read-only
    array where the call writes (`writable`). `bf16`: the argument takes bfloat16 and float32
    alike, so a NumPy bfloat16 array (ml_dtypes) is widened to float32, exactly, in a host copy.
    """
    if is_torch_tensor(x):
        return x.detach().__dlpack__(stream=-1)
    if not isinstance(x, np.ndarray):
        place_of(x, name)  # refuses non-arrays by name
        return x
    dtype = x.dtype
    if bf16 and dtype.kind == "V" and dtype.name == "bfloat16":
        return x.astype(np.float32)
    if not dtype.isnative:
        order = "big-endian" if dtype.byteorder == ">" else "little-endian"
        raise _ext.InvalidArgumentError(
            f"{name} is {order} {dtype.name} ('{dtype.str}'), not in this machine's byte order: "
            f"pass {name}.astype('{dtype.newbyteorder('=').str}')"
        )
    if dtype.kind not in "biufc":
        raise _ext.InvalidArgumentError(
            f"{name} has dtype {dtype.name} ({dtype.type.__module__}), which NumPy cannot pass through DLPack; "
            f"pass {name} in a dtype it takes"
        )
    if writable and not x.flags.writeable:
        raise _ext.InvalidArgumentError(f"{name} is read-only, and the call writes it: pass a writable array")
    return x


def check_forward_arrays(hidden_states, router_logits, topk_ids, topk_weights, out):
    """Place and shape of a forward's hidden_states (2-D), after a clear error for any argument that
    is not an array."""
    place = place_of(hidden_states, "hidden_states")
    shape = shape_of(hidden_states, "hidden_states", ndim=2)
    for name, value in (
        ("router_logits", router_logits),
        ("topk_ids", topk_ids),
        ("topk_weights", topk_weights),
        ("out", out),
    ):
        if value is not None:
            place_of(value, name)
    return place, shape


def export_forward_arrays(hidden_states, router_logits, topk_ids, topk_weights, out):
    """export() of a forward's arrays, None staying None."""
    return (
        export(hidden_states, "hidden_states", bf16=True),
        None if router_logits is None else export(router_logits, "router_logits", bf16=True),
        None if topk_ids is None else export(topk_ids, "topk_ids"),
        None if topk_weights is None else export(topk_weights, "topk_weights"),
        export(out, "out", writable=True),
    )


_TORCH_DTYPES = {"uint8": "uint8", "float32": "float32", "bfloat16": "bfloat16", "int32": "int32"}


def empty(like, place: Place, shape, dtype: str):
    """An uninitialised output array in `like`'s framework (torch -> torch, host -> NumPy)."""
    shape = tuple(int(s) for s in shape)
    if is_torch_tensor(like):
        return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device=like.device)
    if not place.cuda:
        if dtype == "bfloat16":
            raise _ext.InvalidArgumentError("NumPy has no bfloat16: pass out= for a bfloat16 host output")
        return np.empty(shape, dtype=np.dtype(dtype))
    return _ext.device_empty(list(shape), dtype, place.index)


def stream_handle(stream, place: Place) -> int:
    """The CUDA stream a call runs on, as an integer handle.

    Explicit: an int, or an object with ``cuda_stream`` (torch.cuda.Stream) or ``ptr`` (CuPy).
    Default for device arrays: PyTorch's current stream on that device when torch is imported, else
    0, the legacy default stream. Host calls ignore it. A stream object that says its device (torch's
    ``device``, CuPy's ``device_id``) must be the arrays' device; that is checked here, so it also
    holds while the stream is being captured, when the C++ check cannot ask CUDA.
    """
    if not place.cuda:
        return 0
    if stream is None:
        if torch is not None:
            return int(torch.cuda.current_stream(place.index).cuda_stream)
        return 0
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            device = _stream_device(stream)
            if device is not None and device != place.index:
                raise _ext.InvalidArgumentError(
                    f"stream = {stream!r} is a stream of cuda:{device}; the arrays are on cuda:{place.index}"
                )
            return int(getattr(stream, attr))
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream
    raise _ext.InvalidArgumentError(
        f"stream = {stream!r} is not a CUDA stream handle (an int >= 0, a torch.cuda.Stream or a cupy Stream)"
    )


def _stream_device(stream):
    """The CUDA device index a stream object says it belongs to, or None where it does not say."""
    device = getattr(stream, "device", None)
    if device is not None and getattr(device, "type", None) == "cuda" and getattr(device, "index", None) is not None:
        return int(device.index)
    device_id = getattr(stream, "device_id", None)
    if isinstance(device_id, int) and not isinstance(device_id, bool):
        return device_id
    return None


def host_float32(x, name: str) -> np.ndarray:
    """A host float32 copy of a small array (global scales, biases) for conversions done once."""
    if is_torch_tensor(x):
        return x.detach().to(device="cpu", dtype=torch.float32).numpy()
    place = place_of(x, name)
    if place.cuda:
        raise _ext.InvalidArgumentError(
            f"{name} is a device array of a framework fp4moe cannot copy; pass it on the host"
        )
    return np.asarray(x, dtype=np.float32)


def like(host: np.ndarray, original):
    """`host` (a converted copy of `original`) back where `original` lives: a torch tensor on its
    device, so all weights of a layer stay on one device; host arrays stay NumPy."""
    if is_torch_tensor(original):
        return torch.from_numpy(np.ascontiguousarray(host)).to(original.device)
    return host


def _byte_types(allowed: tuple) -> str:
    return " or ".join(("uint8",) + tuple(allowed))


def as_bytes(x, name: str, allowed: tuple = ()):
    """A 1-byte float array (float8_e4m3fn NVFP4 scales, float8_e8m0fnu MXFP4 scales) viewed as uint8,
    without a copy, when its type is one of `allowed` (names as NumPy/ml_dtypes and torch spell
    them); any other 1-byte non-integer type is refused by name: viewed as bytes it would pass for
    the wrong format. Integer types pass through for the C++ side's own dtype checks."""
    if is_torch_tensor(x):
        if x.dtype.itemsize == 1 and x.dtype.is_floating_point:
            dtype = str(x.dtype).removeprefix("torch.")
            if dtype not in allowed:
                raise _ext.InvalidArgumentError(f"{name} is {dtype}; expected {_byte_types(allowed)}")
            return x.view(torch.uint8)
        return x
    if isinstance(x, np.ndarray) and x.dtype.itemsize == 1 and x.dtype.kind not in "iub":
        if x.dtype.name not in allowed:  # e.g. ml_dtypes float8 arrays, or bytes
            raise _ext.InvalidArgumentError(f"{name} is {x.dtype.name}; expected {_byte_types(allowed)}")
        return x.view(np.uint8)
    return x
