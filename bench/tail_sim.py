#!/usr/bin/env python3
"""Token tiles with and without tail tiles under uniform random routing (no GPU): for each case, the
tiles of the main tile size, how many of them tail tiles replace, and the share of useful MMA columns.
Each token picks top_k distinct experts uniformly at random. Usage: bench/tail_sim.py [--seeds N]"""
import argparse
import random

CASES = [  # name, tokens, experts, top_k, main tile tokens
    ("deepseek-r1", 4096, 256, 8, 128),
    ("deepseek-r1", 8192, 256, 8, 128),
    ("llama4-maverick", 16384, 128, 1, 128),
    ("gpt-oss-120b", 16384, 128, 4, 128),
    ("qwen3-30b-a3b", 16384, 128, 8, 128),
]
TAIL_ROWS = 32


def counts(rng, tokens, experts, top_k):
    c = [0] * experts
    for _ in range(tokens):
        for e in rng.sample(range(experts), top_k):
            c[e] += 1
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    n_seeds = ap.parse_args().seeds
    print("| case | T | seed | tiles | tails | tiles with tails | useful columns (without -> with) |")
    print("|---|---|---|---|---|---|---|")
    for name, tokens, experts, top_k, bn in CASES:
        for seed in range(n_seeds):
            c = counts(random.Random(seed), tokens, experts, top_k)
            tiles = sum((x + bn - 1) // bn for x in c)
            tails = sum(1 for x in c if x > bn and 0 < x % bn <= TAIL_ROWS)
            main_tiles = tiles - tails
            rows = sum(c)
            tail_rows = sum(x % bn for x in c if x > bn and 0 < x % bn <= TAIL_ROWS)
            print(f"| {name} | {tokens} | {seed} | {tiles} | {tails} | {main_tiles} | "
                  f"{rows / (tiles * bn):.3f} -> {(rows - tail_rows) / (main_tiles * bn):.3f} |")


if __name__ == "__main__":
    main()
