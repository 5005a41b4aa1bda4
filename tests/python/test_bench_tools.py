"""bench/ab_summary.py (the A/B table of scripts/gpu-ab.sh) on small fp4moe-bench-shaped JSON files."""

import json
import os
import subprocess
import sys

import pytest

import seeding  # (tests/python: the run's base seed, FP4MOE_TEST_SEED)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "ab_summary.py")


def write(path, commit, rows):
    with open(path, "w") as f:
        json.dump({"commit": commit, "rows": [{"T": t, "graph_ms": ms} for t, ms in rows]}, f)


def run(directory):
    return subprocess.run([sys.executable, SCRIPT, str(directory)], capture_output=True, text=True)


def test_medians_change_and_spread(tmp_path):
    write(tmp_path / "base_deepseek-r1_1.json", "aaa", [(1, 0.100), (128, 2.00)])
    write(tmp_path / "base_deepseek-r1_2.json", "aaa", [(1, 0.102), (128, 2.04)])
    write(tmp_path / "base_deepseek-r1_3.json", "aaa", [(1, 0.104), (128, 2.02)])
    write(tmp_path / "head_deepseek-r1_1.json", "bbb", [(1, 0.090), (128, 2.02)])
    write(tmp_path / "head_deepseek-r1_2.json", "bbb", [(1, 0.092), (128, 2.02)])
    write(tmp_path / "head_deepseek-r1_3.json", "bbb", [(1, 0.094), (128, 2.02)])
    (tmp_path / "notes.json").write_text("{}")  # not a base_/head_ file: ignored
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "base aaa vs head bbb" in r.stdout
    lines = {tuple(c.strip() for c in l.split("|")[1:3]): l for l in r.stdout.splitlines() if l.startswith("| deep")}
    # medians 0.102 -> 0.092: -9.8%; spread (max - min) / median: 3.9% / 4.3%
    assert "| 0.1020 | 0.0920 | -9.8% | 3.9% / 4.3% |" in lines[("deepseek-r1", "1")]
    assert "| 2.0200 | 2.0200 | +0.0% | 2.0% / 0.0% |" in lines[("deepseek-r1", "128")]


def test_only_token_counts_both_builds_ran(tmp_path):
    write(tmp_path / "base_qwen_1.json", "aaa", [(1, 0.03), (8, 0.08)])
    write(tmp_path / "head_qwen_1.json", "bbb", [(8, 0.07)])
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith("| qwen")]
    assert len(rows) == 1 and rows[0].startswith("| qwen | 8 |")


@pytest.mark.parametrize("files", [[], ["base_x_1.json"], ["head_x_1.json"]])
def test_refuses_without_both_builds(tmp_path, files):
    for name in files:
        write(tmp_path / name, "c", [(1, 1.0)])
    r = run(tmp_path)
    assert r.returncode != 0
    assert "no base_*/head_* JSON pairs" in r.stderr


# bench/routing_file.py reads what `fp4moe-bench --dump-routing` writes (tools/routing_file.h, whose
# writer test_api's RoutingFile tests check byte for byte against the same format).
sys.path.insert(0, os.path.join(ROOT, "bench"))
import routing_file  # noqa: E402

import numpy as np  # noqa: E402


def write_routing(path, header, ids, weights):
    with open(path, "wb") as f:
        f.write(header.encode("ascii"))
        f.write(np.asarray(ids, dtype="<i4").tobytes())
        f.write(np.asarray(weights, dtype="<f4").tobytes())


def test_routing_file_round_trip(tmp_path):
    p = routing_file.path(str(tmp_path), "deepseek-r1", 3)
    assert p == os.path.join(str(tmp_path), "deepseek-r1_T3.routing")
    write_routing(p, "fp4moe-routing v1 T=3 K=2 E=256\n", [5, 0, 255, 7, 1, 2], [0.25, 0.75, 1.0, 0.0, -0.5, 3.5])
    ids, w, E = routing_file.read(p)
    assert E == 256
    assert ids.dtype == np.int32 and ids.shape == (3, 2)
    assert ids.tolist() == [[5, 0], [255, 7], [1, 2]]
    assert w.dtype == np.float32 and w.tolist() == [[0.25, 0.75], [1.0, 0.0], [-0.5, 3.5]]


def test_routing_file_sets_in_index_order_up_to_the_first_gap(tmp_path):
    d = str(tmp_path)
    assert routing_file.set_paths(d, "llama4-scout", 8) == []
    assert routing_file.path(d, "llama4-scout", 8, 0) == routing_file.path(d, "llama4-scout", 8)
    assert routing_file.path(d, "llama4-scout", 8, 3) == os.path.join(d, "llama4-scout_T8_set3.routing")
    for s in (0, 1, 2, 4):  # set 3 missing: set 4 is not one of the sets
        write_routing(routing_file.path(d, "llama4-scout", 8, s), "fp4moe-routing v1 T=1 K=1 E=16\n", [s], [1.0])
    write_routing(routing_file.path(d, "llama4-scout", 16, 1), "fp4moe-routing v1 T=1 K=1 E=16\n", [9], [1.0])
    paths = routing_file.set_paths(d, "llama4-scout", 8)
    assert paths == [routing_file.path(d, "llama4-scout", 8, s) for s in (0, 1, 2)]
    assert [int(routing_file.read(p)[0][0, 0]) for p in paths] == [0, 1, 2]
    # a set file without set 0 is no set (a dump always writes set 0)
    assert routing_file.set_paths(d, "llama4-scout", 16) == []


def test_routing_file_zero_tokens(tmp_path):
    p = str(tmp_path / "z.routing")
    write_routing(p, "fp4moe-routing v1 T=0 K=8 E=256\n", [], [])
    ids, w, _ = routing_file.read(p)
    assert ids.shape == (0, 8) and w.shape == (0, 8)


@pytest.mark.parametrize("header,ids,weights,message", [
    ("fp4moe-routing v2 T=1 K=1 E=4\n", [1], [1.0], "not an fp4moe-routing v1 file"),
    ("fp4moe-routing v1 T=1 K=1\n", [1], [1.0], "not an fp4moe-routing v1 file"),
    ("fp4moe-routing v1 T=x K=1 E=4\n", [1], [1.0], "bad header"),
    ("fp4moe-routing v1 T=2 K=1 E=4\n", [1], [1.0], "need 16 bytes"),
    ("fp4moe-routing v1 T=1 K=1 E=4\n", [4], [1.0], "outside"),
    ("fp4moe-routing v1 T=1 K=1 E=4\n", [-1], [1.0], "outside"),
])
def test_routing_file_rejects_malformed_files(tmp_path, header, ids, weights, message):
    p = str(tmp_path / "bad.routing")
    write_routing(p, header, ids, weights)
    with pytest.raises(ValueError, match=message):
        routing_file.read(p)


# bench/compare.py: one table from an fp4moe-bench JSON and a peers_torch.py JSON of the same run.
COMPARE = os.path.join(ROOT, "bench", "compare.py")


def write_compare_inputs(tmp_path, peer_rows, **row_fields):
    ours = {"preset": "deepseek-r1", "mode": "w4a16", "routing": "random", "gpu": "NVIDIA H200", "commit": "abc",
            "date": "2026-12-03", "ceilings": {"copy_TBps": 4.2, "bf16_mm_TFLOPs": 650.0},
            "rows": [{"T": 8192, "active_experts": 256, "graph_ms": 10.0, "floor_ms": 8.0, "ratio_to_floor": 1.25,
                      "TBps": 0.6, "TFLOPs": 520.0, **row_fields}]}
    (tmp_path / "ours.json").write_text(json.dumps(ours))
    (tmp_path / "peers.json").write_text(json.dumps({"rows": peer_rows}))
    return subprocess.run([sys.executable, COMPARE, str(tmp_path / "ours.json"), str(tmp_path / "peers.json")],
                          capture_output=True, text=True)


def test_compare_with_the_gemms_only_peers(tmp_path):
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "bf16_gemms_ms": 12.5, "fp8_gemms_ms": 8.0}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert "fp8 GEMMs only ms" in lines[0]
    assert lines[1].count("---") == lines[0].count("|") - 1  # the separator matches the header
    # 80% of the bf16 rate; the fp8 GEMMs alone take 0.8x fp4moe's time: fp4moe is slower than them
    assert lines[2] == ("| 8192 | 256 | 10.000 | 8.000 | 1.25 | 0.60 | 520 | 80% | 20.000 | 19.000 | 2.00x | 1.90x |"
                        " 12.500 | 8.000 | 0.80x |")


@pytest.mark.parametrize("check_pass, flagged", [(False, True), (True, False), (None, False)])
def test_compare_flags_a_failed_fp4moe_check(tmp_path, check_pass, flagged):
    # (fp4moe-bench writes check_pass null without --check, false only where the check ran and failed)
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0}],
                             check_pass=check_pass, check_error=None)
    assert r.returncode == 0, r.stderr
    row = [l for l in r.stdout.splitlines() if l.startswith("| 8192 ")][0]
    assert ("| 10.000 (check failed) |" in row) == flagged
    assert ("| 10.000 |" in row) == (not flagged)


def test_compare_with_older_peer_files(tmp_path):
    # (peer files before session 37 have no GEMMs-only times: the table keeps its older columns)
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": None}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert "GEMMs only" not in lines[0]
    assert lines[2].endswith("| 20.000 | n/a | 2.00x | n/a |")


def test_compare_with_the_marlin_peer(tmp_path):
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "bf16_gemms_ms": 12.5, "fp8_gemms_ms": 8.0, "marlin_gemms_ms": 12.0}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[0].endswith("| Marlin GEMMs only ms | vs Marlin GEMMs |")
    assert lines[1].count("---") == lines[0].count("|") - 1
    assert lines[2].endswith("| 12.500 | 8.000 | 0.80x | 12.000 | 1.20x |")


# bench/peers_marlin.py: the block layout the Marlin peer hands vLLM's kernel (numpy, no GPU).
import peers_marlin  # noqa: E402  (bench/ is on the path: see routing_file above)


@pytest.mark.parametrize("tokens, top_k, experts, want", [
    (1, 8, 256, 8),      # DeepSeek-R1 decode: far under one row per expert
    (128, 8, 256, 8),    # 4 rows per expert: half of 8
    (128, 8, 128, 16),   # Qwen3: 8 rows per expert fill 8 exactly, so not under 90%
    (2048, 8, 256, 64),  # 64 rows per expert: every size filled, the largest
    (100000, 2, 8, 64),
])
def test_marlin_block_size(tokens, top_k, experts, want):
    assert peers_marlin.block_size_m(tokens, top_k, experts) == want


def test_marlin_block_size_refuses_empty_shapes():
    with pytest.raises(ValueError, match="tokens=0"):
        peers_marlin.block_size_m(0, 8, 256)


def test_marlin_align_small_case():
    # pairs 0..3 go to experts 1, 0, 1, 2; blocks of 2 rows; expert 3 has none
    sorted_ids, expert_ids, padded = peers_marlin.align_blocks(np.array([[1, 0], [1, 2]]), 4, 2)
    assert sorted_ids.tolist() == [1, 4, 0, 2, 3, 4, 4, 4]  # 4 = the sentinel (pairs)
    assert expert_ids.tolist() == [0, 1, 2, -1]
    assert padded.tolist() == [6]


def test_marlin_align_random_routing():
    rng = np.random.default_rng(seeding.seed(3901))
    tokens, top_k, experts = 300, 8, 64
    ids = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)])
    bs = peers_marlin.block_size_m(tokens, top_k, experts)
    sorted_ids, expert_ids, padded = peers_marlin.align_blocks(ids, experts, bs)
    pairs = tokens * top_k
    assert sorted_ids.size == pairs + experts * (bs - 1)
    used = int(padded[0])
    assert used % bs == 0 and np.all(sorted_ids[used:] == pairs) and np.all(expert_ids[used // bs:] == -1)
    valid = sorted_ids[sorted_ids < pairs]
    assert sorted(valid.tolist()) == list(range(pairs))  # every pair once
    flat = ids.reshape(-1)
    for b in range(used // bs):
        block = sorted_ids[b * bs:(b + 1) * bs]
        n = int(np.sum(block < pairs))
        assert n > 0 and np.all(block[:n] < pairs) and np.all(block[n:] == pairs)  # rows first, then padding
        assert np.all(flat[block[:n]] == expert_ids[b])
        assert np.all(np.diff(block[:n]) > 0)  # each expert's pairs in order
    assert used == sum((np.sum(flat == e) + bs - 1) // bs * bs for e in range(experts))


def test_marlin_align_refuses_bad_ids():
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        peers_marlin.align_blocks(np.array([[0, 4]]), 4, 8)
    with pytest.raises(ValueError, match="tokens x top_k"):
        peers_marlin.align_blocks(np.array([0, 1]), 4, 8)


def test_compare_marks_a_marlin_time_whose_check_failed(tmp_path):
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "marlin_gemms_ms": 12.0, "marlin_check": "failed: RuntimeError: x"}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[2].endswith("| 12.000 (check failed) | 1.20x (check failed) |")


def test_compare_with_the_marlin_and_humming_peers(tmp_path):
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "marlin_gemms_ms": 12.0, "humming_gemms_ms": 9.0,
                                         "humming_check": "passed"}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[0].endswith("| Marlin GEMMs only ms | vs Marlin GEMMs | Humming GEMMs only ms | vs Humming GEMMs |")
    assert lines[1].count("---") == lines[0].count("|") - 1
    assert lines[2].endswith("| 12.000 | 1.20x | 9.000 | 0.90x |")


def test_compare_marks_peers_timed_on_routing_sets_of_their_own(tmp_path):
    # (session 43: until then the extra peers rotated through sets drawn apart from fp4moe-bench's)
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "marlin_gemms_ms": 12.0, "marlin_routing_sets": 8,
                                         "humming_gemms_ms": 9.0, "humming_routing_sets": 8,
                                         "humming_routing_sets_from": "fp4moe-bench"}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[2].endswith("| 12.000 | 1.20x (other sets) | 9.000 | 0.90x |")
    assert "not a paired comparison" in r.stdout
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "marlin_gemms_ms": 12.0, "marlin_routing_sets": 1}])
    assert r.returncode == 0, r.stderr
    assert [l for l in r.stdout.splitlines() if l.startswith("|")][2].endswith("| 12.000 | 1.20x |")
    assert "paired" not in r.stdout


def test_compare_marks_the_torch_peers_where_set_0_is_not_the_median_set(tmp_path):
    ours = {"preset": "llama4-scout", "mode": "w4a16", "routing": "random", "gpu": "NVIDIA H100", "commit": "abc",
            "date": "2026-12-07", "ceilings": {"copy_TBps": 3.0, "bf16_mm_TFLOPs": 650.0},
            "rows": [{"T": 8, "active_experts": 7, "set_experts": [5, 6, 8, 7, 8, 6, 7, 8], "graph_ms": 0.2,
                      "floor_ms": 0.16, "ratio_to_floor": 1.25, "TBps": 2.4, "TFLOPs": 10.0},
                     {"T": 128, "active_experts": 16, "set_experts": [16, 16], "graph_ms": 0.4,
                      "floor_ms": 0.36, "ratio_to_floor": 1.11, "TBps": 2.7, "TFLOPs": 50.0}]}
    (tmp_path / "ours.json").write_text(json.dumps(ours))
    peers = {"routing": "fp4moe-bench's (--routing-dir)",
             "rows": [{"T": 8, "bf16_layer_ms": 0.4, "fp8_layer_ms": 0.3, "marlin_gemms_ms": 0.18,
                       "marlin_routing_sets": 8, "marlin_routing_sets_from": "fp4moe-bench"},
                      {"T": 128, "bf16_layer_ms": 0.8, "fp8_layer_ms": 0.6}]}
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    run = lambda: subprocess.run([sys.executable, COMPARE, str(tmp_path / "ours.json"), str(tmp_path / "peers.json")],
                                 capture_output=True, text=True)
    r = run()
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    # T=8: set 0 (5 experts) is not the median set (7): the torch ratios are marked, Marlin's is paired
    assert lines[2].endswith("| 0.400 | 0.300 | 2.00x (other sets) | 1.50x (other sets) | 0.180 | 0.90x |")
    assert lines[3].endswith("| 0.800 | 0.600 | 2.00x | 1.50x | n/a | n/a |")
    assert "not a paired comparison" in r.stdout
    # peers that drew their own routing: every ratio is marked
    peers["routing"] = "random (own draw)"
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    r = run()
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[2].endswith("| 0.180 | 0.90x (other sets) |")
    assert lines[3].endswith("| 0.800 | 0.600 | 2.00x (other sets) | 1.50x (other sets) | n/a | n/a |")


def test_compare_with_the_triton_kernels_peer(tmp_path):
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "triton_layer_ms": 11.0, "triton_gemms_ms": 10.5,
                                         "triton_check": "failed: RuntimeError: x"}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[0].endswith("| triton_kernels layer ms | vs triton_kernels layer |"
                             " triton_kernels GEMMs only ms | vs triton_kernels GEMMs |")
    assert lines[1].count("---") == lines[0].count("|") - 1
    assert lines[2].endswith("| 11.000 (check failed) | 1.10x (check failed) | 10.500 (check failed) | 1.05x (check failed) |")


def test_compare_with_a_passed_triton_check_and_rows_without_it(tmp_path):
    # (a row whose peer did not run shows n/a; the columns come from any row that has them)
    r = write_compare_inputs(tmp_path, [{"T": 8192, "bf16_layer_ms": 20.0, "fp8_layer_ms": 19.0,
                                         "triton_layer_ms": 11.0, "triton_gemms_ms": 10.5, "triton_check": "passed"},
                                        {"T": 16384, "bf16_layer_ms": 40.0, "fp8_layer_ms": 38.0}])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    assert lines[2].endswith("| 11.000 | 1.10x | 10.500 | 1.05x |")


def test_marlin_align_caps_the_buffer_with_fewer_pairs_than_experts():
    # vLLM sizes the rows at pairs * bs when there are fewer pairs than experts
    sorted_ids, expert_ids, padded = peers_marlin.align_blocks(np.array([[5, 2]]), 8, 8)
    assert sorted_ids.size == 16 and expert_ids.size == 2
    assert sorted_ids.tolist() == [1] + [2] * 7 + [0] + [2] * 7
    assert expert_ids.tolist() == [2, 5] and padded.tolist() == [16]


def test_peer_check_catches_a_moved_row_or_expert():
    # the peers' plumbing check (peers_marlin.check_gemm_pair) on outputs made by its own model, on
    # the CPU: it passes them, with the constants they were made with, and refuses two rows swapped,
    # one row of another expert's factor, and GEMM2 outputs without the router weights it was told of.
    # (Inputs of mean 1, and token 1's three times token 0's: row sums far from zero and from each other.
    # The check bounds each row by its sum of magnitudes, so one wrong row whose sum is near zero,
    # or near the right row's, can pass: see its docstring.)
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seeding.seed(3902))
    tokens, top_k, experts, hidden, inter = 5, 4, 32, 256, 128
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]).int()
    w = torch.softmax(torch.randn(tokens, top_k, generator=gen), 1)
    x = torch.randn(tokens, hidden, generator=gen) + 1
    x[1] = 3 * x[0]  # (3: no ratio of two experts' factors, powers of two, undoes it)
    x = x.bfloat16()
    a2 = torch.randn(tokens * top_k, inter, generator=gen).bfloat16()
    f = peers_marlin.expert_factors(experts, "cpu")[ids.reshape(-1).long()]
    h1 = (0.375 * f * x.float().sum(1).repeat_interleave(top_k))[:, None].expand(-1, 2 * inter).bfloat16()
    out = (1.5 * f * w.reshape(-1) * a2.float().sum(1))[:, None].expand(-1, hidden).bfloat16()
    c1, c2 = peers_marlin.check_gemm_pair("test", x, ids, top_k, h1, out, a2, router=w)
    assert abs(c1 - 0.375) < 0.375 * 1e-2 and abs(c2 - 1.5) < 1.5 * 1e-2
    swapped = h1.clone()
    swapped[[0, top_k + 1]] = swapped[[top_k + 1, 0]]  # rows of two tokens
    doubled = h1.clone()
    doubled[3] *= 2  # one pair scaled as another expert would be
    for bad in (swapped, doubled):
        with pytest.raises(RuntimeError, match="test GEMM1 check"):
            peers_marlin.check_gemm_pair("test", x, ids, top_k, bad, out, a2, router=w)
    with pytest.raises(RuntimeError, match="test GEMM2 check"):
        peers_marlin.check_gemm_pair("test", x, ids, top_k, h1, out, a2)


# bench/peers_triton.py: the triton_kernels peer's reference, check and router logits (CPU, where
# PyTorch is installed; the peer itself needs a GPU and triton_kernels).
import peers_triton  # noqa: E402


def slow_mxfp4_weight(codes, scales, n, k):
    """Element (n, k) of an MXFP4 matrix, one nibble at a time: codes [N, K/2] low nibble first,
    e8m0 scales [N, K/32]."""
    byte = int(codes[n, k // 2])
    nibble = byte & 0xF if k % 2 == 0 else byte >> 4
    magnitude = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)[nibble & 7]
    return (-magnitude if nibble & 8 else magnitude) * 2.0 ** (int(scales[n, k // 32]) - 127)


def test_triton_peer_dequant_and_reference_match_a_slow_model():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seeding.seed(3903))
    tokens, top_k, experts, hidden, inter = 3, 2, 3, 64, 32
    w13 = torch.randint(0, 256, (experts, 2 * inter, hidden // 2), generator=gen, dtype=torch.uint8)
    s13 = torch.randint(120, 128, (experts, 2 * inter, hidden // 32), generator=gen, dtype=torch.uint8)
    w2 = torch.randint(0, 256, (experts, hidden, inter // 2), generator=gen, dtype=torch.uint8)
    s2 = torch.randint(120, 128, (experts, hidden, inter // 32), generator=gen, dtype=torch.uint8)
    b13, b2 = torch.randn(experts, 2 * inter, generator=gen), torch.randn(experts, hidden, generator=gen)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    w = torch.softmax(torch.randn(tokens, top_k, generator=gen), 1)
    x = torch.randn(tokens, hidden, generator=gen).bfloat16()
    d = peers_triton.dequant_mxfp4(w13[1], s13[1])
    assert d.shape == (2 * inter, hidden)
    for n, k in ((0, 0), (0, 1), (5, 33), (2 * inter - 1, hidden - 1)):
        assert d[n, k].item() == slow_mxfp4_weight(w13[1], s13[1], n, k)
    got = peers_triton.reference(x, ids, w, w13, s13, b13, w2, s2, b2)
    for t in range(tokens):
        want = torch.zeros(hidden, dtype=torch.float64)
        for j in range(top_k):
            e = int(ids[t, j])
            W13 = torch.tensor([[slow_mxfp4_weight(w13[e], s13[e], n, k) for k in range(hidden)]
                                for n in range(2 * inter)], dtype=torch.float64)
            W2 = torch.tensor([[slow_mxfp4_weight(w2[e], s2[e], n, k) for k in range(inter)]
                               for n in range(hidden)], dtype=torch.float64)
            h = W13 @ x[t].double() + b13[e].double()
            gate, up = h[0::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)  # gate and up rows interleaved
            a = gate * torch.sigmoid(1.702 * gate) * (up + 1)
            want += float(w[t, j]) * (W2 @ a + b2[e].double())
        assert torch.allclose(got[t].double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_triton_peer_row_comparison_refuses_wrong_rows():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seeding.seed(3904))
    want = torch.randn(8, 64, generator=gen)
    err = peers_triton.compare_rows("test", want.bfloat16(), want)
    assert 0 < err < 4e-3  # bf16 rounding only
    swapped = want.clone()
    swapped[[0, 1]] = swapped[[1, 0]]
    with pytest.raises(RuntimeError, match="test check: relative error"):
        peers_triton.compare_rows("test", swapped, want)
    poisoned = want.clone()
    poisoned[3, 7] = float("nan")
    with pytest.raises(RuntimeError, match="not finite"):
        peers_triton.compare_rows("test", poisoned, want)
    with pytest.raises(RuntimeError, match="all zero"):
        peers_triton.compare_rows("test", want, torch.zeros_like(want))


def test_triton_peer_router_logits_give_the_routing():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seeding.seed(3905))
    tokens, top_k, experts = 6, 4, 32
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]).int()
    w = torch.softmax(torch.randn(tokens, top_k, generator=gen), 1)
    logits, sorted_ids = peers_triton.router_logits(ids, w, experts)
    assert sorted_ids.dtype == torch.int16
    assert torch.equal(sorted_ids.long(), ids.long().sort(dim=1).values)
    vals, idx = logits.topk(top_k, dim=1)  # top k, then a softmax over them (gpt-oss, sm_first off)
    assert torch.equal(idx.sort(dim=1).values, sorted_ids.long())
    probs = torch.softmax(vals, dim=1)
    for t in range(tokens):
        for j in range(top_k):
            want = w[t, (ids[t] == idx[t, j]).nonzero().item()]
            assert abs(probs[t, j].item() - want.item()) < 1e-6


def test_peers_fp8_weights_per_expert_match_the_whole_tensor_formula():
    # peers_torch.quant_weights quantizes an expert at a time (memory); the same bits as the formula
    # over the whole tensor it replaced
    torch = pytest.importorskip("torch")
    import peers_torch

    gen = torch.Generator().manual_seed(seeding.seed(3906))
    w = torch.randn(3, 64, 128, generator=gen).bfloat16()
    w[1, 5] = 0  # a row of zeros: scale 0, codes NaN either way
    q, s = peers_torch.quant_weights(w)
    s0 = w.abs().amax(dim=2).float() / 448.0
    q0 = (w.float() / s0[:, :, None]).to(torch.float8_e4m3fn)
    assert torch.equal(s, s0)
    assert torch.equal(q.view(torch.uint8), q0.view(torch.uint8))


def test_peers_json_written_whole_and_marked_incomplete(tmp_path):
    # peers_torch.write_json: rewritten after every token count (a CUDA fault ends the process), with
    # `complete` false until the last; no .part file left; peers left out are not in it
    pytest.importorskip("torch")
    import peers_torch

    path = str(tmp_path / "peers.json")
    meta = {"gpu": "test", "preset": "gpt-oss-20b"}
    peers_torch.write_json(path, meta, [{"T": 1}], {"marlin": None, "triton": {"kind": "mxfp4"}}, complete=False)
    d = json.load(open(path))
    assert d["complete"] is False and d["rows"] == [{"T": 1}] and d["triton"] == {"kind": "mxfp4"}
    assert "marlin" not in d and d["preset"] == "gpt-oss-20b" and d["tool"] == "bench/peers_torch.py"
    peers_torch.write_json(path, meta, [{"T": 1}, {"T": 8}], {}, complete=True)
    d = json.load(open(path))
    assert d["complete"] is True and [r["T"] for r in d["rows"]] == [1, 8]
    assert os.listdir(tmp_path) == ["peers.json"]


def test_peers_start_peer_reports_a_failure_and_keeps_going(capsys):
    # peers_torch.start_peer: a peer that cannot be made is recorded (info["error"], stderr), not raised
    pytest.importorskip("torch")
    import peers_torch

    def good(info):
        info["version"] = "1"
        return "peer"

    def bad(info):
        raise ValueError("no such kernel")

    assert peers_torch.start_peer("Good", {"kind": "x"}, good) == ("peer", {"kind": "x", "version": "1"})
    peer, info = peers_torch.start_peer("Bad", {"kind": "y"}, bad)
    assert peer is None and sorted(info) == ["error", "kind"] and info["kind"] == "y"
    # the message, then where it was raised (a bare assert has no message)
    assert info["error"].startswith("ValueError: no such kernel (at python/test_bench_tools.py:")
    assert info["error"].endswith(': raise ValueError("no such kernel"))')
    err = capsys.readouterr().err
    assert "Bad peer unavailable: ValueError: no such kernel" in err and "Traceback" in err


def test_peers_describe_names_where_a_bare_assert_failed(capsys):
    pytest.importorskip("torch")
    import peers_torch

    # (what a bare assert raises outside pytest's rewriting)
    try:
        raise AssertionError()
    except AssertionError as exc:
        raised = exc
    text = peers_torch.describe(raised)
    assert text.startswith("AssertionError (at python/test_bench_tools.py:")
    assert text.endswith(": raise AssertionError())")
    assert "Traceback" in capsys.readouterr().err
    assert peers_torch.describe(raised) == text and "Traceback" not in capsys.readouterr().err  # printed once


# bench/peers_humming.py: the weights it hands Humming (CPU; the peer itself needs a GPU and the
# humming-kernels package).
import peers_humming  # noqa: E402


def humming_weights(kind, experts):
    """A HummingPeer's weight helpers without Humming: only what _random and _uniform_tensor read."""
    torch = pytest.importorskip("torch")
    peer = object.__new__(peers_humming.HummingPeer)
    peer.torch, peer.E, peer.kind, peer.device = torch, experts, kind, "cpu"
    return torch, peer


def test_humming_refuses_an_unknown_weight_kind():
    with pytest.raises(ValueError, match="kind must be one of .*'nvfp4'.*got 'int4'"):
        peers_humming.HummingPeer(64, 32, 4, 2, None, "int4")


def test_humming_mxfp4_check_weights_scale_each_expert_by_its_factor():
    # check_plumbing's MXFP4 weights: every code 1.0 and every e8m0 block scale of expert e
    # 2^(e % 8) (byte 127 + e % 8), so that check_gemm_pair's factor is in every row
    experts = 11
    torch, peer = humming_weights("mxfp4", experts)
    shape = (experts, 96, 64 // 32)
    scales = peer._uniform_tensor("weight_scale", shape, torch.uint8)
    assert scales.shape == shape and scales.dtype == torch.uint8
    want = torch.tensor([127 + e % 8 for e in range(experts)], dtype=torch.uint8)
    assert torch.equal(scales, want[:, None, None].expand(shape))
    decoded = 2.0 ** (scales.float() - 127)  # e8m0
    assert torch.equal(decoded[:, 0, 0], peers_marlin.expert_factors(experts, "cpu"))
    codes = peer._uniform_tensor("weight", (experts, 96, 32), torch.uint8)
    assert bool((codes == 0x22).all())  # two e2m1 codes of 1.0 a byte


def test_humming_random_weights_draw_scales_in_range():
    # the timing's random weights: MXFP4 e8m0 scales from 2^-3 to 2^3 (never 0xFF, e8m0's NaN),
    # NVFP4 e4m3 scales from 2^-3 to 2^3 and any code byte
    torch, peer = humming_weights("mxfp4", 4)
    gen = torch.Generator().manual_seed(seeding.seed(4001))
    scales = peer._random("weight_scale", (4, 64, 90), torch.uint8, gen)
    assert int(scales.min()) == 124 and int(scales.max()) == 130
    codes = peer._random("weight", (4, 64, 1440), torch.uint8, gen)
    assert int(codes.min()) == 0 and int(codes.max()) == 255
    torch, peer = humming_weights("nvfp4", 4)
    e4m3 = peer._random("weight_scale", (4, 64, 180), torch.float8_e4m3fn, gen).float()
    assert float(e4m3.min()) >= 2.0**-3 and float(e4m3.max()) < 2.0**4 and float(e4m3.max()) >= 2.0**3


fake_humming_layers = []  # every FakeHummingLayer made, in order


class FakeHummingLayer:
    """Stands in for humming.layer.HummingLayer: records how HummingPeer builds and loads it, with
    the parameters of Humming's schemas for the kind asked (modelopt NVFP4, gpt_oss_mxfp4)."""

    def __init__(self, **kwargs):
        import torch

        self.kwargs, self.loaded, self.transformed = kwargs, None, False
        E, n, k = kwargs["num_experts"], kwargs["shape_n"], kwargs["shape_k"]
        if kwargs["weight_config"]["quant_method"] == "gpt_oss_mxfp4":
            self.params = {"weight": ((E, n, k // 2), torch.uint8), "weight_scale": ((E, n, k // 32), torch.uint8)}
        else:
            self.params = {"weight": ((E, n, k // 2), torch.uint8),
                           "weight_scale": ((E, n, k // 16), torch.float8_e4m3fn),
                           "weight_scale_2": ((E,), torch.float32)}
        fake_humming_layers.append(self)

    def to(self, device):
        self.device = device
        return self

    def named_parameters(self):
        import torch

        return [(name, torch.empty(shape, dtype=dtype)) for name, (shape, dtype) in self.params.items()]

    def load_from_tensors(self, tensors):
        self.loaded = tensors

    def transform(self):
        self.transformed = True


@pytest.mark.parametrize("kind", ["nvfp4", "mxfp4"])
def test_humming_layers_are_built_and_padded_as_vllm_builds_them(monkeypatch, kind):
    # HummingPeer's two layers (GEMM1 N = 2I, K = H; GEMM2 N = H, K = I) with the schema of the
    # kind, padded as vLLM pads its Humming MoE layers (N to 256, K to 128: session 40's run 1 failed
    # every gpt-oss call without it), loaded with a tensor of each parameter's shape and type
    torch = pytest.importorskip("torch")
    import types

    humming = types.ModuleType("humming")
    layer_module = types.ModuleType("humming.layer")
    tune_module = types.ModuleType("humming.tune")
    layer_module.HummingLayer = FakeHummingLayer
    tune_module.get_heuristics_config = lambda **kwargs: []
    for name, module in (("humming", humming), ("humming.layer", layer_module), ("humming.tune", tune_module)):
        monkeypatch.setitem(sys.modules, name, module)
    fake_humming_layers.clear()
    H, I, E = 2880, 2880, 4
    gen = torch.Generator().manual_seed(seeding.seed(4002))
    peer = peers_humming.HummingPeer(H, I, E, 2, gen, kind, device="cpu")
    assert [layer.kwargs["shape_n"] for layer in fake_humming_layers] == [2 * I, H]
    assert [layer.kwargs["shape_k"] for layer in fake_humming_layers] == [H, I]
    for layer in fake_humming_layers:
        assert layer.kwargs["pad_n_to_multiple"] == 256 and layer.kwargs["pad_k_to_multiple"] == 128
        assert layer.kwargs["weight_config"] == peers_humming.WEIGHT_CONFIGS[kind]
        assert layer.kwargs["num_experts"] == E and layer.kwargs["torch_dtype"] == torch.bfloat16
        assert layer.transformed and layer.device == "cpu"
        assert sorted(layer.loaded) == sorted(layer.params)
        for name, (shape, dtype) in layer.params.items():
            assert tuple(layer.loaded[name].shape) == shape and layer.loaded[name].dtype == dtype, name
    assert (peer.w13, peer.w2) == tuple(fake_humming_layers)
    scales = fake_humming_layers[0].loaded["weight_scale"]
    if kind == "mxfp4":  # e8m0 bytes of 2^-3 .. 2^3
        assert 124 <= int(scales.min()) and int(scales.max()) <= 130
    else:
        assert float(scales.float().min()) >= 2.0**-3


def test_humming_nvfp4_check_weights_put_the_factor_in_the_global_scale():
    # check_plumbing's NVFP4 weights: codes 1.0, block scales 1.0, each expert's global scale its
    # factor 2^(e % 8)
    experts = 10
    torch, peer = humming_weights("nvfp4", experts)
    assert bool((peer._uniform_tensor("weight", (experts, 8, 16), torch.uint8) == 0x22).all())
    block = peer._uniform_tensor("weight_scale", (experts, 8, 2), torch.float8_e4m3fn)
    assert block.dtype == torch.float8_e4m3fn and bool((block.float() == 1.0).all())
    glob = peer._uniform_tensor("weight_scale_2", (experts,), torch.float32)
    assert torch.equal(glob, peers_marlin.expert_factors(experts, "cpu"))


def test_peers_weight_kind_of_each_preset():
    pytest.importorskip("torch")
    import peers_torch

    assert [peers_torch.weight_kind(p) for p in ("gpt-oss-120b", "gpt-oss-20b")] == ["mxfp4", "mxfp4"]
    nvfp4 = [p for p in peers_torch.PRESETS if p not in ("gpt-oss-120b", "gpt-oss-20b")]
    assert nvfp4 and all(peers_torch.weight_kind(p) == "nvfp4" for p in nvfp4)
    assert set(peers_torch.WEIGHT_KIND_LABELS) == set(peers_humming.WEIGHT_CONFIGS)
