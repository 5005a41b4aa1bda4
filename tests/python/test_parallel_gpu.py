"""fp4moe.ParallelMoE on 2 GPUs over NCCL against the single-GPU fp4moe.MoE.

Two worker processes (parallel_gpu_worker.py, one per GPU, with the torchrun variables) are started
once for the module; each runs every case (every valid 2-rank config with every applicable strategy
on three small w4a16 problems, a rank with 0 tokens, an explicit weights dict, w4a4 DP2+EP2 with
NVFP4-quantized dispatch (default and 'on') and without ('off'), the CUDA-graph mode with
padded_tokens, eager and captured) and writes what it measured; each test below judges one case on
both ranks.

w4a4: with quantized dispatch (default for allgather-reducescatter) the reference is the single-GPU
layer whose a13_scale_2 are all the largest (one shared input scale, include/fp4moe/parallel.h);
without it the plain single-GPU layer. The two references must be at least REFERENCES_APART apart
(normalized L2), far above the tolerance, so comparing with the wrong one fails.

Tolerances (as tests/test_parallel_gpu.cpp, which runs the same layer from C++):
* vs the single-GPU layer: relative L2 error <= 1e-2 (kGpuParallelTolerance): each rank's partial
  output is rounded to bf16 and the partials are summed in bf16 (NCCL), so an element carries up to
  two more bf16 roundings (2^-9 relative each) than the single GPU's one, on values that can cancel.
  Bit-identical where a token's output comes from one rank alone: top-1 routing (Llama-4) with EP
  (ep > 1), where the other rank adds exact zeros.
* padded_tokens (graph mode), eager or captured and replayed: bit-identical to the unpadded forward
  (ParallelMoE.forward's docstring; the C++ GraphModeCapturedAndReplayedMatchesTheEagerForward).
* the same step run twice on a layer (the second time into an allocated output): bit-identical.
Every output of a rank with tokens must be finite (outputs are NaN-poisoned first) with a non-zero norm.

Skips (run pytest with -rs to see why) without torch, without an fp4moe build with CUDA and NCCL
(fp4moe.has_cuda, fp4moe.has_nccl), or with fewer than 2 sm_90 GPUs.
FP4MOE_PARALLEL_GPU_TIMEOUT: seconds both workers get together (default 180).
"""

import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the 2-GPU ParallelMoE test needs it")

import fp4moe
import seeding


def _skip_reason():
    if fp4moe._torch_op is None:
        return f"fp4moe runs without torch here: {fp4moe.torch_unavailable_reason}"
    if not fp4moe.has_cuda:
        return "this fp4moe build has no CUDA support (fp4moe.has_cuda is False)"
    if not fp4moe.has_nccl:
        return "this fp4moe build has no NCCL (fp4moe.has_nccl is False): ParallelMoE cannot run"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    n = torch.cuda.device_count()
    if n < 2:
        return f"needs 2 CUDA GPUs, torch sees {n}: the 2-GPU ParallelMoE test is skipped"
    n = fp4moe.cuda_device_count()
    if n < 2:
        return f"needs 2 CUDA GPUs, fp4moe sees {n}"
    for d in (0, 1):
        major, minor = torch.cuda.get_device_capability(d)
        if (major, minor) != (9, 0):
            return f"fp4moe's kernels are built for sm_90a (Hopper); device {d} is sm_{major}{minor}"
    return None


_reason = _skip_reason()
if _reason is not None:
    pytest.skip(_reason, allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "parallel_gpu_worker.py")


def _load_worker():
    spec = importlib.util.spec_from_file_location("parallel_gpu_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()
CASES = worker.build_cases()

WORLD = 2
#: vs the single-GPU layer (tests/test_parallel_gpu.cpp kGpuParallelTolerance).
REL_L2_TOLERANCE = 1e-2
#: The least normalized L2 distance between the w4a4 shared-scale and plain single-GPU references
#: (~0.15 on the CPU reference with these random weights): 5x the tolerance.
REFERENCES_APART = 5e-2
TIMEOUT_S = float(os.environ.get("FP4MOE_PARALLEL_GPU_TIMEOUT", "180"))
#: How long one rank may run on after the other exited (its layers' deadline is 30 s per case).
PEER_GRACE_S = worker.LAYER_TIMEOUT_S + 15.0
# Launcher variables that would outrank or redirect the torchrun ones the workers get.
_DROP_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_", "GROUP_", "ROLE_")
_DROP = {"NCCL_COMM_ID", "FP4MOE_RENDEZVOUS_PORT"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank: int, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES) and k not in _DROP}
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(WORLD),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NCCL_NVLS_ENABLE="0",
        PYTHONUNBUFFERED="1",
        # This run's seed, so that both workers draw the same fresh inputs (seeding.py).
        FP4MOE_TEST_SEED=str(seeding.BASE_SEED),
    )
    return env


def _tail(path: str, n: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        return f"<{path}: {e}>"
    return text[-n:]


def run_workers(worker_path: str, out_dir: str, timeout_s: float, extra_args=()) -> dict:
    """Starts the 2 ranks and waits for both: together at most timeout_s, and once one has exited at
    most PEER_GRACE_S more for the other (a rank left alone fails every collective at its deadline).
    A worker still running then dumps its Python stacks to its stderr (SIGUSR1, faulthandler) and is
    killed. Returns per rank its exit code, stderr/stdout tails and the JSON it wrote (None if none)."""
    port = free_port()
    procs, logs = [], []
    timed_out = False
    start = time.monotonic()
    try:
        for r in range(WORLD):
            err = os.path.join(out_dir, f"rank{r}.stderr")
            out = os.path.join(out_dir, f"rank{r}.stdout")
            logs.append((out, err))
            with open(out, "wb") as fo, open(err, "wb") as fe:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-X", "faulthandler", worker_path, "--out", out_dir, *extra_args],
                        env=worker_env(r, port),
                        cwd=out_dir,
                        stdin=subprocess.DEVNULL,
                        stdout=fo,
                        stderr=fe,
                    )
                )
        deadline = start + timeout_s
        first_exit = None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if first_exit is None and any(p.poll() is not None for p in procs):
                first_exit = now
            if now >= deadline or (first_exit is not None and now >= first_exit + PEER_GRACE_S):
                timed_out = True
                break
            time.sleep(0.1)
    finally:
        hung = [p for p in procs if p.poll() is None]
        for p in hung:
            try:
                p.send_signal(signal.SIGUSR1)
            except OSError:
                pass
        if hung:
            time.sleep(2.0)
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
    ranks = []
    for r, p in enumerate(procs):
        path = os.path.join(out_dir, f"rank{r}.json")
        try:
            with open(path) as f:
                result = json.load(f)
        except (OSError, ValueError):
            result = None
        ranks.append({"rc": p.returncode, "stdout": _tail(logs[r][0]), "stderr": _tail(logs[r][1]), "result": result})
    return {
        "ranks": ranks,
        "timed_out": timed_out,
        "timeout_s": timeout_s,
        "elapsed_s": time.monotonic() - start,
        "port": port,
    }


def _describe_run(run: dict, tail: int = 4000) -> str:
    lines = [f"workers ran {run['elapsed_s']:.1f} s"]
    if run["timed_out"]:
        lines[0] += (
            f" and were killed (timeout {run['timeout_s']:.0f} s, or {PEER_GRACE_S:.0f} s after the first exited;"
            " Python stacks dumped to stderr)"
        )
    for r, info in enumerate(run["ranks"]):
        lines.append(f"--- rank {r}: exit code {info['rc']}; stderr tail:\n{info['stderr'][-tail:]}")
        if info["stdout"].strip():
            lines.append(f"--- rank {r} stdout tail:\n{info['stdout'][-tail:]}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("parallel_gpu"))
    result = run_workers(WORKER, out_dir, TIMEOUT_S)
    print(f"\n2-GPU ParallelMoE workers: {result['elapsed_s']:.1f} s in all (results in {out_dir})")
    rank0 = result["ranks"][0]["result"] or {}
    for cid, c in rank0.get("cases", {}).items():
        print(f"  {c['elapsed_s']:6.2f} s  {cid}")
    return result


def test_workers_ran_every_case(run):
    """Both ranks started (launch_info() as torchrun sets it), ran every case and exited cleanly."""
    problems = []
    for r, info in enumerate(run["ranks"]):
        res = info["result"]
        if res is None:
            problems.append(f"rank {r} wrote no results")
            continue
        if res["setup"]["error"]:
            problems.append(f"rank {r} set-up failed: {res['setup']['error']['traceback']}")
        for c in res["setup"]["checks"]:
            if not c["ok"]:
                problems.append(f"rank {r} set-up check '{c['name']}' failed: {c['detail']}")
        if not res["finished"]:
            problems.append(f"rank {r} did not finish ({len(res['cases'])} of {len(CASES)} cases reported)")
        if info["rc"] != 0:
            problems.append(f"rank {r} exited with {info['rc']}")
    assert not problems, "\n".join(problems) + "\n" + _describe_run(run)


def _rank_result(run: dict, r: int, case_id: str) -> dict:
    info = run["ranks"][r]
    res = info["result"]
    if res is None or case_id not in res.get("cases", {}):
        pytest.fail(
            f"rank {r} reported nothing for {case_id} (test_workers_ran_every_case says why)\n"
            + _describe_run(run, tail=1500)
        )
    return res["cases"][case_id]


def _single_gpu_bitwise(case: dict) -> bool:
    """Bit-identical to the single GPU where one rank alone computes each token: top-1 with EP."""
    return case["top_k"] == 1 and case["config"][2] > 1


def _judge(case: dict, c: dict) -> list:
    """The failures of one comparison record (see the module docstring for the rules)."""
    what = f"{c['kind']}: {c['what']}"
    if c["shape"] != c["want_shape"] or c["dtype"] != "bfloat16":
        return [f"{what}: got {c['dtype']} {c['shape']}, want bfloat16 {c['want_shape']}"]
    stats = f"rel L2 {c['rel_l2']:.3g}, max abs diff {c['max_abs']:.3g}, {c['bits_diff']} elements differ in bits"
    if not c["finite"]:
        return [f"{what}: the output has NaN/Inf (the poison was not overwritten, or the layer produced it)"]
    errors = []
    if not c["norm"] > 0:
        errors.append(f"{what}: the output is all zeros (norm {c['norm']})")
    if c["kind"] == "apart":
        if not (math.isfinite(c["rel_l2"]) and c["rel_l2"] >= REFERENCES_APART):
            errors.append(f"{what}: {stats}: the references are not >= {REFERENCES_APART} apart")
    elif c["kind"] == "single_gpu" and not _single_gpu_bitwise(case):
        if not (math.isfinite(c["rel_l2"]) and c["rel_l2"] <= REL_L2_TOLERANCE):
            errors.append(f"{what}: {stats} > tolerance {REL_L2_TOLERANCE}")
    elif not c["bits_equal"]:
        why = "top-1 with EP" if c["kind"] == "single_gpu" else "must be bit-identical"
        errors.append(f"{what}: not bit-identical ({why}): {stats}")
    return errors


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_parallel_moe_case(run, case):
    failures = []
    for r in range(WORLD):
        c = _rank_result(run, r, case["id"])
        prefix = f"rank {r} (dp_rank {c['dp_rank']}, {c['num_tokens']} tokens)"
        for chk in c["checks"]:
            if not chk["ok"]:
                failures.append(f"{prefix}: check '{chk['name']}' failed: {chk['detail']}")
        for comp in c["comparisons"]:
            failures += [f"{prefix}: {e}" for e in _judge(case, comp)]
        if c["error"]:
            failures.append(
                f"{prefix}: raised {c['error']['type']}: {c['error']['message']}\n{c['error']['traceback']}"
            )
        elif c["num_tokens"] > 0:
            kinds = {comp["kind"] for comp in c["comparisons"]}
            need = {"single_gpu", {"forward": "repeat", "padded": "padded", "graph": "graph"}[case["kind"]]}
            if case["mode"] == "w4a4":
                need.add("apart")
            if not need <= kinds:
                failures.append(f"{prefix}: comparisons {sorted(need - kinds)} missing (ran {sorted(kinds)})")
    if failures:
        # Everything measured, for the record: one line per comparison.
        detail = "\n".join(
            f"rank {r}: {json.dumps(comp)}"
            for r in range(WORLD)
            for comp in _rank_result(run, r, case["id"])["comparisons"]
        )
        pytest.fail(f"{case['id']}:\n" + "\n".join(failures) + f"\nmeasurements:\n{detail}")
