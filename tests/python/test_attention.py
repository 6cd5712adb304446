import numpy as np
import pytest
import seqmix

from conftest import TOLERANCE, rel_err, requires_torch

rng = np.random.default_rng(11)


def qkv(B, Sq, Sk, Hq, Hkv, D, Dv=None):
    return (rng.standard_normal((B, Sq, Hq, D)), rng.standard_normal((B, Sk, Hkv, D)),
            rng.standard_normal((B, Sk, Hkv, Dv or D)))


def f32(*xs):
    return [x.astype(np.float32) for x in xs]


@pytest.mark.parametrize("Sq,Sk,Hq,Hkv,D,Dv,causal", [(63, 63, 2, 2, 16, 16, False), (100, 37, 4, 1, 64, 64, True),
                                                      (1, 100, 4, 2, 16, 24, True), (70, 100, 2, 1, 16, 16, True)])
def test_numpy_fast_matches_oracle(Sq, Sk, Hq, Hkv, D, Dv, causal):
    q, k, v = qkv(2, Sq, Sk, Hq, Hkv, D, Dv)
    ref, ref_lse = seqmix.flash_attn_func(q, k, v, causal=causal, return_lse=True, impl="reference")
    fast, fast_lse = seqmix.flash_attn_func(*f32(q, k, v), causal=causal, return_lse=True, impl="fast")
    assert fast.dtype == np.float32 and fast.shape == (2, Sq, Hq, Dv)
    assert fast_lse.dtype == np.float32 and fast_lse.shape == (2, Hq, Sq)
    assert rel_err(fast, ref) < TOLERANCE["float32"]
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(fast_lse), seen)
    assert rel_err(fast_lse[seen], ref_lse[seen]) < TOLERANCE["float32"]


def test_numpy_matches_a_python_softmax_and_the_bottom_right_causal_mask():
    q, k, v = qkv(1, 5, 3, 2, 1, 4)
    out, lse = seqmix.flash_attn_func(q, k, v, softmax_scale=0.7, causal=True, return_lse=True)
    for h in range(2):
        for i in range(5):
            seen = [j for j in range(3) if j <= i + 3 - 5]
            if not seen:
                assert np.all(out[0, i, h] == 0) and lse[0, h, i] == -np.inf
                continue
            s = np.array([0.7 * q[0, i, h] @ k[0, j, 0] for j in seen])
            p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            assert rel_err(out[0, i, h], p @ v[0, seen, 0]) < 1e-13
            assert abs(lse[0, h, i] - (s.max() + np.log(np.exp(s - s.max()).sum()))) < 1e-13


@pytest.mark.parametrize("causal", [False, True])
def test_numpy_varlen_equals_one_call_per_sequence(causal):
    cu_q, cu_k = np.array([0, 1, 64, 100], np.int32), np.array([0, 50, 51, 120], np.int64)
    q, k, v = rng.standard_normal((100, 4, 16)), rng.standard_normal((120, 2, 16)), rng.standard_normal((120, 2, 8))
    out, lse = seqmix.flash_attn_varlen_func(*f32(q, k, v), cu_q, cu_k, 63, 69, causal=causal, return_lse=True)
    assert out.shape == (100, 4, 8) and lse.shape == (4, 100)
    for n in range(3):
        rq, rk = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
        want, want_lse = seqmix.flash_attn_func(q[None, rq], k[None, rk], v[None, rk], causal=causal,
                                                return_lse=True, impl="reference")
        assert rel_err(out[rq], want[0]) < TOLERANCE["float32"]
        seen = np.isfinite(want_lse[0])
        assert np.array_equal(np.isfinite(lse[:, rq]), seen)
        assert rel_err(lse[:, rq][seen], want_lse[0][seen]) < TOLERANCE["float32"]


def test_numpy_backward_fast_matches_oracle():
    q, k, v = qkv(2, 70, 90, 4, 1, 16, 8)
    dout = rng.standard_normal((2, 70, 4, 8))

    def grads(dtype, impl):
        x = [a.astype(dtype) for a in (q, k, v)]
        out, lse = seqmix.flash_attn_func(*x, causal=True, return_lse=True, impl=impl)
        return seqmix.attention_backward(dout.astype(dtype), *x, out, lse, causal=True, impl=impl)

    for got, want in zip(grads(np.float32, "fast"), grads(np.float64, "reference")):
        assert got.dtype == np.float32
        assert rel_err(got, want) < TOLERANCE["float32"]


def test_bad_input_raises_seqmix_error():
    q, k, v = qkv(2, 8, 6, 4, 3, 16)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'k': expected kv heads Hkv dividing the 4 query heads "
                                                 r"\(integral GQA ratio Hq / Hkv\), got Hkv = 3"):
        seqmix.flash_attn_func(q, k, v)
    q, k, v = qkv(2, 8, 6, 4, 2, 16)
    with pytest.raises(ValueError, match=r"argument 'v': expected dtype f64 \(the dtype of q\), got f32"):
        seqmix.flash_attn_func(q, k, v.astype(np.float32))
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'k': expected head dim 16 \(the head dim of q\), got 8"):
        seqmix.flash_attn_func(q, k[..., :8], v)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'q': expected 4 dimensions \[B, Sq, Hq, D\]"):
        seqmix.flash_attn_func(q[0], k, v)
    cu = np.array([0, 3, 8], np.int32)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'max_seqlen_q': expected >= 5"):
        seqmix.flash_attn_varlen_func(q[0], k[0, :, :, :], v[0], cu, np.array([0, 2, 6], np.int32), 4, 4)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'cu_seqlens_k': expected no empty sequence"):
        seqmix.flash_attn_varlen_func(q[0], k[0], v[0], cu, np.array([0, 6, 6], np.int32), 5, 6)




def torch_qkv(B, Sq, Sk, Hq, Hkv, D, dtype, Dv=None):
    import torch

    return [torch.tensor(x, dtype=dtype) for x in qkv(B, Sq, Sk, Hq, Hkv, D, Dv)]


def sdpa(q, k, v, causal, scale=None):
    """torch's scaled_dot_product_attention on [B, S, H, D] inputs, GQA by repeating kv heads."""
    import torch.nn.functional as F

    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                                         scale=scale)
    return out.transpose(1, 2)


@requires_torch
@pytest.mark.parametrize("Sq,Sk,Hq,Hkv,causal", [(37, 100, 4, 2, False), (100, 37, 4, 1, False), (65, 65, 4, 4, True),
                                                 (64, 64, 8, 2, True)])
def test_torch_matches_scaled_dot_product_attention(Sq, Sk, Hq, Hkv, causal):
    import torch

    q, k, v = torch_qkv(2, Sq, Sk, Hq, Hkv, 32, torch.float32)
    out, lse = seqmix.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    assert rel_err(out, sdpa(q, k, v, causal)) < TOLERANCE["float32"]
    scores = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(Hq // Hkv, dim=2)) * 32 ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool).triu(1), float("-inf"))
    assert rel_err(lse, torch.logsumexp(scores, dim=-1)) < TOLERANCE["float32"]


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
def test_torch_grads_match_scaled_dot_product_attention_float64(causal):
    import torch

    leaves = [t.requires_grad_() for t in torch_qkv(2, 20, 20, 4, 2, 8, torch.float64)]
    dout = torch.randn(2, 20, 4, 8, dtype=torch.float64)
    seqmix.flash_attn_func(*leaves, softmax_scale=0.3, causal=causal).backward(dout)
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    sdpa(*leaves, causal, scale=0.3).backward(dout)
    for g, t in zip(got, leaves):
        assert rel_err(g, t.grad) < 1e-12


@requires_torch
def test_torch_gradcheck_float64():
    import torch

    q, k, v = (t.requires_grad_() for t in torch_qkv(1, 5, 7, 4, 2, 3, torch.float64, Dv=2))

    def padded(q, k, v):
        return seqmix.flash_attn_func(q, k, v, causal=True, return_lse=True)  # Sq < Sk: every row sees a key

    assert torch.autograd.gradcheck(padded, (q, k, v))

    cu_q, cu_k = torch.tensor([0, 1, 5], dtype=torch.int32), torch.tensor([0, 3, 7], dtype=torch.int32)

    def varlen(q, k, v):
        return seqmix.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 4, softmax_scale=0.8, return_lse=True)

    assert torch.autograd.gradcheck(varlen, (q[0], k[0], v[0]))


@requires_torch
@pytest.mark.parametrize("varlen", [False, True])
def test_torch_fast_grads_match_oracle_bf16(varlen):
    import torch

    q, k, v = torch_qkv(1, 100, 90, 4, 1, 64, torch.float64)
    dout = torch.randn(1, 100, 4, 64, dtype=torch.float64)
    cu_q, cu_k = torch.tensor([0, 1, 70, 100]), torch.tensor([0, 30, 31, 90])

    def grads(impl):
        leaves = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
        if varlen:
            out = seqmix.flash_attn_varlen_func(*(t[0] for t in leaves), cu_q, cu_k, 69, 59, causal=True, impl=impl)
            out.backward(dout[0].to(torch.bfloat16))
        else:
            seqmix.flash_attn_func(*leaves, causal=True, impl=impl).backward(dout.to(torch.bfloat16))
        return [t.grad for t in leaves]

    for got, want in zip(grads("fast"), grads("reference")):
        assert got.dtype == torch.bfloat16
        assert rel_err(got, want) < TOLERANCE["bfloat16"]


@requires_torch
def test_torch_compile_fullgraph_has_no_graph_break():
    import torch

    q, k, v = (t.requires_grad_() for t in torch_qkv(2, 33, 40, 4, 2, 16, torch.float32))
    cu_q, cu_k = torch.tensor([0, 10, 33], dtype=torch.int32), torch.tensor([0, 25, 40], dtype=torch.int32)

    def layer(q, k, v):
        out, lse = seqmix.flash_attn_func(q, k, v, causal=True, return_lse=True)
        packed = seqmix.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, 23, 25, causal=True)
        return (out * 2).sum() + lse.sum() + packed.square().sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v)
    loss.backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    want = layer(q, k, v)
    want.backward()
    assert torch.allclose(loss, want)
    for g, t in zip(got, (q, k, v)):
        assert rel_err(g, t.grad) < 1e-6


@requires_torch
def test_torch_bad_input_raises_seqmix_error():
    import torch

    q, k, v = torch_qkv(1, 8, 8, 4, 2, 16, torch.float32)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'k': expected dtype f32 \(the dtype of q\), got bf16"):
        seqmix.flash_attn_func(q, k.bfloat16(), v)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'cu_seqlens_q': expected last offset equal to total_q = 8"):
        seqmix.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 3, 7]), torch.tensor([0, 3, 8]), 8, 8)
