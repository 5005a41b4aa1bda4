#!/usr/bin/env python3
"""One table from an fp4moe-bench JSON and a bench/peers_torch.py JSON of the same run (markdown)."""
import json
import sys


def main(ours_path, peers_path):
    ours = json.load(open(ours_path))
    peers_file = json.load(open(peers_path)) if peers_path else {}
    peers = {r["T"]: r for r in peers_file.get("rows", [])}
    # peers_torch.py without --routing-dir drew its own routing: no peer timed fp4moe's
    own_draw = peers_file.get("routing", "").startswith("random (own draw)")
    bf16 = ours["ceilings"]["bf16_mm_TFLOPs"]
    # results from 2026-11-30 (session 8) on: sustained, with the cold burst beside it
    burst = ours["ceilings"].get("bf16_mm_burst_TFLOPs")
    burst = f" sustained ({burst:.0f} in a burst from idle)" if burst else " (a burst from idle)"
    print(f"{ours['preset']} ({ours['mode']}, routing {ours.get('routing', 'model')}), {ours['gpu']}, "
          f"commit {ours['commit']}, {ours['date']}; copy {ours['ceilings']['copy_TBps']:.2f} TB/s, "
          f"bf16 mm {bf16:.0f} TFLOP/s{burst}\n")
    # The peers' GEMMs-only times (the two grouped GEMMs alone: peers_torch.py's docstring), in
    # peer files from session 37 on; "vs" columns are the peer's time over fp4moe's (above 1x:
    # fp4moe is faster).
    gemms = any("fp8_gemms_ms" in p for p in peers.values())
    head = ("| T | experts | fp4moe graph ms | floor ms | x floor | TB/s | TFLOP/s | of bf16 rate | torch bf16 ms |"
            " torch fp8 ms | vs bf16 | vs fp8 |")
    if gemms:
        head += " bf16 GEMMs only ms | fp8 GEMMs only ms | vs fp8 GEMMs |"
    # vLLM's Marlin and Humming MoE GEMMs alone (peers_torch.py --marlin-lib / --humming, from
    # session 38 on), triton_kernels' layer and its GEMMs alone (--triton, from session 39 on)
    extra = [(peer, what, label) for peer, what, label in
             (("marlin", "gemms", "Marlin GEMMs"), ("humming", "gemms", "Humming GEMMs"),
              ("triton", "layer", "triton_kernels layer"), ("triton", "gemms", "triton_kernels GEMMs"))
             if any(f"{peer}_{what}_ms" in p for p in peers.values())]
    for _, what, label in extra:
        head += f" {label}{' only' if what == 'gemms' else ''} ms | vs {label} |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    unpaired_seen = False
    for r in ours["rows"]:
        p = peers.get(r["T"], {})
        b, f = p.get("bf16_layer_ms"), p.get("fp8_layer_ms")
        fmt = lambda v: f"{v:.3f}" if v else "n/a"
        sp = lambda v: f"{v / r['graph_ms']:.2f}x" if v else "n/a"
        # The torch peers time input set 0 alone; fp4moe's median set may touch other experts
        # (fp4moe-bench JSON from session 43 on lists each set's, `set_experts`).
        sets = r.get("set_experts", [])
        set0 = own_draw or (len(sets) > 1 and sets[0] != r["active_experts"])
        unpaired_seen |= set0 and bool(p)
        torch_sp = lambda v: sp(v) + (" (other sets)" if set0 and v else "")
        # fp4moe's own check: false only where --check ran and failed (null without --check since
        # session 45, true in older files without --check)
        ours_flag = " (check failed)" if r.get("check_pass") is False else ""
        line = (f"| {r['T']} | {r['active_experts']} | {r['graph_ms']:.3f}{ours_flag} | {r['floor_ms']:.3f} | "
                f"{r['ratio_to_floor']:.2f} | {r['TBps']:.2f} | {r['TFLOPs']:.0f} | {r['TFLOPs'] / bf16:.0%} | "
                f"{fmt(b)} | {fmt(f)} | {torch_sp(b)} | {torch_sp(f)} |")
        if gemms:
            bg, fg = p.get("bf16_gemms_ms"), p.get("fp8_gemms_ms")
            line += f" {fmt(bg)} | {fmt(fg)} | {torch_sp(fg)} |"
        for peer, what, _ in extra:
            ms = p.get(f"{peer}_{what}_ms")
            flag = "" if p.get(f"{peer}_check", "passed") == "passed" or not ms else " (check failed)"
            # A peer that rotated through routing sets of its own (peer files before session 43, or
            # a routing dump of set 0 alone) timed other routings than fp4moe's median.
            unpaired = bool(ms) and (own_draw or (p.get(f"{peer}_routing_sets", 1) > 1 and
                                                  p.get(f"{peer}_routing_sets_from") != "fp4moe-bench"))
            unpaired_seen |= unpaired
            line += f" {fmt(ms)}{flag} | {sp(ms)}{flag}{' (other sets)' if unpaired else ''} |"
        print(line)
    if unpaired_seen:
        print("\n(other sets): the peer timed other routings than fp4moe-bench's median (the torch peers"
              " time input set 0 alone; the others rotated through sets drawn apart, or drew their own);"
              " the ratio is not a paired comparison.")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
