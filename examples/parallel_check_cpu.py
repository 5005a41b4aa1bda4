"""Checks every parallel (dp, tp, ep) config and strategy of a scaled-down preset on N in-process CPU
ranks (fp4moe.parallel.run_local: the C++ in-process communicator and the fp64 reference) against the
single-rank CPU layer fp4moe.MoE(device='cpu'). No GPU needed.

In w4a4 mode allgather-reducescatter dispatches the tokens NVFP4-quantized with one input scale shared by
all experts, the largest a13_scale_2 (the C++ default, src/moe/parallel_moe.h): its reference is the
single-rank layer with every a13_scale_2 replaced by that maximum. --quantized-dispatch (run_local's
quantized_dispatch) changes that: 'off' sends bf16 tokens everywhere (the plain layer), 'on' (w4a4 only)
quantizes for alltoall too; strategies that send no tokens never quantize.

    python examples/parallel_check_cpu.py --preset deepseek-r1 --scale 14 --ranks 2,4
"""

import argparse
import sys

import numpy as np

import fp4moe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-30b-a3b", choices=fp4moe.preset_names())
    ap.add_argument("--scale", type=int, default=3, help="divide H and I by this (fp4moe.Problem.scaled)")
    ap.add_argument("--mode", default="w4a16", choices=["w4a16", "w4a4"])
    ap.add_argument("--ranks", default="2,4", help="comma-separated world sizes")
    ap.add_argument("--tokens", type=int, default=4, help="tokens per DP group")
    ap.add_argument("--seed", type=int, default=0, help="weights: fp4moe.random_weights(problem, seed)")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="normalized L2 error (tests/test_parallel.cpp)")
    ap.add_argument(
        "--quantized-dispatch",
        default="auto",
        choices=fp4moe.parallel.QUANTIZED_DISPATCH,
        help="NVFP4-quantized dispatch in w4a4 (auto: allgather-reducescatter only)",
    )
    args = ap.parse_args()
    if args.quantized_dispatch == "on" and args.mode != "w4a4":
        ap.error("--quantized-dispatch on needs --mode w4a4")

    problem = fp4moe.preset(args.preset).scaled(args.scale)
    problem.mode = args.mode
    problem.max_tokens = args.tokens
    weights = fp4moe.random_weights(problem, args.seed)
    reference = fp4moe.MoE(problem, weights, device="cpu")
    shared_reference = reference
    if problem.mode == "w4a4":
        a13 = np.asarray(weights["a13_scale_2"])
        shared = dict(weights, a13_scale_2=np.full_like(a13, a13.max()))
        shared_reference = fp4moe.MoE(problem, shared, device="cpu")
    failures = 0
    for world in (int(w) for w in args.ranks.split(",")):
        for config in fp4moe.valid_parallel_configs(problem, world):
            rng = np.random.default_rng(world)
            xs = [rng.standard_normal((args.tokens, problem.hidden_size)).astype(np.float32) for _ in range(config.dp)]
            logits = [rng.standard_normal((args.tokens, problem.num_experts)).astype(np.float32) for _ in xs]
            plain = [reference(x, lg) for x, lg in zip(xs, logits)]
            with_shared_scale = [shared_reference(x, lg) for x, lg in zip(xs, logits)]
            for strategy in fp4moe.applicable_strategies(config):
                option = args.quantized_dispatch
                if option == "on" and strategy not in ("allgather-reducescatter", "alltoall"):
                    option = "off"  # no tokens to send: 'on' is refused there
                quantized = option == "on" or (
                    option == "auto" and problem.mode == "w4a4" and strategy == "allgather-reducescatter"
                )
                want = with_shared_scale if quantized else plain
                outs = fp4moe.parallel.run_local(
                    problem,
                    config,
                    strategy,
                    args.seed,
                    hidden_states=xs,
                    router_logits=logits,
                    quantized_dispatch=option,
                )
                worst = 0.0
                for rank, out in enumerate(outs):
                    w = want[fp4moe.rank_layout(config, rank)["dp_rank"]]
                    worst = max(worst, float(np.linalg.norm(out - w) / np.linalg.norm(w)))
                ok = worst <= args.tolerance
                failures += not ok
                verdict = "ok" if ok else "FAIL"
                dispatch = "nvfp4" if quantized else "bf16"
                print(
                    f"{world} ranks  {config.name:<12} {strategy:<24} {dispatch:<6} max rel L2 {worst:.2e}  {verdict}"
                )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
