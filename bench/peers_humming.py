"""The Humming peer for bench/peers_torch.py: vLLM's Humming kernels (the `humming-kernels` package on
PyPI, JIT-compiled GEMMs for quantized weights, with a wgmma path), which vLLM 0.34 ranks ahead of
Marlin for NVFP4 MoE weights on Hopper (compute capability 9.0) when the package is installed, as
its CUDA requirements install it (humming-kernels 0.1.19).

What is timed: Humming's "indexed" MoE GEMM1 (gate|up, N = 2I) and GEMM2 (down) on inputs prepared
beforehand: the token blocks aligned as vLLM's moe_align_block_size lays them out
(bench/peers_marlin.py's `align_blocks`), with the m-block of Humming's own heuristics for the batch
(what vLLM's HummingExperts take), and GEMM2's input random rows. Not timed: the alignment, the
activation and vLLM's weighted top-k sum. So this is a lower bound for vLLM's Humming MoE layer.
peers_torch.py times it (time_graphs_ms: CUDA-graph replays, routing sets in rotation at small T).

The weights are NVFP4 in ModelOpt's layout (uint8 codes, e4m3 scales per 16, an fp32 global scale
per expert), or, for gpt-oss, MXFP4 in the checkpoint's layout (uint8 codes, e8m0 scales per 32:
Humming's "gpt_oss_mxfp4" schema, what vLLM's Humming backend converts a gpt-oss checkpoint with;
vLLM keeps H = I = 2880 for it, and Humming pads its tiles' N and K inside, as here). Humming
converts and repacks them once (`transform`), as vLLM does at load: random codes and scales for
the timing (a GEMM's time does not depend on the values). gpt-oss's biases, which vLLM hands these
GEMMs (a per-column add in their epilogues), are left out, as in the Marlin peer. Before timing,
`check_plumbing` runs both GEMMs on weights whose every code is 1.0 and whose scale is 2^(e % 8)
for expert e (the global scale for NVFP4, the block scales for MXFP4): every output must then be
that factor times the sum of its input row, which checks the block alignment, the row indices and
the experts fed to Humming.
"""
import json

import peers_marlin

# Humming's weight schema per weight kind (peers_marlin.KINDS): what vLLM 0.34 converts a ModelOpt
# NVFP4 checkpoint and a gpt-oss MXFP4 checkpoint with.
WEIGHT_CONFIGS = {"nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
                  "mxfp4": {"quant_method": "gpt_oss_mxfp4"}}


class HummingPeer(peers_marlin.GemmsPeer):
    """Humming's two MoE GEMMs for one preset (H, I, E, top-k) and weight kind (NVFP4 or MXFP4)."""

    def __init__(self, H, I, E, k, gen, kind="nvfp4", device="cuda"):
        if kind not in WEIGHT_CONFIGS:
            raise ValueError(f"HummingPeer: kind must be one of {tuple(WEIGHT_CONFIGS)}, got {kind!r}")
        import torch
        from humming.layer import HummingLayer
        from humming.tune import get_heuristics_config

        self.torch, self.H, self.I, self.E, self.k, self.kind = torch, H, I, E, k, kind
        self.device = device  # where the weights are drawn (_random, _uniform_tensor; tests: "cpu")
        self._HummingLayer, self._heuristics = HummingLayer, get_heuristics_config
        self.compute_config = json.dumps({"use_batch_invariant": False, "use_f16_accum": False,
                                          "gemm_type": "indexed"})
        self.w13, self.w2 = self._layers(lambda name, shape, dtype: self._random(name, shape, dtype, gen))
        self._uniform = None

    def _random(self, name, shape, dtype, gen):
        torch = self.torch
        if self.kind == "mxfp4" and name == "weight_scale":  # e8m0 scales from 2^-3 to 2^3
            return torch.randint(124, 131, shape, device=self.device, dtype=torch.uint8, generator=gen)
        if dtype == torch.uint8:
            return torch.randint(0, 256, shape, device=self.device, dtype=torch.uint8, generator=gen)
        if dtype == torch.float8_e4m3fn:  # e4m3 scales from 2^-3 to 2^3
            exp = torch.randint(4, 11, shape, device=self.device, dtype=torch.uint8, generator=gen)
            mantissa = torch.randint(0, 8, shape, device=self.device, dtype=torch.uint8, generator=gen)
            return (exp << 3 | mantissa).view(dtype)
        return torch.full(shape, 2.0**-4, device=self.device, dtype=dtype)  # the global scales

    def _uniform_tensor(self, name, shape, dtype):
        torch = self.torch
        if self.kind == "mxfp4" and name == "weight_scale":  # e8m0: 2^(e % 8) for expert e
            byte = peers_marlin.expert_factors_e8m0(self.E, self.device)
            return byte.reshape((self.E,) + (1,) * (len(shape) - 1)).expand(shape).contiguous()
        if dtype == torch.uint8:
            return torch.full(shape, 0x22, device=self.device, dtype=torch.uint8)  # two codes of 1.0
        if dtype == torch.float8_e4m3fn:
            return torch.full(shape, 1.0, device=self.device, dtype=torch.float32).to(dtype)
        # the global scales: each expert's factor (check_plumbing)
        return peers_marlin.expert_factors(self.E, self.device).to(dtype).reshape(shape)

    def _layers(self, make):
        """GEMM1's and GEMM2's layers, loaded with make(name, shape, dtype) per checkpoint tensor
        and transformed into Humming's layout."""
        torch = self.torch
        layers = []
        for n, k in ((2 * self.I, self.H), (self.H, self.I)):
            # (padded as vLLM's Humming MoE pads every layer, N to 256 and K to 128: Humming's tiles
            # must divide the problem, and gpt-oss's 2880 is a multiple of neither 256 nor 128; the
            # other presets' shapes are multiples already. Session 40's run 1, without it: a bare
            # AssertionError in every gpt-oss call)
            layer = self._HummingLayer(shape_n=n, shape_k=k, weight_config=dict(WEIGHT_CONFIGS[self.kind]),
                                       num_experts=self.E, torch_dtype=torch.bfloat16,
                                       pad_n_to_multiple=256, pad_k_to_multiple=128).to(self.device)
            tensors = {name: make(name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters()}
            layer.load_from_tensors(tensors)
            layer.transform()
            layers.append(layer)
        return layers

    def block_size(self, layer, shape_m):
        """The m-block Humming's heuristics give this layer at shape_m routed rows (vLLM's
        HummingExperts: 64 when none matches)."""
        configs = self._heuristics(layer_config=layer.humming_config, use_f16_accum=False,
                                   use_batch_invariant=False, gemm_type="indexed")
        for lo, hi, config in configs:
            if lo < shape_m <= hi:
                return int(config["block_shape"][0]), json.dumps(configs)
        return 64, json.dumps(configs)

    def prepare(self, x, ids, w, layers=None, poison=False, a2=None):
        """Buffers for GEMM1 and GEMM2 of this batch; returns the function that runs both."""
        torch = self.torch
        w13, w2 = layers or (self.w13, self.w2)
        T = x.shape[0]
        m = T * self.k
        host_ids = ids.cpu().numpy()
        args, self.block_m, aligned = [], [], {}
        for layer, top_k in ((w13, self.k), (w2, 1)):
            bs, tuning = self.block_size(layer, m)
            self.block_m.append(bs)
            if bs not in aligned:  # (GEMM2 aligns again only with another block, as vLLM does)
                aligned[bs] = tuple(torch.from_numpy(h).to("cuda")
                                    for h in peers_marlin.align_blocks(host_ids, self.E, bs))
            blocks = aligned[bs]
            args.append(dict(sorted_ids=blocks[0], expert_ids=blocks[1], num_tokens_padded=blocks[2], top_k=top_k,
                             valid_shape_m=m, compute_config=self.compute_config, tuning_config=tuning))
        h1 = torch.empty(m, 2 * self.I, device="cuda", dtype=torch.bfloat16)
        if a2 is None:
            a2 = torch.randn(m, self.I, device="cuda", dtype=torch.bfloat16) / self.I**0.5
        out = torch.empty(m, self.H, device="cuda", dtype=torch.bfloat16)
        if poison:
            h1.fill_(float("nan"))
            out.fill_(float("nan"))

        def run():
            w13(x, outputs=h1, **args[0])
            w2(a2, outputs=out, **args[1])
            return h1, out

        return run

    def check_plumbing(self, x, ids, w):
        """Both GEMMs on weights of code 1.0 scaled by f(e) = 2^(e % 8) for expert e (NVFP4: block
        scales 1.0, global scale f(e); MXFP4: block scales f(e)): GEMM1's row of pair p must be
        c1 * f(e(p)) * sum(x[p // k]) in every column, GEMM2's c2 * f(e(p)) * sum(a2[p]) (c1 = c2 = 1
        if Humming decodes these exactly). Raises on a mismatch."""
        torch = self.torch
        if self._uniform is None:  # made once: the size of the weights
            self._uniform = self._layers(self._uniform_tensor)
        T = x.shape[0]
        a2 = torch.randn(T * self.k, self.I, device="cuda", dtype=torch.bfloat16)
        h1, out = self.prepare(x, ids, w, layers=self._uniform, poison=True, a2=a2)()
        return peers_marlin.check_gemm_pair("Humming", x, ids, self.k, h1, out, a2)
