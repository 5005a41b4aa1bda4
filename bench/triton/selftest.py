#!/usr/bin/env python3
"""Does triton_kernels (bench/triton/fetch.sh) compute the right thing on this GPU and Triton? For the
peer of bench/peers_triton.py, piece by piece, against peers_triton.reference:
  - GEMM1 alone (rows gathered, no activation, no bias) row by row in the expert-sorted order;
  - the whole layer (routing, GEMM1 + SwiGLU + bias, GEMM2 + bias + router weights + top-k sum);
with the weights in Hopper's swizzled layouts (what vLLM uses) or plain strided ones, and the routing
handed its experts (expt_indx) or choosing them from the logits; "hopper-steps" also checks each
step after GEMM1 (its bias, the fused SwiGLU, GEMM2's rows, GEMM2's scatter with the router weights
and the top-k sum). One configuration per process (--variant), so that a kernel fault stops only its
own; prints one line per token count, and exits 1 when any error passes peers_triton.CHECK_TOL
(NaN included), the router weights differ or a call fails. On an H200 with Triton 3.6.0 (session 39, runs 2-3) the
"provided" variants' routing was wrong (other router weights, NaN rows) and every step of
"hopper-steps" matched (relative errors 1.7e-3 to 2.9e-3); the peer lets the routing choose.

  PYTHONPATH=build/triton-peer python3 bench/triton/selftest.py --variant hopper-provided
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import peers_triton  # noqa: E402

VARIANTS = ("hopper-provided", "hopper-provided32", "hopper-topk", "strided-provided", "hopper-steps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=VARIANTS, required=True)
    ap.add_argument("--shape", default="2880,2880,32,4", help="H,I,E,top-k (default gpt-oss-20b's)")
    ap.add_argument("--tokens", default="1,8,64")
    args = ap.parse_args()
    H, I, E, k = (int(v) for v in args.shape.split(","))
    layout_name, routing_name = args.variant.split("-")
    gen = torch.Generator(device="cuda").manual_seed(7)
    peer = peers_triton.TritonPeer(H, I, E, k, gen)
    if layout_name == "strided":
        from triton_kernels.tensor_details.layout import StridedLayout

        plain = (StridedLayout, {})
        peer.w13, peer.pc13 = peer.convert(peer.raw["w13"], peer.raw["w13_scale"], plain, plain)
        peer.w2, peer.pc2 = peer.convert(peer.raw["w2"], peer.raw["w2_scale"], plain, plain)
    r = peer.raw
    failed = False
    for T in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, generator=gen)
        ids = torch.stack([torch.randperm(E, device="cuda", generator=gen)[:k] for _ in range(T)]).int()
        w = torch.softmax(torch.randn(T, k, device="cuda", generator=gen), dim=1)
        logits, expt_indx = peers_triton.router_logits(ids, w, E)
        line = [f"{args.variant} T={T}"]

        def note(label, err):
            nonlocal failed
            failed |= not err <= peers_triton.CHECK_TOL  # (NaN fails)
            line.append(f"{label} {err:.3g}")

        try:
            handed = {"provided": expt_indx, "provided32": expt_indx.int()}.get(routing_name)
            rdata, gather, scatter = peer._routing(logits, k, sm_first=False, expt_indx=handed)
            # (for "steps" the routing chooses, as for "topk")
            torch.cuda.synchronize()
            # GEMM1 alone: row i of the output is pair gather.src_indx[i] (token * k + slot, slots
            # sorted by expert within each token)
            h = peer._matmul_ogs(x, peer.w13, None, rdata, gather_indx=gather, precision_config=peer.pc13)
            torch.cuda.synchronize()
            h = h.reshape(-1, 2 * I)
            src = gather.src_indx.long()
            experts = expt_indx.long().reshape(-1)[src]
            note("gemm1 rel err", rel(h, gemm_rows(x[src // k], experts, r["w13"], r["w13_scale"])))
            gate_ok = torch.allclose(rdata.gate_scal.float().reshape(-1)[:T * k].sort().values,
                                     w.reshape(-1).float().sort().values, atol=1e-5)
            line.append(f"router weights {'as given' if gate_ok else 'DIFFER'}")
            failed |= not gate_ok
            if layout_name == "hopper" and routing_name == "steps":
                steps(peer, x, rdata, gather, scatter, src, experts, T, I, k, note, line)
            out = peer.prepare_layer(x, ids, w, poison=True)()[0]
            torch.cuda.synchronize()
            want = peers_triton.reference(x, ids.long(), w, r["w13"], r["w13_scale"], r["w13_bias"], r["w2"],
                                          r["w2_scale"], r["w2_bias"], inter_dtype=torch.bfloat16)
            note("layer rel err", rel(out, want))
        except Exception as exc:
            line.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            print(" | ".join(line), flush=True)
            return 1
        print(" | ".join(line), flush=True)
    return 1 if failed else 0


rel = peers_triton.relative_error


def gemm_rows(a, experts, codes, scales, bias=None):
    """The reference of an expert-sorted GEMM: row i is a[i] times expert experts[i]'s dequantized
    weights (plus its bias), in float32."""
    out = torch.empty(a.shape[0], codes.shape[1], device=a.device)
    for e in torch.unique(experts).tolist():
        rows = (experts == e).nonzero(as_tuple=True)[0]
        out[rows] = a[rows].float() @ peers_triton.dequant_mxfp4(codes[e], scales[e]).T
        if bias is not None:
            out[rows] += bias[e]
    return out


def steps(peer, x, rdata, gather, scatter, src, experts, T, I, k, note, line):
    """GEMM1 + bias, its fused SwiGLU against torch's on that output, GEMM2 rows alone, then GEMM2 with
    the router weights and the top-k sum against torch's combine of those rows (note(label, error)
    each; the router weights taken by pair instead of by row only as text on the line)."""
    r = peer.raw
    h = peer._matmul_ogs(x, peer.w13, peer.b13, rdata, gather_indx=gather, precision_config=peer.pc13).reshape(-1, 2 * I)
    note("gemm1+bias", rel(h, gemm_rows(x[src // k], experts, r["w13"], r["w13_scale"], r["w13_bias"])))
    a = peer._matmul_ogs(x, peer.w13, peer.b13, rdata, gather_indx=gather, precision_config=peer.pc13,
                         fused_activation=peer.act).reshape(-1, I)
    g = h.float()[:, 0::2].clamp(max=7.0)
    u = h.float()[:, 1::2].clamp(-7.0, 7.0)
    note("swiglu", rel(a, g * torch.sigmoid(1.702 * g) * (u + 1)))
    y = peer._matmul_ogs(a, peer.w2, peer.b2, rdata, precision_config=peer.pc2).reshape(-1, peer.H)
    note("gemm2+bias rows", rel(y, gemm_rows(a, experts, r["w2"], r["w2_scale"], r["w2_bias"])))
    z = peer._matmul_ogs(a, peer.w2, peer.b2, rdata, scatter_indx=scatter, precision_config=peer.pc2,
                         gammas=rdata.gate_scal).reshape(-1, peer.H)
    gs = rdata.gate_scal.float()[:src.numel()]
    comb = torch.zeros(T, peer.H, device="cuda").index_add_(0, src // k, y.float() * gs[:, None])
    note("gemm2 scatter vs rows*gate summed", rel(z, comb))
    gs2 = torch.zeros_like(gs).index_copy_(0, src, gs)  # the same weights indexed by pair instead of row
    comb2 = torch.zeros(T, peer.H, device="cuda").index_add_(0, src // k, y.float() * gs2[:, None])
    line.append(f"(gate by pair: {rel(z, comb2):.3g})")


if __name__ == "__main__":
    sys.exit(main())
