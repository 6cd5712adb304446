"""GPU cases of gated linear attention: seqmix.chunk_gla against fla's chunk_gla and
causal attention (PyTorch SDPA) on the same shapes.

Every builder takes ``device`` and ``dtype`` so the same cases run on CPU tensors with
tiny shapes in the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import seqmix

from .case import Case, Method

REFERENCE_HEADS = 2        # heads of the first sequence the float64 reference covers
REFERENCE_TOKENS = 1024    # leading tokens it covers (o_t depends on tokens ≤ t only)


def sequential_gla(q, k, v, g, scale):
    """The definition token by token (the float64 reference), one sequence:
    S_t = diag(exp g_t)·S_{t−1} + k_tᵀ v_t, o_t = scale·q_t S_t. q, k, g [T, H, K], v [T, H, V]."""
    S = q.new_zeros(q.shape[1], q.shape[2], v.shape[2])
    out = []
    for q_t, k_t, v_t, g_t in zip(q, k, v, g):
        S = g_t.exp()[..., None] * S + k_t[..., None] * v_t[:, None, :]
        out.append(scale * torch.einsum("hk,hkv->hv", q_t, S))
    return torch.stack(out)


def fla_chunk_gla(q, k, v, g, scale):
    """fla's chunk_gla on [B, T, H, D] inputs."""
    try:
        from fla.ops.gla import chunk_gla
    except Exception as e:  # absent, or its Triton stack fails to import here
        raise RuntimeError(f"fla is not importable ({type(e).__name__}: {e})") from e
    return chunk_gla(q, k, v, g, scale=scale)[0]


def causal_attention(q, k, v):
    """Causal softmax attention on the same [B, T, H, D] tensors (SDPA, cuDNN when it applies)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2)


def _dtype_name(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))


NOTES = (
    "Inputs [B, T, H, D]: q, k, v standard normal, q and k scaled by K^-1/4 (attention-like logits); "
    "g = log-sigmoid of a normal draw / 16 (log decays mostly in [−0.1, −0.02], as a trained GLA layer's); "
    "scale = K^-1/2.",
    "Methods: **seqmix** `seqmix.chunk_gla(q, k, v, g)`; **fla chunk_gla** `fla.ops.gla.chunk_gla` (Triton) on "
    "the same tensors; **causal attention** `F.scaled_dot_product_attention(..., is_causal=True)` on q, k, v "
    "(transposed views), the softmax layer GLA replaces.",
    "Bytes that must move for GLA's forward: q, k, g, v read and o written once, 2·B·T·H·(3K + 2V); the "
    "backward reads those and do, and writes dq, dk, dv, dg: 2·B·T·H·(7K + 4V) in all. Every method is "
    "given GLA's bytes, so GB/s and % put the times on one scale.",
    "Directions: **infer** the forward under `torch.no_grad()`; **fwd** the training forward (inputs "
    "requiring grad), in which seqmix also keeps the state entering every 64-token chunk for the backward "
    "(fla's forward writes its chunk states in both); **fwd+bwd** a training step.",
    f"max rel err: ‖o − ref‖/‖ref‖ on the first sequence's first {REFERENCE_HEADS} heads and first "
    f"{REFERENCE_TOKENS} tokens against a float64 token-by-token loop on the same bf16 inputs "
    "(causal attention: against float64 attention on the same slice).",
)


def gla_bytes(B, T, H, K, V, itemsize=2) -> dict:
    fwd = itemsize * B * T * H * (3 * K + 2 * V)
    bwd = itemsize * B * T * H * (7 * K + 4 * V)
    return {"infer": fwd, "fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}


def gla_case(B, T, H, K, V, device="cuda", dtype=torch.bfloat16, seed=0,
             directions=("infer", "fwd", "fwd+bwd")) -> Case:
    """chunk_gla on [B, T, H, K/V]: seqmix, fla and causal attention."""
    n_tokens, n_heads = min(T, REFERENCE_TOKENS), min(H, REFERENCE_HEADS)
    scale = K ** -0.5

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)

        def randn(*shape, s=1.0):
            return (torch.randn(shape, generator=gen, device=device) * s).to(dtype).requires_grad_()

        q, k = randn(B, T, H, K, s=K ** -0.25), randn(B, T, H, K, s=K ** -0.25)
        v = randn(B, T, H, V)
        g = F.logsigmoid(torch.randn((B, T, H, K), generator=gen, device=device) / 16 + 3).to(dtype)
        dy = torch.randn((B, T, H, V), generator=gen, device=device).to(dtype)
        return {"leaves": [q, k, v, g.requires_grad_()], "dy": dy}

    def references(inputs, name):
        def cut(t):
            return t.detach()[:1, :n_tokens, :n_heads].double()

        q, k, v, g = (cut(t) for t in inputs["leaves"])
        if name == "attention":
            return causal_attention(q, k, v)[0], [None] * 4
        return sequential_gla(q[0], k[0], v[0], g[0], scale), [None] * 4

    def observe(inputs, y, grads):
        return (None if y is None else y[0, :n_tokens, :n_heads]), grads and [None] * 4

    work = gla_bytes(B, T, H, K, V)
    methods = [
        Method("seqmix", lambda x: seqmix.chunk_gla(*x["leaves"], scale=scale)[0], work),
        Method("fla chunk_gla", lambda x: fla_chunk_gla(*x["leaves"], scale), work, baseline=True),
        Method("causal attention", lambda x: causal_attention(*x["leaves"][:3]), work, reference="attention",
               baseline=True),
    ]

    shape = f"B{B} T{T} H{H} K{K} V{V} {_dtype_name(dtype)}"
    return Case("gla", "chunk_gla", shape, {"B": B, "T": T, "H": H, "K": K, "V": V}, make_inputs, methods,
                references, observe, directions=directions,
                speedup_over=("fla chunk_gla", "causal attention"), headline=("seqmix", "fla chunk_gla"),
                tolerance=1e-2, notes=NOTES, plot="speedup_vs_T")


def cases(quick: bool = False) -> list:
    """The GLA cases of the GPU suite (bf16 on the current CUDA device). Full: the issue's
    table, B·T = 16384 tokens with T 1024–16384 at H 16, K = V = 128, and B 4, H 32,
    K = V = 64 with T 1024–4096; then one sequence of 32768 tokens. Quick: three of those
    shapes and the long sequence."""
    if quick:
        shapes = [(8, 2048, 16, 128, 128), (2, 8192, 16, 128, 128), (1, 32768, 16, 128, 128), (4, 2048, 32, 64, 64)]
    else:
        shapes = ([(16384 // T, T, 16, 128, 128) for T in (1024, 2048, 4096, 8192, 16384)]
                  + [(4, T, 32, 64, 64) for T in (1024, 2048, 4096)] + [(1, 32768, 16, 128, 128)])
    return [gla_case(*s) for s in shapes]
