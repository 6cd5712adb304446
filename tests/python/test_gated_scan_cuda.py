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
