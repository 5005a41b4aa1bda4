"""Reads the routing files of `fp4moe-bench --dump-routing DIR` (format in tools/routing_file.h):
one ASCII line "fp4moe-routing v1 T=<T> K=<K> E=<E>", then T*K int32 expert ids and T*K float32
router weights, little-endian, token-major. One file per input set fp4moe-bench timed:
<preset>_T<T>.routing for set 0, <preset>_T<T>_set<S>.routing for the others (dumps before session
43 hold set 0 only)."""
import os

import numpy as np


def path(directory, preset, tokens, set_index=0):
    suffix = f"_set{set_index}" if set_index > 0 else ""
    return os.path.join(directory, f"{preset}_T{tokens}{suffix}.routing")


def set_paths(directory, preset, tokens):
    """The files of every set dumped for this preset and token count, set 0 first, up to the first
    missing index (a dump before session 43: set 0 alone)."""
    paths = []
    while os.path.exists(path(directory, preset, tokens, len(paths))):
        paths.append(path(directory, preset, tokens, len(paths)))
    return paths


def read(file_path):
    """Returns (ids [T, K] int32, weights [T, K] float32, E). Raises ValueError on a malformed file."""
    with open(file_path, "rb") as f:
        header = f.readline().decode("ascii", errors="replace").split()
        body = f.read()
    if len(header) != 5 or header[:2] != ["fp4moe-routing", "v1"]:
        raise ValueError(f"{file_path}: not an fp4moe-routing v1 file (header {' '.join(header)!r})")
    try:
        fields = dict(h.split("=", 1) for h in header[2:])
        T, K, E = int(fields["T"]), int(fields["K"]), int(fields["E"])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{file_path}: bad header {' '.join(header)!r}") from exc
    n = T * K
    if T < 0 or K < 1 or E < 1 or len(body) != 8 * n:
        raise ValueError(f"{file_path}: T={T} K={K} E={E} need {8 * n} bytes after the header, found {len(body)}")
    ids = np.frombuffer(body, dtype="<i4", count=n).reshape(T, K).astype(np.int32)
    weights = np.frombuffer(body, dtype="<f4", count=n, offset=4 * n).reshape(T, K).astype(np.float32)
    if n and (ids.min() < 0 or ids.max() >= E):
        raise ValueError(f"{file_path}: expert ids outside [0, {E})")
    return ids, weights, E
