#!/usr/bin/env python3
"""One table from an fp4moe-bench JSON and a bench/peers_torch.py JSON of the same run (markdown)."""
import json
import sys


def main(ours_path, peers_path):
    ours = json.load(open(ours_path))
    peers = {r["T"]: r for r in json.load(open(peers_path))["rows"]} if peers_path else {}
    print(f"{ours['preset']} ({ours['mode']}, routing {ours.get('routing', 'model')}), {ours['gpu']}, "
          f"commit {ours['commit']}, {ours['date']}; copy {ours['ceilings']['copy_TBps']:.2f} TB/s, "
          f"bf16 mm {ours['ceilings']['bf16_mm_TFLOPs']:.0f} TFLOP/s\n")
    print("| T | experts | fp4moe graph ms | floor ms | x floor | TB/s | TFLOP/s | torch bf16 ms | torch fp8 ms |"
          " vs bf16 | vs fp8 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ours["rows"]:
        p = peers.get(r["T"], {})
        b, f = p.get("bf16_layer_ms"), p.get("fp8_layer_ms")
        fmt = lambda v: f"{v:.3f}" if v else "n/a"
        sp = lambda v: f"{v / r['graph_ms']:.2f}x" if v else "n/a"
        print(f"| {r['T']} | {r['active_experts']} | {r['graph_ms']:.3f} | {r['floor_ms']:.3f} | "
              f"{r['ratio_to_floor']:.2f} | {r['TBps']:.2f} | {r['TFLOPs']:.0f} | {fmt(b)} | {fmt(f)} | {sp(b)} | {sp(f)} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
