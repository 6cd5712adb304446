"""torch ops for the dense linear recurrence: custom ops with fake kernels and autograd, and an eager path."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import linear_recurrence as ops
from ._common import XP, TorchOp, absent, fake_grad, present


def _forward(A: torch.Tensor, b: torch.Tensor, initial_state: Optional[torch.Tensor], method: str,
             impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    return ops.forward(XP, A, b, initial_state, method, impl)


def _forward_fake(A, b, initial_state, method, impl):
    return torch.empty_like(b), b.new_empty((b.shape[0], b.shape[2], b.shape[3]))


def _backward(A: torch.Tensor, b: torch.Tensor, initial_state: Optional[torch.Tensor], dh: torch.Tensor,
              d_final_state: torch.Tensor, h: torch.Tensor, method: str,
              impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dA, db, dh0 = ops.backward(XP, A, b, initial_state, dh, d_final_state, method, impl, states=h)
    return dA, db, present(dh0, b)


def _backward_fake(A, b, initial_state, dh, d_final_state, h, method, impl):
    return torch.empty_like(A), torch.empty_like(b), fake_grad(initial_state, b)


def _setup_context(ctx, inputs, output):
    # h is kept (it is the forward's output, so this costs no memory of its own): the
    # backward reads it instead of recomputing the states.
    A, b, initial_state, method, impl = inputs
    ctx.save_for_backward(A, b, initial_state, output[0])
    ctx.method, ctx.impl = method, impl


def _make_backward(run_backward):
    def backward(ctx, dh, d_final_state):
        A, b, initial_state, h = ctx.saved_tensors
        dA, db, dh0 = run_backward(A, b, initial_state, dh.contiguous(), d_final_state.contiguous(), h, ctx.method,
                                   ctx.impl)
        return dA, db, absent(dh0, initial_state), None, None

    return backward


_op = TorchOp("linear_recurrence", _forward, _forward_fake, _backward, _backward_fake, _setup_context,
              _make_backward)


def linear_recurrence(A, b, h0=None, method="auto", output_final_state=False, impl="automatic"):
    """torch version of :func:`seqmix.linear_recurrence` (same arguments), differentiable
    in A, b and h0."""
    h, final_state = _op(A, b, h0, method, impl)
    return (h, final_state) if output_final_state else h
