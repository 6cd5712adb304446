"""The chains' CUDA path through torch, against the float64 oracle on the CPU (skips
without a GPU or without the chains' CUDA kernels in the build)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch

# Every activation; W_total = 240 (the CUDA path takes multiples of 8).
SEGMENTS = [(64, "identity"), (48, "silu"), (40, "sigmoid"), (56, "logsigmoid", 16.0), (32, "softplus")]
W_TOTAL = sum(s[0] for s in SEGMENTS)


@pytest.fixture
def torch():
    cuda_kernels_or_skip("chains")
    import torch

    return torch


def _leaves(torch, tensors, device):
    return [None if t is None else t.to(device).requires_grad_() for t in tensors]


@pytest.mark.parametrize("leading", [(1,), (1000,), (2, 300)])
@pytest.mark.parametrize("bias", [False, True])
def test_projection_forward_backward_match_oracle(torch, leading, bias):
    import seqmix

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(*leading, 136, generator=gen).bfloat16()
    w = (torch.rand(W_TOTAL, 136, generator=gen) * 0.4 - 0.2).bfloat16()
    b = torch.randn(W_TOTAL, generator=gen).bfloat16() if bias else None
    dys = [torch.randn(*leading, s[0], generator=gen) for s in SEGMENTS]

    def run(device, impl):
        leaves = _leaves(torch, [x, w, b] if device == "cuda" else [x.double(), w.double(), None if b is None
                                                                    else b.double()], device)
        ys = seqmix.projection_chain(leaves[0], leaves[1], SEGMENTS, leaves[2], impl=impl)
        sum((y.double() * dy.to(device).double()).sum() for y, dy in zip(ys, dys)).backward()
        return ys + [t.grad for t in leaves if t is not None]

    got, want = run("cuda", "automatic"), run("cpu", "reference")
    for i, (g, r) in enumerate(zip(got, want)):
        assert g.shape == r.shape
        assert rel_err(g.float().cpu(), r) < TOLERANCE["bfloat16"], i


def test_projection_outputs_are_views_of_one_buffer_with_heads(torch):
    import seqmix

    x = torch.randn(2, 50, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16) / 8
    q, gate = seqmix.projection_chain(x, w, [{"width": 64, "heads": 4}, {"width": 32, "activation": "sigmoid"}])
    assert q.shape == (2, 50, 4, 16) and gate.shape == (2, 50, 32)
    assert q.untyped_storage().data_ptr() == gate.untyped_storage().data_ptr()
    z = (x.float() @ w.float().t())
    assert rel_err(q.reshape(2, 50, 64).float(), z[..., :64]) < TOLERANCE["bfloat16"]
    assert rel_err(gate.float(), torch.sigmoid(z[..., 64:])) < TOLERANCE["bfloat16"]


def test_float32_gates_are_a_second_run_in_float32(torch):
    """Gated DeltaNet's a and beta wanted in f32 from a bf16 chain: their own buffer, written
    by the f32-output GEMM, exact to f32 (not rounded to bf16) and differentiable."""
    import seqmix

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(500, 64, generator=gen).bfloat16().cuda().requires_grad_()
    w = (torch.randn(80, 64, generator=gen) / 8).bfloat16().cuda().requires_grad_()
    segments = [{"width": 64, "heads": 4}, {"width": 8, "activation": "softplus", "dtype": "float32"},
                {"width": 8, "activation": "sigmoid", "dtype": "float32"}]
    q, a, beta = seqmix.projection_chain(x, w, segments)
    assert a.dtype == beta.dtype == torch.float32 and q.dtype == torch.bfloat16
    z = x.detach().double() @ w.detach().double().t()
    assert rel_err(a.double(), torch.nn.functional.softplus(z[:, 64:72])) < 1e-5
    assert rel_err(beta.double(), torch.sigmoid(z[:, 72:])) < 1e-5
    (q.float().sum() + a.sum() + beta.sum()).backward()
    assert all(bool(t.grad.float().isfinite().all()) for t in (x, w))


def test_low_rank_gate_reads_a_column_view(torch):
    import seqmix

    x = torch.randn(300, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(80, 64, device="cuda") / 8).bfloat16().requires_grad_()
    w2 = (torch.randn(128, 16, device="cuda") / 4).bfloat16().requires_grad_()
    v, code = seqmix.projection_chain(x, w, [(64, "identity"), (16, "identity")])
    gk = seqmix.low_rank_gate(code, w2, tau=16.0)
    want = torch.nn.functional.logsigmoid((x.float() @ w.float()[64:].t()) @ w2.float().t()) / 16
    assert rel_err(gk.float(), want) < TOLERANCE["bfloat16"]
    (gk.float().sum() + v.float().sum()).backward()
    assert all(bool(t.grad.isfinite().all()) for t in (x, w, w2))


def test_projection_refuses_what_the_cuda_path_lacks(torch):
    import seqmix

    x = torch.randn(10, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(seqmix.SeqmixError, match="W_total a multiple of 8 on a CUDA device"):
        seqmix.projection_chain(x, torch.randn(12, 64, device="cuda", dtype=torch.bfloat16), [(12, "silu")])
    with pytest.raises(seqmix.SeqmixError, match="dtype bf16 or f32 on a CUDA device, got f16"):
        seqmix.projection_chain(x, torch.randn(16, 64, device="cuda", dtype=torch.bfloat16),
                                [(8, "silu"), {"width": 8, "dtype": "float16"}])
    with pytest.raises(seqmix.SeqmixError, match=r"outputs\[0\]'?: expected 16-byte aligned data"):
        seqmix.projection_chain(x, torch.randn(16, 64, device="cuda", dtype=torch.bfloat16),
                                [(4, "silu"), {"width": 12, "dtype": "float32"}])
    with pytest.raises(seqmix.SeqmixError, match="dtype bf16 on a CUDA device"):
        seqmix.projection_chain(x.float(), torch.randn(16, 64, device="cuda"), [(16, "silu")])


@pytest.mark.parametrize("shape", [(1, 2, 64), (1000, 3, 40), (2, 300, 2, 128)])
def test_output_chain_forward_backward_match_oracle(torch, shape):
    import seqmix

    gen = torch.Generator().manual_seed(5)
    H, Dv, d_out = shape[-2], shape[-1], 72
    o, g = torch.randn(*shape, generator=gen).bfloat16(), (torch.randn(*shape, generator=gen) * 2).bfloat16()
    nw = (torch.rand(Dv, generator=gen) + 0.5).bfloat16()
    ow = (torch.rand(d_out, H * Dv, generator=gen) * 0.4 - 0.2).bfloat16()
    dy = torch.randn(*shape[:-2], d_out, generator=gen)

    def run(device, impl):
        leaves = _leaves(torch, [o, g, nw, ow] if device == "cuda" else [o.double(), g.double(), nw.double(),
                                                                        ow.double()], device)
        y = seqmix.output_chain(*leaves, impl=impl)
        (y.double() * dy.to(device).double()).sum().backward()
        return [y] + [t.grad for t in leaves]

    got, want = run("cuda", "automatic"), run("cpu", "reference")
    for i, (a, r) in enumerate(zip(got, want)):
        assert rel_err(a.float().cpu(), r) < TOLERANCE["bfloat16"], i


def test_output_chain_takes_the_gate_as_a_column_view(torch):
    """g straight from the projection chain: [B, T, H, Dv] heads of a wider buffer."""
    import seqmix

    x = torch.randn(2, 40, 64, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(96, 64, device="cuda") / 8).bfloat16()
    other, g = seqmix.projection_chain(x, w, [(32, "identity"), {"width": 64, "heads": 2}])
    o = torch.randn(2, 40, 2, 32, device="cuda", dtype=torch.bfloat16)
    nw = torch.ones(32, device="cuda", dtype=torch.bfloat16)
    ow = (torch.randn(16, 64, device="cuda") / 8).bfloat16()
    got = seqmix.output_chain(o, g, nw, ow)
    want = seqmix.output_chain(o.double().cpu(), g.double().cpu(), nw.double().cpu(), ow.double().cpu(),
                               impl="reference")
    assert rel_err(got.float().cpu(), want) < TOLERANCE["bfloat16"]


def test_torch_compile_fullgraph_on_cuda(torch):
    import seqmix

    x = torch.randn(100, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(48, 64, device="cuda") / 8).bfloat16().requires_grad_()
    segments = [(16, "silu"), (32, "identity")]

    def loss(x, w):
        a, b = seqmix.projection_chain(x, w, segments)
        return a.float().square().sum() + b.float().sum()

    compiled = torch.compile(loss, fullgraph=True)
    got = compiled(x, w)
    got.backward()
    assert torch.isfinite(w.grad.float()).all()
    want = loss(x, w)
    assert abs(got.item() - want.item()) < 1e-2 * abs(want.item())


# GLA-like at a small width: the code (16) last, a 1024-wide gate.
GLA_SEGMENTS = [(128, "identity"), (128, "identity"), (256, "identity"), (256, "identity"), (16, "identity")]


@pytest.mark.parametrize("in_epilogue", ["0", "1"])
def test_projection_with_gate_matches_oracle_and_two_calls(torch, monkeypatch, in_epilogue):
    import seqmix

    monkeypatch.setenv("SEQMIX_CHAINS_GATE_EPILOGUE", in_epilogue)
    gen = torch.Generator().manual_seed(5)
    width = sum(s[0] for s in GLA_SEGMENTS)
    x = torch.randn(1000, 256, generator=gen).bfloat16()
    w = (torch.rand(width, 256, generator=gen) * 0.2 - 0.1).bfloat16()
    gw, gb = (torch.rand(1024, 16, generator=gen) - 0.5).bfloat16(), torch.randn(1024, generator=gen).bfloat16()
    dys = [torch.randn(1000, s[0], generator=gen) for s in GLA_SEGMENTS] + [torch.randn(1000, 1024, generator=gen)]

    def run(device, impl, one_call=True):
        leaves = _leaves(torch, [x, w, gw, gb] if device == "cuda" else [t.double() for t in (x, w, gw, gb)], device)
        spec = dict(weight=leaves[2], bias=leaves[3], tau=16.0)
        if one_call:
            outputs, gate = seqmix.projection_chain(leaves[0], leaves[1], GLA_SEGMENTS, impl=impl, low_rank_gate=spec)
        else:
            outputs = seqmix.projection_chain(leaves[0], leaves[1], GLA_SEGMENTS, impl=impl)
            gate = seqmix.low_rank_gate(outputs[-1], spec["weight"], spec["bias"], tau=16.0, impl=impl)
        ys = [*outputs, gate]
        sum((y.double() * dy.to(device).double()).sum() for y, dy in zip(ys, dys)).backward()
        return ys + [t.grad for t in leaves]

    got, two, want = run("cuda", "automatic"), run("cuda", "automatic", False), run("cpu", "reference")
    for i, (g, t, r) in enumerate(zip(got, two, want)):
        assert g.shape == r.shape
        assert rel_err(g.float().cpu(), r) < TOLERANCE["bfloat16"], i
        assert rel_err(g.float().cpu(), t.float().cpu()) < TOLERANCE["bfloat16"], i
    # The segments and the gate: the same GEMM mainloop and the same gate products either way.
    for i in range(len(GLA_SEGMENTS) + 1):
        assert torch.equal(got[i], two[i]), i
