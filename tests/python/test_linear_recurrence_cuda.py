"""The CUDA dense linear recurrence through torch, against the float64 oracle (skips
without a GPU or without the op's CUDA kernels in the build)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch

METHODS = ["sequential", "chunked", "scan", "cyclic_reduction", "auto"]


@pytest.fixture
def torch():
    cuda_kernels_or_skip("linear_recurrence")
    import torch

    return torch


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("method", METHODS)
def test_forward_backward_match_oracle(torch, dtype, method):
    check_against_oracle(torch, dtype, method, G=2, T=77, n=32, m=3)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_vector_state_chunked_in_one_pass_matches_oracle(torch, dtype):
    # From 5 groups up a vector state's chunked chains run in one pass (fused_chunked.cuh).
    check_against_oracle(torch, dtype, "chunked", G=6, T=77, n=40, m=1)


def check_against_oracle(torch, dtype, method, G, T, n, m):
    import seqmix

    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(7)
    A = (torch.rand(G, T, n, n, generator=gen, dtype=torch.float64) * 2 - 1) * 1.2 / n**0.5
    b = torch.randn(G, T, n, m, generator=gen, dtype=torch.float64)
    h0 = torch.randn(G, n, m, generator=gen, dtype=torch.float64)
    dh = torch.randn(G, T, n, m, generator=gen, dtype=torch.float64)
    stored = [x.to(dt) for x in (A, b, h0)]  # the values both paths see

    def run(device, impl, method):
        leaves = [x.to(device).requires_grad_() for x in stored]
        h, hT = seqmix.linear_recurrence(*leaves, method=method, output_final_state=True, impl=impl)
        (h.double() * dh.to(device)).sum().add(hT.double().sum()).backward()
        return [h, hT] + [x.grad for x in leaves]

    got = run("cuda", "automatic", method)
    want = run("cpu", "reference", "sequential")
    for g, w in zip(got, want):
        assert rel_err(g.cpu().double(), w.double()) < TOLERANCE[dtype], (dtype, method)


def test_torch_compile_fullgraph_on_cuda(torch):
    import seqmix

    A = (torch.rand(2, 100, 16, 16, device="cuda") * 2 - 1) * 0.3
    b = torch.randn(2, 100, 16, 1, device="cuda", requires_grad=True)
    f = torch.compile(lambda A, b: seqmix.linear_recurrence(A, b).square().sum(), fullgraph=True)
    loss = f(A, b)
    loss.backward()
    assert torch.isfinite(b.grad).all()
    eager = seqmix.linear_recurrence(A, b).square().sum().item()
    assert abs(loss.item() - eager) < 1e-4 * abs(eager)


def test_unsupported_state_size_is_a_clear_error(torch):
    import seqmix

    A = torch.zeros(1, 4, 12, 12, device="cuda")
    b = torch.ones(1, 4, 12, 1, device="cuda")
    with pytest.raises(seqmix.SeqmixError, match="multiple of 8"):
        seqmix.linear_recurrence(A, b)
