"""The CUDA chunk_gla forward and backward through torch, against the float64 oracle (skips
without a GPU or when this build left the gla kernels out)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch


@pytest.fixture
def torch():
    cuda_kernels_or_skip("gla")
    import torch

    return torch


def random_inputs(torch, B, T, H, K, V, N, seed):
    """(generator, (q, k, v, g), h0): float64 q and k scaled by K^-1/4, v, log decays g in
    (-1, 0], and an [N, H, K, V] initial state, drawn in that order from one seeded generator
    (which the caller may draw more from)."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=gen, dtype=torch.float64) * K**-0.25 for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
    g = -torch.rand(B, T, H, K, generator=gen, dtype=torch.float64)
    return gen, (q, k, v, g), torch.randn(N, H, K, V, generator=gen)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("varlen", [False, True])
def test_forward_matches_oracle(torch, dtype, varlen):
    import seqmix

    dt = getattr(torch, dtype)
    B, T, H, K, V = (1, 777, 2, 128, 128) if varlen else (2, 515, 3, 64, 128)
    cu = torch.tensor([0, 100, 101, 777], dtype=torch.int32) if varlen else None
    N = 3 if varlen else B
    _, inputs, h0 = random_inputs(torch, B, T, H, K, V, N, seed=1)
    stored = [x.to(dt) for x in inputs]  # the values both paths see

    def run(device, impl):
        args = [x.to(device) for x in stored]
        return seqmix.chunk_gla(*args, initial_state=h0.to(device), output_final_state=True,
                                cu_seqlens=None if cu is None else cu.to(device), impl=impl)

    o, hT = run("cuda", "automatic")
    o_ref, hT_ref = run("cpu", "reference")
    assert rel_err(o.cpu(), o_ref) < TOLERANCE[dtype]
    assert rel_err(hT.cpu(), hT_ref) < TOLERANCE[dtype]


def test_long_single_sequence_is_split_and_matches_the_fast_cpu_path(torch):
    import seqmix

    gen = torch.Generator().manual_seed(2)
    T, H, D = 4096, 2, 128
    q, k, v = (torch.randn(1, T, H, D, generator=gen).mul(D**-0.25).bfloat16() for _ in range(3))
    g = (-0.05 * torch.rand(1, T, H, D, generator=gen)).bfloat16()
    o, hT = seqmix.chunk_gla(*(x.cuda() for x in (q, k, v, g)), output_final_state=True)
    o_ref, hT_ref = seqmix.chunk_gla(q, k, v, g, output_final_state=True, impl="fast")
    assert rel_err(o.cpu().double(), o_ref.double()) < TOLERANCE["bfloat16"]
    assert rel_err(hT.cpu(), hT_ref) < TOLERANCE["bfloat16"]


def test_training_step_without_final_state_matches_the_kept_one(torch):
    """At the training shape (K = 128: chunk states and scores saved), output_final_state=False
    skips the final state and leaves o and every gradient bit for bit the same."""
    import seqmix

    gen = torch.Generator(device="cuda").manual_seed(3)
    B, T, H, D = 2, 200, 2, 128
    base = [torch.randn(B, T, H, D, generator=gen, device="cuda").mul(D**-0.25).bfloat16() for _ in range(3)]
    base.append((-0.1 * torch.rand(B, T, H, D, generator=gen, device="cuda")).bfloat16())
    do = torch.randn(B, T, H, D, generator=gen, device="cuda").bfloat16()

    def step(keep):
        leaves = [t.clone().requires_grad_() for t in base]
        o, hT = seqmix.chunk_gla(*leaves, output_final_state=keep)
        assert (hT is not None) == keep
        o.backward(do)
        return [o.detach()] + [t.grad for t in leaves]

    for name, without, kept in zip(["o", "dq", "dk", "dv", "dg"], step(False), step(True)):
        assert torch.equal(without, kept), name


def test_torch_compile_fullgraph_forward_on_cuda(torch):
    import seqmix

    q, k, v = (torch.randn(2, 300, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = -torch.rand(2, 300, 2, 64, device="cuda").bfloat16()
    f = torch.compile(lambda q, k, v, g: seqmix.chunk_gla(q, k, v, g)[0].float().square().sum(), fullgraph=True)
    with torch.no_grad():
        got = f(q, k, v, g).item()
        want = seqmix.chunk_gla(q, k, v, g)[0].float().square().sum().item()
    assert abs(got - want) <= 1e-3 * abs(want)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("K,V", [(64, 128), (256, 256)])
def test_autograd_matches_oracle(torch, dtype, K, V):
    """Every gradient through torch autograd on CUDA (varlen with a length-1 sequence,
    initial state, final-state gradient) against the float64 oracle's on the CPU; K = 256
    runs as two key blocks."""
    import seqmix

    dt = getattr(torch, dtype)
    B, T, H = 1, 300, 2
    cu = torch.tensor([0, 1, 170, 300], dtype=torch.int32)
    N = 3
    gen, inputs, h0 = random_inputs(torch, B, T, H, K, V, N, seed=3)
    do = torch.randn(B, T, H, V, generator=gen).to(dt)
    dhT = torch.randn(N, H, K, V, generator=gen)
    stored = [x.to(dt) for x in inputs]

    def gradients(device, impl):
        leaves = [x.to(device).requires_grad_() for x in stored] + [h0.to(device).requires_grad_()]
        o, hT = seqmix.chunk_gla(*leaves[:4], initial_state=leaves[4], output_final_state=True,
                                 cu_seqlens=cu.to(device), impl=impl)
        torch.autograd.backward([o, hT], [do.to(device), dhT.to(device)])
        return [x.grad.cpu() for x in leaves]

    got, want = gradients("cuda", "automatic"), gradients("cpu", "reference")
    for name, a, b in zip(("dq", "dk", "dv", "dg", "d_initial_state"), got, want):
        assert rel_err(a, b) < TOLERANCE[dtype], name


@pytest.mark.parametrize("D", [64, 128, 256])
def test_torch_compile_fullgraph_backward_on_cuda(torch, D):
    """Compiled and eager gradients agree, with (D = 64 and 128) and without (D = 256: two key
    blocks) the forward's kept chunk states and scores."""
    import seqmix

    gen = torch.Generator().manual_seed(4)
    inputs = [torch.randn(2, 150, 2, D, generator=gen).bfloat16() for _ in range(3)]
    inputs.append((-torch.rand(2, 150, 2, D, generator=gen)).bfloat16())

    def loss(q, k, v, g):
        return seqmix.chunk_gla(q, k, v, g)[0].float().square().sum()

    def gradients(f):
        leaves = [x.cuda().requires_grad_() for x in inputs]
        f(*leaves).backward()
        return [x.grad.cpu() for x in leaves]

    compiled = gradients(torch.compile(loss, fullgraph=True, backend="aot_eager"))
    for a, b in zip(compiled, gradients(loss)):
        assert rel_err(a, b) < 1e-6


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_training_forward_saves_chunk_states_for_the_backward(torch, dtype):
    """A fixed-length forward at K = V = 128 that autograd will differentiate keeps the state
    entering every chunk (the first is the initial state, rounded) and every chunk's scores,
    and the backward reading those tables matches both the oracle and the backward that
    recomputes the states (and the backward given the states alone). K = V = 64 keeps both
    tables too, K = 64 with V = 128 neither."""
    import seqmix
    from seqmix._ops import gla as ops
    from seqmix.torch._common import XP

    dt = getattr(torch, dtype)
    B, T, H, K, V = 2, 300, 2, 128, 128
    gen, inputs, h0 = random_inputs(torch, B, T, H, K, V, B, seed=5)
    do = torch.randn(B, T, H, V, generator=gen).to(dt)
    stored = [x.to(dt) for x in inputs]

    def gradients(device, impl):
        leaves = [x.to(device).requires_grad_() for x in stored] + [h0.to(device).requires_grad_()]
        o, _ = seqmix.chunk_gla(*leaves[:4], initial_state=leaves[4], impl=impl)
        if device == "cuda":  # what the forward kept for the backward: the tables, last
            assert o.grad_fn.saved_tensors[-2].shape == (B, H, 5, K, V)
            assert o.grad_fn.saved_tensors[-1].shape == (B, H, 5, 64, 64)
        o.backward(do.to(device))
        return [x.grad.cpu() for x in leaves]

    got, want = gradients("cuda", "automatic"), gradients("cpu", "reference")
    for name, a, b in zip(("dq", "dk", "dv", "dg", "d_initial_state"), got, want):
        assert rel_err(a, b) < TOLERANCE[dtype], name

    args = [x.cuda() for x in stored] + [h0.cuda(), None, K**-0.5, "automatic"]
    _, _, table, scores = ops.forward(XP, *args, save_states=True)
    assert table.shape == (B, H, 5, K, V) and table.dtype == dt
    assert torch.equal(table[:, :, 0].cpu(), h0.to(dt))
    assert scores.shape == (B, H, 5, 64, 64) and scores.dtype == dt
    assert torch.equal(scores, scores.tril())  # A is causal: zero above the diagonal
    assert torch.all(scores[:, :, 4, 300 - 256:] == 0)  # and past the sequence's end (44 tokens in chunk 4)
    backward_args = args[:6] + [do.cuda(), None, K**-0.5, "automatic"]
    saved = ops.backward(XP, *backward_args, chunk_states=table, chunk_scores=scores)
    states_only = ops.backward(XP, *backward_args, chunk_states=table)
    walked = ops.backward(XP, *backward_args)
    for name, a, b, c in zip(("dq", "dk", "dv", "dg", "d_initial_state"), saved, states_only, walked):
        assert rel_err(a.cpu(), c.cpu()) < TOLERANCE[dtype], name
        assert rel_err(b.cpu(), c.cpu()) < TOLERANCE[dtype], name

    narrow = [x[..., :64].contiguous().cuda().requires_grad_() for x in stored]
    o, _ = seqmix.chunk_gla(*narrow)
    assert o.grad_fn.saved_tensors[-2].shape == (B, H, 5, 64, 64)
    assert o.grad_fn.saved_tensors[-1].shape == (B, H, 5, 64, 64)
    narrow[2] = stored[2].cuda().requires_grad_()  # V = 128
    o, _ = seqmix.chunk_gla(*narrow)
    assert o.grad_fn.saved_tensors[-1].numel() == 0 and o.grad_fn.saved_tensors[-2].numel() == 0
