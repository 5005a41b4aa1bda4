"""Replace the MoE block of a PyTorch model with fp4moe.

A small Mixtral-style decoder (written here, random bf16 weights) has a sparse MoE block in every
layer: a router (Linear H -> E), softmax top-2 with renormalization, and E SwiGLU experts
w2(silu(w1 x) * w3 x). This script quantizes each block's experts to NVFP4 with ModelOpt's recipe,
builds one fp4moe.MoE per block from the stacked weights (w13 = [w1 rows; w3 rows], the checkpoint
layout fp4moe takes), swaps the block for a module that keeps the router and calls fp4moe, and
compares the model's output:

  * against the same PyTorch model with the experts' weights replaced by their dequantized NVFP4
    values (same numerics, different kernels: a small difference from bf16 roundings), and
  * against the original bf16 model (the difference NVFP4 weight quantization itself makes).

On a GPU (Hopper) the layer runs fp4moe's kernels; without one it runs fp4moe's CPU reference, so
the script also works on a laptop. `--compile` runs the swapped model under torch.compile (the
forward is the custom op torch.ops.fp4moe.moe_forward).

    python examples/replace_moe_block.py [--device cuda|cpu] [--tokens 64] [--compile]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import fp4moe


# ---- The model -----------------------------------------------------------------------------------


class Expert(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)  # gate
        self.w3 = nn.Linear(hidden, inter, bias=False)  # up
        self.w2 = nn.Linear(inter, hidden, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoeBlock(nn.Module):
    """Router + top-k experts, as in Mixtral / Qwen3-MoE."""

    def __init__(self, hidden: int, inter: int, num_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, inter) for _ in range(num_experts))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.gate(x).float(), dim=-1)
        weights, ids = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if tok.numel():
                out.index_add_(0, tok, expert(x[tok]) * weights[tok, slot, None])
        return out.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, moe: SparseMoeBlock):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.norm2 = nn.RMSNorm(hidden)
        self.mlp = moe

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp(self.norm2(x))


class TinyMoeModel(nn.Module):
    def __init__(self, vocab=1000, hidden=256, inter=512, layers=2, heads=4, num_experts=8, top_k=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads, SparseMoeBlock(hidden, inter, num_experts, top_k)) for _ in range(layers)
        )
        self.norm = nn.RMSNorm(hidden)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


# ---- The swap ------------------------------------------------------------------------------------


def quantize_block(block: SparseMoeBlock, max_tokens: int):
    """NVFP4 weights of a block's experts in fp4moe's checkpoint layout, per expert:
    w13 = [w1; w3] [2I, H/2] + e4m3 scales [2I, H/16] + global scale (decode convention, ModelOpt's
    weight_scale_2 = amax/2688), w2 likewise. Returns the fp4moe.Problem and the weights dict."""
    hidden = block.gate.in_features
    inter = block.experts[0].w1.out_features
    problem = fp4moe.Problem(
        hidden_size=hidden,
        intermediate_size=inter,
        num_experts=len(block.experts),
        top_k=block.top_k,
        routing_method="softmax_topk",
        renormalize=True,
        max_tokens=max_tokens,
    )
    w = {k: [] for k in ("w13", "w13_scale", "w13_scale_2", "w2", "w2_scale", "w2_scale_2")}
    for expert in block.experts:
        for name, weight in (("w13", torch.cat([expert.w1.weight, expert.w3.weight])), ("w2", expert.w2.weight)):
            weight = weight.detach().float()
            s2 = fp4moe.global_scale_from_amax(weight.abs().max().item(), "decode")
            packed, scales = fp4moe.quantize_nvfp4(weight, s2, "decode", recipe="modelopt")
            w[name].append(packed)
            w[name + "_scale"].append(scales)
            w[name + "_scale_2"].append(torch.tensor(s2, dtype=torch.float32, device=weight.device))
    weights = {k: torch.stack(v) for k, v in w.items()}
    return problem, weights


def dequantized_copy(block: SparseMoeBlock, weights) -> SparseMoeBlock:
    """The block with each expert's weights replaced by their NVFP4 values (same router)."""
    import copy

    twin = copy.deepcopy(block)
    inter = block.experts[0].w1.out_features
    for e, expert in enumerate(twin.experts):
        w13 = fp4moe.dequantize_nvfp4(
            weights["w13"][e], weights["w13_scale"][e], weights["w13_scale_2"][e].item(), "decode"
        )
        w2 = fp4moe.dequantize_nvfp4(
            weights["w2"][e], weights["w2_scale"][e], weights["w2_scale_2"][e].item(), "decode"
        )
        dtype = expert.w1.weight.dtype
        expert.w1.weight.data.copy_(w13[:inter].to(dtype))
        expert.w3.weight.data.copy_(w13[inter:].to(dtype))
        expert.w2.weight.data.copy_(w2.to(dtype))
    return twin


class Fp4moeBlock(nn.Module):
    """Drop-in for SparseMoeBlock: the same router Linear, the experts in fp4moe."""

    def __init__(self, block: SparseMoeBlock, moe: fp4moe.MoE):
        super().__init__()
        self.gate = block.gate
        self.moe = moe

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        logits = self.gate(h).float()
        # GPU: bf16 in and out on the current stream; CPU reference: fp32 out.
        return self.moe(h, logits).to(x.dtype).reshape(shape)


def relative_difference(a, b):
    a, b = a.float(), b.float()
    return (torch.linalg.norm(a - b) / torch.linalg.norm(b)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if fp4moe.cuda_device_count() > 0 else "cpu")
    parser.add_argument("--tokens", type=int, default=64, help="sequence length (batch 2)")
    parser.add_argument("--compile", action="store_true", help="also run the swapped model under torch.compile")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    # bf16 on the GPU (fp4moe's GPU layer is bf16 in/out); fp32 on the CPU, where the reference
    # takes fp32 and rounds it to bf16 itself.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = TinyMoeModel().to(device=device, dtype=dtype).eval()
    tokens = torch.randint(0, 1000, (2, args.tokens), device=device)

    with torch.no_grad():
        original = model(tokens)
        twins, swapped = [], []
        for layer in model.layers:
            problem, weights = quantize_block(layer.mlp, max_tokens=2 * args.tokens)
            moe = fp4moe.MoE(problem, weights, device=args.device)
            twins.append(dequantized_copy(layer.mlp, weights))
            swapped.append(Fp4moeBlock(layer.mlp, moe))
        originals = [layer.mlp for layer in model.layers]

        for layer, twin in zip(model.layers, twins):
            layer.mlp = twin
        fake_quantized = model(tokens)
        for layer, block in zip(model.layers, swapped):
            layer.mlp = block
        out = model(tokens)

        info = swapped[0].moe.kernel_info(2 * args.tokens)
        print(f"device {args.device}; fp4moe path '{info['path']}': {info['regime']}")
        print(f"  gemm1 {info['gemm1']}\n  gemm2 {info['gemm2']}")
        print(
            f"fp4moe vs the PyTorch model on the same NVFP4 weights: relative L2 difference "
            f"{relative_difference(out, fake_quantized):.2e} (bf16 roundings)"
        )
        print(
            f"fp4moe vs the original bf16 model:                      relative L2 difference "
            f"{relative_difference(out, original):.2e} (NVFP4 weight quantization)"
        )

        if args.compile:
            compiled = torch.compile(model, fullgraph=True)
            compiled(tokens)  # compile
            start = time.perf_counter()
            out_c = compiled(tokens)
            if device.type == "cuda":
                torch.cuda.synchronize()
            print(
                f"torch.compile: relative difference to eager {relative_difference(out_c, out):.2e}, "
                f"{(time.perf_counter() - start) * 1e3:.2f} ms per forward"
            )

        for layer, block in zip(model.layers, originals):
            layer.mlp = block


if __name__ == "__main__":
    main()
