"""The Marlin peer for bench/peers_torch.py: vLLM's Marlin MoE GEMM (mma.sync), built by
bench/marlin/build.sh as a library with a C entry point. vLLM 0.34 falls back to it for NVFP4 MoE
on Hopper when Humming (bench/peers_humming.py) is not installed, and ranks it after OpenAI's
triton_kernels and FlashInfer's CUTLASS path for MXFP4 (gpt-oss).

What is timed: Marlin's GEMM1 (gate|up, N = 2I) and GEMM2 (down, with the router weights applied,
as vLLM's fused_marlin_moe does) on inputs prepared beforehand: the token blocks aligned to Marlin's
m-block as vLLM's moe_align_block_size lays them out, with the block size vLLM's fused_marlin_moe
picks for the batch, and GEMM2's input random rows. Not timed: the alignment, the activation and
the top-k sum, which a whole vLLM layer adds. So this is a lower bound for vLLM's Marlin MoE layer.
peers_torch.py times it (time_graphs_ms: CUDA-graph replays, routing sets in rotation at small T).

The timed weights are random codes and scales in Marlin's shapes (a GEMM's time does not depend on
the values). Before timing, `check_plumbing` runs both GEMMs on weights whose every code is 1.0 and
whose scale is a power of two per expert: every output is then one constant times its expert's
factor times a sum of its input row, whatever Marlin's tile permutation. So it checks that the
block alignment, the row indices, the experts and the router weights reach the kernel as meant. It
does not check Marlin's numerics beyond that.

The alignment (`block_size_m`, `align_blocks`) is plain numpy so that tests can run without a GPU.
"""
import ctypes
import os

import numpy as np

KINDS = ("nvfp4", "mxfp4")
_MAX_BLOCKS_PER_SM = 4  # vLLM's MARLIN_MAX_BLOCKS_PER_SM: the lock workspace holds one int per block
_MAX_THREAD_N = 256  # Marlin's max_thread_n


def block_size_m(tokens, top_k, experts):
    """The m-block size vLLM's fused_marlin_moe takes: the first of 8, 16, 32, 48, 64 that the mean
    rows per expert fill less than 90%, else 64."""
    if tokens <= 0 or top_k <= 0 or experts <= 0:
        raise ValueError(f"block_size_m: tokens={tokens}, top_k={top_k}, experts={experts} must be positive")
    for bs in (8, 16, 32, 48, 64):
        if tokens * top_k / experts / bs < 0.9:
            return bs
    return 64


def align_blocks(ids, experts, bs):
    """vLLM's moe_align_block_size layout for `ids` (tokens x top_k expert ids): the flat pair indices
    (token * top_k + j) of each expert in order, the expert's rows padded to a multiple of `bs` with
    the sentinel tokens * top_k; one expert id per block (-1 past the used blocks); and the padded row
    count. Buffer sizes as vLLM 0.34's moe_align_block_size allocates them: pairs + experts * (bs - 1)
    rows, or pairs * bs when there are fewer pairs than experts. (Within an expert the pairs are in
    order here; vLLM's kernels may order them otherwise, which changes no amount of work.)"""
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"align_blocks: ids must be tokens x top_k, got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= experts):
        raise ValueError(f"align_blocks: expert ids must lie in [0, {experts}), got [{ids.min()}, {ids.max()}]")
    pairs = ids.size
    flat = ids.reshape(-1).astype(np.int64)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=experts)
    padded = (counts + bs - 1) // bs * bs
    capacity = pairs + experts * (bs - 1)
    if pairs < experts:
        capacity = min(capacity, pairs * bs)
    sorted_ids = np.full(capacity, pairs, dtype=np.int32)
    expert_ids = np.full((capacity + bs - 1) // bs, -1, dtype=np.int32)
    src, dst = 0, 0
    for e in range(experts):
        c = int(counts[e])
        if c == 0:
            continue
        sorted_ids[dst:dst + c] = order[src:src + c]
        expert_ids[dst // bs:(dst + int(padded[e])) // bs] = e
        src += c
        dst += int(padded[e])
    return sorted_ids, expert_ids, np.array([dst], dtype=np.int32)


def _round_up(n, m):
    return (n + m - 1) // m * m


def default_lib():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "build", "marlin-peer", "libfp4moe_marlin_peer.so")


class MarlinLib:
    def __init__(self, path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist: build it with bench/marlin/build.sh")
        self._lib = ctypes.CDLL(path)
        f = self._lib.fp4moe_marlin_moe_gemm
        vp, i = ctypes.c_void_p, ctypes.c_int
        f.argtypes = [vp] * 11 + [i] * 8 + [vp, ctypes.c_char_p, i]
        f.restype = i
        self._gemm = f

    def gemm(self, a, c, c_tmp, b, scales, global_scale, blocks, topk_weights, workspace, bs, experts, top_k,
             mul_topk_weights, size_m, size_n, size_k, kind, stream):
        sorted_ids, expert_ids, padded = blocks
        err = ctypes.create_string_buffer(512)
        rc = self._gemm(a.data_ptr(), c.data_ptr(), c_tmp.data_ptr(), b.data_ptr(), scales.data_ptr(),
                        global_scale.data_ptr(), sorted_ids.data_ptr(), expert_ids.data_ptr(), padded.data_ptr(),
                        topk_weights.data_ptr(), workspace.data_ptr(), bs, experts, top_k, int(mul_topk_weights),
                        size_m, size_n, size_k, KINDS.index(kind), stream, err, len(err))
        if rc != 0:
            raise RuntimeError(f"Marlin MoE GEMM (M={size_m} N={size_n} K={size_k} block {bs}): "
                               f"{err.value.decode(errors='replace')}")


class GemmsPeer:
    """What peers_torch.py asks of an extra peer: `timed`, pairs (what, prepare) where prepare(x, ids,
    w) returns the function to time (recorded as <peer>_<what>_ms), `check(x, ids, w)`, which raises
    on a mismatch and returns more fields for the row, and `block_m` (None when not known). Marlin's
    and Humming's: their two GEMMs (prepare), checked by their check_plumbing."""

    block_m = None

    @property
    def timed(self):
        return (("gemms", self.prepare),)

    def check(self, x, ids, w):
        # (the fitted constants, GEMM1's and GEMM2's: a single routed row cannot tell its expert from
        # them, see check_proportional)
        return {"check_c": list(self.check_plumbing(x, ids, w))}


class MarlinPeer(GemmsPeer):
    """Marlin's two MoE GEMMs for one preset (H, I, E, top-k) and weight kind."""

    def __init__(self, lib, H, I, E, k, kind, gen):
        import torch

        if kind not in KINDS:
            raise ValueError(f"MarlinPeer: kind must be one of {KINDS}, got {kind!r}")
        self.torch, self.lib, self.H, self.I, self.E, self.k, self.kind = torch, lib, H, I, E, k, kind
        self.group = 16 if kind == "nvfp4" else 32
        # vLLM pads MXFP4 weights for Marlin (mxfp4_round_up_hidden_size_and_intermediate_size: H to a
        # multiple of 256, I of 128; gpt-oss's 2880 fits no Marlin tile), so the peer reads and
        # multiplies the padded sizes, as vLLM does; the hidden states are padded outside the timing.
        # The NVFP4 presets' sizes need no padding.
        self.Hp, self.Ip = (_round_up(H, 256), _round_up(I, 128)) if kind == "mxfp4" else (H, I)
        H, I = self.Hp, self.Ip
        dev = "cuda"
        self.sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        # Marlin's shapes: codes as int32 words [E, K / 16, N * 16 / 8], scales [E, K / group, N].
        self.w13 = self._words(E, H, 2 * I, gen)
        self.w2 = self._words(E, I, H, gen)
        self.s13 = self._scales(E, H // self.group, 2 * I, gen)
        self.s2 = self._scales(E, I // self.group, H, gen)
        # NVFP4's global scale as vLLM hands it to Marlin (nvfp4_marlin_process_global_scale): the
        # checkpoint's (here 2^-7) times 2^(126 - 7), which undoes the exponent offset of Marlin's
        # e2m1 -> bf16 decode (a code of 1.0 becomes 2^-126). Session 38's run 1 had 2^-7 and scale
        # bytes under 0x80, and every output underflowed to zero.
        self.g13 = torch.full((E,), 2.0**(-7 + 126 - 7), device=dev, dtype=torch.float32)
        self.g2 = self.g13.clone()
        self.workspace = torch.zeros(self.sms * _MAX_BLOCKS_PER_SM, device=dev, dtype=torch.int32)
        self._uniform = None

    def _words(self, E, K, N, gen):
        torch = self.torch
        return torch.randint(-2**31, 2**31 - 1, (E, K // 16, N * 2), device="cuda", dtype=torch.int32,
                             generator=gen)

    def _scales(self, E, groups, N, gen):
        torch = self.torch
        # NVFP4: Marlin reads the byte as S0E5M3 (vLLM's nvfp4_marlin_process_scales writes e4m3 scales
        # times 2^7 that way), a bf16 exponent of 128 + bits 6-3, whose top bit vLLM's scales always
        # set: random bytes from 0x80 up (2^1 to 2^16 before the global scale). MXFP4: e8m0 near 1.0.
        lo, hi = (0x80, 0x100) if self.kind == "nvfp4" else (120, 134)
        return torch.randint(lo, hi, (E, groups, N), device="cuda", dtype=torch.uint8, generator=gen)

    def _gemm(self, a, c, c_tmp, b, s, g, blocks, w, bs, top_k, mul, m, n, kk):
        stream = self.torch.cuda.current_stream().cuda_stream
        self.lib.gemm(a, c, c_tmp, b, s, g, blocks, w, self.workspace, bs, self.E, top_k, mul, m, n, kk, self.kind,
                      stream)

    def prepare(self, x, ids, w, weights=None, poison=False, a2=None):
        """Buffers for GEMM1 and GEMM2 of this batch; returns the function that runs both on
        `weights` (w13, s13, g13, w2, s2, g2; default the timed ones). With `poison`, the outputs
        start as NaN (the check's: a row the kernel skips stays NaN)."""
        torch = self.torch
        w13, s13, g13, w2, s2, g2 = weights or (self.w13, self.s13, self.g13, self.w2, self.s2, self.g2)
        T = x.shape[0]
        if self.Hp != self.H:
            x = torch.nn.functional.pad(x, (0, self.Hp - self.H))
        bs = block_size_m(T, self.k, self.E)
        host = align_blocks(ids.cpu().numpy(), self.E, bs)
        blocks = tuple(torch.from_numpy(h).to("cuda") for h in host)
        rows = blocks[0].numel()
        tmp = min(max(self.Hp, 2 * self.Ip) * rows, self.sms * _MAX_BLOCKS_PER_SM * bs * _MAX_THREAD_N)
        c_tmp = torch.empty(tmp * (2 if bs == 8 else 1), device="cuda", dtype=torch.float32)
        h1 = torch.empty(T * self.k, 2 * self.Ip, device="cuda", dtype=torch.bfloat16)
        if a2 is None:
            a2 = torch.randn(T * self.k, self.Ip, device="cuda", dtype=torch.bfloat16) / self.Ip**0.5
        out = torch.empty(T * self.k, self.Hp, device="cuda", dtype=torch.bfloat16)
        if poison:
            h1.fill_(float("nan"))
            out.fill_(float("nan"))
        wf = w.float().contiguous()
        self.block_m = bs

        def run():
            self._gemm(x, h1, c_tmp, w13, s13, g13, blocks, wf, bs, self.k, False, T, 2 * self.Ip, self.Hp)
            self._gemm(a2, out, c_tmp, w2, s2, g2, blocks, wf, bs, 1, True, T * self.k, self.Hp, self.Ip)
            return h1, out

        return run

    def check_plumbing(self, x, ids, w):
        """Both GEMMs on weights of one code (1.0) whose scale is 2^(e % 8) times a constant for
        expert e (by the global scale for NVFP4, the block scales for MXFP4): GEMM1's row of pair p
        must be c1 * f(p) * sum(x[p // k]) in every column, GEMM2's c2 * f(p) * w[p] * sum(a2[p]),
        where f(p) = 2^(e(p) % 8) for the expert e(p) of pair p. So a row read from the wrong token,
        written to the wrong place, skipped, or multiplied by another expert's weights shows.
        Raises on a mismatch."""
        torch = self.torch
        factor = expert_factors(self.E)
        if self._uniform is None:  # made once: the size of the weights
            one = 0x22222222  # eight e2m1 codes of 1.0
            if self.kind == "nvfp4":  # scale 2^8 (S0E5M3, as above), global scale per expert
                s13, s2 = torch.full_like(self.s13, 0xB8), torch.full_like(self.s2, 0xB8)
                g = self.g13 * factor
            else:  # e8m0 scales 2^(e % 8)
                byte = expert_factors_e8m0(self.E)[:, None, None]
                s13, s2 = byte.expand_as(self.s13).contiguous(), byte.expand_as(self.s2).contiguous()
                g = self.g13
            self._uniform = (torch.full_like(self.w13, one), s13, g, torch.full_like(self.w2, one), s2, g.clone())
        T = x.shape[0]
        a2 = torch.randn(T * self.k, self.Ip, device="cuda", dtype=torch.bfloat16)
        h1, out = self.prepare(x, ids, w, weights=self._uniform, poison=True, a2=a2)()
        return check_gemm_pair("Marlin", x, ids, self.k, h1, out, a2, router=w)


def expert_factors(experts, device="cuda"):
    """The checks' factor of each expert e, 2^(e % 8) (float32): both peers scale their uniform
    weights by it, and check_gemm_pair expects it in every output row."""
    import torch

    return 2.0 ** (torch.arange(experts, device=device) % 8).float()


def expert_factors_e8m0(experts, device="cuda"):
    """expert_factors as e8m0 bytes (uint8, 127 + e % 8): MXFP4 block scales of those factors."""
    import torch

    return (127 + torch.log2(expert_factors(experts, device))).to(torch.uint8)


def check_gemm_pair(peer, x, ids, top_k, h1, out, a2, router=None):
    """A peer's GEMM1 and GEMM2 outputs from the uniform weights of its check_plumbing: GEMM1's row of
    pair p must be c1 * f(p) * sum(x[p // top_k]) in every column, GEMM2's c2 * f(p) * sum(a2[p])
    (times the router weight w[p] where GEMM2 applies it, `router`), f(p) = expert_factors[e(p)] for
    the expert e(p) of pair p. Waits for the GPU; returns (c1, c2), raises on a mismatch. The bound
    is relative to each row's sum of magnitudes (check_proportional), so one wrong row among many
    passes when its sum is near zero or near the right row's; a wrong layout, which moves many
    rows, does not. The constants are fitted: with a single row, a wrong expert passes too."""
    import torch

    if h1.is_cuda:
        torch.cuda.synchronize()
    flat = ids.reshape(-1).long()
    f = expert_factors(int(flat.max()) + 1, flat.device)[flat]
    f2 = f if router is None else f * router.float().reshape(-1)
    xs, a2 = x.float(), a2.float()
    c1 = check_proportional(peer, "GEMM1", h1.float(), (f * xs.sum(dim=1).repeat_interleave(top_k))[:, None].expand_as(h1),
                            f * xs.abs().sum(dim=1).repeat_interleave(top_k))
    c2 = check_proportional(peer, "GEMM2", out.float(), (f2 * a2.sum(dim=1))[:, None].expand_as(out),
                            f2 * a2.abs().sum(dim=1))
    return c1, c2


def check_proportional(peer, what, got, want, magnitude):
    """A peer's GEMM output against c * want for one constant c (least squares), each element
    within 8e-3 of |c| times its row's magnitude (the sum of |terms|, which bounds the output: a bf16
    output rounds within 2^-8 of itself, so within 2^-8 of that bound, and an fp32 sum adds far
    less; 8e-3 leaves twice that); finite and not all zero.
    Returns c; raises RuntimeError naming the peer."""
    import torch

    if not torch.isfinite(got).all():
        nan = float(torch.isnan(got).float().mean())
        raise RuntimeError(f"{peer} {what} check: non-finite output ({nan:.1%} NaN: rows never written "
                           f"keep the poison)")
    if float(got.norm()) == 0.0:
        raise RuntimeError(f"{peer} {what} check: all-zero output")
    c = float((got * want).sum() / (want * want).sum())
    err = (got - c * want).abs() / (abs(c) * magnitude[:, None] + 1e-30)
    worst = float(err.max())
    if worst > 8e-3:
        raise RuntimeError(f"{peer} {what} check: output off c * rowsum by {worst:.3g} of the row's magnitude "
                           f"(c = {c:.4g})")
    return c
