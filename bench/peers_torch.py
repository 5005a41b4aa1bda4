#!/usr/bin/env python3
"""Peers for fp4moe-bench, measured in the same run: one whole MoE layer in PyTorch.

Per token count: the routing fp4moe-bench timed (--routing-dir, from `fp4moe-bench --dump-routing`),
or else its own uniform random top-k routing (k distinct experts per token, softmax weights), then
permute (stable sort by expert), GEMM1 (gate|up), SwiGLU, GEMM2 (down), router-weighted combine
(index_add), bf16 in and out, with
  - bf16:  torch._grouped_mm on bf16 weights;
  - fp8:   torch._scaled_grouped_mm on e4m3 weights with per-output-row scales and the activations
           quantized per row inside the timed layer.
Also each peer's two grouped GEMMs alone (`*_gemms_ms`): the same GEMM1 and GEMM2 on inputs
permuted (and, for fp8, quantized) beforehand, with no routing, activation, quantization or combine
inside the timed region. That is a lower bound for any layer built on those GEMMs, however good
its permute, activation and combine.
With --marlin-lib, also vLLM's Marlin MoE GEMMs alone (`marlin_gemms_ms`; bench/peers_marlin.py),
and with --humming, vLLM's Humming MoE GEMMs alone (`humming_gemms_ms`; bench/peers_humming.py,
NVFP4 weights, or MXFP4 for gpt-oss), each after a check of how its inputs are laid out (`*_check`). With --triton,
also OpenAI's triton_kernels MoE that vLLM runs for gpt-oss on Hopper (bench/peers_triton.py, MXFP4
presets only): a whole layer from routing to the top-k sum (`triton_layer_ms`) and its two matmul_ogs
calls alone (`triton_gemms_ms`), after a check against a reference of its own numerics. These extra
peers are timed as fp4moe-bench times its graph replays (time_graphs_ms: CUDA graphs, routing sets in
rotation: every set fp4moe-bench timed where --routing-dir holds them all, else sets drawn here at
T <= 128), and also eagerly on the first set (`*_eager_ms`). The torch layers and GEMMs above run set
0 alone.
Timed with CUDA events after a warm-up of at least --warmup calls and --warmup-ms milliseconds,
median of --iters. Writes JSON (--json).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import routing_file  # noqa: E402
import peers_marlin  # noqa: E402

PRESETS = {  # H, I, E, top-k (BRIEF section 5)
    "deepseek-r1": (7168, 2048, 256, 8),
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "qwen3-235b-a22b": (4096, 1536, 128, 8),
    "llama4-scout": (5120, 8192, 16, 1),
    "llama4-maverick": (5120, 8192, 128, 1),
    "mixtral-8x7b": (4096, 14336, 8, 2),
    "gpt-oss-120b": (2880, 2880, 128, 4),
    "gpt-oss-20b": (2880, 2880, 32, 4),
}
MXFP4_PRESETS = ("gpt-oss-120b", "gpt-oss-20b")  # the others are NVFP4 checkpoints
# How the extra peers' JSON names each kind of checkpoint weights
WEIGHT_KIND_LABELS = {"nvfp4": "nvfp4 (ModelOpt layout)", "mxfp4": "mxfp4 (gpt-oss checkpoint layout)"}


def weight_kind(preset):
    """The FP4 format of a preset's checkpoint weights: "mxfp4" (gpt-oss) or "nvfp4"."""
    return "mxfp4" if preset in MXFP4_PRESETS else "nvfp4"


def route(T, E, k, gen):
    ids = torch.rand(T, E, generator=gen, device="cuda").topk(k, dim=1).indices.to(torch.int32)
    w = torch.softmax(torch.randn(T, k, generator=gen, device="cuda"), dim=1)
    return ids, w


def permute(ids, E):
    k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return order, order // k, offs


def layer_bf16(x, ids, w, w13, w2):
    E, two_i, _ = w13.shape
    order, tok, offs = permute(ids, E)
    h = torch._grouped_mm(x[tok], w13.transpose(1, 2), offs=offs)
    a = F.silu(h[:, : two_i // 2]) * h[:, two_i // 2 :]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    y = y * w.flatten()[order].unsqueeze(1).to(y.dtype)
    return torch.zeros_like(x).index_add_(0, tok, y)


def quant_rows(t):
    scale = t.abs().amax(dim=1).float().clamp(min=1e-12) / 448.0
    return (t.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


def quant_weights(w):
    """e4m3 weights [E, N, K] with one fp32 scale per output row, an expert at a time (float32 copies
    of all the experts at once, 40 GiB at Llama-4-Maverick, did not fit beside the other peers)."""
    q = torch.empty(w.shape, device=w.device, dtype=torch.float8_e4m3fn)
    s = torch.empty(w.shape[:2], device=w.device, dtype=torch.float32)
    for e in range(w.shape[0]):
        s[e] = w[e].abs().amax(dim=1).float() / 448.0
        q[e] = (w[e].float() / s[e][:, None]).to(torch.float8_e4m3fn)
    return q, s


def layer_fp8(x, ids, w, w13q, s13, w2q, s2):
    E, two_i, _ = w13q.shape
    order, tok, offs = permute(ids, E)
    xq, sx = quant_rows(x[tok])
    h = torch._scaled_grouped_mm(xq, w13q.transpose(1, 2), sx, s13, offs=offs, out_dtype=torch.bfloat16)
    a = F.silu(h[:, : two_i // 2]) * h[:, two_i // 2 :]
    aq, sa = quant_rows(a)
    y = torch._scaled_grouped_mm(aq, w2q.transpose(1, 2), sa, s2, offs=offs, out_dtype=torch.bfloat16)
    y = y * w.flatten()[order].unsqueeze(1).to(y.dtype)
    return torch.zeros_like(x).index_add_(0, tok, y)


def gemms_inputs(x, ids, w13, w2q_or_w2, fp8):
    """The GEMMs-only peer's inputs, outside the timed region: the permuted rows, the expert
    offsets and GEMM2's input (random rows of the intermediate width, one per permuted row: their
    values do not change the time)."""
    E = w13.shape[0]
    order, tok, offs = permute(ids, E)
    xs = x[tok]
    I = w2q_or_w2.shape[2]
    a = torch.randn(xs.shape[0], I, device="cuda", dtype=torch.bfloat16) / I**0.5
    if not fp8:
        return xs, a, offs
    xq, sx = quant_rows(xs)
    aq, sa = quant_rows(a)
    return (xq, sx), (aq, sa), offs


def gemms_bf16(xs, a, offs, w13, w2):
    torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)


def gemms_fp8(xq_sx, aq_sa, offs, w13q, s13, w2q, s2):
    (xq, sx), (aq, sa) = xq_sx, aq_sa
    torch._scaled_grouped_mm(xq, w13q.transpose(1, 2), sx, s13, offs=offs, out_dtype=torch.bfloat16)
    torch._scaled_grouped_mm(aq, w2q.transpose(1, 2), sa, s2, offs=offs, out_dtype=torch.bfloat16)


_printed_failures = set()  # (describe: each distinct failure's traceback once a run)


def describe(exc):
    """A failure as a row records it: its type, the first 300 characters of its message and where it
    was raised (the innermost frame's folder/file:line and code: a bare `assert` in a peer's package
    has no message, and session 40's first Humming MXFP4 run recorded only "AssertionError: ").
    Prints the whole traceback on stderr (gpu-check.sh keeps it in bench.log) the first time a
    failure with this text is seen, so that a peer failing at every token count prints it once."""
    import traceback

    text = type(exc).__name__
    message = str(exc)[:300]
    if message:
        text += ": " + message
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        path = os.path.normpath(frames[-1].filename).split(os.sep)
        text += f" (at {'/'.join(path[-2:])}:{frames[-1].lineno}: {frames[-1].line or '?'})"
    if text not in _printed_failures:
        _printed_failures.add(text)
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return text


def start_peer(label, info, build):
    """An extra peer: build(info) makes it, adding what it learns to info. A failure is reported
    (info["error"], and on stderr) rather than raised, so that the other peers still run. Returns
    (peer or None, info)."""
    try:
        return build(info), info
    except Exception as exc:
        info["error"] = describe(exc)
        print(f"peers_torch.py: {label} peer unavailable: {info['error']}", file=sys.stderr)
        return None, info


def time_ms(fn, warmup, iters, warmup_ms):
    # at least `warmup` calls and `warmup_ms` of wall time (synchronized every 8 calls), as
    # fp4moe-bench warms up: a loaded H200 runs at its power cap, with a lower SM clock
    t0, i = time.perf_counter(), 0
    while i < warmup or (time.perf_counter() - t0) * 1e3 < warmup_ms:
        fn()
        i += 1
        if i % 8 == 0:
            torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def time_graphs_ms(runs, warmup, iters, warmup_ms):
    """The extra peers' timing, as fp4moe-bench times its graph replays: each of `runs` (one per
    routing set) called once eagerly (JIT compilation, lazy set-up), then captured in a CUDA graph;
    the graphs replayed in rotation, so that consecutive replays touch other experts' weights
    (through L2 otherwise, when they fit), each replay timed alone with CUDA events after the
    warm-up; the median of iters replays of each."""
    graphs = []
    for run in runs:
        run()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        # (relaxed: Marlin's launcher asks the device's attributes while it is captured)
        with torch.cuda.graph(g, capture_error_mode="relaxed"):
            run()
        graphs.append(g)
    n = len(graphs)
    t0, i = time.perf_counter(), 0
    while i < warmup * n or (time.perf_counter() - t0) * 1e3 < warmup_ms:
        graphs[i % n].replay()
        i += 1
        if i % 8 == 0:
            torch.cuda.synchronize()
    times = []
    for j in range(iters * n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graphs[j % n].replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


ROTATING_SETS = 8  # routing sets the extra peers draw and rotate through at T <= ROTATE_MAX_T ...
ROTATE_MAX_T = 128  # (above it every set touches nearly every expert)
# ... where --routing-dir holds set 0 alone (a dump before session 43). With every set fp4moe-bench
# timed in it, they rotate through exactly those, at every T. Drawn apart, the sets of Llama-4-Scout
# T=8 (top-1 of 16: 5-8 experts a set) and Mixtral T=8 differed from fp4moe-bench's by several
# percent of the bytes read, the size of the differences they were compared on (session 43).


def load_routing(file_path, T, k, E):
    """One routing file of --routing-dir as CUDA tensors (ids, weights), checked against the preset."""
    try:
        host_ids, host_w, file_e = routing_file.read(file_path)
    except (OSError, ValueError) as exc:
        sys.exit(f"peers_torch.py: --routing-dir: {exc}")
    if host_ids.shape != (T, k) or file_e != E:
        sys.exit(f"peers_torch.py: {file_path} holds T={host_ids.shape[0]} K={host_ids.shape[1]} E={file_e}, "
                 f"not T={T} K={k} E={E}")
    return torch.from_numpy(host_ids).to("cuda"), torch.from_numpy(host_w).to("cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="deepseek-r1", choices=sorted(PRESETS))
    ap.add_argument("--tokens", default="1,8,32,128,512,2048,8192")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--warmup-ms", type=float, default=500.0)
    ap.add_argument("--json")
    ap.add_argument("--routing-dir", help="time fp4moe-bench's routing (its --dump-routing DIR) instead of drawing one")
    ap.add_argument("--marlin-lib", help="also time vLLM's Marlin MoE GEMMs from this library "
                    "(bench/marlin/build.sh; 'default' for build/marlin-peer)")
    ap.add_argument("--humming", action="store_true",
                    help="also time vLLM's Humming MoE GEMMs (the humming-kernels package must be importable)")
    ap.add_argument("--triton", action="store_true",
                    help="also time triton_kernels' MoE layer, vLLM's for gpt-oss on Hopper (triton_kernels must be "
                    "importable: bench/triton/fetch.sh)")
    args = ap.parse_args()
    H, I, E, k = PRESETS[args.preset]
    gen = torch.Generator(device="cuda").manual_seed(0)
    kind = weight_kind(args.preset)  # (the Marlin and Humming peers' weights)
    marlin, marlin_info = None, None
    if args.marlin_lib:
        path = peers_marlin.default_lib() if args.marlin_lib == "default" else args.marlin_lib

        def build_marlin(info):
            peer = peers_marlin.MarlinPeer(peers_marlin.MarlinLib(path), H, I, E, k, kind,
                                           torch.Generator(device="cuda").manual_seed(1))
            info["H"], info["I"] = peer.Hp, peer.Ip  # as vLLM pads them for Marlin
            return peer

        marlin, marlin_info = start_peer("Marlin", {"lib": os.path.abspath(path), "kind": kind,
                                                    "vllm": "0.34.0 (bench/marlin/build.sh)"}, build_marlin)
    humming, humming_info = None, None
    if args.humming:
        def build_humming(info):
            import peers_humming
            import humming as humming_package

            info["humming"] = humming_package.__version__
            gen_h = torch.Generator(device="cuda").manual_seed(2)
            return peers_humming.HummingPeer(H, I, E, k, gen_h, kind)

        humming, humming_info = start_peer("Humming", {"kind": WEIGHT_KIND_LABELS[kind]}, build_humming)
    triton, triton_info = None, None
    if args.triton:
        def build_triton(info):
            if args.preset not in MXFP4_PRESETS:
                raise ValueError(f"the triton_kernels peer runs MXFP4 weights (gpt-oss) only; {args.preset} is NVFP4")
            import peers_triton
            import triton as triton_lang
            import triton_kernels

            info["triton"] = triton_lang.__version__
            info["triton_kernels"] = os.path.dirname(os.path.abspath(triton_kernels.__file__))
            return peers_triton.TritonPeer(H, I, E, k, torch.Generator(device="cuda").manual_seed(3))

        triton, triton_info = start_peer("triton_kernels", {"kind": WEIGHT_KIND_LABELS["mxfp4"]},
                                         build_triton)
    extra_peers = [(name, peer) for name, peer in (("marlin", marlin), ("humming", humming), ("triton", triton))
                   if peer is not None]
    w13 = (torch.randn(E, 2 * I, H, device="cuda", dtype=torch.bfloat16, generator=gen) / H**0.5)
    w2 = (torch.randn(E, H, I, device="cuda", dtype=torch.bfloat16, generator=gen) / I**0.5)
    w13q, s13 = quant_weights(w13)
    w2q, s2 = quant_weights(w2)
    rows = []
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "preset": args.preset,
            "routing": "fp4moe-bench's (--routing-dir)" if args.routing_dir else "random (own draw)",
            "warmup_ms": args.warmup_ms}
    peer_infos = {"marlin": marlin_info, "humming": humming_info, "triton": triton_info}
    for T in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, generator=gen)
        fp4moe_sets = []  # the other input sets fp4moe-bench timed (a dump of every set: session 43 on)
        if args.routing_dir:
            ids, w = load_routing(routing_file.path(args.routing_dir, args.preset, T), T, k, E)
            fp4moe_sets = [load_routing(p, T, k, E)
                           for p in routing_file.set_paths(args.routing_dir, args.preset, T)[1:]]
        else:
            ids, w = route(T, E, k, gen)
        row = {"T": T, "active_experts": int(torch.unique(ids).numel())}
        # The sets the extra peers rotate through after set 0: fp4moe-bench's where the dump has
        # them (a paired comparison), else at T <= ROTATE_MAX_T sets drawn here, apart from the
        # torch peers' inputs; with each set's experts, set 0 first, as fp4moe-bench's set_experts.
        other_sets, sets_from = fp4moe_sets, "fp4moe-bench" if fp4moe_sets else None
        if not fp4moe_sets and extra_peers and T <= ROTATE_MAX_T:
            set_gen = torch.Generator(device="cuda").manual_seed(1000 + T)
            other_sets, sets_from = [route(T, E, k, set_gen) for _ in range(ROTATING_SETS - 1)], "drawn"
        set_experts = [int(torch.unique(i).numel()) for i, _ in [(ids, w)] + other_sets]
        if fp4moe_sets:
            row["set_experts"] = set_experts
        def bf16_gemms():
            xs, a, offs = gemms_inputs(x, ids, w13, w2, fp8=False)
            return lambda: gemms_bf16(xs, a, offs, w13, w2)

        def fp8_gemms():
            xq, aq, offs = gemms_inputs(x, ids, w13, w2q, fp8=True)
            return lambda: gemms_fp8(xq, aq, offs, w13q, s13, w2q, s2)

        # (each entry makes its timed function, so that a failure while preparing inputs is
        # reported for that peer only)
        for name, make in (("bf16_layer_ms", lambda: lambda: layer_bf16(x, ids, w, w13, w2)),
                           ("fp8_layer_ms", lambda: lambda: layer_fp8(x, ids, w, w13q, s13, w2q, s2)),
                           ("bf16_gemms_ms", bf16_gemms), ("fp8_gemms_ms", fp8_gemms)):
            try:
                row[name] = time_ms(make(), args.warmup, args.iters, args.warmup_ms)
            except Exception as exc:  # report, keep the other peers
                row[name] = None
                row[name.replace("_ms", "_error")] = describe(exc)
        for name, peer in extra_peers:
            # (timed whatever the check says, which the row records: the time does not depend on
            # the values, and compare.py marks a time whose check did not pass)
            try:
                row.update({f"{name}_{key}": value for key, value in peer.check(x, ids, w).items()})
                row[f"{name}_check"] = "passed"
            except Exception as exc:
                row[f"{name}_check"] = "failed: " + describe(exc)
            for what, prepare in peer.timed:
                key = f"{name}_{what}"
                try:
                    run = prepare(x, ids, w)
                    if peer.block_m is not None:
                        row[f"{name}_block_m"] = peer.block_m
                    row[f"{key}_eager_ms"] = time_ms(run, args.warmup, args.iters, args.warmup_ms)
                    runs = [run] + [prepare(x, ids_i, w_i) for ids_i, w_i in other_sets]
                    if sets_from:
                        row[f"{name}_routing_sets_from"] = sets_from
                    if sets_from == "drawn":
                        row[f"{name}_set_experts"] = set_experts
                    row[f"{name}_routing_sets"] = len(runs)
                    row[f"{key}_ms"] = time_graphs_ms(runs, args.warmup, args.iters, args.warmup_ms)
                except Exception as exc:  # report, keep the other peers
                    row[f"{key}_ms"] = None
                    row[f"{key}_error"] = describe(exc)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:  # after every token count: a fault that ends the process keeps the rows before it
            write_json(args.json, meta, rows, peer_infos, complete=False)
    if args.json:
        write_json(args.json, meta, rows, peer_infos, complete=True)


def write_json(path, meta, rows, peer_infos, complete):
    """The run's JSON so far: meta's fields, the date, `complete` (false until every token count is
    in: a CUDA fault, which no peer's try can survive, ends the process, and session 39's run 1 lost
    every row that way), the rows and each extra peer's info (None: left out). Written whole, then
    renamed over the old one."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = {"tool": "bench/peers_torch.py", "date": now, **meta, "complete": complete, "rows": rows}
    result.update({name: info for name, info in peer_infos.items() if info is not None})
    with open(path + ".part", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".part", path)


if __name__ == "__main__":
    main()
