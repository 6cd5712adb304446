"""seqmix.chunk_gla in fla's place: the same call fla's GatedLinearAttention layer makes
(fla 0.6: keyword arguments, state_v_first=True), against fla's own chunk_gla on the GPU.
Skips, with the reason, without a GPU, without this build's gla kernels, or where fla does
not import (it is not a dependency of seqmix)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch

# seqmix and fla each round to bf16 at their own points, so they differ by about both
# errors against the float64 oracle; a wrong state layout or argument differs by O(1).
AGREEMENT = 2 * TOLERANCE["bfloat16"]


@pytest.fixture
def fla():
    cuda_kernels_or_skip("gla")
    try:
        import fla.layers.gla
        import fla.ops.gla
    except Exception as e:  # absent, or its Triton stack fails to import here
        pytest.skip(f"fla is not importable ({type(e).__name__}: {e})")
    return fla


def test_matches_fla_chunk_gla_with_v_first_states(fla):
    """fla's own call with initial and final states in fla's layers' [N, H, V, K] layout, a
    length that is not a multiple of 64, and every gradient; seqmix also against the oracle."""
    import torch

    import seqmix

    gen = torch.Generator().manual_seed(3)
    B, T, H, K, V = 2, 1000, 3, 64, 128
    q, k = (torch.randn(B, T, H, K, generator=gen) * K**-0.25 for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, K, generator=gen)) / 4
    h0 = torch.randn(B, H, V, K, generator=gen)
    do, dhT = torch.randn(B, T, H, V, generator=gen), torch.randn(B, H, V, K, generator=gen)
    stored = [x.bfloat16() for x in (q, k, v, g)]

    def run(chunk_gla, device):
        leaves = [x.to(device).requires_grad_() for x in stored] + [h0.to(device).requires_grad_()]
        o, hT = chunk_gla(q=leaves[0], k=leaves[1], v=leaves[2], g=leaves[3], initial_state=leaves[4],
                          output_final_state=True, state_v_first=True, cu_seqlens=None)
        assert hT.shape == (B, H, V, K)
        ((o.float() * do.to(device)).sum() + (hT * dhT.to(device)).sum()).backward()
        return [o, hT] + [x.grad for x in leaves]

    def reference(**kwargs):
        return seqmix.chunk_gla(**kwargs, impl="reference")

    names = ["o", "hT", "dq", "dk", "dv", "dg", "dh0"]
    ours, theirs = run(seqmix.chunk_gla, "cuda"), run(fla.ops.gla.chunk_gla, "cuda")
    oracle = run(reference, "cpu")
    for name, got, fla_got, want in zip(names, ours, theirs, oracle):
        assert rel_err(got.cpu(), want) < TOLERANCE["bfloat16"], name
        assert rel_err(got.cpu(), fla_got.cpu()) < AGREEMENT, name


def test_fla_layer_trains_the_same_with_seqmix_chunk_gla(fla, monkeypatch):
    """fla's GatedLinearAttention layer (chunk mode, its defaults: K 64, V 128 a head) with
    seqmix.chunk_gla put where it calls fla's: the output and the gradients of the input and
    of every weight agree with the layer running fla's own."""
    import torch

    import seqmix

    torch.manual_seed(0)
    layer = fla.layers.gla.GatedLinearAttention(mode="chunk", hidden_size=512, num_heads=4).cuda().bfloat16()
    x = torch.randn(2, 1000, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)

    def step():
        layer.zero_grad(set_to_none=True)
        leaf = x.clone().requires_grad_()
        y = layer(leaf)[0]
        y.backward(dy)
        return {"y": y.detach(), "dx": leaf.grad, **{n: p.grad for n, p in layer.named_parameters()}}

    theirs = step()
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return seqmix.chunk_gla(*args, **kwargs)

    monkeypatch.setattr(fla.layers.gla, "chunk_gla", counted)
    ours = step()
    assert len(calls) == 1 and calls[0].get("state_v_first") is True  # the layer's own call reached seqmix
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert rel_err(ours[name], theirs[name]) < AGREEMENT, name
