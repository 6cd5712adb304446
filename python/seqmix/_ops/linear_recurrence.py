"""Dense linear recurrence h_t = A_t h_{t-1} + b_t: allocation and _C calls."""

from __future__ import annotations

from .. import _C
from .._backend import NUMPY, is_torch, torch_module

METHODS = ("auto", "sequential", "chunked", "scan", "cyclic_reduction")


def _workspace(xp, b, method, backward):
    """f32 scratch for a CUDA call (None on the CPU, which needs none)."""
    if not xp.is_cuda(b):
        return None
    G, T, n, m = b.shape
    dtype = "bf16" if str(xp.dtype(b)).endswith("bfloat16") else "f32"  # CUDA takes only these two
    return xp.empty((_C.linear_recurrence_workspace_size(G, T, n, m, dtype, backward, method),), xp.float32, b)


def forward(xp, A, b, initial_state, method, impl):
    """Returns (h [G, T, n, m], final_state [G, n, m]), both in b's dtype."""
    h = xp.empty_like(b)
    final_state = xp.empty((b.shape[0], b.shape[2], b.shape[3]), xp.dtype(b), b)
    _C.linear_recurrence_forward(xp.arg(A), xp.arg(b), xp.arg(initial_state), xp.arg(h), xp.arg(final_state),
                                 xp.arg(_workspace(xp, b, method, False)), method, impl, xp.stream(b))
    return h, final_state


def backward(xp, A, b, initial_state, dh, d_final_state, method, impl, states=None):
    """Returns (dA, db, d_initial_state or None). `states`, when given, is the h the
    forward returned for these inputs: the CUDA chunked backward then reads it instead of
    recomputing it (one reverse chain instead of two)."""
    dA, db = xp.empty_like(A), xp.empty_like(b)
    dh0 = None if initial_state is None else xp.empty_like(initial_state)
    _C.linear_recurrence_backward(xp.arg(A), xp.arg(b), xp.arg(initial_state), xp.arg(dh), xp.arg(d_final_state),
                                  xp.arg(dA), xp.arg(db), xp.arg(dh0), xp.arg(_workspace(xp, b, method, True)),
                                  xp.arg(states), method, impl, xp.stream(b))
    return dA, db, dh0


def linear_recurrence(A, b, h0=None, method="auto", output_final_state=False, impl="automatic"):
    """Dense linear recurrence ``h_t = A_t h_{t-1} + b_t`` for ``t = 1..T``, per group.

    Args:
        A: ``[G, T, n, n]`` transitions; bf16, fp16, fp32 or fp64 (A, b and h0 share
            this dtype; numpy has no bf16, use torch for it).
        b: ``[G, T, n, m]`` inputs; ``m = 1`` for a vector state, more for a matrix
            state whose columns evolve independently under the same ``A_t``.
        h0: optional ``[G, n, m]`` initial state (zeros when absent).
        method: how the fast path computes it; all give the same result up to rounding:
            ``"auto"`` (the fastest measured for the shape and device: on the CPU see
            ``bench/cpu_linear_recurrence.md``; on CUDA the table of H100 forward times
            in ``src/cuda/linear_recurrence/params.hpp``: chunked for n ≤ 64, m ≤ 8 up to
            G ≈ 32 (n = 32: always) and for n ≤ 64 with m a multiple of 8 up to 64;
            otherwise cyclic reduction at one group
            (chunked above T = 4096 for n > 32) and sequential at many groups), ``"sequential"`` (step by step),
            ``"chunked"`` (independent chunks, then a pass over chunk summaries; on
            CUDA with n ≤ 64 and m ≤ 8 or a multiple of 8 up to 64, its products run on
            the tensor cores, fp32 as three tf32 products, bf16 states as two bf16 parts,
            which costs accuracy on long products: relative
            errors near 1e-4 (n = 32) to 3e-4 (n = 64) at spectral radius 0.999 over
            2048–4096 steps in fp32, and 7e-4 in bf16, against 2e-6 and 8e-5 for the
            other methods — use ``"sequential"`` where that matters),
            ``"scan"`` (Hillis–Steele prefix scan of the affine maps) or
            ``"cyclic_reduction"`` (odd–even elimination). Ignored by
            ``impl="reference"``, which is always the float64 sequential oracle.
        output_final_state: also return the ``[G, n, m]`` state after step T
            (equal to ``h[:, -1]``).
        impl: ``"automatic"`` (the oracle for float64 inputs, the float32 fast path
            otherwise), ``"reference"`` (float64 oracle) or ``"fast"``.

    Returns:
        ``h`` ``[G, T, n, m]`` holding every state ``h_1..h_T`` in the input dtype, and
        the final state when ``output_final_state``.

    CUDA tensors need bf16 or fp32, ``n`` a multiple of 8 up to 128, and contiguous
    tensors; the parallel methods use float32 scratch (about ``G·T·n·(n + m)`` floats,
    twice that for the scan; the chunked method on tensor cores keeps only chunk
    summaries, about ``G·(T/64)·n·(n + 2m)`` floats), allocated here for the call like
    the outputs.

    numpy arrays give numpy results (forward only; see ``linear_recurrence_backward``);
    torch tensors go through ``seqmix.torch`` and are differentiable in A, b and h0,
    with torch.compile support.
    """
    if is_torch(b):
        return torch_module("linear_recurrence").linear_recurrence(A, b, h0, method, output_final_state, impl)
    h, final_state = forward(NUMPY, A, b, h0, method, impl)
    return (h, final_state) if output_final_state else h


def linear_recurrence_backward(A, b, dh, h0=None, d_final_state=None, method="auto", impl="automatic"):
    """Gradients of ``linear_recurrence`` for numpy arrays: returns ``(dA, db, dh0)``,
    ``dh0`` being ``None`` when ``h0`` was not given. ``dh`` ``[G, T, n, m]`` is the
    gradient with respect to every state; ``d_final_state`` ``[G, n, m]`` (optional) the
    gradient with respect to the final state. ``method`` and ``impl`` as in the forward:
    the reverse-time recurrence through ``A_tᵀ`` runs with the same method."""
    return backward(NUMPY, A, b, h0, dh, d_final_state, method, impl)
