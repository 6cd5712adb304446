"""torch ops for gated linear attention: custom ops with fake kernels and autograd, and an eager path."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import gla as ops
from ._common import XP, TorchOp, absent, contiguous_or_none, fake_grad, present, state_dtype


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], scale: float,
             impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    return ops.forward(XP, q, k, v, g, initial_state, cu_seqlens, scale, impl)


def _forward_fake(q, k, v, g, initial_state, cu_seqlens, scale, impl):
    return v.new_empty(v.shape, dtype=q.dtype), q.new_empty(ops.state_shape(q, v, cu_seqlens), dtype=state_dtype(q))


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
              initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], do: torch.Tensor,
              d_final_state: torch.Tensor, scale: float,
              impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv, dg, dh0 = ops.backward(XP, q, k, v, g, initial_state, cu_seqlens, do, d_final_state, scale, impl)
    return dq, dk, dv, dg, present(dh0, q)


def _backward_fake(q, k, v, g, initial_state, cu_seqlens, do, d_final_state, scale, impl):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(g),
            fake_grad(initial_state, q))


def _setup_context(ctx, inputs, output):
    q, k, v, g, initial_state, cu_seqlens, scale, impl = inputs
    ctx.save_for_backward(q, k, v, g, initial_state, cu_seqlens)
    ctx.scale, ctx.impl = scale, impl


def _make_backward(run_backward):
    def backward(ctx, do, d_final_state):
        q, k, v, g, initial_state, cu_seqlens = ctx.saved_tensors
        if do is None:  # only the final state reached the loss (eager mode, see TorchOp)
            do = v.new_zeros(v.shape, dtype=q.dtype)
        dq, dk, dv, dg, dh0 = run_backward(q, k, v, g, initial_state, cu_seqlens, do.contiguous(),
                                           contiguous_or_none(d_final_state), ctx.scale, ctx.impl)
        return dq, dk, dv, dg, absent(dh0, initial_state), None, None, None

    return backward


# An unused final state sends no gradient: the backward skips its zeros.
_op = TorchOp("gla", _forward, _forward_fake, _backward, _backward_fake, _setup_context, _make_backward,
              materialize_grads=False)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              impl="automatic"):
    """torch version of :func:`seqmix.chunk_gla` (same arguments and results), differentiable
    in q, k, v, g and initial_state."""
    o, final_state = _op(q, k, v, g, initial_state, cu_seqlens, ops.default_scale(q, scale), impl)
    return o, (final_state if output_final_state else None)
