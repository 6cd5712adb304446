"""torch ops for gated linear attention: custom ops with fake kernels and autograd, and an eager path."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import gla as ops
from ._common import XP, TorchOp, absent, contiguous_or_none, fake_grad, present, state_dtype


# save_states: the forward also returns the states entering each chunk and each chunk's scores
# A, which the backward reads instead of walking the sequence again and forming A again;
# otherwise empty tensors stand for them (see ``present``). chunk_gla asks for them when a
# backward will follow, on CUDA, for fixed-length batches (the fake kernel sizes the table
# from T alone), where it measured faster: K = 128 with V a multiple of 128 (forward+backward
# −8 to −15 % on the H100, src/cuda/gla/NOTES.md v19), and K = V = 64 since the gradient kernel
# reads the saved scores and factors its chunks (NOTES.md v62). K = 256's key blocks make the
# table by the backward's own walk anyway, so it keeps the backward's walk, as do the other
# K = 64 widths (not measured).
def _saves_states(q, v, cu_seqlens) -> bool:
    K, V = q.shape[-1], v.shape[-1]
    return q.is_cuda and cu_seqlens is None and ((K == 128 and V % 128 == 0) or (K == 64 and V == 64))


# keep_final_state: without it the final state is neither allocated nor written (an empty
# tensor stands for it), as fla skips it without output_final_state.
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], scale: float, impl: str,
             save_states: bool,
             keep_final_state: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    o, final_state, chunk_states, chunk_scores = ops.forward(XP, q, k, v, g, initial_state, cu_seqlens, scale, impl,
                                                             save_states, keep_final_state)
    return o, present(final_state, q, state_dtype(q)), present(chunk_states, q), present(chunk_scores, q)


def _forward_fake(q, k, v, g, initial_state, cu_seqlens, scale, impl, save_states, keep_final_state):
    chunk_states = q.new_empty(ops.chunk_states_shape(q, v)) if save_states else q.new_empty((0,))
    scores = save_states and ops.saves_scores(q)
    chunk_scores = q.new_empty(ops.chunk_scores_shape(q, v)) if scores else q.new_empty((0,))
    final_state = q.new_empty(ops.state_shape(q, v, cu_seqlens), dtype=state_dtype(q)) if keep_final_state else None
    return v.new_empty(v.shape, dtype=q.dtype), present(final_state, q, state_dtype(q)), chunk_states, chunk_scores


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
              initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], do: torch.Tensor,
              d_final_state: Optional[torch.Tensor], chunk_states: Optional[torch.Tensor],
              chunk_scores: Optional[torch.Tensor], scale: float,
              impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv, dg, dh0 = ops.backward(XP, q, k, v, g, initial_state, cu_seqlens, do, d_final_state, scale, impl,
                                       chunk_states, chunk_scores)
    return dq, dk, dv, dg, present(dh0, q)


def _backward_fake(q, k, v, g, initial_state, cu_seqlens, do, d_final_state, chunk_states, chunk_scores, scale,
                   impl):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(g),
            fake_grad(initial_state, q))


def _setup_context(ctx, inputs, output):
    q, k, v, g, initial_state, cu_seqlens, scale, impl, _, _ = inputs
    ctx.mark_non_differentiable(output[2], output[3])
    ctx.save_for_backward(q, k, v, g, initial_state, cu_seqlens, output[2], output[3])
    ctx.scale, ctx.impl = scale, impl


def _make_backward(run_backward):
    def backward(ctx, do, d_final_state, _d_chunk_states, _d_chunk_scores):
        q, k, v, g, initial_state, cu_seqlens, chunk_states, chunk_scores = ctx.saved_tensors
        if do is None:  # only the final state reached the loss (eager mode, see TorchOp)
            do = v.new_zeros(v.shape, dtype=q.dtype)
        # A final state not kept is an empty output, whose gradient (compiled: an empty tensor) is none.
        if d_final_state is not None and d_final_state.numel() == 0:
            d_final_state = None
        kept_states = chunk_states if chunk_states.numel() > 0 else None
        kept_scores = chunk_scores if chunk_scores.numel() > 0 else None
        dq, dk, dv, dg, dh0 = run_backward(q, k, v, g, initial_state, cu_seqlens, do.contiguous(),
                                           contiguous_or_none(d_final_state), kept_states, kept_scores, ctx.scale,
                                           ctx.impl)
        return dq, dk, dv, dg, absent(dh0, initial_state), None, None, None, None, None

    return backward


# An unused final state sends no gradient: the backward skips its zeros.
_op = TorchOp("gla", _forward, _forward_fake, _backward, _backward_fake, _setup_context, _make_backward,
              materialize_grads=False)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False,
              cu_seqlens=None, cu_seqlens_cpu=None, *, impl="automatic"):
    """torch version of :func:`seqmix.chunk_gla` (same arguments and results), differentiable
    in q, k, v, g and initial_state."""
    ops.check_host_offsets(cu_seqlens, cu_seqlens_cpu)
    if state_v_first and initial_state is not None:  # [N, H, V, K] -> the kernels' [N, H, K, V]
        initial_state = initial_state.transpose(-1, -2).contiguous()
    args = (q, k, v, g, initial_state, cu_seqlens, ops.default_scale(q, scale), impl)
    save_states = _saves_states(q, v, cu_seqlens) and _op.needs_autograd(args)
    o, final_state, _, _ = _op(*args, save_states, bool(output_final_state))
    if not output_final_state:
        return o, None
    return o, (final_state.transpose(-1, -2) if state_v_first else final_state)
