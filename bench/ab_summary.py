#!/usr/bin/env python3
"""A/B table from fp4moe-bench JSON files of two builds run alternately on one GPU (scripts/gpu-ab.sh).

Usage: bench/ab_summary.py DIR    (DIR holds <label>_<preset>_<rep>.json, label "base" or "head")

Per preset and token count: the median graph-replay ms of each build over its repetitions, the
change of head against base, and whether the repetitions overlap (two H200s differ by up to 6%, and
one GPU's repetitions by 1-3%: a change inside that spread is noise, not a result).
"""
import glob
import json
import os
import re
import statistics
import sys


def load(directory):
    runs = {}  # (label, preset) -> {T: [graph_ms, ...]}
    meta = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        m = re.match(r"(base|head)_(.+)_(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        label, preset = m.group(1), m.group(2)
        d = json.load(open(path))
        meta.setdefault(label, set()).add(d.get("commit", "?"))
        rows = runs.setdefault((label, preset), {})
        for r in d["rows"]:
            rows.setdefault(r["T"], []).append(r["graph_ms"])
    return runs, meta


def main(directory):
    runs, meta = load(directory)
    presets = sorted({p for (_, p) in runs})
    if not presets or "base" not in meta or "head" not in meta:
        sys.exit(f"ab_summary: no base_*/head_* JSON pairs in {directory}")
    commits = lambda label: "/".join(sorted(meta[label]))
    print(f"base {commits('base')} vs head {commits('head')}: median graph-replay ms over the repetitions\n")
    print("| preset | T | base ms | head ms | change | spread base / head |")
    print("|---|---|---|---|---|---|")
    for preset in presets:
        base, head = runs.get(("base", preset), {}), runs.get(("head", preset), {})
        for T in sorted(set(base) & set(head)):
            b, h = statistics.median(base[T]), statistics.median(head[T])
            spread = lambda v: f"{100 * (max(v) - min(v)) / statistics.median(v):.1f}%"
            print(f"| {preset} | {T} | {b:.4f} | {h:.4f} | {100 * (h / b - 1):+.1f}% | "
                  f"{spread(base[T])} / {spread(head[T])} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
