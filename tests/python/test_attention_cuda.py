"""The CUDA attention forward through torch, against a float64 reference computed from
the same stored inputs (skips without a GPU or without the attention kernels)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch


@pytest.fixture
def torch():
    cuda_kernels_or_skip("attention")
    import torch

    return torch


def reference(torch, q, k, v, causal, scale):
    """float64 O and LSE of one sequence: q [Sq, Hq, D], k, v [Sk, Hkv, D] -> [Sq, Hq, D], [Hq, Sq]."""
    q, k, v = (t.double().transpose(0, 1) for t in (q, k, v))
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    s = q @ k.transpose(1, 2) * scale
    Sq, Sk = q.shape[1], k.shape[1]
    if causal:  # bottom-right aligned
        i = torch.arange(Sq, device=q.device)[:, None]
        j = torch.arange(Sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + Sk - Sq, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(s), (s - lse[..., None]).exp())
    return (p @ v).transpose(0, 1), lse


def lse_rel_err(got, want):
    dead = torch_isneginf(want)
    assert bool((torch_isneginf(got) == dead).all()), "rows that see no key must have lse = -inf"
    return rel_err(got[~dead], want[~dead]) if bool((~dead).any()) else 0.0


def torch_isneginf(t):
    return t.isinf() & (t < 0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_forward_matches_reference(torch, dtype, D, causal):
    import seqmix

    dt = getattr(torch, dtype)
    B, Sq, Sk, Hq, Hkv = 2, 190, 333, 4, 2
    gen = torch.Generator(device="cuda").manual_seed(D + causal)
    q = torch.randn(B, Sq, Hq, D, generator=gen, device="cuda").to(dt)
    k, v = (torch.randn(B, Sk, Hkv, D, generator=gen, device="cuda").to(dt) for _ in range(2))
    out, lse = seqmix.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (B, Hq, Sq)
    for b in range(B):
        want, want_lse = reference(torch, q[b], k[b], v[b], causal, D ** -0.5)
        assert rel_err(out[b], want) < TOLERANCE[dtype]
        assert lse_rel_err(lse[b], want_lse) < 1e-4


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_gqa_strided_forward_matches_reference(torch, causal):
    import seqmix

    cu_q = torch.tensor([0, 1, 200, 260, 700], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 40, 41, 300, 512], dtype=torch.int32, device="cuda")
    Hq, Hkv, D = 8, 1, 128
    gen = torch.Generator(device="cuda").manual_seed(7)
    # q, k, v as column blocks of one packed projection (strided rows, no copies)
    qkv_q = torch.randn(700, Hq + 2, D, generator=gen, device="cuda").bfloat16()
    kv = torch.randn(512, 2 * Hkv, D, generator=gen, device="cuda").bfloat16()
    q, k, v = qkv_q[:, :Hq], kv[:, :Hkv], kv[:, Hkv:]
    scale = 0.1
    out, lse = seqmix.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 440, 259, softmax_scale=scale, causal=causal,
                                             return_lse=True)
    for n in range(4):
        q0, q1, k0, k1 = int(cu_q[n]), int(cu_q[n + 1]), int(cu_k[n]), int(cu_k[n + 1])
        want, want_lse = reference(torch, q[q0:q1], k[k0:k1], v[k0:k1], causal, scale)
        assert rel_err(out[q0:q1], want) < TOLERANCE["bfloat16"]
        assert lse_rel_err(lse[:, q0:q1], want_lse) < 1e-4


def test_compiled_forward_has_no_graph_break(torch):
    import seqmix

    q, k, v = (torch.randn(1, 300, 2, 128, device="cuda").bfloat16() for _ in range(3))
    fn = torch.compile(lambda q, k, v: seqmix.flash_attn_func(q, k, v, causal=True), fullgraph=True,
                       backend="aot_eager")
    want, _ = reference(torch, q[0], k[0], v[0], True, 128 ** -0.5)
    assert rel_err(fn(q, k, v)[0], want) < TOLERANCE["bfloat16"]


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_float64_autograd(torch, D, causal):
    import seqmix

    gen = torch.Generator(device="cuda").manual_seed(D + 3 * causal)
    q = torch.randn(2, 150, 4, D, generator=gen, device="cuda").bfloat16().requires_grad_()
    k, v = (torch.randn(2, 97, 2, D, generator=gen, device="cuda").bfloat16().requires_grad_() for _ in range(2))
    dout = torch.randn(2, 150, 4, D, generator=gen, device="cuda").bfloat16()
    out = seqmix.flash_attn_func(q, k, v, causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.stack([reference(torch, q64[b], k64[b], v64[b], causal, D ** -0.5)[0] for b in range(2)])
    want_grads = torch.autograd.grad(want, (q64, k64, v64), dout.double())
    for name, got, ref in zip("qkv", grads, want_grads):
        # two roundings to bf16 (the P / dS operands of the products and the result)
        assert rel_err(got, ref) < 2 * TOLERANCE["bfloat16"], name
    # The default (Hopper) backward sums dq with float atomics in any order; dk, dv have none.
    again = torch.autograd.grad(seqmix.flash_attn_func(q, k, v, causal=causal), (q, k, v), dout)
    assert rel_err(again[0], grads[0]) < 0.1 * TOLERANCE["bfloat16"], "dq of two runs"
    assert all(bool((x == y).all()) for x, y in zip(grads[1:], again[1:])), "dk, dv must repeat bitwise"
    # deterministic=True: dq's adds in a fixed order, all three gradients repeat bitwise.
    runs = [torch.autograd.grad(seqmix.flash_attn_func(q, k, v, causal=causal, deterministic=True), (q, k, v), dout)
            for _ in range(2)]
    for name, got, ref in zip("qkv", runs[0], want_grads):
        assert rel_err(got, ref) < 2 * TOLERANCE["bfloat16"], name
    assert all(bool((x == y).all()) for x, y in zip(*runs)), "the deterministic backward must repeat bitwise"


@pytest.mark.parametrize("D", [64, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("deterministic", [False, True])
def test_varlen_backward_matches_float64_autograd(torch, D, causal, deterministic):
    """Variable lengths (one query, one key, rows that see no key under the causal mask),
    GQA 2, through flash_attn_varlen_func's autograd on CUDA."""
    import seqmix

    cu_q = torch.tensor([0, 1, 200, 260, 700], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 40, 41, 300, 512], dtype=torch.int32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(D + 2 * causal + deterministic)
    q = torch.randn(700, 4, D, generator=gen, device="cuda").bfloat16().requires_grad_()
    k, v = (torch.randn(512, 2, D, generator=gen, device="cuda").bfloat16().requires_grad_() for _ in range(2))
    dout = torch.randn(700, 4, D, generator=gen, device="cuda").bfloat16()

    def run():
        out = seqmix.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 440, 259, causal=causal, deterministic=deterministic)
        return torch.autograd.grad(out, (q, k, v), dout)

    grads = run()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    bounds = [(int(cu_q[n]), int(cu_q[n + 1]), int(cu_k[n]), int(cu_k[n + 1])) for n in range(4)]
    want = torch.cat([reference(torch, q64[q0:q1], k64[k0:k1], v64[k0:k1], causal, D ** -0.5)[0]
                      for q0, q1, k0, k1 in bounds])
    want_grads = torch.autograd.grad(want, (q64, k64, v64), dout.double())
    for name, got, ref in zip("qkv", grads, want_grads):
        assert rel_err(got, ref) < 2 * TOLERANCE["bfloat16"], name
    if deterministic:
        assert all(bool((x == y).all()) for x, y in zip(grads, run())), "the deterministic backward must repeat bitwise"


def test_cuda_deterministic_backward_repeats_with_many_key_blocks(torch):
    """More key blocks of one head than the GPU has SMs (D = 256: 64 keys a block), every one
    adding to the same query block: the ordered dq adds must finish and repeat bitwise, and
    agree with the unordered backward."""
    import seqmix

    gen = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(1, 64, 2, 256, generator=gen, device="cuda").bfloat16().requires_grad_()
    k, v = (torch.randn(1, 19000, 1, 256, generator=gen, device="cuda").bfloat16().requires_grad_() for _ in range(2))
    dout = torch.randn(1, 64, 2, 256, generator=gen, device="cuda").bfloat16()
    runs = [torch.autograd.grad(seqmix.flash_attn_func(q, k, v, deterministic=det), (q, k, v), dout)
            for det in (True, True, False)]
    assert all(bool((x == y).all()) for x, y in zip(runs[0], runs[1])), "the deterministic backward must repeat bitwise"
    for name, got, ref in zip("qkv", runs[0], runs[2]):
        assert rel_err(got, ref) < 0.1 * TOLERANCE["bfloat16"], name
