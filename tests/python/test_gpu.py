"""fp4moe with PyTorch: the custom op, torch.compile, and on a GPU the forward against a plain
PyTorch MoE on dequantized weights, CUDA-graph capture and stream semantics.

Without torch the whole module skips; without a usable GPU the GPU tests skip. Both say why (run
pytest with -rs to see it). Tests on CPU tensors need only torch.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the torch and GPU tests need it")

import fp4moe  # noqa: E402
import numpy_ref as ref  # noqa: E402
import seeding  # noqa: E402

if fp4moe._torch_op is None:
    pytest.skip(f"fp4moe runs without torch here: {fp4moe.torch_unavailable_reason}", allow_module_level=True)


def _gpu_skip_reason():
    if not fp4moe.has_cuda:
        return "this fp4moe build has no CUDA support"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if fp4moe.cuda_device_count() == 0:
        return "fp4moe sees no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"fp4moe's kernels are built for sm_90a (Hopper); device 0 is sm_{major}{minor}"
    return None


GPU_SKIP = _gpu_skip_reason()
requires_gpu = pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")

# fp4moe's GPU forward rounds the intermediate, the weighted expert outputs and the output to bf16
# (tests/moe_test_util.h: 8e-3 normalized against the fp64 reference, w4a16); the plain PyTorch MoE
# below has its own fp32 summation order and roundings, so the pair gets 1e-2.
TORCH_MOE_TOLERANCE = 1e-2
REFERENCE_TOLERANCE = {"w4a16": 8e-3, "w4a4": 3e-2}  # the C++ tests' table, same reasons

SCALED = [("qwen3-30b-a3b", 8), ("deepseek-r1", 16), ("gpt-oss-20b", 16), ("llama4-scout", 32)]


def scaled_problem(name, factor, max_tokens=256):
    p = fp4moe.preset(name).scaled(factor)
    p.max_tokens = max_tokens
    return p


def make_inputs(p, num_tokens, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seeding.seed(seed))  # fresh each run; `seed` keeps streams apart
    x = torch.randn(num_tokens, p.hidden_size, generator=g)
    logits = 2 * torch.randn(num_tokens, p.num_experts, generator=g)
    return x.to(device), logits.to(device)


# ---- PyTorch MoE on dequantized weights --------------------------------------------------------


_DEQUANTIZED = {}


def dequantized_weights(p, weights, device):
    """All experts' weights as fp32 tensors, decoded by numpy_ref (not by fp4moe); cached per problem
    and seed, as the parametrized tests reuse them."""
    key = (p.name, int(weights["w13"][0, 0, 0]), int(weights["w2"][-1, -1, -1]), device)
    if key not in _DEQUANTIZED:
        _DEQUANTIZED[key] = _dequantize_all(p, weights, device)
    return _DEQUANTIZED[key]


def _dequantize_all(p, weights, device):
    w13, w2 = [], []
    for e in range(weights["w13"].shape[0]):
        a, b = ref.dequantize_expert(weights, p, e)
        w13.append(torch.from_numpy(a.astype(np.float32)))
        w2.append(torch.from_numpy(b.astype(np.float32)))
    out = {"w13": torch.stack(w13).to(device), "w2": torch.stack(w2).to(device)}
    if p.has_bias:
        out["w13_bias"] = torch.from_numpy(weights["w13_bias"]).to(device)
        out["w2_bias"] = torch.from_numpy(weights["w2_bias"]).to(device)
    return out


def torch_activation(name, gate, up):
    if name == "swiglu":
        return torch.nn.functional.silu(gate) * up
    g = gate.clamp(max=7.0)
    return g * torch.sigmoid(1.702 * g) * (up.clamp(-7.0, 7.0) + 1.0)


def torch_moe(p, dq, x, topk_ids, topk_weights):
    """A plain PyTorch MoE: per expert, gather its tokens, two fp32 matmuls, scatter-add."""
    x = x.to(torch.bfloat16).float()
    T, H = x.shape
    I = p.intermediate_size
    out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    ids = topk_ids.long()
    for e in ids.unique().tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        w = topk_weights[tok, slot].unsqueeze(1)
        xin = x[tok]
        if p.apply_router_weight_on_input:
            xin = (xin * w).to(torch.bfloat16).float()
        acc = xin @ dq["w13"][e].T
        if p.has_bias:
            acc = acc + dq["w13_bias"][e]
        h = torch_activation(p.activation, acc[:, :I], acc[:, I:]).to(torch.bfloat16).float()
        y = h @ dq["w2"][e].T
        if p.has_bias:
            y = y + dq["w2_bias"][e]
        out.index_add_(0, tok, y if p.apply_router_weight_on_input else y * w)
    return out


def normalized_error(got, want):
    return ref.normalized_error(got.float().cpu().numpy(), want.float().cpu().numpy())


# ---- torch on the CPU ----------------------------------------------------------------------------


def test_custom_op_is_registered():
    assert fp4moe._torch_op is not None, fp4moe.torch_unavailable_reason
    assert hasattr(torch.ops.fp4moe, "moe_forward")


def test_cpu_tensors_run_the_reference():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 1, device="cpu")
    x, logits = make_inputs(p, 5)
    y = moe(x, logits)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (5, p.hidden_size)
    np.testing.assert_array_equal(y.numpy(), moe(x.numpy(), logits.numpy()))
    # bf16 tensors cross as bf16 (NumPy has no bf16): the same as float32 inputs rounded to bf16.
    yb = moe(x.to(torch.bfloat16), logits)
    np.testing.assert_array_equal(yb.numpy(), y.numpy())


def test_custom_op_opcheck():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 1, device="cpu")
    x, logits = make_inputs(p, 3)
    ids, w = fp4moe.route(logits, p)
    torch.library.opcheck(torch.ops.fp4moe.moe_forward.default, (moe._id, x, logits, None, None))
    torch.library.opcheck(torch.ops.fp4moe.moe_forward.default, (moe._id, x, None, ids, w))


def test_torch_compile_cpu():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 2, device="cpu")
    x, logits = make_inputs(p, 4)

    def block(x, logits):
        return moe(x * 2, logits).sum(dim=-1)

    # aot_eager: traces through the fake implementation without generating C++ code.
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, logits), block(x, logits), rtol=0, atol=0)


@pytest.mark.parametrize("name,factor", SCALED)
def test_torch_moe_helper_matches_the_reference(name, factor):
    # The PyTorch MoE the GPU is compared with, checked here on the CPU against fp4moe's reference:
    # fp32 weights and matmuls vs fp64 (~1e-7 relative), except where that moves a bf16 rounding of
    # the intermediate (2^-9 of one element, rare).
    p = scaled_problem(name, factor)
    weights = fp4moe.random_weights(p, 3)
    x, logits = make_inputs(p, 7)
    bias = weights.get("routing_bias")
    ids, w = fp4moe.route(logits, p, correction_bias=None if bias is None else torch.from_numpy(bias))
    got = torch_moe(p, dequantized_weights(p, weights, "cpu"), x, ids, w)
    want = fp4moe.MoE(p, weights)(x, logits)
    assert normalized_error(got, want) <= 2e-4


def test_codec_with_cpu_tensors():
    x = torch.randn(6, 64)
    packed, scales = fp4moe.quantize_nvfp4(x, 100.0, "encode")
    assert isinstance(packed, torch.Tensor) and packed.dtype == torch.uint8
    p_np, s_np = fp4moe.quantize_nvfp4(x.numpy(), 100.0, "encode")
    np.testing.assert_array_equal(packed.numpy(), p_np)
    np.testing.assert_array_equal(scales.numpy(), s_np)
    # bf16 input is the same as its float32 value.
    xb = x.to(torch.bfloat16)
    pb, sb = fp4moe.quantize_nvfp4(xb, 100.0, "encode")
    pf, sf = fp4moe.quantize_nvfp4(xb.float(), 100.0, "encode")
    assert torch.equal(pb, pf) and torch.equal(sb, sf)
    # float8 scales (as torch loads them from a checkpoint) are read as their bytes.
    out = fp4moe.dequantize_nvfp4(packed, scales.view(torch.float8_e4m3fn), 100.0, "encode")
    np.testing.assert_array_equal(out.numpy(), fp4moe.dequantize_nvfp4(p_np, s_np, 100.0, "encode"))


def test_errors_through_the_custom_op():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 1, device="cpu")
    logits = torch.zeros(3, p.num_experts)
    with pytest.raises(fp4moe.InvalidArgumentError, match="hidden_states has dtype float64") as e:
        moe(torch.zeros(3, p.hidden_size, dtype=torch.float64), logits)
    assert e.value.code == "invalid argument"
    with pytest.raises(fp4moe.InvalidArgumentError, match="hidden_states is not C-contiguous"):
        moe(torch.zeros(3, 2 * p.hidden_size)[:, ::2], logits)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"topk_ids has dtype int64; expected int32"):
        moe(
            torch.zeros(3, p.hidden_size),
            topk_ids=torch.zeros(3, p.top_k, dtype=torch.long),
            topk_weights=torch.ones(3, p.top_k),
        )


def test_weights_as_torch_tensors():
    p = scaled_problem("qwen3-30b-a3b", 8)
    w = fp4moe.random_weights(p, 5)
    x, logits = make_inputs(p, 3)
    want = fp4moe.MoE(p, w)(x.numpy(), logits.numpy())
    tw = {k: torch.from_numpy(v) for k, v in w.items()}
    tw["w13_scale"] = tw["w13_scale"].view(torch.float8_e4m3fn)
    tw["w13_scale_2"] = tw["w13_scale_2"].to(torch.float64)
    np.testing.assert_array_equal(fp4moe.MoE(p, tw)(x.numpy(), logits.numpy()), want)
    # compressed-tensors' encode-convention scale given as a tensor: 1/x, as a tensor again.
    ct = dict(tw, w2_weight_global_scale=1.0 / tw.pop("w2_scale_2"))
    g = fp4moe.MoE(p, ct)(x.numpy(), logits.numpy())
    assert ref.normalized_error(g, want) < 1e-6


# ---- GPU -----------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("name,factor", SCALED)
@pytest.mark.parametrize("num_tokens", [1, 7, 127])
@pytest.mark.parametrize("path", ["auto", "simt"])
def test_gpu_forward_matches_torch_moe(name, factor, num_tokens, path):
    torch.backends.cuda.matmul.allow_tf32 = False
    p = scaled_problem(name, factor)
    weights = fp4moe.random_weights(p, 3)
    moe = fp4moe.MoE(p, weights, device="cuda", path=path)
    assert moe.kernel_info(num_tokens)["path"] == ("sm90" if path == "auto" else "simt")
    assert moe.workspace_bytes > 0
    x, logits = make_inputs(p, num_tokens, seed=num_tokens, device="cuda")
    x = x.to(torch.bfloat16)
    y = moe(x, logits)
    assert y.dtype == torch.bfloat16 and y.device == x.device and y.shape == (num_tokens, p.hidden_size)
    bias = weights.get("routing_bias")
    ids, w = fp4moe.route(logits, p, correction_bias=None if bias is None else torch.from_numpy(bias).cuda())
    want = torch_moe(p, dequantized_weights(p, weights, "cuda"), x, ids, w)
    assert torch.linalg.norm(y.float()) > 0
    assert normalized_error(y, want) <= TORCH_MOE_TOLERANCE
    # Against the C++ reference on the same weights (the CPU layer).
    cpu = fp4moe.MoE(p, weights, device="cpu")(x.float().cpu().numpy(), logits.cpu().numpy())
    assert normalized_error(y, torch.from_numpy(cpu)) <= REFERENCE_TOLERANCE[p.mode]
    # Precomputed routing gives the same bits.
    assert torch.equal(moe(x, topk_ids=ids, topk_weights=w), y)


@requires_gpu
def test_gpu_w4a4_against_reference():
    p = scaled_problem("qwen3-30b-a3b", 8).replace(mode="w4a4")
    weights = fp4moe.random_weights(p, 4)
    x, logits = make_inputs(p, 33, device="cuda")
    y = fp4moe.MoE(p, weights, device="cuda")(x.to(torch.bfloat16), logits)
    cpu = fp4moe.MoE(p, weights, device="cpu")(x.cpu().numpy(), logits.cpu().numpy())
    assert normalized_error(y, torch.from_numpy(cpu)) <= REFERENCE_TOLERANCE["w4a4"]


@requires_gpu
def test_gpu_split_k_against_reference():
    # Llama-4-Scout, one token: both GEMMs have fewer tiles than SMs, so split_k splits them.
    p = scaled_problem("llama4-scout", 4)
    weights = fp4moe.random_weights(p, 6)
    x, logits = make_inputs(p, 1, device="cuda")
    moe = fp4moe.MoE(p, weights, device="cuda", split_k=True)
    y = moe(x.to(torch.bfloat16), logits)
    again = moe(x.to(torch.bfloat16), logits)
    cpu = fp4moe.MoE(p, weights, device="cpu")(x.cpu().numpy(), logits.cpu().numpy())
    assert normalized_error(y, torch.from_numpy(cpu)) <= REFERENCE_TOLERANCE["w4a16"]
    assert torch.equal(y, again)


@requires_gpu
def test_gpu_max_sms_gives_the_same_bits():
    # The GEMMs on at most 3 SMs (several rounds of tiles each): the bits of all SMs.
    p = scaled_problem("deepseek-r1", 16)
    x, logits = make_inputs(p, 40, device="cuda")
    x = x.to(torch.bfloat16)
    a = fp4moe.MoE.dummy(p, 5, device="cuda")(x, logits)
    b = fp4moe.MoE.dummy(p, 5, device="cuda", max_sms=3)(x, logits)
    assert torch.equal(a, b)
    with pytest.raises(fp4moe.InvalidArgumentError, match="max_sms = -2 must be >= 0"):
        fp4moe.MoE.dummy(p, 5, device="cuda", max_sms=-2)


@requires_gpu
def test_gpu_tokens_routed_here_reaches_the_config_choice():
    # DeepSeek-R1's expert shard 0 of 8 at T=256: T * K / E = 8 rows per local expert (the decode's
    # BN16); after an all-to-all a token has a local id, 8 / P = 13 rows (P = 1 - C(224, 8) / C(256, 8)
    # = 0.66; BN32). Speed only: the same bits. (About half of these random tokens have no local id,
    # against the flag's premise; the layer's output for them is zero either way.)
    p = scaled_problem("deepseek-r1", 16)
    plain = fp4moe.MoE.dummy(p, 3, device="cuda", ep_rank=0, ep_size=8)
    routed = fp4moe.MoE.dummy(p, 3, device="cuda", ep_rank=0, ep_size=8, tokens_routed_here=True)
    assert plain.kernel_info(256)["gemm1"] != routed.kernel_info(256)["gemm1"]
    x, logits = make_inputs(p, 256, device="cuda")
    x = x.to(torch.bfloat16)
    a = plain(x, logits)
    assert a.float().norm() > 0
    assert torch.equal(a, routed(x, logits))


@requires_gpu
def test_gpu_dummy_weights_equal_random_weights():
    p = scaled_problem("deepseek-r1", 16)
    x, logits = make_inputs(p, 9, device="cuda")
    x = x.to(torch.bfloat16)
    a = fp4moe.MoE.dummy(p, 7, device="cuda")(x, logits)
    b = fp4moe.MoE(p, fp4moe.random_weights(p, 7), device="cuda")(x, logits)
    assert torch.equal(a, b)
    # Weights handed over as CUDA tensors are copied to the host and repacked the same way.
    tw = {k: torch.from_numpy(v).cuda() for k, v in fp4moe.random_weights(p, 7).items()}
    tw["w13_scale_2"] = tw["w13_scale_2"].double()  # converted to float32 on its device
    moe = fp4moe.MoE(p, tw)
    assert moe.device == "cuda:0"
    assert torch.equal(moe(x, logits), a)


@requires_gpu
def test_gpu_layer_from_checkpoint(tmp_path):
    p = fp4moe.Problem(hidden_size=256, intermediate_size=128, num_experts=8, top_k=2, renormalize=True)
    weights = fp4moe.random_weights(p, 12)
    ref.write_qwen3_checkpoint(str(tmp_path), p, [weights])
    x, logits = make_inputs(p, 6, device="cuda")
    x = x.to(torch.bfloat16)
    moe = fp4moe.MoE.from_checkpoint(str(tmp_path), 0, device="cuda", max_tokens=64)
    assert torch.equal(moe(x, logits), fp4moe.MoE(p.replace(max_tokens=64), weights, device="cuda")(x, logits))


@requires_gpu
def test_gpu_zero_tokens_and_bf16_logits():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 1, device="cuda")
    x, logits = make_inputs(p, 0, device="cuda")
    assert moe(x.to(torch.bfloat16), logits).shape == (0, p.hidden_size)
    x, logits = make_inputs(p, 5, device="cuda")
    x = x.to(torch.bfloat16)
    lb = logits.to(torch.bfloat16)
    assert torch.equal(moe(x, lb), moe(x, lb.float()))


@requires_gpu
def test_cuda_graph_capture():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 3, device="cuda")
    x, logits = make_inputs(p, 16, seed=1, device="cuda")
    x = x.to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch recommends
        moe(x, logits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = moe(x, logits)
    for seed in (2, 3):
        nx, nl = make_inputs(p, 16, seed=seed, device="cuda")
        x.copy_(nx.to(torch.bfloat16))
        logits.copy_(nl)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, moe(x, logits))
        assert torch.linalg.norm(y.float()) > 0


class _OtherGpuStream:
    """A stream object whose handle is this GPU's current stream but which says another device."""

    def __init__(self, device=None, device_id=None):
        self.cuda_stream = torch.cuda.current_stream().cuda_stream
        if device is not None:
            self.device = device
        if device_id is not None:
            self.device_id = device_id

    def __repr__(self):
        return "<other GPU's stream>"


_ALLOCATOR_SCRIPT = r'''
import hashlib, sys, torch, fp4moe
p = fp4moe.preset("qwen3-30b-a3b").scaled(8)
p.max_tokens = 64
moe = fp4moe.MoE.dummy(p, 5, device="cuda")
g = torch.Generator().manual_seed(7)
x = torch.randn(33, p.hidden_size, generator=g).to(torch.bfloat16).cuda()
logits = torch.randn(33, p.num_experts, generator=g).cuda()
y = moe(x, logits)
torch.cuda.synchronize()
print(torch.cuda.get_allocator_backend(), float(torch.linalg.norm(y.float())),
      hashlib.sha256(y.view(torch.int16).cpu().numpy().tobytes()).hexdigest())
'''


@requires_gpu
def test_gpu_forward_takes_memory_from_every_torch_allocator():
    """The forward's pointer checks accept what PyTorch's allocators hand out: cudaMalloc blocks,
    expandable segments (virtual memory mapped with cuMemMap) and cudaMallocAsync pools, with the
    same bits from each (one process per setting: the allocator is chosen at CUDA start-up)."""
    import os
    import subprocess
    import sys

    results = {}
    for conf in ("", "expandable_segments:True", "backend:cudaMallocAsync"):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        run = subprocess.run([sys.executable, "-c", _ALLOCATOR_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, f"PYTORCH_CUDA_ALLOC_CONF={conf!r}: {run.stderr[-2000:]}"
        backend, norm, digest = run.stdout.split()[-3:]
        assert backend == ("cudaMallocAsync" if "cudaMallocAsync" in conf else "native"), (conf, backend)
        assert float(norm) > 0, conf
        results[conf] = digest
    assert len(set(results.values())) == 1, results


@requires_gpu
def test_torch_compile_gpu():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 4, device="cuda")

    def block(x, logits):
        return x + moe(x, logits)

    compiled = torch.compile(block, fullgraph=True)
    graphed = torch.compile(block, mode="reduce-overhead", fullgraph=True)  # CUDA graphs (cudagraph trees)
    for seed in range(3):
        x, logits = make_inputs(p, 8, seed=seed, device="cuda")
        x = x.to(torch.bfloat16)
        want = block(x, logits)
        # Inductor may fuse the bf16 add differently; the MoE output itself is not recomputed.
        torch.testing.assert_close(compiled(x, logits), want)
        torch.testing.assert_close(graphed(x, logits).clone(), want)


@requires_gpu
def test_current_stream_is_honoured():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 5, device="cuda")
    x_new, logits = make_inputs(p, 64, seed=8, device="cuda")
    x_new = x_new.to(torch.bfloat16)
    want = moe(x_new, logits)
    torch.cuda.synchronize()
    # On a non-blocking side stream: a long sleep, then the input is written, then the forward. A
    # forward on any other stream would read the input before the write lands.
    x = torch.zeros_like(x_new)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.copy_(x_new)
        y = moe(x, logits)
        packed, scales = fp4moe.quantize_nvfp4(x, 1.0, "encode")
    side.synchronize()
    assert torch.equal(y, want)
    want_packed, _ = fp4moe.quantize_nvfp4(x_new, 1.0, "encode")
    assert torch.equal(packed, want_packed)
    # An explicit stream argument (with out=) runs there too, whatever the current stream is.
    x.zero_()
    out = torch.empty_like(want)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.copy_(x_new)
    moe.forward(x, logits, out=out, stream=side)
    moe.forward(x, logits, out=out, stream=side.cuda_stream)
    side.synchronize()
    assert torch.equal(out, want)


@requires_gpu
def test_gpu_codec_and_routing_match_cpu():
    x = torch.randn(130, 256) * 3
    gs = fp4moe.global_scale_from_amax(x.abs().max().item(), "encode")
    for recipe, convention, scale in (("kernel", "encode", gs), ("modelopt", "decode", 1.0 / gs)):
        for layout in ("linear", "swizzled"):
            pc, sc = fp4moe.quantize_nvfp4(x.numpy(), scale, convention, recipe=recipe, layout=layout)
            pg, sg = fp4moe.quantize_nvfp4(x.cuda(), scale, convention, recipe=recipe, layout=layout)
            np.testing.assert_array_equal(pg.cpu().numpy(), pc)
            np.testing.assert_array_equal(sg.cpu().numpy(), sc)
            dg = fp4moe.dequantize_nvfp4(pg, sg, scale, convention, layout=layout)
            dc = fp4moe.dequantize_nvfp4(pc, sc, scale, convention, layout=layout)
            np.testing.assert_array_equal(dg.cpu().numpy(), dc)
    xb = x.to(torch.bfloat16).cuda()
    pb, sb = fp4moe.quantize_nvfp4(xb, gs, "encode")
    pf, sf = fp4moe.quantize_nvfp4(xb.float().cpu().numpy(), gs, "encode")
    np.testing.assert_array_equal(pb.cpu().numpy(), pf)
    np.testing.assert_array_equal(sb.cpu().numpy(), sf)
    pm, sm = fp4moe.quantize_mxfp4(x.cuda())
    np.testing.assert_array_equal(pm.cpu().numpy(), fp4moe.quantize_mxfp4(x.numpy())[0])
    np.testing.assert_array_equal(
        fp4moe.dequantize_mxfp4(pm, sm).cpu().numpy(), fp4moe.dequantize_mxfp4(pm.cpu().numpy(), sm.cpu().numpy())
    )
    lin = fp4moe.quantize_nvfp4(x.numpy(), gs, "encode")[1]
    swz = fp4moe.swizzle_scales(torch.from_numpy(lin).cuda())
    np.testing.assert_array_equal(swz.cpu().numpy(), fp4moe.swizzle_scales(lin))
    np.testing.assert_array_equal(fp4moe.unswizzle_scales(swz, 130, 16).cpu().numpy(), lin)
    for name in ("qwen3-30b-a3b", "deepseek-r1", "gpt-oss-120b", "llama4-maverick"):
        p = fp4moe.preset(name)
        logits = torch.randn(77, p.num_experts)
        bias = torch.randn(p.num_experts) * 0.1 if p.routing_method == "deepseek_v3" else None
        ic, wc = fp4moe.route(logits.numpy(), p, correction_bias=None if bias is None else bias.numpy())
        ig, wg = fp4moe.route(logits.cuda(), p, correction_bias=None if bias is None else bias.cuda())
        np.testing.assert_array_equal(ig.cpu().numpy(), ic)
        np.testing.assert_array_equal(wg.cpu().numpy(), wc)


@requires_gpu
def test_gpu_errors():
    p = scaled_problem("qwen3-30b-a3b", 8)
    moe = fp4moe.MoE.dummy(p, 1, device="cuda")
    x, logits = make_inputs(p, 4, device="cuda")
    xb = x.to(torch.bfloat16)
    cases = [
        (lambda: moe(x, logits), "hidden_states has dtype float32; expected bfloat16"),
        (lambda: moe(xb.cpu(), logits.cpu()), "hidden_states is on cpu but this MoE lives on cuda:0"),
        (lambda: moe(xb, logits.cpu()), "router_logits is on cpu but hidden_states is on cuda:0"),
        (lambda: moe(xb.t(), logits), "hidden_states has shape"),
        (
            lambda: moe(torch.zeros(4, 2 * p.hidden_size, dtype=torch.bfloat16, device="cuda")[:, ::2], logits),
            "hidden_states is not C-contiguous",
        ),
        (
            lambda: moe(
                torch.zeros(4 * p.hidden_size + 1, dtype=torch.bfloat16, device="cuda")[1:].view(4, -1), logits
            ),
            "is not 16-byte aligned",
        ),
        (
            lambda: moe(
                torch.zeros(300, p.hidden_size, dtype=torch.bfloat16, device="cuda"),
                torch.zeros(300, p.num_experts, device="cuda"),
            ),
            r"num_tokens = 300 must be in \[0, max_tokens = 256\]",
        ),
        (
            lambda: moe.forward(xb, logits, out=torch.empty(4, p.hidden_size, device="cuda")),
            "out has dtype float32; expected bfloat16",
        ),
        (lambda: fp4moe.MoE.dummy(p, 1, device="cuda", path="warp"), "kernel path = 'warp' is not one of"),
        (lambda: fp4moe.MoE.dummy(p, 1, device=f"cuda:{torch.cuda.device_count()}"), "is not a visible CUDA device"),
        (lambda: fp4moe.quantize_nvfp4(x, 1.0, "encode", stream="s"), "stream = 's' is not a CUDA stream handle"),
        # A stream object of another GPU (a stand-in: the handle is this GPU's, the object says
        # another device, as a torch or CuPy stream of that GPU would) is refused by name.
        (
            lambda: moe.forward(xb, logits, out=torch.empty_like(xb), stream=_OtherGpuStream(torch.device("cuda", 7))),
            r"is a stream of cuda:7; the arrays are on cuda:0",
        ),
        (
            lambda: fp4moe.quantize_nvfp4(x, 1.0, "encode", stream=_OtherGpuStream(device_id=5)),
            r"is a stream of cuda:5; the arrays are on cuda:0",
        ),
    ]
    for call, message in cases:
        with pytest.raises(fp4moe.InvalidArgumentError, match=message):
            call()
    cpu_moe = fp4moe.MoE.dummy(p, 1, device="cpu")
    with pytest.raises(fp4moe.InvalidArgumentError, match="hidden_states is on cuda:0 but this MoE lives on cpu"):
        cpu_moe(xb, logits)
    # Out-of-range precomputed ids are skipped on the device and reported afterwards.
    ids = torch.full((4, p.top_k), p.num_experts, dtype=torch.int32, device="cuda")
    moe(xb, topk_ids=ids, topk_weights=torch.ones(4, p.top_k, device="cuda"))
    with pytest.raises(fp4moe.InvalidArgumentError, match="routed expert ids were outside"):
        moe.check_device_errors()
