"""The CUDA gated scan through torch, against the float64 oracle (skips without a GPU)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch


@pytest.fixture
def torch():
    cuda_kernels_or_skip("gated_scan")
    import torch

    return torch


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("varlen", [False, True])
def test_forward_backward_match_oracle(torch, dtype, varlen):
    import seqmix

    dt = getattr(torch, dtype)
    B, T, D = (1, 777, 136) if varlen else (3, 515, 136)
    cu = torch.tensor([0, 100, 101, 777], dtype=torch.int32) if varlen else None
    N = 3
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(B, T, D, generator=gen, dtype=torch.float64) * 0.3 + 0.69
    b, z, dy = (torch.randn(B, T, D, generator=gen, dtype=torch.float64) for _ in range(3))
    h0 = torch.randn(N, D, generator=gen)
    stored = [x.to(dt) for x in (a, b, z)]  # the values both paths see

    def run(device, impl):
        leaves = [x.to(device).requires_grad_() for x in stored] + [h0.to(device).requires_grad_()]
        y, hT = seqmix.gated_scan(*leaves, output_final_state=True, cu_seqlens=None if cu is None else cu.to(device),
                                  impl=impl)
        (y.float() * dy.to(device).float()).sum().add(hT.sum()).backward()
        return [y, hT] + [x.grad for x in leaves]

    got = run("cuda", "automatic")
    want = run("cpu", "reference")
    for g, w in zip(got, want):
        assert rel_err(g.cpu(), w) < TOLERANCE[dtype], dtype


def test_training_step_without_final_state_matches_the_kept_one(torch):
    """output_final_state=False skips the final state (a null pointer to the kernels) and
    leaves y and every gradient bit for bit the same."""
    import seqmix

    gen = torch.Generator(device="cuda").manual_seed(3)
    B, T, D = 2, 1000, 200
    base = [torch.rand(B, T, D, generator=gen, device="cuda").mul(0.3).add(0.69).bfloat16()]
    base += [torch.randn(B, T, D, generator=gen, device="cuda").bfloat16() for _ in range(2)]
    base.append(torch.randn(B, D, generator=gen, device="cuda"))
    dy = torch.randn(B, T, D, generator=gen, device="cuda").bfloat16()

    def step(keep):
        leaves = [t.clone().requires_grad_() for t in base]
        out = seqmix.gated_scan(*leaves, output_final_state=keep)
        y = out[0] if keep else out
        y.backward(dy)
        return [y.detach()] + [t.grad for t in leaves]

    for name, without, kept in zip(["y", "da", "db", "dz", "dh0"], step(False), step(True)):
        assert torch.equal(without, kept), name


def test_torch_compile_fullgraph_on_cuda(torch):
    import seqmix

    a = torch.rand(2, 300, 64, device="cuda") * 0.5 + 0.4
    b = torch.randn(2, 300, 64, device="cuda", requires_grad=True)
    z = torch.randn(2, 300, 64, device="cuda")
    f = torch.compile(lambda a, b, z: seqmix.gated_scan(a, b, z).square().sum(), fullgraph=True)
    loss = f(a, b, z)
    loss.backward()
    assert torch.isfinite(b.grad).all()
    assert abs(loss.item() - seqmix.gated_scan(a, b, z).square().sum().item()) < 1e-3 * abs(loss.item())


def _layer_oracle(torch, x, w, decay):
    """The layer in float64 from the definition: u = x·Wᵀ, the scan token by token."""
    import seqmix

    u = x.double() @ w.double().T
    D = w.shape[0] // 3
    return seqmix.gated_scan(u[..., :D], u[..., D:2 * D], u[..., 2 * D:], decay=decay, impl="reference")


@pytest.mark.parametrize("shape", [(2, 100, 72, 24), (16, 512, 256, 64), (4, 2048, 256, 64)])
def test_layer_kernel_forward_backward_match_oracle(torch, shape):
    import seqmix
    from seqmix.torch.gated_scan_layer import uses_layer_kernel

    B, T, d, D = shape
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(B, T, d, generator=gen).to(torch.bfloat16)
    w = (torch.randn(3 * D, d, generator=gen) / d ** 0.5).to(torch.bfloat16)
    dy = torch.randn(B, T, D, generator=gen, dtype=torch.float64)
    xc, wc = x.cuda().requires_grad_(), w.cuda().requires_grad_()
    assert uses_layer_kernel(xc, wc), "the one-kernel forward should run for this shape"
    y = seqmix.gated_scan_layer(xc, wc)
    (y.double() * dy.cuda()).sum().backward()
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y_ref = _layer_oracle(torch, xr, wr, "logit")
    (y_ref * dy).sum().backward()
    assert rel_err(y.cpu(), y_ref) < TOLERANCE["bfloat16"]
    assert rel_err(xc.grad.cpu(), xr.grad) < 2 * TOLERANCE["bfloat16"]  # u is rounded to bf16 in the backward
    assert rel_err(wc.grad.cpu(), wr.grad) < 2 * TOLERANCE["bfloat16"]


def test_layer_kernel_equals_semi_fused_and_compiles(torch):
    import seqmix

    x = torch.randn(3, 333, 128, device="cuda", dtype=torch.float16)
    w = torch.randn(3 * 48, 128, device="cuda", dtype=torch.float16) / 128 ** 0.5
    y = seqmix.gated_scan_layer(x, w, decay="logit")
    u = x @ w.T
    semi = seqmix.gated_scan(u[..., :48], u[..., 48:96], u[..., 96:], decay="logit")
    assert rel_err(y.float().cpu(), semi.float().cpu()) < TOLERANCE["float16"] * 2
    compiled = torch.compile(lambda x, w: seqmix.gated_scan_layer(x, w).float().square().sum(), fullgraph=True)
    xg = x.clone().requires_grad_()
    compiled(xg, w).backward()
    assert torch.isfinite(xg.grad).all()
    assert rel_err(compiled(x, w).cpu(), y.float().square().sum().cpu()) < 1e-3


def test_layer_falls_back_when_the_grid_does_not_fit(torch):
    import seqmix
    from seqmix.torch.gated_scan_layer import uses_layer_kernel

    x = torch.randn(64, 2048, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3 * 64, 64, device="cuda", dtype=torch.bfloat16) / 8
    assert not uses_layer_kernel(x, w)  # 64·32·4 = 8192 CTAs: more than the GPU holds
    u = x @ w.T
    want = seqmix.gated_scan(u[..., :64], u[..., 64:128], u[..., 128:], decay="logit")
    assert torch.equal(seqmix.gated_scan_layer(x, w), want)
