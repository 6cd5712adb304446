"""Gated linear attention (fla's chunk_gla): allocation and _C calls."""

from __future__ import annotations

import numpy as np

from .. import _C
from .._backend import NUMPY, is_torch, num_sequences, state_dtype, torch_module


def state_shape(q, v, cu_seqlens):
    """[N, H, K, V]: one [K, V] state per sequence and head."""
    return (num_sequences(q.shape[0], cu_seqlens), q.shape[2], q.shape[3], v.shape[3])


CHUNK = 64  # tokens a chunk of the CUDA kernels


def chunk_states_shape(q, v):
    """[B, H, C, K, V], C = ceil(T / 64): the state entering every chunk of each sequence
    (fixed-length batches; the C++ API also takes variable-length ones)."""
    return (q.shape[0], q.shape[2], -(-q.shape[1] // CHUNK), q.shape[3], v.shape[3])


def chunk_scores_shape(q, v):
    """[B, H, C, 64, 64]: every chunk's scores A (the causal, decay-weighted q k^T block of its
    64 tokens) of each sequence and head, which the forward saves beside the chunk states at
    K <= 128 so that the backward need not form them again."""
    return (q.shape[0], q.shape[2], -(-q.shape[1] // CHUNK), CHUNK, CHUNK)


def saves_scores(q):
    """Whether a forward that saves its chunk states saves its chunk scores too: K <= 128
    (K = 256 runs as two key blocks, whose scores the kernels do not keep)."""
    return q.shape[3] <= 128


def default_scale(q, scale):
    """fla's default: K^-0.5."""
    return q.shape[-1] ** -0.5 if scale is None else float(scale)


def forward(xp, q, k, v, g, initial_state, cu_seqlens, scale, impl, save_states=False, keep_final_state=True):
    """Returns (o [B, T, H, V] in q's dtype, final_state [N, H, K, V] in the state dtype or
    None without `keep_final_state` (then it is neither allocated nor written), chunk_states,
    chunk_scores): with `save_states` (CUDA, fixed length) the [B, H, C, K, V] states entering
    each chunk in q's dtype, for ``backward``, and where ``saves_scores`` the [B, H, C, 64, 64]
    chunk scores beside them; else None."""
    o = xp.empty(tuple(v.shape), xp.dtype(q), q)
    final_state = xp.empty(state_shape(q, v, cu_seqlens), state_dtype(xp, q), q) if keep_final_state else None
    chunk_states = xp.empty(chunk_states_shape(q, v), xp.dtype(q), q) if save_states else None
    scores = save_states and saves_scores(q)
    chunk_scores = xp.empty(chunk_scores_shape(q, v), xp.dtype(q), q) if scores else None
    _C.gla_forward(xp.arg(q), xp.arg(k), xp.arg(v), xp.arg(g), xp.arg(initial_state), xp.arg(cu_seqlens),
                   xp.arg(o), xp.arg(final_state), xp.arg(chunk_states), xp.arg(chunk_scores), scale, impl,
                   xp.stream(q))
    return o, final_state, chunk_states, chunk_scores


def backward(xp, q, k, v, g, initial_state, cu_seqlens, do, d_final_state, scale, impl, chunk_states=None,
             chunk_scores=None):
    """Returns (dq, dk, dv, dg, d_initial_state or None). `chunk_states`, `chunk_scores`: the
    forward's saved states and scores on these same inputs, or None (then the backward
    recomputes them; scores only beside states)."""
    dq, dk, dv, dg = xp.empty_like(q), xp.empty_like(k), xp.empty_like(v), xp.empty_like(g)
    dh0 = None if initial_state is None else xp.empty_like(initial_state)
    _C.gla_backward(xp.arg(q), xp.arg(k), xp.arg(v), xp.arg(g), xp.arg(initial_state), xp.arg(cu_seqlens),
                    xp.arg(do), xp.arg(d_final_state), xp.arg(dq), xp.arg(dk), xp.arg(dv), xp.arg(dg),
                    xp.arg(dh0), xp.arg(chunk_states), xp.arg(chunk_scores), scale, impl, xp.stream(q))
    return dq, dk, dv, dg, dh0


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False,
              cu_seqlens=None, cu_seqlens_cpu=None, *, impl="automatic"):
    """Gated linear attention, ``S_t = diag(exp g_t) S_{t-1} + k_t^T v_t``, ``o_t = scale * q_t S_t``.

    Same arguments, in the same order, and results as fla's ``chunk_gla`` (fla 0.6), so that
    fla's ``GatedLinearAttention`` layer can call it in place of its own.

    Args:
        q: ``[B, T, H, K]`` queries; bf16, fp16, fp32 or fp64 (all inputs share this dtype).
        k: ``[B, T, H, K]`` keys.
        v: ``[B, T, H, V]`` values.
        g: ``[B, T, H, K]`` log decays, ``<= 0`` (e.g. a log-sigmoid), one per key channel.
        scale: multiplies ``q_t S_t``; ``None`` means ``K ** -0.5``.
        initial_state: optional ``[N, H, K, V]`` float32 state (float64 with float64 inputs),
            ``[N, H, V, K]`` with ``state_v_first``.
        output_final_state: also return the state after each sequence.
        state_v_first: the states (initial and final) laid out ``[N, H, V, K]`` instead of
            ``[N, H, K, V]``, as fla's layers keep them. The final state is then the
            transposed view of the ``[N, H, K, V]`` one, which a later call takes back as its
            initial state without a copy.
        cu_seqlens: optional ``[N + 1]`` int32/int64 offsets for variable length (B == 1);
            each sequence starts from its own initial state (zeros without one).
        cu_seqlens_cpu: fla's host copy of ``cu_seqlens``, accepted for its callers and
            checked for length; the kernels read ``cu_seqlens`` itself, so it is not needed.
        impl: ``"automatic"``, ``"reference"`` (float64 oracle, token by token) or
            ``"fast"`` (float32, chunkwise as on the GPU); keyword only.

    Returns:
        ``(o, final_state)``: ``o`` ``[B, T, H, V]`` in q's dtype; ``final_state``
        ``[N, H, K, V]`` (``[N, H, V, K]`` with ``state_v_first``; float32, float64 with
        float64 inputs), or ``None`` unless ``output_final_state``.

    numpy arrays give numpy results (forward only; see ``chunk_gla_backward``); torch
    tensors go through ``seqmix.torch`` with autograd and torch.compile support.
    """
    if is_torch(q):  # it checks cu_seqlens_cpu itself
        return torch_module("gla").chunk_gla(q, k, v, g, scale, initial_state, output_final_state, state_v_first,
                                             cu_seqlens, cu_seqlens_cpu, impl=impl)
    check_host_offsets(cu_seqlens, cu_seqlens_cpu)
    if state_v_first and initial_state is not None:
        initial_state = np.ascontiguousarray(np.swapaxes(initial_state, -1, -2))
    o, final_state = forward(NUMPY, q, k, v, g, initial_state, cu_seqlens, default_scale(q, scale), impl,
                             keep_final_state=output_final_state)[:2]
    if state_v_first and final_state is not None:
        final_state = np.swapaxes(final_state, -1, -2)
    return o, final_state


def check_host_offsets(cu_seqlens, cu_seqlens_cpu):
    """fla's ``cu_seqlens_cpu`` only goes with ``cu_seqlens``, with as many offsets."""
    if cu_seqlens_cpu is None:
        return
    if cu_seqlens is None:
        raise ValueError("chunk_gla: cu_seqlens_cpu was given without cu_seqlens")
    if len(cu_seqlens_cpu) != len(cu_seqlens):
        raise ValueError(f"chunk_gla: cu_seqlens_cpu has {len(cu_seqlens_cpu)} offsets and cu_seqlens "
                         f"{len(cu_seqlens)}")


def chunk_gla_backward(q, k, v, g, do, scale=None, initial_state=None, d_final_state=None, cu_seqlens=None,
                       impl="automatic"):
    """Gradients of ``chunk_gla`` for numpy arrays: returns ``(dq, dk, dv, dg, d_initial_state)``,
    ``d_initial_state`` ``None`` when no initial state was given. ``do`` is ``[B, T, H, V]``;
    ``d_final_state`` ``[N, H, K, V]`` is optional; the other arguments are as for ``chunk_gla``."""
    return backward(NUMPY, q, k, v, g, initial_state, cu_seqlens, do, d_final_state, default_scale(q, scale), impl)
