import numpy as np
import pytest
import seqmix

from conftest import TOLERANCE, rel_err, requires_torch

rng = np.random.default_rng(11)


def inputs(B, T, H, K, V, N=None, l2norm=False):
    """float64 q, k, v, g, beta, initial_state; without the L2 norm ‖k‖² stays near 2/3 so
    the recurrence is bounded (β‖k‖² < 2)."""
    k_range = 1.0 if l2norm else np.sqrt(2.0 / K)
    return (rng.uniform(-1, 1, (B, T, H, K)), rng.uniform(-k_range, k_range, (B, T, H, K)),
            rng.uniform(-1, 1, (B, T, H, V)), rng.uniform(-1, -0.01, (B, T, H)), rng.uniform(0.05, 0.95, (B, T, H)),
            rng.uniform(-1, 1, (N or B, H, K, V)))


def python_loop(q, k, v, g, beta, h0, cu, scale, l2norm):
    """The definition, token by token, in numpy."""
    def norm(x):
        return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6) if l2norm else x

    q, k = norm(q), norm(k)
    o = np.empty(v.shape)
    states = []
    for n, (start, end) in enumerate(zip(cu[:-1], cu[1:])):
        for h in range(q.shape[2]):
            S = h0[n, h].copy()
            for t in range(start, end):
                kt = k[0, t, h][None, :]
                S = np.exp(g[0, t, h]) * (np.eye(S.shape[0]) - beta[0, t, h] * kt.T @ kt) @ S \
                    + beta[0, t, h] * kt.T @ v[0, t, h][None, :]
                o[0, t, h] = scale * q[0, t, h] @ S
            states.append(S)
    return o, np.stack(states).reshape(h0.shape)


@pytest.mark.parametrize("l2norm", [False, True])
def test_numpy_fast_matches_oracle(l2norm):
    q, k, v, g, beta, h0 = inputs(2, 100, 2, 16, 8, l2norm=l2norm)
    ref, ref_state = seqmix.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, l2norm, impl="reference")
    f32 = [x.astype(np.float32) for x in (q, k, v, g, beta, h0)]
    fast, fast_state = seqmix.chunk_gated_delta_rule(*f32[:5], initial_state=f32[5], output_final_state=True,
                                                     use_qk_l2norm_in_kernel=l2norm, impl="fast")
    assert fast.dtype == np.float32 and fast_state.dtype == np.float32
    assert rel_err(fast, ref) < TOLERANCE["float32"]
    assert rel_err(fast_state, ref_state) < TOLERANCE["float32"]


@pytest.mark.parametrize("l2norm", [False, True])
def test_numpy_matches_python_loop_with_varlen_and_default_scale(l2norm):
    cu = np.array([0, 3, 4, 11], dtype=np.int64)
    q, k, v, g, beta, h0 = inputs(1, 11, 2, 4, 3, N=3, l2norm=l2norm)
    o, state = seqmix.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                             use_qk_l2norm_in_kernel=l2norm, cu_seqlens=cu)
    want_o, want_state = python_loop(q, k, v, g, beta, h0, cu, 4 ** -0.5, l2norm)
    assert rel_err(o, want_o) < 1e-13
    assert rel_err(state, want_state) < 1e-13
    o_fast, none = seqmix.chunk_gated_delta_rule(*(x.astype(np.float32) for x in (q, k, v, g, beta)), scale=0.5,
                                                 use_qk_l2norm_in_kernel=l2norm, cu_seqlens=cu)
    assert none is None
    assert rel_err(o_fast, python_loop(q, k, v, g, beta, 0 * h0, cu, 0.5, l2norm)[0]) < TOLERANCE["float32"]


def test_numpy_fast_backward_matches_oracle_backward():
    q, k, v, g, beta, h0 = inputs(1, 70, 2, 8, 12, l2norm=True)
    do, dhT = rng.standard_normal((1, 70, 2, 12)), rng.standard_normal(h0.shape)
    ref = seqmix.chunk_gated_delta_rule_backward(q, k, v, g, beta, do, initial_state=h0, d_final_state=dhT,
                                                 use_qk_l2norm_in_kernel=True, impl="reference")
    fast = seqmix.chunk_gated_delta_rule_backward(*(x.astype(np.float32) for x in (q, k, v, g, beta, do)),
                                                  initial_state=h0.astype(np.float32),
                                                  d_final_state=dhT.astype(np.float32),
                                                  use_qk_l2norm_in_kernel=True, impl="fast")
    for got, want in zip(fast, ref):
        assert rel_err(got, want) < TOLERANCE["float32"]


def test_bad_input_raises_seqmix_error():
    q, k, v, g, beta, h0 = inputs(2, 8, 2, 4, 6)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'beta': expected shape \[2, 8, 2\] \[B, T, H\], got \[2, 8, 1\]"):
        seqmix.chunk_gated_delta_rule(q, k, v, g, beta[:, :, :1])
    with pytest.raises(ValueError, match=r"argument 'g': expected dtype f64 \(the dtype of q\), got f32"):
        seqmix.chunk_gated_delta_rule(q, k, v, g.astype(np.float32), beta)
    with pytest.raises(ValueError, match=r"argument 'initial_state': expected shape \[2, 2, 4, 6\]"):
        seqmix.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0[:, :, :, :5])


@requires_torch
@pytest.mark.parametrize("l2norm,varlen", [(False, False), (True, True)])
def test_torch_gradcheck_float64(l2norm, varlen):
    import torch

    cu = torch.tensor([0, 2, 7], dtype=torch.int32) if varlen else None
    B = 1 if varlen else 2
    leaves = [torch.tensor(x, requires_grad=True) for x in inputs(B, 7, 2, 3, 4, N=2, l2norm=l2norm)]

    def f(q, k, v, g, beta, h0):
        return seqmix.chunk_gated_delta_rule(q, k, v, g, beta, 0.7, h0, True, l2norm, cu)

    assert torch.autograd.gradcheck(f, leaves)


@requires_torch
def test_torch_fast_grads_match_oracle_bf16():
    import torch

    q, k, v, g, beta, h0 = (torch.tensor(x) for x in inputs(1, 90, 2, 16, 8, N=3, l2norm=True))
    cu = torch.tensor([0, 5, 70, 90], dtype=torch.int64)
    do = torch.randn(1, 90, 2, 8, dtype=torch.float64)
    dhT = torch.randn(3, 2, 16, 8, dtype=torch.float64)

    def grads(impl):
        leaves = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v, g, beta)] + [h0.float().requires_grad_()]
        o, hT = seqmix.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True,
                                              use_qk_l2norm_in_kernel=True, cu_seqlens=cu, impl=impl)
        assert o.dtype == torch.bfloat16 and hT.dtype == torch.float32
        torch.autograd.backward((o, hT), (do.to(torch.bfloat16), dhT.float()))
        return [t.grad for t in leaves]

    for got, want in zip(grads("fast"), grads("reference")):
        assert rel_err(got, want) < TOLERANCE["bfloat16"]


@requires_torch
def test_torch_compile_fullgraph_has_no_graph_break():
    import torch

    q, k, v, g, beta, h0 = (torch.tensor(x, dtype=torch.float32) for x in inputs(2, 9, 2, 4, 4))
    q.requires_grad_()
    h0.requires_grad_()

    def layer(q, k, v, g, beta, h0):
        o, hT = seqmix.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                              use_qk_l2norm_in_kernel=True)
        return (o * 2).sum() + hT.sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v, g, beta, h0)
    loss.backward()
    assert torch.allclose(loss, layer(q, k, v, g, beta, h0))
    assert q.grad is not None and torch.isfinite(q.grad).all()
    assert h0.grad is not None and torch.isfinite(h0.grad).all()
