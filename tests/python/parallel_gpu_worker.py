"""One rank of the 2-GPU fp4moe.ParallelMoE test (tests/python/test_parallel_gpu.py starts two of these).

Started with the torchrun variables (RANK, WORLD_SIZE=2, LOCAL_RANK, LOCAL_WORLD_SIZE=2, MASTER_ADDR,
MASTER_PORT), one process per GPU. The rank runs every case of build_cases() in order (both ranks run
the same list, so their collectives line up): it builds the case's ParallelMoE (collective), runs the
forward on torch CUDA bf16 tensors, and measures the output against the single-GPU fp4moe.MoE on the
same GPU, same weights, same tokens. It only measures; test_parallel_gpu.py holds the tolerance rules
and judges. Results go to OUT/rank<R>.json, rewritten after every case, so a crash or a hang still
leaves the cases done so far.

Weights: every layer is made from the dummy weights of SEED. ParallelMoE(..., seed=SEED) builds each
rank's shard with MoeLayer::create_dummy on that shard (src/moe/parallel_moe.cu) and the single-GPU
MoE.dummy(problem, SEED) builds the whole layer from the same generator: the dummy weights are a pure
function of (seed, tensor, GLOBAL expert, row, column) (src/moe/dummy_weights.h, DummySource in
src/moe/weights.cu), and the DeepSeek-V3 correction bias of the parallel backend is
make_random_weights(problem, seed)'s, the same as the dummy layer's. So a shard is exactly the slice
of the full dummy layer; one case also passes fp4moe.random_weights(problem, SEED) as an explicit
weights dict (the same weights) to cover that path.

w4a4 and NVFP4-quantized dispatch (ParallelMoE's quantized_dispatch, on by default for w4a4 with
allgather-reducescatter): the tokens are quantized once with ONE input scale shared by all experts, the
largest a13_scale_2, so the single-GPU layer to compare with is fp4moe.MoE(problem, weights) built from
fp4moe.random_weights(problem, SEED) with every a13_scale_2 replaced by that maximum (the 'shared_scale'
reference); with bf16 tokens (quantized_dispatch 'off', or a strategy 'auto' leaves off) it is the plain
layer. The w4a4 cases also record how far apart the two references are (the random experts' scales
differ, so a comparison with the wrong one fails) and check the layer's quantized_dispatch and
dispatch_input_scale_2 properties.

Inputs: the ranks of one DP group hold the same tokens, different DP groups hold different tokens
(include/fp4moe/parallel.h). A rank's tokens are generated on the CPU from (case, DP group) only, so
both ranks of a pure-TP config (dp = 1) pass identical tensors, and under DP each rank passes its own.

Without a GPU (or torch), ``--list-cases`` prints the case table (needs only fp4moe).

    python3 -X faulthandler parallel_gpu_worker.py --out DIR [--cases ID,ID,...]
    python3 parallel_gpu_worker.py --list-cases
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
import traceback

import fp4moe
import numpy as np

# Every rank must draw the same inputs: the test passes its run's FP4MOE_TEST_SEED to both workers;
# started by hand (torchrun) without it, the ranks agree on seed 0 rather than each drawing its own.
if not os.environ.get("FP4MOE_TEST_SEED", ""):
    os.environ["FP4MOE_TEST_SEED"] = "0"
import seeding  # noqa: E402  (beside this script)

#: Seed of the dummy weights of every layer (parallel and single-GPU).
SEED = 1234
#: Deadline (seconds) of every collective wait of a ParallelMoE, its set-up included: a peer that
#: failed makes the other rank fail within this, instead of hanging until the test's timeout.
LAYER_TIMEOUT_S = 30.0
#: Tokens per DP group of the main sweep (dp = 1 configs use the first): awkward, different counts.
SWEEP_TOKENS = (33, 19)
#: Tokens and padding of the graph-mode cases (as tests/test_parallel_gpu.cpp: 33 and 17, padded 40).
PADDED_TOKENS = (33, 17)
PADDED_TO = 40


# ---- Problems and cases (fp4moe only: no torch, no GPU) ------------------------------------------------


def make_problem(name: str) -> fp4moe.Problem:
    """The small problems of the test; max_tokens 64 (the most tokens one rank passes)."""
    if name in ("small", "small-w4a4"):
        # H 512, I 256 (TP2 slices of 128, whole 32-element scale blocks), E 16 (EP2: 8 per rank), top-4.
        return fp4moe.Problem(
            hidden_size=512,
            intermediate_size=256,
            num_experts=16,
            top_k=4,
            renormalize=True,
            max_tokens=64,
            mode="w4a4" if name == "small-w4a4" else "w4a16",
        )
    if name == "deepseek-r1/16":
        # H 512, I 128, E 256, top-8, grouped sigmoid routing with the correction bias.
        p = fp4moe.preset("deepseek-r1").scaled(16)
    elif name == "llama4-scout/32":
        # H 256, I 256, E 16, top-1, router weight on the input: with EP one rank computes each token.
        p = fp4moe.preset("llama4-scout").scaled(32)
    else:
        raise ValueError(f"unknown problem {name!r}")
    p.max_tokens = 64
    return p


PROBLEMS = ("small", "deepseek-r1/16", "llama4-scout/32")
# Routing inputs cycled over a problem's (config, strategy) cases: fp32 logits, precomputed
# topk_ids/topk_weights (fp4moe.route on the GPU), bf16 logits. DeepSeek-R1 always routes from
# fp32 logits inside the layer, so its correction bias is exercised on both sides.
ROUTINGS = {
    "small": ("logits", "topk", "logits-bf16"),
    "deepseek-r1/16": ("logits",),
    "llama4-scout/32": ("logits-bf16", "topk", "logits"),
}


def _short(problem_name: str) -> str:
    return problem_name.replace("/", "-s")  # deepseek-r1/16 -> deepseek-r1-s16


def quantizes(mode: str, strategy: str, quantized_dispatch: str) -> bool:
    """Whether the layer dispatches NVFP4 tokens: ParallelMoeOptions::quantized_dispatch resolved
    ('auto': w4a4 with allgather-reducescatter; 'on' is accepted only for w4a4 with a strategy that
    dispatches tokens)."""
    if quantized_dispatch == "on":
        return True
    return quantized_dispatch == "auto" and mode == "w4a4" and strategy == "allgather-reducescatter"


def shared_scale_weights(weights: dict) -> dict:
    """The weights with every a13_scale_2 replaced by the largest (what quantized dispatch computes)."""
    a13 = np.asarray(weights["a13_scale_2"])
    return dict(weights, a13_scale_2=np.full_like(a13, a13.max()))


def build_cases() -> list:
    """Every case, in the order both ranks run them. A case is a JSON-able dict:

    id, index, problem, mode, top_k, config [dp, tp, ep], strategy, tokens (one count per DP group),
    routing ('logits' | 'logits-bf16' | 'topk'), weights ('seed' | 'dict'),
    kind ('forward' | 'padded' | 'graph'), padded_to (padded/graph only),
    quantized_dispatch ('auto' | 'off' | 'on', ParallelMoE's argument), quantized (what it resolves
    to), reference ('plain' | 'shared_scale': the single-GPU layer to compare with).
    """
    cases = []

    def add(
        problem,
        config,
        strategy,
        tokens,
        kind="forward",
        routing="logits",
        weights="seed",
        tag="",
        quantized_dispatch="auto",
    ):
        dp, tp, ep = config
        assert len(tokens) == dp
        p = make_problem(problem)
        quantized = quantizes(p.mode, strategy, quantized_dispatch)
        name = f"{_short(problem)}-dp{dp}tp{tp}ep{ep}-{strategy}-{kind}"
        if kind == "forward":
            name += f"-{routing}"
        if weights != "seed":
            name += f"-weights_{weights}"
        if quantized_dispatch != "auto":
            name += f"-qd_{quantized_dispatch}"
        if tag:
            name += f"-{tag}"
        case = {
            "id": name,
            "index": len(cases),
            "problem": problem,
            "mode": p.mode,
            "top_k": int(p.top_k),
            "config": [int(dp), int(tp), int(ep)],
            "strategy": strategy,
            "tokens": [int(t) for t in tokens],
            "routing": routing,
            "weights": weights,
            "kind": kind,
            "quantized_dispatch": quantized_dispatch,
            "quantized": quantized,
            "reference": "shared_scale" if quantized else "plain",
        }
        if kind in ("padded", "graph"):
            case["padded_to"] = PADDED_TO
        cases.append(case)

    # Every valid 2-rank config with every applicable strategy, on each problem.
    for problem in PROBLEMS:
        p = make_problem(problem)
        j = 0
        for config in fp4moe.valid_parallel_configs(p, 2):
            for strategy in fp4moe.applicable_strategies(config):
                routing = ROUTINGS[problem][j % len(ROUTINGS[problem])]
                j += 1
                c = (config.dp, config.tp, config.ep)
                add(problem, c, strategy, SWEEP_TOKENS[: config.dp], routing=routing)
    # A rank with 0 tokens takes part in every DP (config, strategy) (rank 1 idle, or rank 0 for alltoall).
    small = make_problem("small")
    for config in fp4moe.valid_parallel_configs(small, 2):
        if config.dp != 2:
            continue
        for strategy in fp4moe.applicable_strategies(config):
            tokens = (0, 25) if strategy == "alltoall" else (25, 0)
            add("small", (config.dp, config.tp, config.ep), strategy, tokens, tag=f"tokens{tokens[0]}_{tokens[1]}")
    # Explicit weights (fp4moe.random_weights(problem, SEED), all experts, full I): each rank reads its
    # shard of the intermediate dimension (ep = 1) from the dict.
    add("small", (2, 1, 1), "allgather-reducescatter", SWEEP_TOKENS, weights="dict")
    # w4a4 DP2+EP2 (as the C++ W4a4QuantizedDispatchMatchesTheSingleGpuLayerWithTheSharedScale):
    # allgather-reducescatter with the default (NVFP4 tokens, the shared-scale layer), eager and padded;
    # with 'off' (bf16 tokens, the plain layer); alltoall with 'on' (the shared-scale layer).
    w4a4 = (2, 1, 2)
    add("small-w4a4", w4a4, "allgather-reducescatter", SWEEP_TOKENS)
    add("small-w4a4", w4a4, "allgather-reducescatter", PADDED_TOKENS, kind="padded")
    add("small-w4a4", w4a4, "allgather-reducescatter", SWEEP_TOKENS, routing="topk", quantized_dispatch="off")
    add("small-w4a4", w4a4, "alltoall", SWEEP_TOKENS, routing="logits-bf16", quantized_dispatch="on")
    # CUDA-graph mode (padded_tokens), the configs of the C++ GraphModeCapturedAndReplayedMatchesTheEagerForward:
    # eager padded forwards first, the captures last (a capture that goes wrong cannot disturb the rest).
    graph_configs = (((2, 1, 2), "allgather-reducescatter"), ((1, 2, 2), "tp-allreduce"))
    for kind in ("padded", "graph"):
        for config, strategy in graph_configs:
            add("deepseek-r1/16", config, strategy, PADDED_TOKENS[: config[0]], kind=kind)
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), ids
    return cases


# ---- Measurements ----------------------------------------------------------------------------------


class Report:
    """This rank's results, rewritten (atomically) after every case."""

    def __init__(self, path: str, rank: int):
        self.path = path
        self.data = {
            "rank": rank,
            "pid": os.getpid(),
            "fp4moe_file": fp4moe.__file__,
            "setup": {"checks": [], "error": None},
            "cases": {},
            "finished": False,
            "elapsed_s": 0.0,
        }
        self.start = time.monotonic()
        self.write()

    def write(self):
        self.data["elapsed_s"] = round(time.monotonic() - self.start, 3)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)


def _error_record(e: BaseException) -> dict:
    return {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}


class CaseRecord:
    def __init__(self, case: dict, rank: int, layout: dict, num_tokens: int):
        self.d = {
            "id": case["id"],
            "rank": rank,
            "dp_rank": layout["dp_rank"],
            "num_tokens": num_tokens,
            "checks": [],  # API checks: {name, ok, detail}
            "comparisons": [],  # measurements: {kind, what, ...}
            "error": None,
            "elapsed_s": None,
        }

    def check(self, name: str, ok: bool, detail=""):
        self.d["checks"].append({"name": name, "ok": bool(ok), "detail": str(detail)})

    def compare(self, kind: str, what: str, got, want):
        self.d["comparisons"].append(measure(kind, what, got, want))


def measure(kind: str, what: str, got, want) -> dict:
    """got, want: bf16 CUDA tensors [T, H]. Max abs diff and relative L2 error (fp64 on the host),
    the output's norm, and whether the bits are identical."""
    import torch

    rec = {
        "kind": kind,
        "what": what,
        "shape": list(got.shape),
        "want_shape": list(want.shape),
        "dtype": str(got.dtype).replace("torch.", ""),
    }
    if tuple(got.shape) != tuple(want.shape) or got.dtype != torch.bfloat16 or want.dtype != torch.bfloat16:
        rec.update(
            finite=False, norm=float("nan"), rel_l2=float("nan"), max_abs=float("nan"), bits_equal=False, bits_diff=-1
        )
        return rec
    g = got.float().cpu().numpy().astype(np.float64)
    w = want.float().cpu().numpy().astype(np.float64)
    finite = bool(np.isfinite(g).all())
    norm_w = float(np.linalg.norm(w))
    diff = g - w
    rec["finite"] = finite
    rec["norm"] = float(np.linalg.norm(g)) if finite else float("nan")
    rec["want_norm"] = norm_w
    rec["rel_l2"] = float(np.linalg.norm(diff) / max(norm_w, 1e-30)) if finite else float("nan")
    rec["max_abs"] = float(np.abs(diff).max()) if finite and diff.size else (0.0 if finite else float("nan"))
    # Bit patterns (as the C++ test compares uint16 vectors): -0 and +0 differ, NaN never equals.
    bits_g = got.contiguous().view(torch.int16)
    bits_w = want.contiguous().view(torch.int16)
    rec["bits_diff"] = int((bits_g != bits_w).sum().item())
    rec["bits_equal"] = rec["bits_diff"] == 0
    return rec


# ---- The rank ----------------------------------------------------------------------------------------


class Rank:
    def __init__(self, torch, info: dict):
        self.torch = torch
        self.info = info
        self.rank = info["rank"]
        self.local_rank = info["local_rank"]
        self.device = f"cuda:{self.local_rank}"
        self._single = {}

    def single_gpu(self, problem_name: str, reference: str = "plain"):
        """The whole layer on this rank's GPU: MoE.dummy(problem, SEED) ('plain'), or ('shared_scale')
        MoE(problem, random_weights(problem, SEED) with every a13_scale_2 replaced by the largest)."""
        key = (problem_name, reference)
        if key not in self._single:
            p = make_problem(problem_name)
            if reference == "plain":
                layer = fp4moe.MoE.dummy(p, SEED, device=self.device)
            elif reference == "shared_scale":
                layer = fp4moe.MoE(p, shared_scale_weights(fp4moe.random_weights(p, SEED)), device=self.device)
            else:
                raise ValueError(f"unknown reference {reference!r}")
            self._single[key] = layer
        return self._single[key]

    def inputs(self, p, case: dict, group: int, num_tokens: int, variant: int = 0) -> dict:
        """Forward keyword arguments for DP group `group`'s tokens of `case`: a function of (case, group,
        variant) and the run's seed only, generated on the CPU, so every rank of a DP group gets the same
        tensors."""
        torch = self.torch
        g = torch.Generator().manual_seed(seeding.seed(1_000_003 * (case["index"] + 1) + 1009 * group + 17 * variant))
        x = torch.randn(num_tokens, p.hidden_size, generator=g).to(torch.bfloat16).to(self.device)
        logits = (2 * torch.randn(num_tokens, p.num_experts, generator=g)).to(self.device)
        routing = case["routing"]
        if routing == "logits":
            return {"hidden_states": x, "router_logits": logits}
        if routing == "logits-bf16":
            return {"hidden_states": x, "router_logits": logits.to(torch.bfloat16)}
        if routing == "topk":
            ids, weights = fp4moe.route(logits, p)
            return {"hidden_states": x, "topk_ids": ids, "topk_weights": weights}
        raise ValueError(f"unknown routing {routing!r}")

    def poisoned(self, num_tokens: int, hidden: int):
        return self.torch.full((num_tokens, hidden), float("nan"), dtype=self.torch.bfloat16, device=self.device)

    def make_layer(self, case: dict, p, config, check_token_counts=True):
        weights = fp4moe.random_weights(p, SEED) if case["weights"] == "dict" else None
        return fp4moe.ParallelMoE(
            p,
            config,
            case["strategy"],
            weights,
            seed=SEED,
            timeout=LAYER_TIMEOUT_S,
            check_token_counts=check_token_counts,
            quantized_dispatch=case["quantized_dispatch"],
        )

    def check_layer(self, rec: CaseRecord, layer, p, config, strategy: str, case: dict):
        rec.check("layer.rank", layer.rank == self.rank, f"{layer.rank} != {self.rank}")
        rec.check("layer.world_size", layer.world_size == 2, layer.world_size)
        rec.check("layer.device", layer.device == self.device, f"{layer.device!r} != {self.device!r}")
        rec.check("layer.strategy", layer.strategy == strategy, layer.strategy)
        rec.check("layer.config", layer.config == config, f"{layer.config!r} != {config!r}")
        want_layout = fp4moe.rank_layout(config, self.rank)
        rec.check("layer.layout", dict(layer.layout) == dict(want_layout), f"{layer.layout} != {want_layout}")
        rec.check("layer.problem", layer.problem == p, f"{layer.problem} != {p}")
        rec.check("layer.closed before close()", not layer.closed, layer.closed)
        # NVFP4-quantized dispatch: resolved as the case expects, with the largest a13_scale_2 of all
        # experts (every rank the same, whatever its shard) as the shared input scale.
        quantized = quantizes(p.mode, strategy, case["quantized_dispatch"])
        rec.check("layer.quantized_dispatch", layer.quantized_dispatch == quantized, layer.quantized_dispatch)
        want_scale = float(np.max(fp4moe.random_weights(p, SEED)["a13_scale_2"])) if quantized else 0.0
        rec.check(
            "layer.dispatch_input_scale_2",
            layer.dispatch_input_scale_2 == want_scale,
            f"{layer.dispatch_input_scale_2!r} != {want_scale!r}",
        )

    def check_output(self, rec: CaseRecord, name: str, y, out, num_tokens: int, hidden: int):
        rec.check(f"{name}: returns out", y is out, type(y).__name__)
        rec.check(
            f"{name}: bf16 [{num_tokens}, {hidden}] on {self.device}",
            tuple(y.shape) == (num_tokens, hidden) and y.dtype == self.torch.bfloat16 and str(y.device) == self.device,
            f"{tuple(y.shape)} {y.dtype} {y.device}",
        )

    def run_case(self, case: dict, rec_holder: list):
        torch = self.torch
        p = make_problem(case["problem"])
        config = fp4moe.ParallelConfig(*case["config"])
        strategy = case["strategy"]
        layout = fp4moe.rank_layout(config, self.rank)
        group = layout["dp_rank"]
        T = case["tokens"][group]
        H = p.hidden_size
        rec = CaseRecord(case, self.rank, layout, T)
        rec_holder.append(rec)
        kind = case["kind"]
        args = self.inputs(p, case, group, T)
        want = self.single_gpu(case["problem"], case["reference"])(**args) if T > 0 else None
        if p.mode == "w4a4" and T > 0:
            # The two w4a4 references must be far apart for the comparison to tell them apart.
            other = "plain" if case["reference"] == "shared_scale" else "shared_scale"
            rec.compare("apart", f"{case['reference']} vs {other} single-GPU reference", want,
                        self.single_gpu(case["problem"], other)(**args))
        layer = self.make_layer(case, p, config, check_token_counts=(kind != "graph"))
        try:
            self.check_layer(rec, layer, p, config, strategy, case)
            out = self.poisoned(T, H)
            y = layer.forward(**args, out=out)
            torch.cuda.synchronize()
            self.check_output(rec, "forward(out=poisoned)", y, out, T, H)
            if T > 0:
                rec.compare("single_gpu", f"ParallelMoE.forward vs single-GPU MoE ({case['reference']})", out, want)
            if kind == "forward":
                # Default output allocation (and __call__), same step again: the same bits.
                y2 = layer(**args)
                torch.cuda.synchronize()
                rec.check(
                    "forward() allocates bf16 [T, H]",
                    tuple(y2.shape) == (T, H) and y2.dtype == torch.bfloat16 and str(y2.device) == self.device,
                    f"{tuple(y2.shape)} {y2.dtype} {y2.device}",
                )
                if T > 0:
                    rec.compare("repeat", "second forward (allocated out) vs the first", y2, out)
            elif kind == "padded":
                for P in (case["padded_to"], p.max_tokens):
                    outp = self.poisoned(T, H)
                    yp = layer.forward(**args, out=outp, padded_tokens=P)
                    layer.synchronize()
                    torch.cuda.synchronize()
                    self.check_output(rec, f"forward(padded_tokens={P})", yp, outp, T, H)
                    if T > 0:
                        rec.compare("padded", f"padded_tokens={P} vs unpadded forward", outp, out)
            elif kind == "graph":
                self.run_graph(rec, layer, p, case, group, T, args, out)
        finally:
            layer.close()
            rec.check("layer.closed after close()", layer.closed, layer.closed)
            layer.close()  # idempotent
        return rec

    def run_graph(self, rec: CaseRecord, layer, p, case, group, T, args_a, eager_a):
        """torch.cuda.CUDAGraph capture of the padded forward, replayed on two input sets; each replay
        must equal the eager unpadded forward on those inputs bit for bit."""
        torch = self.torch
        H, P = p.hidden_size, case["padded_to"]
        args_b = self.inputs(p, case, group, T, variant=1)
        eager_b = self.poisoned(T, H)
        layer.forward(**args_b, out=eager_b)
        torch.cuda.synchronize()
        # Static inputs the graph reads; warm-up: the padded forward once eagerly on them.
        static = {k: v.clone() for k, v in args_a.items()}
        out_g = self.poisoned(T, H)
        layer.forward(**static, out=out_g, padded_tokens=P)
        layer.synchronize()
        torch.cuda.synchronize()
        if T > 0:
            rec.compare("graph", "eager padded forward before capture vs unpadded", out_g, eager_a)
        out_g.fill_(float("nan"))
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            ctx = torch.cuda.graph(graph, capture_error_mode="thread_local")
        except TypeError:  # torch < 2.1
            ctx = torch.cuda.graph(graph)
        with ctx:
            layer.forward(**static, out=out_g, padded_tokens=P)
        torch.cuda.synchronize()
        for name, src, eager in (("inputs A", args_a, eager_a), ("inputs B", args_b, eager_b)):
            for k, v in src.items():
                static[k].copy_(v)
            graph.replay()
            layer.synchronize()  # the deadline wait on the replay stream (torch's current stream)
            torch.cuda.synchronize()
            if T > 0:
                rec.compare("graph", f"graph replay ({name}) vs eager unpadded forward", out_g, eager)
        rec.check("graph replays ran", True)
        del graph


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for rank<R>.json (required unless --list-cases)")
    ap.add_argument("--cases", default="", help="comma-separated case ids to run (default: all, in order)")
    ap.add_argument("--list-cases", action="store_true", help="print the case table as JSON and exit (no GPU)")
    args = ap.parse_args(argv)
    if not args.list_cases and not args.out:
        ap.error("--out DIR is required")
    return args


def select_cases(cases: list, wanted: str) -> list:
    if not wanted:
        return cases
    ids = [w for w in wanted.split(",") if w]
    known = {c["id"] for c in cases}
    unknown = [w for w in ids if w not in known]
    if unknown:
        raise SystemExit(f"unknown case ids: {unknown}; known: {sorted(known)}")
    return [c for c in cases if c["id"] in ids]


def main(argv=None) -> int:
    args = parse_args(argv)
    cases = select_cases(build_cases(), args.cases)
    if args.list_cases:
        print(json.dumps(cases, indent=1))
        return 0
    # A hang can be diagnosed: SIGUSR1 dumps every thread's Python stack to stderr (the test sends it
    # before killing a worker past its timeout).
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    os.makedirs(args.out, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    report = Report(os.path.join(args.out, f"rank{rank}.json"), rank)
    setup = report.data["setup"]
    try:
        import torch

        info = fp4moe.launch_info()
        want = {
            "launcher": "torchrun",
            "rank": rank,
            "world_size": int(os.environ.get("WORLD_SIZE", "-1")),
            "local_rank": int(os.environ.get("LOCAL_RANK", "-1")),
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "-1")),
            "master_addr": os.environ.get("MASTER_ADDR", ""),
            "master_port": int(os.environ.get("MASTER_PORT", "-1")),
            "nccl_comm_id": "",
        }
        setup["launch_info"] = dict(info)
        setup["checks"].append(
            {"name": "launch_info() is the torchrun variables", "ok": dict(info) == want, "detail": f"{info} != {want}"}
        )
        setup["checks"].append({"name": "world_size == 2", "ok": info["world_size"] == 2, "detail": info["world_size"]})
        setup["checks"].append(
            {
                "name": "NCCL_NVLS_ENABLE is 0",
                "ok": os.environ.get("NCCL_NVLS_ENABLE") == "0",
                "detail": os.environ.get("NCCL_NVLS_ENABLE"),
            }
        )
        torch.cuda.set_device(info["local_rank"])
        setup["device"] = torch.cuda.get_device_name(info["local_rank"])
        setup["torch"] = torch.__version__
        me = Rank(torch, info)
    except Exception as e:  # noqa: BLE001  (reported, then the rank stops)
        setup["error"] = _error_record(e)
        report.write()
        print(f"rank {rank}: set-up failed:\n{setup['error']['traceback']}", file=sys.stderr, flush=True)
        return 1
    report.write()
    for case in cases:
        start = time.monotonic()
        holder = []
        try:
            me.run_case(case, holder)
        except Exception as e:  # noqa: BLE001  (a failed case is reported; the next one gets a fresh layer)
            if not holder:
                holder.append(
                    CaseRecord(case, rank, fp4moe.rank_layout(fp4moe.ParallelConfig(*case["config"]), rank), -1)
                )
            holder[0].d["error"] = _error_record(e)
        holder[0].d["elapsed_s"] = round(time.monotonic() - start, 3)
        report.data["cases"][case["id"]] = holder[0].d
        report.write()
        err = holder[0].d["error"]
        status = f"raised {err['type']}: {err['message']}\n{err['traceback']}" if err else "done"
        print(f"rank {rank}: {case['id']}: {holder[0].d['elapsed_s']:.2f} s, {status}", file=sys.stderr, flush=True)
    report.data["finished"] = True
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
