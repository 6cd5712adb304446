"""torch ops for the gated delta rule: custom ops with fake kernels and autograd, and an eager path."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import delta_rule as ops
from ._common import XP, TorchOp, absent, contiguous_or_none, fake_grad, present, state_dtype


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], scale: float,
             use_qk_l2norm: bool, impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    return ops.forward(XP, q, k, v, g, beta, initial_state, cu_seqlens, scale, use_qk_l2norm, impl)


def _forward_fake(q, k, v, g, beta, initial_state, cu_seqlens, scale, use_qk_l2norm, impl):
    return v.new_empty(v.shape, dtype=q.dtype), q.new_empty(ops.state_shape(q, v, cu_seqlens), dtype=state_dtype(q))


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], do: torch.Tensor,
              d_final_state: torch.Tensor, scale: float, use_qk_l2norm: bool,
              impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv, dg, dbeta, dh0 = ops.backward(XP, q, k, v, g, beta, initial_state, cu_seqlens, do, d_final_state,
                                              scale, use_qk_l2norm, impl)
    return dq, dk, dv, dg, dbeta, present(dh0, q)


def _backward_fake(q, k, v, g, beta, initial_state, cu_seqlens, do, d_final_state, scale, use_qk_l2norm, impl):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(g),
            torch.empty_like(beta), fake_grad(initial_state, q))


def _setup_context(ctx, inputs, output):
    q, k, v, g, beta, initial_state, cu_seqlens, scale, use_qk_l2norm, impl = inputs
    ctx.save_for_backward(q, k, v, g, beta, initial_state, cu_seqlens)
    ctx.scale, ctx.use_qk_l2norm, ctx.impl = scale, use_qk_l2norm, impl


def _make_backward(run_backward):
    def backward(ctx, do, d_final_state):
        q, k, v, g, beta, initial_state, cu_seqlens = ctx.saved_tensors
        if do is None:  # only the final state reached the loss (eager mode, see TorchOp)
            do = v.new_zeros(v.shape, dtype=q.dtype)
        dq, dk, dv, dg, dbeta, dh0 = run_backward(q, k, v, g, beta, initial_state, cu_seqlens, do.contiguous(),
                                                  contiguous_or_none(d_final_state), ctx.scale, ctx.use_qk_l2norm,
                                                  ctx.impl)
        return dq, dk, dv, dg, dbeta, absent(dh0, initial_state), None, None, None, None

    return backward


# An unused final state sends no gradient: the backward skips its zeros.
_op = TorchOp("delta_rule", _forward, _forward_fake, _backward, _backward_fake, _setup_context, _make_backward,
              materialize_grads=False)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, impl="automatic"):
    """torch version of :func:`seqmix.chunk_gated_delta_rule` (same arguments and results),
    differentiable in q, k, v, g, beta and initial_state."""
    o, final_state = _op(q, k, v, g, beta, initial_state, cu_seqlens, ops.default_scale(q, scale),
                         use_qk_l2norm_in_kernel, impl)
    return o, (final_state if output_final_state else None)
