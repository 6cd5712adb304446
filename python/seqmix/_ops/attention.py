"""Exact attention (flash-attn's API): allocation and _C calls for numpy and torch."""

from __future__ import annotations

from .. import _C
from .._backend import NUMPY, is_torch, state_dtype, torch_module


def default_scale(q, softmax_scale):
    """``softmax_scale`` or, when it is None, ``D ** -0.5`` with D the head dim of q."""
    return float(q.shape[-1]) ** -0.5 if softmax_scale is None else float(softmax_scale)


def out_shape(q, v):
    """q's shape with v's head dim: [B, Sq, Hq, Dv] or [total_q, Hq, Dv]."""
    return tuple(q.shape[:-1]) + (v.shape[-1],)


def lse_shape(q, varlen):
    """[B, Hq, Sq], or [Hq, total_q] for variable length. An input of the wrong rank gets
    an empty placeholder so that _C reports the rank of q itself."""
    if q.ndim != (3 if varlen else 4):
        return (0,)
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


def forward(xp, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, impl):
    """Returns (out in q's dtype, lse in float32, or float64 for float64 inputs)."""
    out = xp.empty(out_shape(q, v), xp.dtype(q), q)
    lse = xp.empty(lse_shape(q, cu_seqlens_q is not None), state_dtype(xp, q), q)
    _C.attention_forward(xp.arg(q), xp.arg(k), xp.arg(v), xp.arg(cu_seqlens_q), xp.arg(cu_seqlens_k),
                         int(max_seqlen_q), int(max_seqlen_k), xp.arg(out), xp.arg(lse), scale, causal, impl,
                         xp.stream(q))
    return out, lse


def backward(xp, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse, dout, d_lse, scale,
             causal, deterministic, impl):
    """Returns (dq, dk, dv), each like its input."""
    dq, dk, dv = xp.empty_like(q), xp.empty_like(k), xp.empty_like(v)
    _C.attention_backward(xp.arg(q), xp.arg(k), xp.arg(v), xp.arg(cu_seqlens_q), xp.arg(cu_seqlens_k),
                          int(max_seqlen_q), int(max_seqlen_k), xp.arg(out), xp.arg(lse), xp.arg(dout),
                          xp.arg(d_lse), xp.arg(dq), xp.arg(dk), xp.arg(dv), scale, causal, deterministic, impl,
                          xp.stream(q))
    return dq, dk, dv


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_lse=False, deterministic=False,
                    impl="automatic"):
    """Exact attention ``O = softmax(scale * Q K^T + mask) V`` per batch row and query head,
    with flash-attn's ``flash_attn_func`` interface.

    Args:
        q: ``[B, Sq, Hq, D]`` queries; bf16, fp16, fp32 or fp64 (q, k, v share one dtype).
            CUDA tensors (Hopper): bf16 or fp16, ``D == Dv`` in {64, 128, 256}, 16-byte
            aligned with strides that are multiples of 8 elements; the CUDA backward takes
            every one of these ``D``, deterministic or not.
        k: ``[B, Sk, Hkv, D]`` keys. ``Hq % Hkv == 0``: query head ``h`` reads kv head
            ``h // (Hq // Hkv)`` (GQA; MQA when ``Hkv == 1``).
        v: ``[B, Sk, Hkv, Dv]`` values (``Dv`` may differ from ``D``).
        softmax_scale: multiplies ``Q K^T``; ``None`` means ``D ** -0.5``.
        causal: bottom-right aligned causal mask (flash-attn >= 2.1): query ``i`` sees key
            ``j`` iff ``j <= i + Sk - Sq``. A query that sees no key gets ``out = 0`` and
            ``lse = -inf``.
        return_lse: also return the log-sum-exp of each score row.
        deterministic: CUDA backward only (the CPU one is always deterministic): ``True``
            makes each query block's dq adds in a fixed order, so the gradients repeat
            bitwise (every head dim); ``False`` (faster) adds dq in whatever order the
            blocks finish, so its last bits may vary between runs.
        impl: ``"automatic"``, ``"reference"`` (float64 oracle) or ``"fast"`` (float32, the
            FlashAttention form: 64-key tiles with an online softmax).

    Returns:
        ``out`` ``[B, Sq, Hq, Dv]`` in q's dtype, and with ``return_lse`` also ``lse``
        ``[B, Hq, Sq]`` (natural log; float32, float64 for float64 inputs).

    numpy arrays give numpy results (forward only; see ``attention_backward``); torch
    tensors go through ``seqmix.torch`` and are differentiable in q, k and v.
    """
    if is_torch(q):
        return torch_module("attention").flash_attn_func(
            q, k, v, softmax_scale, causal, return_lse, deterministic, impl)
    out, lse = forward(NUMPY, q, k, v, None, None, 0, 0, default_scale(q, softmax_scale), causal, impl)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                           causal=False, return_lse=False, deterministic=False, impl="automatic"):
    """Exact attention over packed sequences of different lengths, with flash-attn's
    ``flash_attn_varlen_func`` interface.

    Sequence ``n`` takes rows ``cu_seqlens_q[n]:cu_seqlens_q[n+1]`` of q against rows
    ``cu_seqlens_k[n]:cu_seqlens_k[n+1]`` of k and v; sequences never see each other.

    Args:
        q: ``[total_q, Hq, D]``; bf16, fp16, fp32 or fp64 (q, k, v share one dtype).
        k: ``[total_k, Hkv, D]`` with ``Hq % Hkv == 0`` (GQA/MQA as in ``flash_attn_func``).
        v: ``[total_k, Hkv, Dv]``.
        cu_seqlens_q, cu_seqlens_k: ``[N + 1]`` int32/int64 offsets, starting at 0, strictly
            increasing (no empty sequence), ending at total_q / total_k; on the CPU for CPU
            inputs, on q's device for CUDA inputs (read back once for validation).
        max_seqlen_q, max_seqlen_k: the longest query / key sequence (checked to be at
            least the real maxima).
        softmax_scale: multiplies ``Q K^T``; ``None`` means ``D ** -0.5``.
        causal: bottom-right aligned per sequence, as in ``flash_attn_func``.
        return_lse: also return the log-sum-exp of each score row.
        deterministic: CUDA backward only (the CPU one is always deterministic): ``True``
            makes each query block's dq adds in a fixed order, so the gradients repeat
            bitwise (every head dim); ``False`` (faster) adds dq in whatever order the
            blocks finish, so its last bits may vary between runs.
        impl: ``"automatic"``, ``"reference"`` (float64 oracle) or ``"fast"``.

    Returns:
        ``out`` ``[total_q, Hq, Dv]`` in q's dtype, and with ``return_lse`` also ``lse``
        ``[Hq, total_q]`` (float32, float64 for float64 inputs).
    """
    if is_torch(q):
        return torch_module("attention").flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, return_lse,
            deterministic, impl)
    out, lse = forward(NUMPY, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       default_scale(q, softmax_scale), causal, impl)
    return (out, lse) if return_lse else out


def attention_backward(dout, q, k, v, out, lse, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
                       max_seqlen_k=0, softmax_scale=None, causal=False, d_lse=None, deterministic=False,
                       impl="automatic"):
    """Gradients of ``flash_attn_func`` / ``flash_attn_varlen_func`` for numpy arrays:
    returns ``(dq, dk, dv)``, each like its input.

    ``out`` and ``lse`` are what the forward returned for these inputs (``return_lse=True``);
    ``dout`` is like ``out``; ``d_lse`` (like ``lse``, optional) is a gradient reaching the
    log-sum-exp itself. The remaining arguments are the forward's. For GQA, dk and dv sum
    over the query heads that share each kv head.
    """
    return backward(NUMPY, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse, dout, d_lse,
                    default_scale(q, softmax_scale), causal, deterministic, impl)
