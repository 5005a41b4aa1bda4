#!/usr/bin/env python3
"""Static instruction count of the sm90 kernels' consumer K loop, per 64-wide K chunk.

Decode is issue-bound (docs/perf-notes.md): each SASS instruction of the loop that streams a weight
unit through the register decode costs throughput, so this count is a cheap proxy to check a change
against before GPU time. Usage:

    scripts/sass-kloop.py                # compiles src/gemm/sm90/sm90_gemm{1,2}.cu (nvcc) and counts
    scripts/sass-kloop.py a.cubin ...    # counts these

SASS_KLOOP_TOP=N lists the N most frequent opcodes of each loop (default 8).

Needs cuobjdump: the CUDA toolkit's, or CUOBJDUMP=... (the GPU image has one; on a machine without,
`pip install triton` carries one under triton/backends/nvidia/bin).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cuobjdump():
    exe = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not exe:
        sys.exit("sass-kloop: no cuobjdump (set CUOBJDUMP; see the header)")
    return exe


def functions(cubin):
    out = subprocess.run([cuobjdump(), "-sass", cubin], capture_output=True, text=True, check=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return funcs


def k_loops(ins):
    """The K loops: the innermost loop around the first wgmma (the nearest backward branch after
    it), then the same from the first wgmma past that loop, and so on (a kernel over canonical K
    ranges has two: whole ranges, then the last one)."""
    loops, start = [], 0
    while True:
        first = next((a for a, t in ins if a >= start and "HGMMA" in t), None)
        if first is None:
            return loops
        best = None
        for a, t in ins:
            m = re.search(r"BRA (0x[0-9a-f]+)", t)
            if m and a > first and int(m.group(1), 16) <= first and (best is None or a < best[1]):
                best = (int(m.group(1), 16), a)
        if best is None:
            return loops
        # (only innermost loops: past the first, the nearest backward branch after a wgmma can close
        # a loop around whole tiles, whose body holds the K loops' own backward branches)
        nested = any(best[0] <= int(m.group(1), 16) < a < best[1]
                     for a, t in ins for m in [re.search(r"BRA (0x[0-9a-f]+)", t)] if m)
        if not nested:
            loops.append([t for a, t in ins if best[0] <= a <= best[1]])
        start = best[1] + 1


def report(label, body):
    """One K loop's line: instructions per K chunk (or per loop, for two wgmma shapes) and opcodes."""
    mmas = sum("HGMMA" in t for t in body)
    # A loop may hold more than one wgmma shape behind a branch (BN16: m64n8k16 for tiles of
    # at most 8 tokens, m64n16k16 otherwise): then the count covers both paths and there is
    # no per-chunk figure (compare such loops by their totals).
    shapes = {}
    for t in body:
        sm = re.search(r"HGMMA\.(\d+x\d+x\d+)", t)
        if sm:
            shapes[sm.group(1)] = shapes.get(sm.group(1), 0) + 1
    ops = {}
    for t in body:
        op = (t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0]
        ops[op] = ops.get(op, 0) + 1
    most = sorted(ops.items(), key=lambda kv: -kv[1])[: int(os.environ.get("SASS_KLOOP_TOP", "8"))]
    top = " ".join(f"{k}:{v}" for k, v in most)
    if len(shapes) > 1:
        kinds = " ".join(f"{k}:{v}" for k, v in sorted(shapes.items()))
        print(f"{label}: {len(body)} in the loop, both paths ({mmas} wgmma: {kinds})  {top}")
    else:
        print(f"{label}: {len(body) * 4 / mmas:.0f} per K chunk ({len(body)} in the loop, {mmas} wgmma)  {top}")



def main(cubins):
    for cubin in cubins:
        for name, ins in functions(cubin).items():
            # moe_gemm_sm90_kernel<Sm90Traits<...>, kDirect, kRanged>: the traits, then " direct" /
            # " ranged" for kDirect / kRanged (each K loop of a kernel on a line of its own)
            m = re.search(r"Sm90TraitsI(.*?)EEELb([01])ELb([01])E", name)
            label = m.group(1).replace("ELi", ",").replace("Li", "").replace("ELb", ",b") if m else name
            if m and m.group(2) == "1":
                label += " direct"
            if m and m.group(3) == "1":
                label += " ranged"
            loops = k_loops(ins)
            if not loops:
                print(f"{label}: no K loop found")
            for i, body in enumerate(loops):
                report(label + (f" (loop {i + 1})" if len(loops) > 1 else ""), body)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1:])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            outs = []
            for tu in ("sm90_gemm1", "sm90_gemm2"):
                out = os.path.join(tmp, tu + ".cubin")
                cutlass = os.environ.get("FP4MOE_CUTLASS_DIR", os.path.join(ROOT, ".deps", "cutlass")) + "/include"
                subprocess.run([os.environ.get("NVCC", "nvcc"), "-O3", "-DNDEBUG", "-DFP4MOE_HAS_CUDA=1",
                                "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr", "-std=c++20",
                                "-I" + os.path.join(ROOT, "include"), "-I" + ROOT, "-isystem=" + cutlass, "-cubin",
                                "-o", out, os.path.join(ROOT, "src", "gemm", "sm90", tu + ".cu")], check=True)
                outs.append(out)
            main(outs)
