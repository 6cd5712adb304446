"""torch custom ops for the gated scan, with fake kernels and autograd."""

from __future__ import annotations

from typing import Optional

import torch

from .._ops import gated_scan as ops
from ._common import XP, absent, eager_function, num_sequences, present, state_dtype


def _forward_impl(a: torch.Tensor, b: torch.Tensor, z: Optional[torch.Tensor], initial_state: Optional[torch.Tensor],
                  cu_seqlens: Optional[torch.Tensor], decay: str,
                  impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, final_state, tile_states = ops.forward(XP, a, b, z, initial_state, cu_seqlens, decay, impl,
                                              keep_tile_states=True)
    return y, final_state, present(tile_states, b)


_forward = torch.library.custom_op("seqmix::gated_scan_fwd", _forward_impl, mutates_args=())


def _tile_states_like(b, cu_seqlens):
    """What the forward keeps for the backward: tile states on CUDA, nothing on the CPU."""
    if b.device.type != "cuda":
        return b.new_empty((0,))
    return b.new_empty(ops.tile_states_shape(b, cu_seqlens), dtype=torch.float32)


@_forward.register_fake
def _(a, b, z, initial_state, cu_seqlens, decay, impl):
    return (torch.empty_like(b),
            b.new_empty((num_sequences(b.shape[0], cu_seqlens), b.shape[-1]), dtype=state_dtype(b)),
            _tile_states_like(b, cu_seqlens))


def _backward_impl(a: torch.Tensor, b: torch.Tensor, z: Optional[torch.Tensor], initial_state: Optional[torch.Tensor],
                   cu_seqlens: Optional[torch.Tensor], dy: torch.Tensor, d_final_state: torch.Tensor,
                   tile_states: Optional[torch.Tensor], decay: str,
                   impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    da, db, dz, dh0 = ops.backward(XP, a, b, z, initial_state, cu_seqlens, dy, d_final_state, decay, impl,
                                   tile_states)
    return da, db, present(dz, b), present(dh0, b)


_backward = torch.library.custom_op("seqmix::gated_scan_bwd", _backward_impl, mutates_args=())


@_backward.register_fake
def _(a, b, z, initial_state, cu_seqlens, dy, d_final_state, tile_states, decay, impl):
    return (torch.empty_like(a), torch.empty_like(b), present(None if z is None else torch.empty_like(z), b),
            present(None if initial_state is None else torch.empty_like(initial_state), b))


def _setup_context(ctx, inputs, output):
    a, b, z, initial_state, cu_seqlens, decay, impl = inputs
    ctx.save_for_backward(a, b, z, initial_state, cu_seqlens, output[2])
    ctx.decay, ctx.impl = decay, impl


def _autograd_backward(run_backward):
    """The autograd backward, running `run_backward`: the custom op where torch.compile
    traces it, the bare implementation in eager mode."""

    def backward(ctx, dy, d_final_state, _d_tile_states):
        a, b, z, initial_state, cu_seqlens, tile_states = ctx.saved_tensors
        kept = tile_states if tile_states.numel() > 0 else None
        if d_final_state is None:  # the eager Function does not materialise unused gradients
            d_final_state = torch.zeros((num_sequences(b.shape[0], cu_seqlens), b.shape[-1]), dtype=state_dtype(b),
                                        device=b.device)
        da, db, dz, dh0 = run_backward(a, b, z, initial_state, cu_seqlens, dy, d_final_state, kept, ctx.decay,
                                       ctx.impl)
        return da, db, absent(dz, z), absent(dh0, initial_state), None, None, None

    return backward


_forward.register_autograd(_autograd_backward(_backward), setup_context=_setup_context)
_Eager = eager_function(_forward_impl, _setup_context, _autograd_backward(_backward_impl))


def gated_scan(a, b, z=None, initial_state=None, output_final_state=False, cu_seqlens=None, decay="direct",
               impl="automatic"):
    """torch version of :func:`seqmix.gated_scan` (same arguments), differentiable in
    a, b, z and initial_state."""
    if torch.compiler.is_compiling():
        run = _forward
    elif torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a, b, z, initial_state)):
        run = _Eager.apply
    else:  # nothing to differentiate: the implementation itself, without autograd's bookkeeping
        run = _forward_impl
    y, final_state, _ = run(a, b, z, initial_state, cu_seqlens, decay, impl)
    return (y, final_state) if output_final_state else y
