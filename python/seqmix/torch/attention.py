"""torch ops for exact attention (padded and variable length through optional cu_seqlens):
custom ops with fake kernels and autograd differentiable in q, k and v, and an eager path."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import attention as ops
from ._common import XP, TorchOp, state_dtype


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
             cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, scale: float, causal: bool,
             deterministic: bool, impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    return ops.forward(XP, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, impl)


def _forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, deterministic,
                  impl):
    return (q.new_empty(ops.out_shape(q, v)),
            q.new_empty(ops.lse_shape(q, cu_seqlens_q is not None), dtype=state_dtype(q)))


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
              cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, out: torch.Tensor,
              lse: torch.Tensor, dout: torch.Tensor, d_lse: Optional[torch.Tensor], scale: float, causal: bool,
              deterministic: bool, impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return ops.backward(XP, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse, dout, d_lse,
                        scale, causal, deterministic, impl)


def _backward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse, dout, d_lse, scale,
                   causal, deterministic, impl):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, deterministic, impl = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse)
    ctx.max_seqlen = (max_seqlen_q, max_seqlen_k)
    ctx.scale, ctx.causal, ctx.deterministic, ctx.impl = scale, causal, deterministic, impl


def _make_backward(run_backward):
    def backward(ctx, dout, d_lse):
        q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse = ctx.saved_tensors
        # lse is an output too: a caller that uses it downstream sends its gradient here.
        # An unused output's gradient is None in eager mode (no zeros are materialized).
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = run_backward(q, k, v, cu_seqlens_q, cu_seqlens_k, *ctx.max_seqlen, out, lse, dout.contiguous(),
                                  None if d_lse is None else d_lse.contiguous(), ctx.scale, ctx.causal,
                                  ctx.deterministic, ctx.impl)
        return dq, dk, dv, None, None, None, None, None, None, None, None

    return backward


_op = TorchOp("attention", _forward, _forward_fake, _backward, _backward_fake, _setup_context, _make_backward,
              materialize_grads=False)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False, deterministic=False,
                    impl="automatic"):
    """torch version of :func:`seqmix.flash_attn_func` (same arguments), differentiable in
    q, k and v (and through the returned lse when it is used)."""
    out, lse = _op(q, k, v, None, None, 0, 0, ops.default_scale(q, softmax_scale), causal, deterministic, impl)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                           causal=False, return_lse=False, deterministic=False, impl="automatic"):
    """torch version of :func:`seqmix.flash_attn_varlen_func` (same arguments; cu_seqlens
    on the CPU for CPU inputs, on q's device for CUDA inputs), differentiable in q, k and v
    (on the CPU and on CUDA)."""
    out, lse = _op(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                   ops.default_scale(q, softmax_scale), causal, deterministic, impl)
    return (out, lse) if return_lse else out
