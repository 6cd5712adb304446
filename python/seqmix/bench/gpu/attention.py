"""GPU cases of exact attention: seqmix's Hopper kernel against PyTorch SDPA's cuDNN and
FlashAttention-2 backends, on the same inputs in one process (the issue's grid: head
dims 64, 128, 256, B·S = 16384 tokens, H·D = 2048, causal and not, bf16).

Every builder takes ``device`` and ``dtype`` so the same cases run on CPU tensors with
tiny shapes in the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import seqmix

from .case import Case, Method

TOKENS = 16384          # B·S of every grid case
MODEL_WIDTH = 2048      # H·D
REFERENCE_ROWS = 128    # query rows of batch entry 0 the float64 reference covers
REFERENCE_HEADS = 2

NOTES = (
    "Inputs bf16 [B, S, H, D] standard normal (q, k, v), B·S = 16384, H·D = 2048; SDPA reads the same "
    "tensors as [B, H, S, D] views (no copies). Causal is top-left = bottom-right here (Sq = Sk).",
    "Methods: **seqmix** `seqmix.flash_attn_func(q, k, v, causal=...)` (wgmma + TMA, warp-specialized); "
    "**SDPA cuDNN** `F.scaled_dot_product_attention` under `sdpa_kernel(CUDNN_ATTENTION)`; **SDPA FA2** the "
    "same under `sdpa_kernel(FLASH_ATTENTION)`.",
    "FLOP = 4·B·H·S²·D, halved for causal (the issue's convention); TFLOP/s = FLOP / median time.",
    "Small configurations (B 2, H 8, D 64, fp16, S 32–512): seqmix against **SDPA default**, the backend "
    "PyTorch picks itself.",
    f"max rel err: the output rows 0..{REFERENCE_ROWS - 1} of batch entry 0, heads 0..{REFERENCE_HEADS - 1}, "
    "against softmax(scale·QKᵀ + mask)·V in float64 from the same bf16 inputs.",
    "Backward: FLOP = 2.5× the forward's, forward+backward 3.5×; gradients are not compared here (the GPU tests "
    "check them against float64).",
)


def attention_flop(B, S, H, D, causal: bool) -> float:
    flop = 4.0 * B * H * S * S * D
    return flop / 2 if causal else flop


def reference_rows(q, k, v, causal: bool, rows: int, heads: int):
    """float64 softmax(scale·QKᵀ + mask)·V for the first ``rows`` queries of batch entry 0
    and the first ``heads`` heads (Sq = Sk, so the causal mask is j <= i). -> [rows, heads, D]."""
    q64, k64, v64 = (t[0, :, :heads].detach().double() for t in (q, k, v))
    scores = torch.einsum("qhd,khd->hqk", q64[:rows], k64) * q.shape[-1] ** -0.5
    if causal:
        i = torch.arange(rows, device=q.device)[:, None]
        j = torch.arange(k.shape[1], device=q.device)[None, :]
        scores = scores.masked_fill(j > i, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v64)


def sdpa(backend=None):
    """SDPA on the same tensors as [B, H, S, D] views, under one backend (None: PyTorch's
    own choice, what a model gets by default)."""
    def run(x):
        q, k, v = (t.transpose(1, 2) for t in x["leaves"])
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=x["causal"]).transpose(1, 2)
        with torch.nn.attention.sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=x["causal"]).transpose(1, 2)

    return run


def attention_case(B, S, H, D, causal: bool, baselines: dict, name: str, device="cuda", dtype=torch.bfloat16,
                   seed=0) -> Case:
    """seqmix against the SDPA ``baselines`` (method name -> backend or None) on [B, S, H, D]."""
    rows, heads = min(REFERENCE_ROWS, S), min(REFERENCE_HEADS, H)

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)
        q, k, v, dy = (torch.randn((B, S, H, D), generator=gen, device=device).to(dtype) for _ in range(4))
        return {"leaves": [q.requires_grad_(), k.requires_grad_(), v.requires_grad_()], "dy": dy, "causal": causal}

    def references(inputs, name):
        return reference_rows(*inputs["leaves"], causal, rows, heads), [None, None, None]

    def observe(inputs, y, grads):
        return (None if y is None else y[0, :rows, :heads]), None if grads is None else [None, None, None]

    flop = attention_flop(B, S, H, D, causal)
    work = {"fwd": flop, "bwd": 2.5 * flop, "fwd+bwd": 3.5 * flop}
    directions = ("fwd", "bwd", "fwd+bwd")
    methods = [Method("seqmix", lambda x: seqmix.flash_attn_func(*x["leaves"], causal=causal), work)]
    methods += [Method(label, sdpa(backend), work, baseline=True) for label, backend in baselines.items()]
    dtype_name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))
    shape = f"D{D} S{S} B{B} H{H} {'causal' if causal else 'full'} {dtype_name}"
    return Case("attention", name, shape, {"B": B, "S": S, "H": H, "D": D, "causal": causal},
                make_inputs, methods, references, observe, directions=directions, unit="TFLOP/s",
                speedup_over=tuple(baselines), headline=("seqmix", next(iter(baselines))), tolerance=1e-2,
                notes=NOTES)


def grid_case(S, D, causal: bool, device="cuda", dtype=torch.bfloat16, seed=0, tokens=TOKENS,
              width=MODEL_WIDTH) -> Case:
    """The issue's grid: B·S = tokens, H·D = width, against SDPA's cuDNN and FA2 backends."""
    backends = torch.nn.attention.SDPBackend
    return attention_case(max(1, tokens // S), S, max(1, width // D), D, causal,
                          {"SDPA cuDNN": backends.CUDNN_ATTENTION, "SDPA FA2": backends.FLASH_ATTENTION},
                          "causal" if causal else "non-causal", device, dtype, seed)


def small_case(S, causal: bool, device="cuda", dtype=torch.float16, seed=0) -> Case:
    """A seed's small configurations: B 2, H 8, D 64, fp16, against SDPA's default choice."""
    return attention_case(2, S, 8, 64, causal, {"SDPA default": None},
                          "small, " + ("causal" if causal else "non-causal"), device, dtype, seed)


def cases(quick: bool = False) -> list:
    """The attention cases of the GPU suite on the current CUDA device: the grid (bf16)
    and the small configurations (fp16), forward and backward."""
    if quick:
        grid, small = [(S, 128) for S in (2048, 16384)], (128, 512)
    else:
        grid = [(S, D) for D in (64, 128, 256) for S in (512, 1024, 2048, 4096, 8192, 16384)]
        small = (32, 64, 128, 256, 512)
    return ([grid_case(S, D, causal) for S, D in grid for causal in (False, True)]
            + [small_case(S, causal) for S in small for causal in (False, True)])
