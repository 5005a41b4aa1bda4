"""The triton_kernels peer for bench/peers_torch.py: OpenAI's triton_kernels MoE (matmul_ogs), which
vLLM 0.34 runs for gpt-oss's MXFP4 experts on Hopper (its "TRITON" MXFP4 backend, ranked ahead of
FlashInfer's CUTLASS path and Marlin there). bench/triton/fetch.sh takes the package out of vLLM's
wheel; put the folder holding `triton_kernels/` on PYTHONPATH.

The weights are MXFP4 as gpt-oss's checkpoint stores them (uint8 codes, two per byte, low nibble
first; one e8m0 scale per 32 along K; gate and up rows interleaved in GEMM1; fp32 biases), converted
once as vLLM's `_swizzle_mxfp4` converts them on compute capability 9.0: the scales' K padded to a
multiple of 4, both transposed to K-major, then Hopper's value and scale layouts, and split-K off
(vLLM's constraint there). What is timed, each in CUDA-graph replay (peers_torch.time_graphs_ms):
  - `layer`: what vLLM's triton_kernel_moe_forward runs for a batch: `routing` (top-k softmax over
    the router logits and the sort into expert order), GEMM1 with the rows gathered and the gpt-oss
    SwiGLU (alpha 1.702, limit 7) fused, GEMM2 with the router weights and the top-k sum. The router
    logits are log(w) at the batch's experts and -30 elsewhere, so that `routing`'s own top-k softmax
    (vLLM's gpt-oss path: top k, then a softmax over them) chooses fp4moe-bench's routing. They are
    fp32, where vLLM's router hands bf16: its top-k then sorts wider keys, a little more work for the
    peer's layer (not for `gemms`). (Handing `routing` the experts instead, its expt_indx, as int16
    gave wrong router weights and NaN rows in session 39's run 2, its bit packing in int16 as a
    review read it; as int32 they gave the right ones, run 8. The peer does not use it.)
  - `gemms`: the two matmul_ogs calls alone, on routing data made beforehand (the fused activation
    and the top-k sum are inside them and stay).
`check` runs the layer on random weights into NaN-filled buffers and compares up to CHECK_ROWS
tokens' outputs with a reference computed here in fp32 from the same codes, scales and biases
(the intermediate rounded to bf16 as the peer stores it); every output row must be finite.
"""
CHECK_ROWS = 32  # tokens the reference recomputes (the first ones of the batch)
CHECK_TOL = 1e-2  # relative L2 error of those rows (bf16 outputs: about 3e-3 expected)
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0  # gpt-oss's activation (vLLM's defaults for it)
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequant_mxfp4(codes, scales):
    """fp32 weights [..., N, K] from codes [..., N, K/2] (uint8, low nibble first) and e8m0 scales
    [..., N, K/32] (uint8, 2^(s - 127))."""
    import torch

    lut = torch.tensor(E2M1, dtype=torch.float32, device=codes.device)
    vals = torch.stack((lut[(codes & 0xF).long()], lut[(codes >> 4).long()]), dim=-1).flatten(-2)
    factor = torch.exp2(scales.float() - 127.0).repeat_interleave(32, dim=-1)
    return vals * factor


def reference(x, ids, w, w13, s13, b13, w2, s2, b2, inter_dtype=None):
    """The gpt-oss MoE layer of these tokens in fp32 (per token, per routed expert): h = W13 x + b13,
    gate = h[0::2], up = h[1::2]; a = min(gate, 7) * sigmoid(1.702 min(gate, 7)) * (clamp(up, -7, 7) + 1),
    rounded to inter_dtype if given; y = sum over the top k of w * (W2 a + b2)."""
    import torch

    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        rows, slots = (ids == e).nonzero(as_tuple=True)
        h = x[rows].float() @ dequant_mxfp4(w13[e], s13[e]).T + b13[e]
        gate = h[:, 0::2].clamp(max=SWIGLU_LIMIT)
        up = h[:, 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
        a = gate * torch.sigmoid(SWIGLU_ALPHA * gate) * (up + 1)
        if inter_dtype is not None:
            a = a.to(inter_dtype).float()
        y = a @ dequant_mxfp4(w2[e], s2[e]).T + b2[e]
        out.index_add_(0, rows, y * w[rows, slots].float()[:, None])
    return out


def relative_error(got, want):
    """The relative L2 error of got against want (float32); NaN when got holds a non-finite value."""
    import torch

    if not torch.isfinite(got).all():
        return float("nan")
    return (torch.linalg.vector_norm(got.float() - want.float()) / torch.linalg.vector_norm(want.float())).item()


def compare_rows(peer, got, want):
    """Raises unless got (peer's output rows) matches want (the reference) within CHECK_TOL relative
    L2 error and want is not all zero; returns the error."""
    import torch

    ref_norm = torch.linalg.vector_norm(want).item()
    if not ref_norm > 0:
        raise RuntimeError(f"{peer} check: the reference rows are all zero")
    if not torch.isfinite(got).all():
        raise RuntimeError(f"{peer} check: {int((~torch.isfinite(got)).sum())} output values are not finite")
    err = relative_error(got, want)
    if not err <= CHECK_TOL:
        raise RuntimeError(f"{peer} check: relative error {err:.3g} > {CHECK_TOL}")
    return err


def router_logits(ids, w, experts):
    """fp32 router logits whose top-k softmax gives the routing (ids, w): log(w) at the routed experts,
    -30 elsewhere (a softmax over k <= 8 of N(0, 1) scores is far above e^-30); and ids sorted within
    each row, int16, as triton_kernels' own top-k returns them (the pairs' order in its routing)."""
    import torch

    sorted_ids, order = ids.long().sort(dim=1)
    logits = torch.full((ids.shape[0], experts), -30.0, device=ids.device, dtype=torch.float32)
    logits.scatter_(1, sorted_ids, torch.log(w.gather(1, order).float()))
    return logits, sorted_ids.to(torch.int16)


class TritonPeer:
    """triton_kernels' MoE layer for one MXFP4 preset (H, I, E, top-k): gpt-oss."""

    def __init__(self, H, I, E, k, gen):
        import torch
        import triton_kernels.matmul_ogs_details.opt_flags as opt_flags
        import triton_kernels.swiglu
        from triton_kernels.matmul_ogs import FlexCtx, FnSpecs, FusedActivation, PrecisionConfig, matmul_ogs
        from triton_kernels.numerics import InFlexData
        from triton_kernels.routing import routing
        from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor
        from triton_kernels.tensor_details import layout

        if H % 32 or I % 32:
            raise ValueError(f"TritonPeer: H={H} and I={I} must be multiples of 32 (MXFP4 blocks)")
        if not torch.cuda.get_device_capability() == (9, 0):
            raise ValueError(f"TritonPeer reproduces vLLM's path on compute capability 9.0 (Hopper), not "
                             f"{torch.cuda.get_device_capability()}")
        self.torch, self.H, self.I, self.E, self.k = torch, H, I, E, k
        self._matmul_ogs, self._routing = matmul_ogs, routing
        self._FP4, self._convert, self._wrap, self._layout = FP4, convert_layout, wrap_torch_tensor, layout
        self._InFlexData, self._FlexCtx, self._PrecisionConfig = InFlexData, FlexCtx, PrecisionConfig
        opt_flags.update_opt_flags_constraints({"split_k": 1})  # vLLM's constraint on compute capability 9.0
        self.act = FusedActivation(FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit")),
                                   (SWIGLU_ALPHA, SWIGLU_LIMIT), 2)
        dev = "cuda"
        # the checkpoint's tensors: codes [E, N, K/2], scales [E, N, K/32] from 2^-8 to 2^-6 (outputs
        # of about unit size from unit-size inputs), biases [E, N]
        self.raw = {}
        for name, n, kk in (("w13", 2 * I, H), ("w2", H, I)):
            self.raw[name] = torch.randint(0, 256, (E, n, kk // 2), device=dev, dtype=torch.uint8, generator=gen)
            self.raw[name + "_scale"] = torch.randint(119, 122, (E, n, kk // 32), device=dev, dtype=torch.uint8,
                                                      generator=gen)
            self.raw[name + "_bias"] = 0.1 * torch.randn(E, n, device=dev, dtype=torch.float32, generator=gen)
        self.w13, self.pc13 = self._swizzle(self.raw["w13"], self.raw["w13_scale"])
        self.w2, self.pc2 = self._swizzle(self.raw["w2"], self.raw["w2_scale"])
        self.b13, self.b2 = self.raw["w13_bias"], self.raw["w2_bias"]
        self.block_m = None  # (chosen inside matmul_ogs per call)
        self.timed = (("layer", self.prepare_layer), ("gemms", self.prepare_gemms))

    def _swizzle(self, codes, scales):
        """As vLLM's _swizzle_mxfp4 on compute capability 9.0: the weights and the precision config."""
        v_layout, v_opts = self._layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        s_layout, s_opts = self._layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8)
        w, pc = self.convert(codes, scales, (v_layout, v_opts), (s_layout, s_opts))
        s = pc.weight_scale
        # (any correct layout passes the check: make sure these are the swizzled ones vLLM uses)
        if not (isinstance(w.storage.layout, self._layout.HopperMXValueLayout)
                and isinstance(s.storage.layout, self._layout.HopperMXScaleLayout)
                and s.storage.layout.num_warps == 8):
            raise RuntimeError(f"TritonPeer: layouts {type(w.storage.layout).__name__} and "
                               f"{type(s.storage.layout).__name__}, not Hopper's (vLLM's on compute capability 9.0)")
        return w, pc

    def convert(self, codes, scales, value_layout, scale_layout):
        """Checkpoint codes [E, N, K/2] and scales [E, N, K/32] as matmul_ogs takes them: the scales'
        K padded to a multiple of 4, both transposed to K-major, then converted to the layouts given
        as (layout class, options); returns the weights and their precision config."""
        torch = self.torch
        scales = torch.nn.functional.pad(scales, (0, -scales.shape[-1] % 4))
        codes, scales = codes.transpose(-2, -1), scales.transpose(-2, -1)
        w = self._convert(self._wrap(codes, dtype=self._FP4), value_layout[0], **value_layout[1])
        s = self._convert(self._wrap(scales), scale_layout[0], **scale_layout[1])
        return w, self._PrecisionConfig(weight_scale=s, flex_ctx=self._FlexCtx(rhs_data=self._InFlexData()))

    def _buffers(self, T, poison):
        torch = self.torch
        inter = torch.empty(1, T * self.k, self.I, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(1, T, self.H, device="cuda", dtype=torch.bfloat16)
        if poison:
            inter.fill_(float("nan"))
            out.fill_(float("nan"))
        return inter, out

    def _gemms(self, x, rdata, gather, scatter, inter, out):
        T = x.shape[0]
        self._matmul_ogs(x, self.w13, self.b13, rdata, gather_indx=gather, precision_config=self.pc13,
                         fused_activation=self.act, y=inter)
        self._matmul_ogs(inter.view(T * self.k, self.I), self.w2, self.b2, rdata, scatter_indx=scatter,
                         precision_config=self.pc2, gammas=rdata.gate_scal, y=out)
        return out

    def prepare_layer(self, x, ids, w, poison=False):
        logits, _ = router_logits(ids, w, self.E)
        inter, out = self._buffers(x.shape[0], poison)

        def run():
            rdata, gather, scatter = self._routing(logits, self.k, sm_first=False)
            return self._gemms(x, rdata, gather, scatter, inter, out)

        return run

    def prepare_gemms(self, x, ids, w):
        logits, _ = router_logits(ids, w, self.E)
        rdata, gather, scatter = self._routing(logits, self.k, sm_first=False)
        inter, out = self._buffers(x.shape[0], False)
        return lambda: self._gemms(x, rdata, gather, scatter, inter, out)

    def check(self, x, ids, w):
        """The layer (routing included) against `reference` on the first CHECK_ROWS tokens; every
        output row finite. Returns the row fields: the relative error."""
        torch = self.torch
        out = self.prepare_layer(x, ids, w, poison=True)()[0]
        torch.cuda.synchronize()
        if not torch.isfinite(out).all():
            bad = int((~torch.isfinite(out)).any(dim=1).sum())
            raise RuntimeError(f"triton_kernels check: {bad} of {out.shape[0]} output rows are not finite")
        n = min(x.shape[0], CHECK_ROWS)
        r = self.raw
        want = reference(x[:n], ids[:n].long(), w[:n], r["w13"], r["w13_scale"], r["w13_bias"], r["w2"],
                         r["w2_scale"], r["w2_bias"], inter_dtype=torch.bfloat16)
        return {"check_err": compare_rows("triton_kernels", out[:n], want), "check_rows": n}

