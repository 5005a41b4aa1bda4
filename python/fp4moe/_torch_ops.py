"""The MoE forward as the PyTorch custom op ``torch.ops.fp4moe.moe_forward``.

Imported by fp4moe only when torch is importable. The op takes the layer by its integer id (a
custom op's arguments are tensors and scalars, not Python objects); under torch.compile the id is
a constant of the graph, and the op is opaque: its fake implementation gives the output's shape,
dtype and device without running anything. The real implementation allocates the output with
torch (so CUDA-graph capture draws it from the graph's pool) and runs on the current stream; the
layer's workspace was allocated when the layer was created.

NOTE: one layer has one workspace; two forwards of the same layer must not run concurrently on
different streams.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _ext


def _out_dtype(hidden_states: torch.Tensor) -> torch.dtype:
    # GPU: the layer's bf16 output; CPU: the reference's fp32 sum.
    return torch.bfloat16 if hidden_states.device.type == "cuda" else torch.float32


@torch.library.custom_op("fp4moe::moe_forward", mutates_args=())
def moe_forward(
    layer_id: int,
    hidden_states: torch.Tensor,
    router_logits: Optional[torch.Tensor],
    topk_ids: Optional[torch.Tensor],
    topk_weights: Optional[torch.Tensor],
) -> torch.Tensor:
    from . import _layer_by_id

    return _layer_by_id(layer_id)._forward(hidden_states, router_logits, topk_ids, topk_weights, None, None)


@moe_forward.register_fake
def _moe_forward_fake(layer_id, hidden_states, router_logits, topk_ids, topk_weights):
    from . import _layer_by_id

    problem = _layer_by_id(layer_id)._problem
    if hidden_states.dim() != 2 or hidden_states.shape[1] != problem.hidden_size:
        raise _ext.InvalidArgumentError(
            f"hidden_states has shape {list(hidden_states.shape)}; expected [num_tokens, hidden_size = "
            f"{problem.hidden_size}]"
        )
    return hidden_states.new_empty((hidden_states.shape[0], problem.hidden_size), dtype=_out_dtype(hidden_states))
