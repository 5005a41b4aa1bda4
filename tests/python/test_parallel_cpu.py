"""The parallel MoE layer from Python on CPU (runs in CI, NumPy only): fp4moe.parallel.run_local runs
every valid (dp, tp, ep) on 2 and 4 in-process ranks with every applicable strategy, and each rank's
output is checked against the single-rank CPU layer fp4moe.MoE(device='cpu') on that rank's tokens;
plus the config/strategy/launcher bindings and their errors, and the argument checks of the GPU class
ParallelMoE that run without a GPU (its NCCL forward needs one GPU per process and is not run here).

Tolerance: as tests/test_parallel.cpp, normalized L2 error <= 1e-5. The reference rounds the fp64 sum
over a token's experts to fp32 once; the parallel layer rounds each rank's partial sum to fp32 and
adds them in fp32, so the outputs differ by a few fp32 ulps. With top-1 routing and EP exactly one
rank contributes to each token, so those outputs must be bit-identical.

w4a4 and NVFP4-quantized dispatch (run_local's quantized_dispatch, C++ ParallelMoeOptions): where it
is on (by default for allgather-reducescatter; alltoall with 'on') the tokens are quantized once with
ONE input scale shared by all experts, the largest a13_scale_2, so the reference is the single-rank
layer whose weights have every a13_scale_2 replaced by that maximum (as examples/parallel_check_cpu.py
builds it). Where it is off (bf16 tokens) the reference is the plain single-rank layer, whose experts
quantize with their own scales. The random weights' a13_scale_2 differ between experts, so the two
references are far apart (checked: normalized L2 distance > 1e-2) and a wrong choice fails.
"""

import numpy as np
import pytest

import fp4moe
import seeding

TOLERANCE = 1e-5
SEED = 1234

# Scaled-down presets (small H and I so the fp64 reference runs in a fraction of a second per config).
CASES = [
    ("deepseek-r1", 14, "w4a16"),  # H 512, I 256, E 256, top-8, grouped sigmoid with correction bias
    ("qwen3-30b-a3b", 3, "w4a4"),  # H 768, I 256, E 128, top-8
    ("gpt-oss-20b", 12, "w4a16"),  # MXFP4, biases, E 32, top-4
    ("llama4-scout", 32, "w4a16"),  # top-1, router weight on the input
    ("llama4-scout", 32, "w4a4"),  # the same in w4a4: the sender weights the token before quantizing it
]
W4A4_CASES = [c for c in CASES if c[2] == "w4a4"]
#: The strategies that dispatch tokens, so the only ones NVFP4-quantized dispatch applies to.
DISPATCHING = ("allgather-reducescatter", "alltoall")
#: The least normalized L2 distance between the plain and the shared-scale w4a4 references (they are
#: ~0.15 apart with the random weights): far above TOLERANCE, so comparing with the wrong one fails.
REFERENCES_APART = 1e-2


def make_problem(name, factor, mode):
    p = fp4moe.preset(name).scaled(factor)
    p.mode = mode
    p.max_tokens = 8
    p.validate()
    return p


def rel_l2(got, want):
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want.astype(np.float64)), 1e-30))


def shared_scale_weights(weights):
    """The weights with every a13_scale_2 replaced by the largest: the single-rank layer of these is
    what the parallel layer computes with NVFP4-quantized dispatch (one shared input scale)."""
    a13 = np.asarray(weights["a13_scale_2"])
    return dict(weights, a13_scale_2=np.full_like(a13, a13.max()))


def quantizes(mode, strategy, quantized_dispatch):
    """Whether run_local dispatches NVFP4 tokens (ParallelMoeOptions::quantized_dispatch resolved):
    'auto' for w4a4 with allgather-reducescatter, 'on' (accepted only for w4a4 and a dispatching
    strategy), never 'off'."""
    if quantized_dispatch == "on":
        return True
    return quantized_dispatch == "auto" and mode == "w4a4" and strategy == "allgather-reducescatter"


# Tokens per DP group: awkward sizes, with empty groups (a rank with 0 tokens still takes part).
def tokens_of_group(dp_rank, dp):
    return 6 if dp == 1 else (5, 0, 3, 1)[dp_rank % 4]


class Case:
    """A problem, its single-rank CPU layer, and the inputs and reference outputs of each DP group:
    'ref' from the plain layer, and in w4a4 'ref_shared' from the shared-scale layer (weights with
    every a13_scale_2 replaced by the largest)."""

    def __init__(self, name, factor, mode):
        self.problem = make_problem(name, factor, mode)
        self.moe = fp4moe.MoE.dummy(self.problem, SEED, device="cpu")
        weights = fp4moe.random_weights(self.problem, SEED)
        self.routing_bias = weights.get("routing_bias")
        self.shared_moe = None
        if mode == "w4a4":
            a13 = weights["a13_scale_2"]
            assert a13.min() < a13.max(), "the test needs experts with different a13_scale_2"
            self.shared_moe = fp4moe.MoE(self.problem, shared_scale_weights(weights), device="cpu")
        self._groups = {}

    def groups(self, dp, world):
        key = (dp, world)
        if key not in self._groups:
            groups = []
            for d in range(dp):
                rng = np.random.default_rng(seeding.seed(world * 100 + d))
                T = tokens_of_group(d, dp)
                x = rng.standard_normal((T, self.problem.hidden_size)).astype(np.float32)
                logits = rng.standard_normal((T, self.problem.num_experts)).astype(np.float32)
                ids, weights = fp4moe.route(logits, self.problem, correction_bias=self.routing_bias)
                g = {"x": x, "logits": logits, "ids": ids, "weights": weights, "ref": self.moe(x, logits)}
                if self.shared_moe is not None:
                    g["ref_shared"] = self.shared_moe(x, logits)
                groups.append(g)
            if self.shared_moe is not None:
                # Over all the groups' tokens (one group's few tokens may all go to experts whose
                # a13_scale_2 is the largest, where both references agree exactly).
                shared = np.concatenate([g["ref_shared"] for g in groups])
                plain = np.concatenate([g["ref"] for g in groups])
                apart = rel_l2(shared, plain)
                assert apart > REFERENCES_APART, f"shared-scale and plain references only {apart:.3g} apart"
            self._groups[key] = groups
        return self._groups[key]

    def reference_key(self, strategy, quantized_dispatch="auto"):
        return "ref_shared" if quantizes(self.problem.mode, strategy, quantized_dispatch) else "ref"


_cases = {}


def get_case(name, factor, mode):
    key = (name, factor, mode)
    if key not in _cases:
        _cases[key] = Case(name, factor, mode)
    return _cases[key]


def run(case, config, strategy, groups, from_logits, weights=SEED, **options):
    kwargs = {"hidden_states": [g["x"] for g in groups]}
    if from_logits:
        kwargs["router_logits"] = [g["logits"] for g in groups]
    else:
        kwargs["topk_ids"] = [g["ids"] for g in groups]
        kwargs["topk_weights"] = [g["weights"] for g in groups]
    return fp4moe.parallel.run_local(case.problem, config, strategy, weights, timeout=30.0, **kwargs, **options)


def check_outputs(case, config, groups, outs, ref_key, what):
    """Each rank's output against its DP group's reference `ref_key`: finite, non-zero, normalized L2
    error <= TOLERANCE, bit-identical for top-1 with EP."""
    p = case.problem
    assert len(outs) == config.world_size, what
    for r, out in enumerate(outs):
        g = groups[fp4moe.rank_layout(config, r)["dp_rank"]]
        want = g[ref_key]
        assert out.dtype == np.float32 and out.shape == want.shape, what
        assert np.all(np.isfinite(out)), f"{what}: rank {r}"
        if out.shape[0] == 0:
            continue
        assert np.linalg.norm(out) > 0, f"{what}: rank {r}"
        err = rel_l2(out, want)
        assert err <= TOLERANCE, f"{what}: rank {r}: normalized L2 error {err:.3g} against {ref_key}"
        if p.top_k == 1 and config.ep > 1:
            np.testing.assert_array_equal(out, want, err_msg=f"{what}: rank {r} (top-1, EP) against {ref_key}")


@pytest.mark.parametrize("name,factor,mode", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
@pytest.mark.parametrize("world", [2, 4])
def test_every_config_and_strategy_matches_the_single_rank_moe(name, factor, mode, world):
    """The default options: the plain single-rank layer, except w4a4 with allgather-reducescatter,
    whose default NVFP4-quantized dispatch makes it the shared-scale layer."""
    case = get_case(name, factor, mode)
    p = case.problem
    configs = fp4moe.valid_parallel_configs(p, world)
    assert configs, f"no valid config for {world} ranks"
    num_runs = 0
    for config in configs:
        groups = case.groups(config.dp, world)
        strategies = fp4moe.applicable_strategies(config)
        assert strategies
        for strategy in strategies:
            what = f"{p.name} {p.mode} {config} {strategy}"
            outs = run(case, config, strategy, groups, from_logits=num_runs % 2 == 0)  # both routing inputs
            num_runs += 1
            check_outputs(case, config, groups, outs, case.reference_key(strategy), what)
    assert num_runs >= (5 if world == 2 else 8)


@pytest.mark.parametrize("name,factor,mode", W4A4_CASES, ids=[f"{c[0]}-{c[2]}" for c in W4A4_CASES])
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("quantized_dispatch", ["off", "on"])
def test_w4a4_quantized_dispatch_off_and_on(name, factor, mode, world, quantized_dispatch):
    """Every config and strategy that dispatches tokens, with the option given: 'off' (bf16 tokens)
    is the plain single-rank layer with the per-expert scales, allgather-reducescatter included;
    'on' is the shared-scale layer, alltoall included (where 'auto' leaves it off)."""
    case = get_case(name, factor, mode)
    p = case.problem
    ref_key = "ref_shared" if quantized_dispatch == "on" else "ref"
    seen = set()
    for config in fp4moe.valid_parallel_configs(p, world):
        groups = case.groups(config.dp, world)
        for strategy in fp4moe.applicable_strategies(config):
            if strategy not in DISPATCHING:
                continue
            what = f"{p.name} {p.mode} {config} {strategy} quantized_dispatch={quantized_dispatch}"
            outs = run(case, config, strategy, groups, from_logits=len(seen) % 2 == 0,
                       quantized_dispatch=quantized_dispatch)
            seen.add(strategy)
            check_outputs(case, config, groups, outs, ref_key, what)
    assert seen == set(DISPATCHING)


def test_auto_quantized_dispatch_resolves_per_mode_and_strategy():
    """'auto' is bit for bit 'on' for w4a4 allgather-reducescatter, 'off' for w4a4 alltoall and for
    w4a16 (where 'on' is refused)."""
    config = (2, 1, 2)
    for case_args, strategy, same_as in (
        (CASES[1], "allgather-reducescatter", "on"),
        (CASES[1], "alltoall", "off"),
        (CASES[0], "allgather-reducescatter", "off"),
        (CASES[0], "alltoall", "off"),
    ):
        case = get_case(*case_args)
        groups = case.groups(2, 2)
        auto = run(case, config, strategy, groups, from_logits=True)
        explicit = run(case, config, strategy, groups, from_logits=True, quantized_dispatch=same_as)
        for r in range(2):
            np.testing.assert_array_equal(auto[r], explicit[r], err_msg=f"{case.problem.mode} {strategy} rank {r}")


def test_quantized_dispatch_with_equal_input_scales_is_the_plain_layer():
    """With every a13_scale_2 the same, the shared scale is each expert's own: NVFP4 tokens give the
    plain w4a4 layer (allgather-reducescatter by default, alltoall when asked)."""
    case = get_case(*CASES[1])
    p = case.problem
    weights = shared_scale_weights(fp4moe.random_weights(p, SEED))
    moe = fp4moe.MoE(p, weights, device="cpu")
    groups = case.groups(2, 2)
    for strategy, option in (("allgather-reducescatter", "auto"), ("alltoall", "on"), ("alltoall", "off")):
        outs = run(case, (2, 1, 2), strategy, groups, from_logits=True, weights=weights,
                   quantized_dispatch=option)
        for r, out in enumerate(outs):
            g = groups[r]
            if len(g["x"]) == 0:
                continue
            err = rel_l2(out, moe(g["x"], g["logits"]))
            assert err <= TOLERANCE, f"{strategy} quantized_dispatch={option} rank {r}: {err:.3g}"


@pytest.mark.parametrize("world", [2, 4])
def test_padded_tokens_graph_mode_gives_the_same_bits(world):
    """The CUDA-graph mode (padded_tokens: fixed exchange sizes, filler rows) on CPU ranks: every
    config and strategy that has it returns exactly the unpadded outputs."""
    case = get_case("deepseek-r1", 14, "w4a16")
    p = case.problem
    num_runs = 0
    for config in fp4moe.valid_parallel_configs(p, world):
        groups = case.groups(config.dp, world)
        largest = max(len(g["x"]) for g in groups)
        for strategy in fp4moe.applicable_strategies(config):
            if strategy == "alltoall":
                continue
            kwargs = {"hidden_states": [g["x"] for g in groups], "router_logits": [g["logits"] for g in groups]}
            base = fp4moe.parallel.run_local(p, config, strategy, SEED, timeout=30.0, **kwargs)
            for padded in (largest, p.max_tokens):
                outs = fp4moe.parallel.run_local(p, config, strategy, SEED, timeout=30.0, padded_tokens=padded, **kwargs)
                num_runs += 1
                for r in range(world):
                    np.testing.assert_array_equal(outs[r], base[r], err_msg=f"{config} {strategy} {padded} rank {r}")
    assert num_runs >= 4


def test_padded_tokens_with_quantized_dispatch_gives_the_same_bits():
    """Graph mode with NVFP4 tokens (w4a4 allgather-reducescatter, the default): the filler records'
    zero codes and block scales expand to zeros; the real rows' outputs are exactly the unpadded
    ones, which are the shared-scale layer's."""
    case = get_case(*CASES[1])
    p = case.problem
    num_runs = 0
    for world in (2, 4):
        for config in fp4moe.valid_parallel_configs(p, world):
            if "allgather-reducescatter" not in fp4moe.applicable_strategies(config):
                continue
            groups = case.groups(config.dp, world)
            largest = max(len(g["x"]) for g in groups)
            kwargs = {"hidden_states": [g["x"] for g in groups], "router_logits": [g["logits"] for g in groups]}
            base = fp4moe.parallel.run_local(p, config, "allgather-reducescatter", SEED, timeout=30.0, **kwargs)
            check_outputs(case, config, groups, base, "ref_shared", f"{config} unpadded")
            outs = fp4moe.parallel.run_local(
                p, config, "allgather-reducescatter", SEED, timeout=30.0, padded_tokens=p.max_tokens, **kwargs
            )
            num_runs += 1
            for r in range(world):
                np.testing.assert_array_equal(outs[r], base[r], err_msg=f"{config} padded {p.max_tokens} rank {r}")
            assert largest < p.max_tokens  # the filler rows were there
    assert num_runs >= 4


def test_padded_tokens_errors():
    case = get_case("deepseek-r1", 14, "w4a16")
    p = case.problem
    groups = case.groups(2, 2)
    kwargs = {"hidden_states": [g["x"] for g in groups], "router_logits": [g["logits"] for g in groups]}
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"padded_tokens = 2 must be in \[num_tokens = 5"):
        fp4moe.parallel.run_local(p, (2, 1, 2), "allgather-reducescatter", SEED, padded_tokens=2, **kwargs)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"padded_tokens = -1 must be an int >= 0"):
        fp4moe.parallel.run_local(p, (2, 1, 2), "allgather-reducescatter", SEED, padded_tokens=-1, **kwargs)
    with pytest.raises(fp4moe.InvalidArgumentError, match="alltoall has no CUDA-graph mode"):
        fp4moe.parallel.run_local(p, (2, 1, 2), "alltoall", SEED, padded_tokens=8, **kwargs)


def test_expected_configs_and_strategies():
    p = get_case(*CASES[1]).problem
    names = [c.name for c in fp4moe.valid_parallel_configs(p, 2)]
    assert names == ["dp1tp2ep1", "dp1tp2ep2", "dp2tp1ep1", "dp2tp1ep2"]
    assert len(fp4moe.valid_parallel_configs(p, 4)) == 6
    assert len(fp4moe.valid_parallel_configs(p, 8)) == 8
    assert fp4moe.applicable_strategies((1, 1, 1)) == ["none"]
    assert fp4moe.applicable_strategies(fp4moe.ParallelConfig(1, 4, 4)) == ["tp-allreduce"]
    assert fp4moe.applicable_strategies({"dp": 4, "tp": 1, "ep": 1}) == ["allgather-reducescatter"]
    assert fp4moe.applicable_strategies((2, 2, 4)) == ["allgather-reducescatter", "alltoall"]
    assert fp4moe.parallel.STRATEGIES == ("none", "tp-allreduce", "allgather-reducescatter", "alltoall")


def test_parallel_config_is_dict_like():
    c = fp4moe.ParallelConfig(dp=2, tp=4, ep=8)
    assert (c.dp, c.tp, c.ep, c.world_size, c.name) == (2, 4, 8, 8, "dp2tp4ep8")
    assert c.to_dict() == {"dp": 2, "tp": 4, "ep": 8}
    assert c["tp"] == 4 and list(c.keys()) == ["dp", "tp", "ep"]
    assert c == fp4moe.ParallelConfig(2, 4, 8) and c != fp4moe.ParallelConfig(2, 4, 1)
    assert repr(c) == "ParallelConfig(dp=2, tp=4, ep=8)"
    assert fp4moe.ParallelConfig() == fp4moe.ParallelConfig(1, 1, 1)
    with pytest.raises(KeyError, match="no field 'pp'"):
        c["pp"]


def test_rank_layout():
    # World rank 5 of dp 2 x tp 4: DP group 1, TP rank 1 (as tests/test_parallel.cpp).
    l = fp4moe.rank_layout((2, 4, 1), 5)
    assert (l["dp_rank"], l["tp_rank"], l["moe_tp_rank"], l["moe_tp_size"], l["moe_ep_size"]) == (1, 1, 5, 8, 1)
    l = fp4moe.rank_layout(fp4moe.ParallelConfig(2, 4, 8), 5)
    assert (l["moe_ep_rank"], l["moe_ep_size"], l["moe_tp_size"]) == (5, 8, 1)


def test_launch_info():
    info = fp4moe.launch_info(
        {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node0",
         "MASTER_PORT": 29500}
    )
    assert info == {
        "launcher": "torchrun", "rank": 3, "world_size": 8, "local_rank": 1, "local_world_size": 2,
        "master_addr": "node0", "master_port": 29500, "nccl_comm_id": "",
    }
    info = fp4moe.launch_info(
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_PORT": "1234"}
    )
    assert (info["launcher"], info["rank"], info["master_addr"]) == ("mpirun", 1, "127.0.0.1")
    info = fp4moe.launch_info(
        {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "4(x2)",
         "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-08,11],cpu1", "SLURM_JOB_ID": "123456"}
    )
    assert (info["launcher"], info["rank"], info["local_world_size"], info["master_addr"]) == ("slurm", 5, 4, "gpu07")
    assert info["master_port"] == 20000 + 123456 % 20000
    assert fp4moe.launch_info({})["launcher"] == "none"


def test_launch_info_reads_the_process_environment(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29400")
    info = fp4moe.launch_info()
    assert (info["launcher"], info["rank"], info["world_size"], info["master_port"]) == ("torchrun", 1, 2, 29400)


def test_per_rank_inputs_and_weights_dict_agree_with_per_group_and_seed():
    case = get_case(*CASES[2])  # gpt-oss: MXFP4 weights with biases through the dict path
    p = case.problem
    config = fp4moe.ParallelConfig(2, 2, 4)
    groups = case.groups(2, 4)
    want = run(case, config, "alltoall", groups, from_logits=True)
    per_rank = [groups[r // 2] for r in range(4)]
    got = run(case, config, "alltoall", per_rank, from_logits=True, weights=fp4moe.random_weights(p, SEED))
    for r in range(4):
        np.testing.assert_array_equal(got[r], want[r])
    # Another seed is another layer.
    other = run(case, config, "alltoall", groups, from_logits=True, weights=SEED + 1)
    assert rel_l2(other[0], want[0]) > 1e-2


def test_default_strategy_is_the_first_applicable():
    case = get_case(*CASES[1])
    groups = case.groups(2, 2)
    xs, ls = [g["x"] for g in groups], [g["logits"] for g in groups]
    a = fp4moe.parallel.run_local(case.problem, (2, 1, 2), hidden_states=xs, router_logits=ls)  # seed 0
    b = fp4moe.parallel.run_local(case.problem, (2, 1, 2), "allgather-reducescatter", 0, hidden_states=xs,
                                  router_logits=ls)
    for r in range(2):
        np.testing.assert_array_equal(a[r], b[r])


# ---- Errors ----------------------------------------------------------------------------------------


def small():
    return get_case(*CASES[1]).problem  # H 768, I 256, E 128, top-8


def inputs(p, n, T=2, seed=0):
    rng = np.random.default_rng(seeding.seed(seed))
    xs = [rng.standard_normal((T, p.hidden_size)).astype(np.float32) for _ in range(n)]
    ls = [rng.standard_normal((T, p.num_experts)).astype(np.float32) for _ in range(n)]
    return xs, ls


@pytest.mark.parametrize(
    "config,strategy,message",
    [
        ((2, 2, 2), None, "ep = 2"),
        ((3, 1, 3), None, "num_experts = 128"),
        ((4, 4, 1), None, "intermediate_size = 256"),
        ((0, 1, 1), None, "dp = 0"),
        ((2, 1, 1), "all2all", "'all2all'"),
        ((2, 1, 1), "alltoall", "use allgather-reducescatter"),
        ((2, 1, 2), "tp-allreduce", "dp = 2"),
        ((1, 2, 1), "none", "none"),
    ],
)
def test_invalid_configs_and_strategies_name_the_bad_value(config, strategy, message):
    p = small()
    xs, ls = inputs(p, 2)
    with pytest.raises(fp4moe.InvalidArgumentError, match=message):
        fp4moe.parallel.run_local(p, config, strategy, hidden_states=xs, router_logits=ls)


@pytest.mark.parametrize(
    "mode,config,strategy,option,message",
    [
        ("w4a16", (2, 1, 2), "alltoall", "on", "quantized_dispatch = on needs mode w4a4.*mode = w4a16"),
        ("w4a16", (2, 1, 1), "allgather-reducescatter", "on", "quantized_dispatch = on needs mode w4a4"),
        ("w4a4", (1, 2, 2), "tp-allreduce", "on",
         "quantized_dispatch = on needs a strategy that dispatches tokens.*strategy tp-allreduce sends none"),
        ("w4a4", (1, 1, 1), "none", "on", "strategy none sends none"),
        ("w4a4", (2, 1, 2), "alltoall", "yes", "quantized_dispatch = 'yes' is not one of 'auto', 'off', 'on'"),
        ("w4a4", (2, 1, 2), "alltoall", "ON", "quantized_dispatch = 'ON' is not one of"),
        ("w4a4", (2, 1, 2), "alltoall", True, "quantized_dispatch = True is not one of"),
        ("w4a4", (2, 1, 2), "alltoall", None, "quantized_dispatch = None is not one of"),
    ],
)
def test_quantized_dispatch_errors_name_the_option(mode, config, strategy, option, message):
    p = get_case(*CASES[1]).problem.replace(mode=mode)
    dp = config[0]
    xs, ls = inputs(p, dp)
    with pytest.raises(fp4moe.InvalidArgumentError, match=message):
        fp4moe.parallel.run_local(p, config, strategy, hidden_states=xs, router_logits=ls,
                                  quantized_dispatch=option)


def test_quantized_dispatch_off_and_auto_are_accepted_everywhere():
    p = get_case(*CASES[1]).problem.replace(mode="w4a16")
    xs, ls = inputs(p, 2)
    for option in ("auto", "off"):
        fp4moe.parallel.run_local(p, (1, 2, 2), "tp-allreduce", hidden_states=xs[:1], router_logits=ls[:1],
                                  quantized_dispatch=option)
        fp4moe.parallel.run_local(p, (2, 1, 2), "alltoall", hidden_states=xs, router_logits=ls,
                                  quantized_dispatch=option)


def test_config_and_strategy_checks():
    p = small()
    fp4moe.ParallelConfig(2, 2, 4).validate(p)
    fp4moe.ParallelConfig(4, 1, 1).validate(p, 4)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"dp \* tp = 2 \* 1 = 2"):
        fp4moe.ParallelConfig(2, 1, 1).validate(p, 4)
    with pytest.raises(fp4moe.InvalidArgumentError, match="'all2all'"):
        fp4moe.ParallelConfig(2, 1, 2).check_strategy("all2all")
    with pytest.raises(fp4moe.InvalidArgumentError, match="use allgather-reducescatter"):
        fp4moe.ParallelConfig(2, 1, 1).check_strategy("alltoall")
    with pytest.raises(fp4moe.InvalidArgumentError, match="rank = 4 is not in"):
        fp4moe.rank_layout((2, 2, 1), 4)
    with pytest.raises(fp4moe.InvalidArgumentError, match="tp = 0"):
        fp4moe.rank_layout((2, 0, 1), 0)
    with pytest.raises(fp4moe.InvalidArgumentError, match="ep = 3 must be 1"):
        fp4moe.rank_layout((2, 2, 3), 0)
    with pytest.raises(fp4moe.InvalidArgumentError, match="world_size = 0"):
        fp4moe.valid_parallel_configs(p, 0)
    with pytest.raises(fp4moe.InvalidArgumentError, match="expected fp4moe.ParallelConfig"):
        fp4moe.applicable_strategies("dp2")
    with pytest.raises(fp4moe.InvalidArgumentError, match="unknown keys"):
        fp4moe.applicable_strategies({"dp": 2, "pp": 1})
    with pytest.raises(fp4moe.InvalidArgumentError, match="expected fp4moe.Problem"):
        fp4moe.valid_parallel_configs({"hidden_size": 8}, 2)
    # Sizes past the bound of ranks: refused before any int product wraps (2^16 x 2^16 was 0 ranks, and
    # valid_parallel_configs' loop divided by zero).
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"world_size = 2147483647 must be in \[1, 65536\]"):
        fp4moe.valid_parallel_configs(p, 2**31 - 1)
    assert fp4moe.ParallelConfig(2**16, 2**16, 1).world_size == 2**32
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"dp \* tp = 3 \* 1431655766 = 4294967298 exceeds"):
        fp4moe.ParallelConfig(3, 1431655766, 1).validate(p, 2)
    with pytest.raises(fp4moe.InvalidArgumentError, match="exceeds the 65536 ranks"):
        fp4moe.rank_layout((2**16, 2**16, 1), 0)


def test_launch_info_errors_name_the_variable():
    with pytest.raises(fp4moe.InvalidArgumentError, match="SLURM_TASKS_PER_NODE = '2\\(y3\\)'"):
        fp4moe.launch_info({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2(y3)"})
    with pytest.raises(fp4moe.InvalidArgumentError, match="MASTER_ADDR"):
        fp4moe.launch_info({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
                            "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_PORT": "1234"})
    with pytest.raises(fp4moe.InvalidArgumentError, match="RANK"):
        fp4moe.launch_info({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(fp4moe.InvalidArgumentError, match="expected a mapping"):
        fp4moe.launch_info(["RANK=0"])


def test_run_local_argument_errors():
    p = small()
    xs, ls = inputs(p, 2)
    rl = fp4moe.parallel.run_local
    cfg = (2, 1, 2)
    with pytest.raises(fp4moe.InvalidArgumentError, match="hidden_states has 3 entries"):
        rl(p, cfg, hidden_states=xs + xs[:1], router_logits=ls + ls[:1])
    with pytest.raises(fp4moe.InvalidArgumentError, match="router_logits has 1 entries"):
        rl(p, cfg, hidden_states=xs, router_logits=ls[:1])
    with pytest.raises(fp4moe.InvalidArgumentError, match="expected a list"):
        rl(p, cfg, hidden_states=xs[0], router_logits=ls)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"hidden_states\[1\] is a builtins.str, not an array"):
        rl(p, cfg, hidden_states=[xs[0], "x"], router_logits=ls)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"router_logits\[1\] has shape \[2, 7\]"):
        rl(p, cfg, hidden_states=xs, router_logits=[ls[0], ls[1][:, :7].copy()])
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"hidden_states\[0\] has dtype float64"):
        rl(p, cfg, hidden_states=[xs[0].astype(np.float64), xs[1]], router_logits=ls)
    with pytest.raises(fp4moe.InvalidArgumentError, match="not both"):
        ids = [np.zeros((2, p.top_k), np.int32)] * 2
        w = [np.zeros((2, p.top_k), np.float32)] * 2
        rl(p, cfg, hidden_states=xs, router_logits=ls, topk_ids=ids, topk_weights=w)
    with pytest.raises(fp4moe.InvalidArgumentError, match="got neither"):
        rl(p, cfg, hidden_states=xs)
    with pytest.raises(fp4moe.InvalidArgumentError, match="topk_ids given without topk_weights"):
        rl(p, cfg, hidden_states=xs, topk_ids=[np.zeros((2, p.top_k), np.int32)] * 2)
    with pytest.raises(fp4moe.InvalidArgumentError, match="timeout = 0"):
        rl(p, cfg, hidden_states=xs, router_logits=ls, timeout=0)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"timeout = 1e\+10 must be > 0 and at most"):
        rl(p, cfg, hidden_states=xs, router_logits=ls, timeout=1e10)  # (its deadline overflowed the clock)
    with pytest.raises(fp4moe.InvalidArgumentError, match="expected an int seed or a dict"):
        rl(p, cfg, None, "seed", hidden_states=xs, router_logits=ls)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"weights\['w13'\] is missing"):
        rl(p, cfg, None, {"w2": np.zeros(1, np.uint8)}, hidden_states=xs, router_logits=ls)
    # Sharded weights are not the layer's: the dict must hold all experts.
    shard = fp4moe.random_weights(p, SEED, ep_rank=0, ep_size=2)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"weights\['w13'\] has shape \[64,"):
        rl(p, cfg, None, shard, hidden_states=xs, router_logits=ls)


@pytest.mark.parametrize(
    "key,poison,strategy,message",
    [
        ("w13_scale_2", lambda v: np.nan, "alltoall", "= nan must be finite and >= 0"),
        ("w2_scale_2", lambda v: -v, "allgather-reducescatter", "= -[0-9.e-]+ must be finite and >= 0"),
        ("w13_scale_2", lambda v: np.inf, "allgather-reducescatter", "= inf must be finite and >= 0"),
        ("a13_scale_2", lambda v: 0.0, "alltoall", "= 0 must be finite and > 0"),
        ("a2_scale_2", lambda v: np.nan, "allgather-reducescatter", "= nan must be finite and > 0"),
    ],
)
def test_run_local_checks_the_global_scales_of_a_weights_dict(key, poison, strategy, message):
    # As MoE(weights, device='cpu') does (C++ validate_global_scales): these used to run and return
    # NaNs or a silently wrong layer.
    p = small()  # w4a4
    weights = fp4moe.random_weights(p, 81)
    e = int(np.random.default_rng(seeding.seed(82)).integers(p.num_experts))
    bad = dict(weights, **{key: weights[key].copy()})
    bad[key][e] = poison(bad[key][e])
    xs, ls = inputs(p, 2, T=3, seed=83)
    with pytest.raises(fp4moe.InvalidArgumentError, match=rf"weights: {key}\[{e}\] {message}"):
        fp4moe.parallel.run_local(p, (2, 1, 2), strategy, bad, hidden_states=xs, router_logits=ls,
                                  quantized_dispatch="off")
    with pytest.raises(fp4moe.InvalidArgumentError, match=rf"weights: {key}\[{e}\] {message}"):
        fp4moe.MoE(p, bad, device="cpu")
    # The untouched dict runs: the layer of its seed.
    outs = fp4moe.parallel.run_local(p, (2, 1, 2), strategy, weights, hidden_states=xs, router_logits=ls,
                                     quantized_dispatch="off")
    moe = fp4moe.MoE.dummy(p, 81, device="cpu")
    for x, l, out in zip(xs, ls, outs):
        assert np.linalg.norm(out) > 0 and rel_l2(out, moe(x, l)) <= TOLERANCE


def test_padded_tokens_error_names_the_callers_max_tokens():
    # The binding shrinks the ranks' max_tokens to the largest input; the error used to name that
    # (max_tokens = 3 here) instead of the problem's.
    p = small().replace(max_tokens=8)
    xs, ls = inputs(p, 2, T=3, seed=91)
    for padded in (1, 2, 9):
        with pytest.raises(
            fp4moe.InvalidArgumentError, match=rf"padded_tokens = {padded} must be in \[num_tokens = 3 .*max_tokens = 8\]"
        ):
            fp4moe.parallel.run_local(
                p, (2, 1, 1), "allgather-reducescatter", SEED, hidden_states=xs, router_logits=ls, padded_tokens=padded
            )
    base = fp4moe.parallel.run_local(p, (2, 1, 1), "allgather-reducescatter", SEED, hidden_states=xs, router_logits=ls)
    for padded in (3, 8):
        outs = fp4moe.parallel.run_local(
            p, (2, 1, 1), "allgather-reducescatter", SEED, hidden_states=xs, router_logits=ls, padded_tokens=padded
        )
        for got, want in zip(outs, base):
            np.testing.assert_array_equal(got, want)


def test_non_int_and_non_bool_arguments_are_refused(monkeypatch):
    # int() truncated 2.9 to 2 (the config ran as dp = 2) and bool() took any object as a flag.
    p = small()
    xs, ls = inputs(p, 2, T=2, seed=95)
    rl = fp4moe.parallel.run_local
    cases = [
        (lambda: rl(p, (2.9, 1, 2), "alltoall", hidden_states=xs, router_logits=ls), "dp = 2.9 must be an int"),
        (lambda: rl(p, {"dp": 2, "tp": 1, "ep": "2"}, hidden_states=xs, router_logits=ls), "ep = '2' must be an int"),
        (lambda: rl(p, (2, 1, 2), None, -1, hidden_states=xs, router_logits=ls), r"-1 must be in \[0, 2\*\*64\)"),
        (lambda: rl(p, (2, 1, 2), hidden_states=xs, router_logits=ls, threads_per_rank=1.5), "threads_per_rank = 1.5"),
        (lambda: fp4moe.applicable_strategies((2, 1.0, 2)), "tp = 1.0 must be an int"),
        (lambda: fp4moe.rank_layout((2, 1, 2), 1.2), "rank = 1.2 must be an int"),
        (lambda: fp4moe.valid_parallel_configs(p, 4.5), "world_size = 4.5 must be an int"),
        (lambda: fp4moe.ParallelMoE(p, (2, 1, 2), check_token_counts="no"), "check_token_counts = 'no' must be a bool"),
        (lambda: fp4moe.ParallelMoE(p, (2, 1, 2), seed=-5), r"seed = -5 must be in \[0, 2\*\*64\)"),
        (lambda: rl(p, (2, 1, 2), hidden_states=xs, router_logits=ls, timeout="30"), "timeout = '30' must be a float"),
        (lambda: fp4moe.ParallelMoE(p, (2, 1, 2), timeout=True), "timeout = True must be a float"),
    ]
    torchrun_env(monkeypatch, 0, 2)
    for call, message in cases:
        with pytest.raises(fp4moe.InvalidArgumentError, match=message):
            call()
    # numpy integers are ints.
    assert fp4moe.rank_layout((np.int64(2), 1, np.int32(2)), np.int64(1))["dp_rank"] == 1


def test_problem_and_parallel_config_compare_with_any_object():
    p = small()
    assert (p == None) is False and (p != None) is True  # noqa: E711  (a TypeError before)
    assert p != "qwen3-30b-a3b" and p in [None, 3, p.copy()]
    assert p == p.copy() and p != p.replace(top_k=2)
    c = fp4moe.ParallelConfig(2, 1, 2)
    configs = fp4moe.valid_parallel_configs(p, 4)
    assert c != (2, 1, 2) and (2, 1, 2) not in configs and None not in configs
    assert fp4moe.ParallelConfig(2, 2, 4) in configs and fp4moe.ParallelConfig(2, 2, 2) not in configs
    # Both are mutable and compare by value: unhashable (an identity hash broke a == b => hash(a) == hash(b)).
    for obj in (p, c):
        with pytest.raises(TypeError, match="unhashable"):
            hash(obj)
        with pytest.raises(TypeError, match="unhashable"):
            _ = {obj: 1}


def test_run_local_takes_numpy_bfloat16_as_its_float32_values():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = small()
    xs, ls = inputs(p, 2, T=3, seed=97)
    xb, lb = [x.astype(ml_dtypes.bfloat16) for x in xs], [l.astype(ml_dtypes.bfloat16) for l in ls]
    want = fp4moe.parallel.run_local(p, (2, 1, 2), "alltoall", SEED, hidden_states=[x.astype(np.float32) for x in xb],
                                     router_logits=[l.astype(np.float32) for l in lb])
    got = fp4moe.parallel.run_local(p, (2, 1, 2), "alltoall", SEED, hidden_states=xb, router_logits=lb)
    for g, w in zip(got, want):
        assert np.linalg.norm(w) > 0
        np.testing.assert_array_equal(g, w)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"hidden_states\[1\] is (big|little)-endian float32"):
        fp4moe.parallel.run_local(p, (2, 1, 2), "alltoall", SEED, hidden_states=[xs[0], xs[1].astype(xs[1].dtype.newbyteorder("S"))],
                                  router_logits=ls)


def test_run_local_refuses_different_inputs_on_the_tp_ranks_of_a_group():
    p = small()
    xs, ls = inputs(p, 4)
    rl = fp4moe.parallel.run_local
    cfg = (2, 2, 4)  # ranks 0-1 are DP group 0, ranks 2-3 group 1
    same = [xs[0], xs[0].copy(), xs[1], xs[1].copy()]
    logits = [ls[0], ls[0].copy(), ls[1], ls[1].copy()]
    got = rl(p, cfg, hidden_states=same, router_logits=logits)  # equal copies are fine
    want = rl(p, cfg, hidden_states=xs[:2], router_logits=ls[:2])
    for r in range(4):
        np.testing.assert_array_equal(got[r], want[r])
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"rank 3's hidden_states differ from rank 2's: .*group 1"):
        rl(p, cfg, hidden_states=[xs[0], xs[0], xs[1], xs[2]], router_logits=logits)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"rank 1's router_logits differ from rank 0's"):
        rl(p, cfg, hidden_states=same, router_logits=[ls[0], ls[2], ls[1], ls[1]])
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"rank 1's token count differs from rank 0's"):
        rl(p, cfg, hidden_states=[xs[0], xs[0][:1].copy(), xs[1], xs[1]],
           router_logits=[ls[0], ls[0][:1].copy(), ls[1], ls[1]])
    ids = [np.zeros((2, p.top_k), np.int32) + np.arange(p.top_k, dtype=np.int32) for _ in range(4)]
    w = [np.full((2, p.top_k), 0.125, np.float32) for _ in range(4)]
    w[3] = w[3] * 2
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"rank 3's topk_weights differ from rank 2's"):
        rl(p, cfg, hidden_states=same, topk_ids=ids, topk_weights=w)


def test_errors_raised_on_a_rank_name_it():
    p = small()
    xs, ls = inputs(p, 2, T=9)  # problem.max_tokens is 8
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"rank \d: num_tokens = 9 must be in \[0, max_tokens = 8\]"):
        fp4moe.parallel.run_local(p, (2, 1, 2), "alltoall", hidden_states=xs, router_logits=ls)
    # The two TP ranks of one DP group hold the same tokens: a different count on one is caught, by
    # the binding before any rank starts (the ranks' own count agreement, which ParallelMoE's processes
    # rely on, is test_parallel's).
    xs, ls = inputs(p, 2, T=3)
    xs2, ls2 = inputs(p, 2, T=2)
    with pytest.raises(fp4moe.InvalidArgumentError, match="rank 1's token count differs from rank 0's"):
        fp4moe.parallel.run_local(p, (1, 2, 1), hidden_states=[xs[0], xs2[0]], router_logits=[ls[0], ls2[0]])
    # An expert id out of range is refused by the reference on the rank that sees it.
    ids = [np.full((3, p.top_k), p.num_experts, np.int32)] * 2
    w = [np.full((3, p.top_k), 0.1, np.float32)] * 2
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"rank \d: topk_ids\[0\] = 128 is outside"):
        fp4moe.parallel.run_local(p, (1, 2, 1), hidden_states=[xs[0], xs[0]], topk_ids=ids, topk_weights=w)


# ---- ParallelMoE (GPU over NCCL): only what runs without a GPU ---------------------------------------


def torchrun_env(monkeypatch, rank, world):
    for k in [k for k in __import__("os").environ if k.startswith(("OMPI_COMM_WORLD_", "SLURM_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(world))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29555")


def test_parallel_moe_checks_config_and_strategy_before_the_gpu(monkeypatch):
    p = small()
    torchrun_env(monkeypatch, 0, 2)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"dp \* tp = 1 \* 1 = 1"):
        fp4moe.ParallelMoE(p, (1, 1, 1))  # the launcher started 2 ranks
    with pytest.raises(fp4moe.InvalidArgumentError, match="ep = 3"):
        fp4moe.ParallelMoE(p, (1, 2, 3))
    with pytest.raises(fp4moe.InvalidArgumentError, match="'all2all'"):
        fp4moe.ParallelMoE(p, (2, 1, 2), "all2all")
    with pytest.raises(fp4moe.InvalidArgumentError, match="use allgather-reducescatter"):
        fp4moe.ParallelMoE(p, (2, 1, 1), "alltoall")
    with pytest.raises(fp4moe.InvalidArgumentError, match="timeout = -1"):
        fp4moe.ParallelMoE(p, (2, 1, 2), timeout=-1)
    with pytest.raises(fp4moe.InvalidArgumentError, match="at most 1e"):
        fp4moe.ParallelMoE(p, (2, 1, 2), timeout=float("inf"))
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"weights\['w13'\] is missing"):
        fp4moe.ParallelMoE(p, (2, 1, 2), weights={})
    with pytest.raises(fp4moe.InvalidArgumentError, match="expected fp4moe.Problem"):
        fp4moe.ParallelMoE("qwen3", (2, 1, 2))
    # quantized_dispatch: the value, and 'on' against the mode and the strategy, before any GPU set-up.
    with pytest.raises(fp4moe.InvalidArgumentError, match="quantized_dispatch = 'nvfp4' is not one of"):
        fp4moe.ParallelMoE(p, (2, 1, 2), quantized_dispatch="nvfp4")
    with pytest.raises(fp4moe.InvalidArgumentError, match="quantized_dispatch = on needs mode w4a4.*mode = w4a16"):
        fp4moe.ParallelMoE(p.replace(mode="w4a16"), (2, 1, 2), "alltoall", quantized_dispatch="on")
    with pytest.raises(fp4moe.InvalidArgumentError, match="strategy tp-allreduce sends none"):
        fp4moe.ParallelMoE(p, (1, 2, 2), "tp-allreduce", quantized_dispatch="on")
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(fp4moe.InvalidArgumentError, match="RANK"):
        fp4moe.ParallelMoE(p, (2, 1, 2))


@pytest.mark.skipif(
    fp4moe.cuda_device_count() > 0, reason="a CUDA device is visible: this checks the error without one"
)
def test_parallel_moe_without_a_gpu(monkeypatch):
    torchrun_env(monkeypatch, 0, 2)
    with pytest.raises(fp4moe.UnsupportedError) as e:
        fp4moe.ParallelMoE(small(), (2, 1, 2), "alltoall")
    if fp4moe.has_nccl:
        assert "no CUDA device is visible" in str(e.value)
    assert "run_local" in str(e.value)
    # A valid quantized_dispatch passes the early checks and reaches the same error.
    with pytest.raises(fp4moe.UnsupportedError, match="run_local"):
        fp4moe.ParallelMoE(small(), (2, 1, 2), "alltoall", quantized_dispatch="on")


def test_parallel_moe_forward_argument_checks():
    # The checks ParallelMoE.forward runs before any collective, on a layer that would live on cuda:0.
    p = small()
    check = fp4moe._ext.check_parallel_forward_args
    x = np.zeros((2, p.hidden_size), np.float32)
    logits = np.zeros((2, p.num_experts), np.float32)
    ids = np.zeros((2, p.top_k), np.int32)
    w = np.zeros((2, p.top_k), np.float32)
    out = np.zeros((2, p.hidden_size), np.float32)
    with pytest.raises(fp4moe.InvalidArgumentError, match="not both"):
        check(p, 0, x, logits, ids, w, out)
    with pytest.raises(fp4moe.InvalidArgumentError, match="got neither"):
        check(p, 0, x, None, None, None, out)
    with pytest.raises(fp4moe.InvalidArgumentError, match="topk_weights given without topk_ids"):
        check(p, 0, x, None, None, w, out)
    with pytest.raises(fp4moe.InvalidArgumentError, match=r"hidden_states has shape \[768\]"):
        check(p, 0, x[0], logits, None, None, out)
    on_cpu = "hidden_states is on cpu but this ParallelMoE lives on cuda:0"
    with pytest.raises(fp4moe.InvalidArgumentError, match=on_cpu):
        check(p, 0, x, logits, None, None, out)
