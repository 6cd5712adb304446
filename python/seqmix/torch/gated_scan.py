"""torch ops for the gated scan: custom ops with fake kernels and autograd, and an eager path."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import gated_scan as ops
from ._common import XP, TorchOp, absent, fake_grad, num_sequences, present, state_dtype


# keep_final_state: without it the final state is neither allocated nor written (an empty
# tensor stands for it).
def _forward(a: torch.Tensor, b: torch.Tensor, z: Optional[torch.Tensor], initial_state: Optional[torch.Tensor],
             cu_seqlens: Optional[torch.Tensor], decay: str, impl: str,
             keep_final_state: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, final_state, tile_states = ops.forward(XP, a, b, z, initial_state, cu_seqlens, decay, impl,
                                              keep_tile_states=True, keep_final_state=keep_final_state)
    return y, present(final_state, b, state_dtype(b)), present(tile_states, b)


def _tile_states_like(b, cu_seqlens):
    """What the forward keeps for the backward: tile states on CUDA, nothing on the CPU."""
    if b.device.type != "cuda":
        return b.new_empty((0,))
    return b.new_empty(ops.tile_states_shape(b, cu_seqlens), dtype=torch.float32)


def _forward_fake(a, b, z, initial_state, cu_seqlens, decay, impl, keep_final_state):
    final_shape = (num_sequences(b.shape[0], cu_seqlens), b.shape[-1]) if keep_final_state else (0,)
    return torch.empty_like(b), b.new_empty(final_shape, dtype=state_dtype(b)), _tile_states_like(b, cu_seqlens)


def _backward(a: torch.Tensor, b: torch.Tensor, z: Optional[torch.Tensor], initial_state: Optional[torch.Tensor],
              cu_seqlens: Optional[torch.Tensor], dy: torch.Tensor, d_final_state: Optional[torch.Tensor],
              tile_states: Optional[torch.Tensor], decay: str,
              impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    da, db, dz, dh0 = ops.backward(XP, a, b, z, initial_state, cu_seqlens, dy, d_final_state, decay, impl,
                                   tile_states)
    return da, db, present(dz, b), present(dh0, b)


def _backward_fake(a, b, z, initial_state, cu_seqlens, dy, d_final_state, tile_states, decay, impl):
    return torch.empty_like(a), torch.empty_like(b), fake_grad(z, b), fake_grad(initial_state, b)


def _setup_context(ctx, inputs, output):
    a, b, z, initial_state, cu_seqlens, decay, impl, _ = inputs
    ctx.save_for_backward(a, b, z, initial_state, cu_seqlens, output[2])
    ctx.decay, ctx.impl = decay, impl


def _make_backward(run_backward):
    def backward(ctx, dy, d_final_state, _d_tile_states):
        a, b, z, initial_state, cu_seqlens, tile_states = ctx.saved_tensors
        if dy is None:  # only the final state reached the loss (eager mode, see TorchOp)
            dy = torch.zeros_like(b)
        # A final state not kept is an empty output, whose gradient (compiled: an empty tensor) is none.
        if d_final_state is not None and d_final_state.numel() == 0:
            d_final_state = None
        kept = tile_states if tile_states.numel() > 0 else None
        da, db, dz, dh0 = run_backward(a, b, z, initial_state, cu_seqlens, dy, d_final_state, kept, ctx.decay,
                                       ctx.impl)
        return da, db, absent(dz, z), absent(dh0, initial_state), None, None, None, None

    return backward


# An unused final state sends no gradient: the backward skips its zeros.
_op = TorchOp("gated_scan", _forward, _forward_fake, _backward, _backward_fake, _setup_context, _make_backward,
              materialize_grads=False)


def gated_scan(a, b, z=None, initial_state=None, output_final_state=False, cu_seqlens=None, decay="direct",
               impl="automatic"):
    """torch version of :func:`seqmix.gated_scan` (same arguments), differentiable in
    a, b, z and initial_state."""
    y, final_state, _ = _op(a, b, z, initial_state, cu_seqlens, decay, impl, bool(output_final_state))
    return (y, final_state) if output_final_state else y
