"""The CPU suite of ``seqmix bench``: every op on shapes that finish in about a minute
in all, float32, against the float64 oracle and PyTorch eager where torch is installed.

Each builder returns a Case; inputs are numpy float32 for seqmix and the same values as
torch tensors for the eager references.
"""

from __future__ import annotations

import numpy as np

import seqmix

from .runner import Case

RNG = np.random.default_rng(0)


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def _fast_and_reference(call):
    return {"seqmix fast": lambda: call("fast"), "seqmix reference": lambda: call("reference")}


def gated_scan_case(B=4, T=512, D=1024):
    a = RNG.uniform(0.8, 0.999, (B, T, D)).astype(np.float32)
    b, z = _randn(B, T, D), _randn(B, T, D)
    methods = _fast_and_reference(lambda impl: seqmix.gated_scan(a, b, z, impl=impl))
    torch = _torch()
    if torch:
        ta, tb, tz = map(torch.from_numpy, (a, b, z))

        def eager():  # the loop a user writes without a scan kernel
            h, ys = torch.zeros(B, D), []
            for t in range(T):
                h = ta[:, t] * h + tb[:, t]
                ys.append(h)
            return torch.stack(ys, 1) * torch.nn.functional.silu(tz)

        methods["torch eager loop"] = eager
    return Case("gated_scan", f"B{B} T{T} D{D} +SiLU gate", methods, baseline="torch eager loop" if torch else None)


def _recurrent_attention_eager(torch, q, k, v, decay_of_t, scale):
    """S_t = decay_t(S_{t-1}) + k_tᵀ v_t, o_t = scale q_t S_t, vectorised over B and H."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        S = decay_of_t(S, t) + k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1)


def gla_case(B=2, T=512, H=4, K=64, V=64):
    q, k, v = _randn(B, T, H, K), _randn(B, T, H, K), _randn(B, T, H, V)
    g = np.log(RNG.uniform(0.9, 0.999, (B, T, H, K))).astype(np.float32)
    methods = _fast_and_reference(lambda impl: seqmix.chunk_gla(q, k, v, g, impl=impl)[0])
    torch = _torch()
    if torch:
        tq, tk, tv, tg = map(torch.from_numpy, (q, k, v, g))
        methods["torch eager recurrent"] = lambda: _recurrent_attention_eager(
            torch, tq, tk, tv, lambda S, t: tg[:, t, :, :, None].exp() * S, K**-0.5)
    return Case("chunk_gla", f"B{B} T{T} H{H} K{K} V{V}", methods,
                baseline="torch eager recurrent" if torch else None)


def delta_rule_case(B=2, T=512, H=4, K=64, V=64):
    q, k, v = _randn(B, T, H, K), _randn(B, T, H, K), _randn(B, T, H, V)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    g = np.log(RNG.uniform(0.9, 0.999, (B, T, H))).astype(np.float32)
    beta = RNG.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    methods = _fast_and_reference(lambda impl: seqmix.chunk_gated_delta_rule(q, k, v, g, beta, impl=impl)[0])
    torch = _torch()
    if torch:
        tq, tk, tv, tg, tb = map(torch.from_numpy, (q, k, v, g, beta))

        def decay(S, t):  # exp(g)(I − β k kᵀ) S; the β k vᵀ term is folded into v below
            kS = torch.einsum("bhk,bhkv->bhv", tk[:, t], S)
            return tg[:, t, :, None, None].exp() * (S - tb[:, t, :, None, None] * tk[:, t, :, :, None] * kS[:, :, None])

        scaled_v = tv * tb[..., None]
        methods["torch eager recurrent"] = lambda: _recurrent_attention_eager(torch, tq, tk, scaled_v, decay, K**-0.5)
    return Case("chunk_gated_delta_rule", f"B{B} T{T} H{H} K{K} V{V}", methods,
                baseline="torch eager recurrent" if torch else None)


def attention_case(B=1, S=1024, H=4, D=64, causal=True):
    q, k, v = _randn(B, S, H, D), _randn(B, S, H, D), _randn(B, S, H, D)
    methods = _fast_and_reference(lambda impl: seqmix.flash_attn_func(q, k, v, causal=causal, impl=impl))
    torch = _torch()
    if torch:
        tq, tk, tv = (torch.from_numpy(x).transpose(1, 2) for x in (q, k, v))
        methods["torch SDPA"] = lambda: torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, is_causal=causal).transpose(1, 2)
    return Case("attention", f"B{B} S{S} H{H} D{D} {'causal' if causal else 'full'}", methods,
                baseline="torch SDPA" if torch else None)


def linear_recurrence_cases(G=4, T=1024, n=32, m=1):
    A = (RNG.standard_normal((G, T, n, n)) / np.sqrt(n) * 0.9).astype(np.float32)
    b = _randn(G, T, n, m)
    methods = {"seqmix reference": lambda: seqmix.linear_recurrence(A, b, impl="reference")}
    for method in ("sequential", "chunked", "scan", "cyclic_reduction"):
        methods[f"seqmix {method}"] = lambda method=method: seqmix.linear_recurrence(A, b, method=method, impl="fast")
    torch = _torch()
    if torch:
        tA, tb = torch.from_numpy(A), torch.from_numpy(b)

        def eager_loop():
            h, hs = tb.new_zeros(G, n, m), []
            for t in range(T):
                h = tA[:, t] @ h + tb[:, t]
                hs.append(h)
            return torch.stack(hs, 1)

        methods["torch bmm loop"] = eager_loop
    return Case("linear_recurrence", f"G{G} T{T} n{n} m{m}", methods,
                baseline="torch bmm loop" if torch else "seqmix reference")


def projection_chain_case(tokens=512, d=512):
    widths = [("q", 256, "identity"), ("k", 256, "silu"), ("v", 512, "identity"), ("g", 512, "sigmoid"),
              ("gk", 16, "identity")]
    x = _randn(tokens, d)
    weight = (_randn(sum(w for _, w, _ in widths), d) / np.sqrt(d)).astype(np.float32)
    segments = [(w, act) for _, w, act in widths]
    methods = _fast_and_reference(lambda impl: np.concatenate(
        seqmix.projection_chain(x, weight, segments, impl=impl), axis=1))
    torch = _torch()
    if torch:
        tx, tw = torch.from_numpy(x), torch.from_numpy(weight)
        acts = {"identity": lambda y: y, "silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid}

        def eager():
            outs, start = [], 0
            for _, w, act in widths:
                outs.append(acts[act](torch.nn.functional.linear(tx, tw[start:start + w])))
                start += w
            return torch.cat(outs, 1)

        methods["torch eager"] = eager
    return Case("projection_chain", f"tokens{tokens} d{d} -> {weight.shape[0]}", methods,
                baseline="torch eager" if torch else None)


def output_chain_case(tokens=512, H=4, Dv=128, d_out=512):
    o, g = _randn(tokens, H, Dv), _randn(tokens, H, Dv)
    norm_weight, out_weight = _randn(Dv), (_randn(d_out, H * Dv) / np.sqrt(H * Dv)).astype(np.float32)
    methods = _fast_and_reference(lambda impl: seqmix.output_chain(o, g, norm_weight, out_weight, impl=impl))
    torch = _torch()
    if torch:
        to, tg, tn, tw = map(torch.from_numpy, (o, g, norm_weight, out_weight))

        def eager():
            normed = to * torch.rsqrt(to.pow(2).mean(-1, keepdim=True) + 1e-5) * tn
            return torch.nn.functional.linear((normed * torch.nn.functional.silu(tg)).reshape(tokens, -1), tw)

        methods["torch eager"] = eager
    return Case("output_chain", f"tokens{tokens} H{H} Dv{Dv} -> {d_out}", methods,
                baseline="torch eager" if torch else None)


def cpu_cases(quick: bool = False):
    """The CPU suite; `quick` shrinks every shape for a smoke run of a few seconds."""
    if quick:
        return [gated_scan_case(2, 64, 64), gla_case(1, 64, 2, 16, 16), delta_rule_case(1, 64, 2, 16, 16),
                attention_case(1, 64, 2, 16), linear_recurrence_cases(2, 64, 8), projection_chain_case(32, 64),
                output_chain_case(32, 2, 16, 64)]
    return [gated_scan_case(), gla_case(), delta_rule_case(), attention_case(), attention_case(causal=False),
            linear_recurrence_cases(), linear_recurrence_cases(m=32), projection_chain_case(), output_chain_case()]
