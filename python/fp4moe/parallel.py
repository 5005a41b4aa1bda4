"""The MoE layer across ranks: data, tensor and expert parallelism (C++ include/fp4moe/parallel.h,
src/moe/parallel_moe.h), with vLLM's semantics.

The world has dp * tp ranks; world rank r sits in DP group r // tp at TP rank r % tp. The ranks of one
DP group hold the same tokens; different DP groups hold different tokens. ep is 1 (every rank holds
every expert and a 1/(dp*tp) slice of the intermediate dimension) or dp * tp (rank r holds the
experts [r*E/ep, (r+1)*E/ep), whole). Strategies (how tokens reach the experts and partial outputs
come back): 'none' (one rank), 'tp-allreduce' (dp == 1), 'allgather-reducescatter' (dp > 1),
'alltoall' (dp > 1 and ep > 1).

Two ways to run it:

* ``run_local(problem, config, strategy, weights, hidden_states=[...], router_logits=[...])`` runs all
  the ranks in this process, one thread each, over the in-process communicator and the C++ fp64
  reference (what the C++ tests and ``fp4moe-bench-parallel --cpu`` use): check a config against the
  single-rank ``fp4moe.MoE(..., device='cpu')`` output without a GPU.
* ``ParallelMoE(problem, config, strategy)`` is one rank on this process's GPU (LOCAL_RANK), one
  process per GPU started by torchrun, mpirun or srun; the NCCL world communicator is bootstrapped
  from the launcher's variables (``launch_info()``).

NVFP4-quantized dispatch (``quantized_dispatch='auto' | 'off' | 'on'``, both ways; C++
ParallelMoeOptions::quantized_dispatch). In w4a4 mode the tokens can travel as their GEMM1 input
already quantized to NVFP4 (0.5625 instead of 2 bytes per element), quantized once, before the
dispatch, with ONE input global scale shared by all experts: the largest a13_scale_2 of the layer.
Every expert's GEMM1 then uses that shared scale, so the output is exactly (up to the strategy's
reduction order) the single-rank w4a4 layer's with every a13_scale_2 replaced by the maximum, which
differs from the plain w4a4 layer wherever the experts' scales differ (and equals it when they are all
the same). 'auto' (the default) turns it on for w4a4 with 'allgather-reducescatter' and leaves it off
otherwise (bf16 tokens); 'off' keeps bf16 tokens, i.e. the per-expert scales of the single-rank layer;
'on' asks for it with 'allgather-reducescatter' or 'alltoall' and is refused (InvalidArgumentError) in
w4a16 mode and with strategies that send no tokens ('none', 'tp-allreduce').
"""

from __future__ import annotations

import numpy as np

# (_flag, _index, _seed: defined in fp4moe/__init__.py before it imports this module)
from . import _arrays, _ext, _flag, _index, _real, _seed
from ._ext import InvalidArgumentError, ParallelConfig, Problem

__all__ = [
    "ParallelConfig",
    "ParallelMoE",
    "QUANTIZED_DISPATCH",
    "STRATEGIES",
    "applicable_strategies",
    "launch_info",
    "rank_layout",
    "run_local",
    "valid_parallel_configs",
]

#: Every strategy name, in the C++ enum order.
STRATEGIES: tuple = tuple(_ext.strategy_names())

#: The values of the quantized_dispatch argument (C++ QuantizedDispatch: kAuto, kOff, kOn).
QUANTIZED_DISPATCH: tuple = ("auto", "off", "on")


def _config(config) -> ParallelConfig:
    """A ParallelConfig from a ParallelConfig, a (dp, tp, ep) tuple or a {'dp', 'tp', 'ep'} mapping."""
    if isinstance(config, ParallelConfig):
        return config
    if isinstance(config, (tuple, list)) and len(config) == 3:
        return ParallelConfig(*(_index(v, k) for k, v in zip(("dp", "tp", "ep"), config)))
    if hasattr(config, "items"):
        unknown = sorted(set(config) - {"dp", "tp", "ep"})
        if unknown:
            raise InvalidArgumentError(f"config has unknown keys {unknown}; expected dp, tp, ep")
        return ParallelConfig(**{k: _index(v, k) for k, v in config.items()})
    raise InvalidArgumentError(
        f"config is a {type(config).__name__}; expected fp4moe.ParallelConfig, a (dp, tp, ep) tuple or a dict"
    )


def _problem(problem) -> Problem:
    if not isinstance(problem, Problem):
        raise InvalidArgumentError(
            f"problem is a {type(problem).__name__}; expected fp4moe.Problem "
            "(fp4moe.preset(name) or fp4moe.Problem(**fields))"
        )
    return problem


def _strategy(config: ParallelConfig, strategy) -> str:
    """The strategy name; None picks the first applicable one (in STRATEGIES order)."""
    if strategy is None:
        names = _ext.applicable_strategies(config)
        if not names:
            # The config itself is invalid: let the C++ checks name the bad value.
            return "none"
        return names[0]
    if not isinstance(strategy, str):
        raise InvalidArgumentError(f"strategy is a {type(strategy).__name__}; expected one of {', '.join(STRATEGIES)}")
    return strategy


def valid_parallel_configs(problem: Problem, world_size: int) -> list:
    """Every ParallelConfig for `world_size` ranks that the C++ validate() accepts for `problem`,
    ordered by (dp, ep)."""
    return _ext.valid_parallel_configs(_problem(problem), _index(world_size, "world_size"))


def applicable_strategies(config) -> list:
    """The strategy names that can run `config` (a ParallelConfig or (dp, tp, ep)), in STRATEGIES order."""
    return _ext.applicable_strategies(_config(config))


def rank_layout(config, rank: int) -> dict:
    """Where world rank `rank` sits: {'rank', 'dp_rank', 'tp_rank', 'moe_ep_rank', 'moe_ep_size',
    'moe_tp_rank', 'moe_tp_size'} (the expert shard and the intermediate-dimension shard it holds)."""
    return _ext.rank_layout(_config(config), _index(rank, "rank"))


def launch_info(env=None) -> dict:
    """The launcher variables of this process (torchrun > mpirun > Slurm), parsed by the C++
    parse_launch_env: {'launcher', 'rank', 'world_size', 'local_rank', 'local_world_size',
    'master_addr', 'master_port', 'nccl_comm_id'}. `env`: a mapping to parse instead of os.environ
    (the C++ function reads the process environment itself). Without launcher variables: launcher
    'none', rank 0 of 1."""
    if env is not None:
        if not hasattr(env, "items"):
            raise InvalidArgumentError(f"env is a {type(env).__name__}; expected a mapping of str to str")
        env = {str(k): str(v) for k, v in env.items()}
    return _ext.launch_info(env)


def _as_list(name: str, value, bf16: bool = False) -> list:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentError(
            f"{name} is a {type(value).__name__}; expected a list with one array per rank (or per DP group)"
        )
    return [_arrays.export(v, f"{name}[{i}]", bf16=bf16) for i, v in enumerate(value)]


def _quantized_dispatch(value) -> str:
    if not isinstance(value, str) or value not in QUANTIZED_DISPATCH:
        raise InvalidArgumentError(f"quantized_dispatch = {value!r} is not one of 'auto', 'off', 'on'")
    return value


def _padded(padded_tokens) -> int:
    if isinstance(padded_tokens, bool) or not isinstance(padded_tokens, (int, np.integer)) or padded_tokens < 0:
        raise InvalidArgumentError(f"padded_tokens = {padded_tokens!r} must be an int >= 0 (or None: off)")
    return int(padded_tokens)


def run_local(
    problem: Problem,
    config,
    strategy: str | None = None,
    weights=0,
    *,
    hidden_states,
    router_logits=None,
    topk_ids=None,
    topk_weights=None,
    timeout: float = 60.0,
    threads_per_rank: int = 1,
    padded_tokens: int | None = None,
    quantized_dispatch: str = "auto",
) -> list:
    """The parallel layer on config.world_size in-process ranks (one thread each, the C++
    LocalCommunicator) with the CPU reference backend (the fp64 reference on each rank's shard).

    weights: an int seed (the deterministic weights of fp4moe.random_weights(problem, seed), the
    default 0) or a dict in fp4moe.MoE's layout and names holding ALL experts with the FULL
    intermediate size; each rank takes its shard from it.
    hidden_states: a list of host arrays [T, H] (float32, rounded to bf16 first, or bfloat16), one
    per rank (length dp * tp) or one per DP group (length dp: the group's TP ranks all get it). The
    ranks of one DP group must hold the same tokens (per-rank inputs that differ within a group,
    routing included, raise InvalidArgumentError naming the ranks). router_logits [T, E] (float32 or bfloat16), or
    topk_ids int32 [T, k] with topk_weights float32 [T, k], lists of the same length.
    timeout: seconds, the deadline of every collective wait.
    padded_tokens: the CUDA-graph mode of ParallelMoE.forward (see there), here on CPU ranks: the
    same numbers as without it.
    quantized_dispatch: 'auto' (default), 'off' or 'on': NVFP4-quantized dispatch in w4a4 mode (see
    the module docstring). 'auto' is on for w4a4 with 'allgather-reducescatter', off otherwise; 'on'
    with w4a16 or with a strategy that sends no tokens raises InvalidArgumentError.

    Returns one float32 NumPy array [T_rank, H] per rank: the full layer output for that rank's
    tokens (the sum of the ranks' partial outputs). Compare it with the single-rank
    ``fp4moe.MoE(problem, weights, device='cpu')`` on the same weights, except where quantized
    dispatch is on (w4a4 with 'allgather-reducescatter' by default): there the single-rank layer
    to compare with is the one whose weights have every a13_scale_2 replaced by its maximum
    (``dict(w, a13_scale_2=np.full_like(w['a13_scale_2'], w['a13_scale_2'].max()))``). Buffers
    are sized for the largest input, not problem.max_tokens. Errors raise fp4moe's exceptions with
    the C++ message (for a failure on a rank, prefixed with that rank; a rank's own error is
    preferred over the aborts it caused in its peers).
    """
    problem = _problem(problem)
    config = _config(config)
    strategy = _strategy(config, strategy)
    quantized_dispatch = _quantized_dispatch(quantized_dispatch)
    if isinstance(weights, (bool, float)) or not (isinstance(weights, (int, np.integer)) or hasattr(weights, "items")):
        raise InvalidArgumentError(
            f"weights is a {type(weights).__name__}; expected an int seed or a dict of arrays (all experts)"
        )
    hidden = _as_list("hidden_states", hidden_states, bf16=True)
    logits = _as_list("router_logits", router_logits, bf16=True)
    ids = _as_list("topk_ids", topk_ids)
    tw = _as_list("topk_weights", topk_weights)
    config.validate(problem)  # before anything is sized from it: the C++ message names the bad value
    n = config.world_size
    per_rank = len(hidden) == n
    out = []
    if len(hidden) in (n, config.dp):
        for r in range(n):
            shape = getattr(hidden_states[r if per_rank else r // config.tp], "shape", None)
            rows = int(shape[0]) if shape is not None and len(shape) >= 1 else 0
            out.append(np.empty((rows, problem.hidden_size), dtype=np.float32))
    if isinstance(weights, (int, np.integer)):
        seed, canonical = _seed(weights, "weights (a seed)"), None
    else:
        from . import _canonical_weights

        seed, canonical = 0, _canonical_weights(weights, getattr(problem, "weight_format", ""))
    _ext.parallel_run_local(
        problem,
        config,
        strategy,
        canonical,
        seed,
        hidden,
        logits,
        ids,
        tw,
        out,
        _real(timeout, "timeout"),
        _index(threads_per_rank, "threads_per_rank"),
        None if padded_tokens is None else _padded(padded_tokens),
        quantized_dispatch,
    )
    return out


class ParallelMoE:
    """One rank of the parallel MoE layer on this process's GPU, over NCCL.

    ParallelMoE(problem, config, strategy=None, weights=None, *, seed=0, timeout=60.0,
                check_token_counts=True, quantized_dispatch='auto')

    Start one process per GPU with torchrun, mpirun or srun; the world is every rank of the launch
    (launch_info()), which must equal config.world_size. Creation is collective: every rank builds
    the layer with the same problem, config and strategy (checked, a mismatch fails on every rank
    naming the differing fields). It selects the GPU LOCAL_RANK, creates the NCCL world communicator
    from the launcher's variables (the C++ create_nccl_world: a TCP rendezvous at MASTER_ADDR /
    MASTER_PORT, or NCCL_COMM_ID) and the rank's expert backend (the GPU MoeLayer on its shard).
    NCCL_NVLS_ENABLE is set to 0 unless already set (NVLink multicast off).

    strategy: a name of applicable_strategies(config); None picks the first.
    weights: None for the deterministic dummy weights of `seed` (generated on the GPU, as
    MoE.dummy), or a dict in fp4moe.MoE's layout and names holding ALL experts with the FULL
    intermediate size (host or device arrays); each rank reads its shard from it.
    problem.max_tokens: the most tokens one rank passes to forward().
    timeout: seconds, the deadline of every communicator wait (set-up included); past it the call
    raises and the communicator is aborted, so the peers fail fast too.
    check_token_counts: check every step that the ranks of a DP group pass the same token count.
    quantized_dispatch: 'auto' (default), 'off' or 'on': NVFP4-quantized dispatch in w4a4 mode (see
    the module docstring): 'auto' is on for w4a4 with 'allgather-reducescatter', where the output is
    then the single-GPU w4a4 layer's with every a13_scale_2 replaced by the largest; 'off' keeps bf16
    tokens and the per-expert scales. 'on' with w4a16 or a strategy that sends no tokens raises
    InvalidArgumentError before any GPU or NCCL set-up. Every rank must pass the same value
    (checked). The properties quantized_dispatch and dispatch_input_scale_2 say what was resolved.

    After a failed forward the communicator is aborted: close the layer and create a new one.
    Call close() (or use ``with``) on every rank at the end.
    """

    def __init__(
        self,
        problem: Problem,
        config,
        strategy: str | None = None,
        weights=None,
        *,
        seed: int = 0,
        timeout: float = 60.0,
        check_token_counts: bool = True,
        quantized_dispatch: str = "auto",
    ):
        problem = _problem(problem)
        config = _config(config)
        strategy = _strategy(config, strategy)
        quantized_dispatch = _quantized_dispatch(quantized_dispatch)
        canonical = None
        if weights is not None:
            from . import _canonical_weights

            canonical = _canonical_weights(weights, getattr(problem, "weight_format", ""))
        self._layer = _ext.ParallelLayer.create(
            problem,
            config,
            strategy,
            canonical,
            _seed(seed),
            _real(timeout, "timeout"),
            _flag(check_token_counts, "check_token_counts"),
            quantized_dispatch,
        )
        self._problem = self._layer.problem

    # -- properties --
    @property
    def problem(self) -> Problem:
        return self._layer.problem

    @property
    def config(self) -> ParallelConfig:
        return self._layer.config

    @property
    def strategy(self) -> str:
        return self._layer.strategy

    @property
    def device(self) -> str:
        """'cuda:LOCAL_RANK'."""
        return self._layer.device

    @property
    def quantized_dispatch(self) -> bool:
        """Whether the tokens are dispatched NVFP4-quantized (the quantized_dispatch argument resolved
        against the mode and the strategy)."""
        return self._layer.quantized_dispatch

    @property
    def dispatch_input_scale_2(self) -> float:
        """The GEMM1 input global scale (decode convention) shared by all experts under quantized
        dispatch: the largest a13_scale_2 of the layer, the same on every rank; 0.0 when it is off."""
        return self._layer.dispatch_input_scale_2

    @property
    def layout(self) -> dict:
        """rank_layout(config, rank) of this rank."""
        return self._layer.layout

    @property
    def rank(self) -> int:
        return self._layer.launch_info["rank"]

    @property
    def world_size(self) -> int:
        return self._layer.launch_info["world_size"]

    @property
    def launch_info(self) -> dict:
        return self._layer.launch_info

    @property
    def closed(self) -> bool:
        return self._layer.closed

    def __repr__(self):
        c = self.config
        return (
            f"ParallelMoE({self._problem.name!r}, dp={c.dp}, tp={c.tp}, ep={c.ep}, strategy={self.strategy!r}, "
            f"rank={self.rank}, device={self.device!r}{', closed' if self.closed else ''})"
        )

    # -- forward --
    def forward(
        self,
        hidden_states,
        router_logits=None,
        *,
        topk_ids=None,
        topk_weights=None,
        out=None,
        stream=None,
        padded_tokens=None,
    ):
        """Collective: every rank calls it once per step (a rank with 0 tokens too).

        hidden_states bfloat16 [T, H] on this rank's GPU with router_logits [T, E] (float32 or
        bfloat16; each rank routes its own tokens) or topk_ids int32 / topk_weights float32 [T, k]
        (global expert ids). Returns out, bfloat16 [T, H]: the full layer output for these tokens
        (an `out` given must not overlap the inputs: refused by name, on every rank).
        The layer runs on its own stream, ordered after `stream` (default: torch's current stream,
        else the legacy default stream) and before later work on it. Without padded_tokens the
        host waits for the collectives (with the deadline), so the forward is not capturable.

        padded_tokens (CUDA-graph mode; strategies none, tp-allreduce and allgather-reducescatter): every
        rank exchanges exactly that many token rows (T real ones, then filler rows whose outputs are
        dropped) and the host waits for nothing, so the forward can be captured (e.g. in a
        torch.cuda.CUDAGraph; create the layer with check_token_counts=False for that). Every rank
        of a DP group must pass the same value, T <= padded_tokens <= problem.max_tokens. Call
        synchronize(stream) after the step or the replay (it has the deadline; a plain stream wait
        has none). Outputs equal the unpadded forward's bit for bit (tests/python/test_parallel_gpu.py,
        on two H200s).
        """
        place, shape = _arrays.check_forward_arrays(hidden_states, router_logits, topk_ids, topk_weights, out)
        if self.closed:
            raise InvalidArgumentError("this ParallelMoE is closed")
        if out is None:
            if not place.cuda:
                # The C++ check names the device mismatch; NumPy has no bfloat16 for an output anyway.
                out = np.empty((shape[0], self._problem.hidden_size), dtype=np.float32)
            else:
                out = _arrays.empty(hidden_states, place, (shape[0], self._problem.hidden_size), "bfloat16")
        self._layer.forward(
            *_arrays.export_forward_arrays(hidden_states, router_logits, topk_ids, topk_weights, out),
            _arrays.stream_handle(stream, place),
            None if padded_tokens is None else _padded(padded_tokens),
        )
        return out

    __call__ = forward

    def synchronize(self, stream=None) -> None:
        """Waits, with the deadline, for the collectives of graph-mode forwards and for the work
        queued so far on `stream` (default: torch's current stream, else the legacy default stream;
        e.g. a torch.cuda.CUDAGraph replayed there). A timeout or a peer's failure raises and aborts
        the communicators."""
        if self.closed:
            raise InvalidArgumentError("this ParallelMoE is closed")
        local_rank = self._layer.launch_info["local_rank"]
        self._layer.synchronize(_arrays.stream_handle(stream, _arrays.Place(True, local_rank)))

    def check_device_errors(self) -> None:
        """Raises InvalidArgumentError if the last forward's expert layer on this rank skipped routed
        expert ids outside [0, num_experts) (it skips and counts them, as MoE.forward does; strategy
        alltoall rejects them before computing). Rank-local; waits for the layer's stream, so not
        while capturing a graph."""
        if self.closed:
            raise InvalidArgumentError("this ParallelMoE is closed")
        self._layer.check_device_errors()

    def close(self) -> None:
        """Waits for the layer's stream, frees its buffers and destroys the NCCL communicator
        (collective in NCCL: call it on every rank). Idempotent."""
        self._layer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
