"""Gated diagonal scan with optional SiLU output gate: allocation and _C calls."""

from __future__ import annotations

from .. import _C
from .._backend import NUMPY, is_torch, num_sequences, state_dtype, torch_module


def _workspace(xp, b, cu_seqlens):
    """Scratch for a CUDA call (None on the CPU, which needs none)."""
    if not xp.is_cuda(b):
        return None
    size = _C.gated_scan_workspace_size(b.shape[0], b.shape[1], num_sequences(b.shape[0], cu_seqlens), b.shape[-1])
    return xp.empty((size,), xp.float32, b)


def tile_states_shape(b, cu_seqlens):
    """[rows, D]: the CUDA forward's record of the state entering each tile. The same
    formula as the C++ gated_scan_tile_states_shape, written here so that symbolic shapes
    (torch.compile with dynamic shapes) trace through the fake kernel."""
    B, T, D = b.shape
    steps = _C.GATED_SCAN_TILE_STEPS
    return ((B * T + steps - 1) // steps + num_sequences(B, cu_seqlens), D)


def forward(xp, a, b, z, initial_state, cu_seqlens, decay, impl, keep_tile_states=False, keep_final_state=True):
    """Returns (y [B, T, D] in b's dtype, final_state [N, D] in the state dtype or None
    without `keep_final_state` (then it is neither allocated nor written), and the tile
    states for the backward — None unless kept, which only CUDA does)."""
    y = xp.empty_like(b)
    final_state = None
    if keep_final_state:
        final_state = xp.empty((num_sequences(b.shape[0], cu_seqlens), b.shape[-1]), state_dtype(xp, b), b)
    tile_states = None
    if keep_tile_states and xp.is_cuda(b):
        tile_states = xp.empty(tile_states_shape(b, cu_seqlens), xp.float32, b)
    _C.gated_scan_forward(xp.arg(a), xp.arg(b), xp.arg(z), xp.arg(initial_state), xp.arg(cu_seqlens),
                          xp.arg(y), xp.arg(final_state), xp.arg(_workspace(xp, b, cu_seqlens)), xp.arg(tile_states),
                          decay, impl, xp.stream(b))
    return y, final_state, tile_states


def backward(xp, a, b, z, initial_state, cu_seqlens, dy, d_final_state, decay, impl, tile_states=None):
    """Returns (da, db, dz or None, d_initial_state or None). tile_states: what a
    forward on the same inputs kept, or None to recompute."""
    da, db = xp.empty_like(a), xp.empty_like(b)
    dz = None if z is None else xp.empty_like(z)
    dh0 = None if initial_state is None else xp.empty_like(initial_state)
    workspace = _workspace(xp, b, cu_seqlens)
    _C.gated_scan_backward(xp.arg(a), xp.arg(b), xp.arg(z), xp.arg(initial_state), xp.arg(cu_seqlens),
                           xp.arg(dy), xp.arg(d_final_state), xp.arg(da), xp.arg(db), xp.arg(dz), xp.arg(dh0),
                           xp.arg(workspace), xp.arg(tile_states), decay, impl, xp.stream(b))
    return da, db, dz, dh0


def gated_scan(a, b, z=None, initial_state=None, output_final_state=False, cu_seqlens=None,
               decay="direct", impl="automatic"):
    """Gated diagonal scan ``h_t = a_t * h_{t-1} + b_t`` with output ``y_t = h_t * SiLU(z_t)``.

    Args:
        a: ``[B, T, D]`` decay inputs, read as ``decay`` says.
        b: ``[B, T, D]`` inputs; bf16, fp16, fp32 or fp64 (all inputs share this dtype).
        z: optional ``[B, T, D]`` output gate; without it ``y_t = h_t``.
        initial_state: optional ``[N, D]`` float32 state (float64 with float64 inputs).
        output_final_state: also return the ``[N, D]`` state after the last token.
        cu_seqlens: optional ``[N + 1]`` int32/int64 offsets for variable length (B == 1).
        decay: ``"direct"`` (a in (0, 1) is the factor), ``"log"`` (the factor is
            ``exp(a)``, a <= 0, as fla's ``chunk_hgrn``) or ``"logit"`` (the factor is
            ``sigmoid(a)``: a projection's raw output, with the activation fused).
        impl: ``"automatic"``, ``"reference"`` (float64 oracle) or ``"fast"``.

    Returns:
        ``y`` ``[B, T, D]`` in b's dtype, and the final state when ``output_final_state``.

    numpy arrays give numpy results (forward only; see ``gated_scan_backward``); torch
    tensors go through ``seqmix.torch`` with autograd and torch.compile support.
    """
    if is_torch(b):
        return torch_module("gated_scan").gated_scan(
            a, b, z, initial_state, output_final_state, cu_seqlens, decay, impl)
    y, final_state, _ = forward(NUMPY, a, b, z, initial_state, cu_seqlens, decay, impl,
                                keep_final_state=output_final_state)
    return (y, final_state) if output_final_state else y


def gated_scan_backward(a, b, dy, z=None, initial_state=None, d_final_state=None, cu_seqlens=None,
                        decay="direct", impl="automatic"):
    """Gradients of ``gated_scan`` for numpy arrays: returns ``(da, db, dz, d_initial_state)``,
    with ``None`` for an input that was not given. ``dy`` is ``[B, T, D]``;
    ``d_final_state`` ``[N, D]`` is optional."""
    return backward(NUMPY, a, b, z, initial_state, cu_seqlens, dy, d_final_state, decay, impl)
