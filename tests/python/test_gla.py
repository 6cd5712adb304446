import numpy as np
import pytest
import seqmix

from conftest import TOLERANCE, rel_err, requires_torch, runs_without_and_with_final_state

rng = np.random.default_rng(11)


def inputs(B, T, H, K, V, N=None, g_range=(-1.0, -0.01)):
    """float64 q, k, v, g and an [N, H, K, V] initial state."""
    N = B if N is None else N
    return (rng.standard_normal((B, T, H, K)), rng.standard_normal((B, T, H, K)), rng.standard_normal((B, T, H, V)),
            rng.uniform(*g_range, (B, T, H, K)), rng.standard_normal((N, H, K, V)))


def as_f32(*arrays):
    return [a.astype(np.float32) for a in arrays]


@pytest.mark.parametrize("B,T,H,K,V,cu,g_range", [
    (2, 100, 2, 16, 8, None, (-1.0, -0.01)),
    (1, 63, 2, 8, 32, None, (-20.0, -1e-3)),
    (1, 150, 1, 8, 16, [0, 1, 70, 150], (-1e-3, 0.0)),
])
def test_numpy_fast_matches_oracle_forward_and_backward(B, T, H, K, V, cu, g_range):
    cu = None if cu is None else np.array(cu, dtype=np.int64)
    N = B if cu is None else len(cu) - 1
    q, k, v, g, h0 = inputs(B, T, H, K, V, N, g_range)
    do, dhT = rng.standard_normal((B, T, H, V)), rng.standard_normal((N, H, K, V))
    ref, ref_state = seqmix.chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                      impl="reference")
    fast, fast_state = seqmix.chunk_gla(*as_f32(q, k, v, g, h0)[:4], initial_state=as_f32(h0)[0],
                                        output_final_state=True, cu_seqlens=cu, impl="fast")
    assert fast.dtype == np.float32 and fast_state.dtype == np.float32
    assert rel_err(fast, ref) < TOLERANCE["float32"]
    assert rel_err(fast_state, ref_state) < TOLERANCE["float32"]

    ref_grads = seqmix.chunk_gla_backward(q, k, v, g, do, initial_state=h0, d_final_state=dhT, cu_seqlens=cu,
                                          impl="reference")
    q32, k32, v32, g32, h032, do32, dhT32 = as_f32(q, k, v, g, h0, do, dhT)
    fast_grads = seqmix.chunk_gla_backward(q32, k32, v32, g32, do32, initial_state=h032, d_final_state=dhT32,
                                           cu_seqlens=cu, impl="fast")
    for name, got, want in zip(["dq", "dk", "dv", "dg", "dh0"], fast_grads, ref_grads):
        assert rel_err(got, want) < TOLERANCE["float32"], name


def test_numpy_matches_python_loop_with_default_scale_and_varlen_restarts():
    q, k, v, g, _ = inputs(1, 12, 2, 3, 5)
    cu = np.array([0, 5, 12], dtype=np.int32)
    o, final_state = seqmix.chunk_gla(q, k, v, g, cu_seqlens=cu)
    assert final_state is None
    want = np.empty_like(v)
    for start, end in [(0, 5), (5, 12)]:
        for h in range(2):
            S = np.zeros((3, 5))
            for t in range(start, end):
                S = np.exp(g[0, t, h])[:, None] * S + np.outer(k[0, t, h], v[0, t, h])
                want[0, t, h] = 3 ** -0.5 * q[0, t, h] @ S
    assert rel_err(o, want) < 1e-14


def test_bad_input_raises_seqmix_error():
    q, k, v, g, _ = inputs(2, 8, 2, 4, 3)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'k': expected shape \[2, 8, 2, 4\] \[B, T, H, K\]"):
        seqmix.chunk_gla(q, k[:, :7], v, g)
    with pytest.raises(ValueError, match=r"argument 'v': expected dtype f64 \(the dtype of q\), got f32"):
        seqmix.chunk_gla(q, k, v.astype(np.float32), g)


@requires_torch
@pytest.mark.parametrize("varlen", [False, True])
def test_torch_gradcheck_float64(varlen):
    import torch

    B, T = (1, 7) if varlen else (2, 5)
    cu = torch.tensor([0, 3, 7], dtype=torch.int64) if varlen else None
    N = 2
    q, k, v, g, h0 = (torch.tensor(x, requires_grad=True) for x in inputs(B, T, 2, 3, 4, N))

    def f(q, k, v, g, h0):
        return seqmix.chunk_gla(q, k, v, g, scale=0.7, initial_state=h0, output_final_state=True, cu_seqlens=cu)

    assert torch.autograd.gradcheck(f, (q, k, v, g, h0))


@requires_torch
def test_torch_fast_grads_match_oracle_bf16():
    import torch

    q, k, v, g, h0 = (torch.tensor(x) for x in inputs(1, 90, 2, 16, 8, 2, (-3.0, -1e-3)))
    cu = torch.tensor([0, 70, 90], dtype=torch.int32)
    do, dhT = torch.randn(1, 90, 2, 8, dtype=torch.float64), torch.randn(2, 2, 16, 8, dtype=torch.float64)

    def grads(impl):
        leaves = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v, g)] + [h0.float().requires_grad_()]
        o, hT = seqmix.chunk_gla(*leaves[:4], initial_state=leaves[4], output_final_state=True, cu_seqlens=cu,
                                 impl=impl)
        assert o.dtype == torch.bfloat16 and hT.dtype == torch.float32
        ((o.double() * do).sum() + (hT.double() * dhT).sum()).backward()
        return [t.grad for t in leaves]

    for name, got, want in zip(["dq", "dk", "dv", "dg", "dh0"], grads("fast"), grads("reference")):
        assert rel_err(got, want) < TOLERANCE["bfloat16"], name


@requires_torch
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_without_final_state_gives_the_same_outputs_and_grads(compiled):
    """output_final_state=False skips the final state (neither allocated nor written) and
    changes nothing else: o and the gradients equal those of a call that keeps it."""
    import torch

    base = [torch.tensor(x, dtype=torch.float32) for x in inputs(2, 9, 2, 4, 3)[:4]]
    dy = torch.randn(base[2].shape, generator=torch.Generator().manual_seed(5))

    def layer(q, k, v, g, keep):
        o, hT = seqmix.chunk_gla(q, k, v, g, output_final_state=keep)
        assert (hT is not None) == keep
        return o

    runs = runs_without_and_with_final_state(layer, base, dy, compiled)
    for name, without, with_state in zip(["o", "dq", "dk", "dv", "dg"], *runs):
        assert torch.equal(without, with_state), name


def test_numpy_without_final_state_returns_none_and_the_same_o():
    q, k, v, g, _ = inputs(1, 10, 2, 3, 4)
    o, hT = seqmix.chunk_gla(q, k, v, g)
    o_kept, hT_kept = seqmix.chunk_gla(q, k, v, g, output_final_state=True)
    assert hT is None and hT_kept.shape == (1, 2, 3, 4)
    assert np.array_equal(o, o_kept)


@requires_torch
def test_torch_compile_fullgraph_has_no_graph_break():
    import torch

    q, k, v, g, h0 = (torch.tensor(x, dtype=torch.float32) for x in inputs(2, 9, 2, 4, 3))
    q.requires_grad_()
    g.requires_grad_()
    h0.requires_grad_()

    def layer(q, k, v, g, h0):
        o, hT = seqmix.chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True)
        return (o * 2).sum() + hT.sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v, g, h0)
    loss.backward()
    assert torch.allclose(loss, layer(q, k, v, g, h0))
    for leaf in (q, g, h0):
        assert leaf.grad is not None and torch.isfinite(leaf.grad).all()


# fla 0.6's chunk_gla parameters, in order: fla's GatedLinearAttention layer calls chunk_gla with
# these names (state_v_first=True among them), so seqmix.chunk_gla must take every one of them.
FLA_CHUNK_GLA_PARAMETERS = ["q", "k", "v", "g", "scale", "initial_state", "output_final_state", "state_v_first",
                            "cu_seqlens", "cu_seqlens_cpu"]


def test_signature_takes_fla_parameters_in_fla_order():
    import importlib
    import importlib.util
    import inspect

    functions = [seqmix.chunk_gla]
    if importlib.util.find_spec("torch") is not None:  # the torch surface has its own def
        functions.append(importlib.import_module("seqmix.torch.gla").chunk_gla)
    for function in functions:
        names = list(inspect.signature(function).parameters)
        assert names[:len(FLA_CHUNK_GLA_PARAMETERS)] == FLA_CHUNK_GLA_PARAMETERS
        assert inspect.signature(function).parameters["impl"].kind is inspect.Parameter.KEYWORD_ONLY


def test_numpy_state_v_first_is_the_transposed_layout():
    cu = np.array([0, 4, 11], dtype=np.int64)
    q, k, v, g, h0 = inputs(1, 11, 2, 3, 5, 2)
    o, hT = seqmix.chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    o_vk, hT_vk = seqmix.chunk_gla(q, k, v, g, initial_state=np.swapaxes(h0, -1, -2).copy(), output_final_state=True,
                                   state_v_first=True, cu_seqlens=cu, cu_seqlens_cpu=cu)
    assert hT_vk.shape == (2, 2, 5, 3)
    assert np.array_equal(o_vk, o) and np.array_equal(hT_vk, np.swapaxes(hT, -1, -2))


def test_cu_seqlens_cpu_must_match_cu_seqlens():
    q, k, v, g, _ = inputs(1, 11, 2, 3, 5)
    cu = np.array([0, 4, 11], dtype=np.int64)
    with pytest.raises(ValueError, match="cu_seqlens_cpu was given without cu_seqlens"):
        seqmix.chunk_gla(q, k, v, g, cu_seqlens_cpu=cu)
    with pytest.raises(ValueError, match="cu_seqlens_cpu has 2 offsets and cu_seqlens 3"):
        seqmix.chunk_gla(q, k, v, g, cu_seqlens=cu, cu_seqlens_cpu=cu[:2])


@requires_torch
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_state_v_first_gives_transposed_states_and_grads(compiled):
    """state_v_first=True (fla's layers) takes and returns [N, H, V, K] states: the same numbers
    as the default layout, transposed, through autograd and torch.compile alike."""
    import torch

    base = [torch.tensor(x, dtype=torch.float32) for x in inputs(2, 9, 2, 4, 3)]
    gen = torch.Generator().manual_seed(7)
    do, dhT = torch.randn(base[2].shape, generator=gen), torch.randn(base[4].shape, generator=gen)

    def layer(q, k, v, g, h0, v_first):
        return seqmix.chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True, state_v_first=v_first)

    def run(v_first):
        leaves = [t.clone().requires_grad_() for t in base]
        if v_first:
            leaves[4] = base[4].transpose(-1, -2).contiguous().requires_grad_()
        fn = torch.compile(layer, fullgraph=True, backend="aot_eager") if compiled else layer
        o, hT = fn(*leaves, v_first)
        assert hT.shape == ((2, 2, 3, 4) if v_first else (2, 2, 4, 3))
        hT_kv = hT.transpose(-1, -2) if v_first else hT
        ((o * do).sum() + (hT_kv * dhT).sum()).backward()
        dh0 = leaves[4].grad.transpose(-1, -2) if v_first else leaves[4].grad
        return [o.detach(), hT_kv.detach()] + [t.grad for t in leaves[:4]] + [dh0]

    for name, got, want in zip(["o", "hT", "dq", "dk", "dv", "dg", "dh0"], run(True), run(False)):
        assert torch.equal(got, want), name
