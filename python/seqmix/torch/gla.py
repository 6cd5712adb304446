"""torch custom ops for gated linear attention, with fake kernels and autograd."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import gla as ops
from ._common import XP, absent, present, state_dtype


@torch.library.custom_op("seqmix::gla_fwd", mutates_args=())
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], scale: float,
             impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    return ops.forward(XP, q, k, v, g, initial_state, cu_seqlens, scale, impl)


@_forward.register_fake
def _(q, k, v, g, initial_state, cu_seqlens, scale, impl):
    return v.new_empty(v.shape, dtype=q.dtype), q.new_empty(ops.state_shape(q, v, cu_seqlens), dtype=state_dtype(q))


@torch.library.custom_op("seqmix::gla_bwd", mutates_args=())
def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
              initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], do: torch.Tensor,
              d_final_state: torch.Tensor, scale: float,
              impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv, dg, dh0 = ops.backward(XP, q, k, v, g, initial_state, cu_seqlens, do, d_final_state, scale, impl)
    return dq, dk, dv, dg, present(dh0, q)


@_backward.register_fake
def _(q, k, v, g, initial_state, cu_seqlens, do, d_final_state, scale, impl):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(g),
            present(None if initial_state is None else torch.empty_like(initial_state), q))


def _setup_context(ctx, inputs, output):
    q, k, v, g, initial_state, cu_seqlens, scale, impl = inputs
    ctx.save_for_backward(q, k, v, g, initial_state, cu_seqlens)
    ctx.scale, ctx.impl = scale, impl


def _autograd_backward(ctx, do, d_final_state):
    q, k, v, g, initial_state, cu_seqlens = ctx.saved_tensors
    dq, dk, dv, dg, dh0 = _backward(q, k, v, g, initial_state, cu_seqlens, do.contiguous(),
                                    d_final_state.contiguous(), ctx.scale, ctx.impl)
    return dq, dk, dv, dg, absent(dh0, initial_state), None, None, None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              impl="automatic"):
    """torch version of :func:`seqmix.chunk_gla` (same arguments and results), differentiable
    in q, k, v, g and initial_state."""
    o, final_state = _forward(q, k, v, g, initial_state, cu_seqlens, ops.default_scale(q, scale), impl)
    return o, (final_state if output_final_state else None)
