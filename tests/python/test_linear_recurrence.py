import numpy as np
import pytest
import seqmix

from conftest import TOLERANCE, rel_err, requires_torch

rng = np.random.default_rng(11)
METHODS = ["sequential", "chunked", "scan", "cyclic_reduction", "auto"]


def inputs(G, T, n, m):
    """Transitions with spectral radius well below 1, so states stay O(1) over T."""
    scale = 1.2 / np.sqrt(n)
    return (rng.uniform(-scale, scale, (G, T, n, n)), rng.standard_normal((G, T, n, m)),
            rng.standard_normal((G, n, m)))


def python_loop(A, b, h0):
    h = np.empty_like(b)
    for g in range(A.shape[0]):
        state = h0[g]
        for t in range(A.shape[1]):
            state = A[g, t] @ state + b[g, t]
            h[g, t] = state
    return h


def test_oracle_matches_python_loop():
    A, b, h0 = inputs(2, 9, 3, 2)
    h, final_state = seqmix.linear_recurrence(A, b, h0, output_final_state=True)
    want = python_loop(A, b, h0)
    assert rel_err(h, want) < 1e-14
    assert rel_err(final_state, want[:, -1]) < 1e-14
    assert rel_err(seqmix.linear_recurrence(A, b), python_loop(A, b, np.zeros_like(h0))) < 1e-14


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("T,n,m", [(1, 4, 3), (7, 1, 1), (100, 4, 1), (64, 5, 3)])
@pytest.mark.parametrize("with_state", [False, True])
def test_numpy_methods_match_oracle(method, T, n, m, with_state):
    A, b, h0 = inputs(2, T, n, m)
    h0 = h0 if with_state else None
    ref, ref_state = seqmix.linear_recurrence(A, b, h0, output_final_state=True, impl="reference")
    f32 = [None if x is None else x.astype(np.float32) for x in (A, b, h0)]
    fast, fast_state = seqmix.linear_recurrence(*f32, method=method, output_final_state=True, impl="fast")
    assert fast.dtype == np.float32 and fast_state.dtype == np.float32
    assert rel_err(fast, ref) < TOLERANCE["float32"]
    assert rel_err(fast_state, ref_state) < TOLERANCE["float32"]

    dh, d_final = rng.standard_normal(b.shape), rng.standard_normal(b[:, 0].shape)
    want = seqmix.linear_recurrence_backward(A, b, dh, h0, d_final, impl="reference")
    got = seqmix.linear_recurrence_backward(*f32[:2], dh.astype(np.float32), f32[2], d_final.astype(np.float32),
                                            method=method, impl="fast")
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert rel_err(g, w) < TOLERANCE["float32"]


def test_bad_input_raises_seqmix_error():
    A, b, h0 = inputs(2, 8, 4, 3)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'b': expected shape \[2, 8, 4, 3\] \[G, T, n, m\]"):
        seqmix.linear_recurrence(A, b[:, :7])
    with pytest.raises(ValueError, match=r"argument 'A': expected square transitions"):
        seqmix.linear_recurrence(A[..., :3], b)
    with pytest.raises(ValueError, match=r"argument 'initial_state': expected dtype f64 \(the dtype of A\), got f32"):
        seqmix.linear_recurrence(A, b, h0.astype(np.float32))
    with pytest.raises(ValueError, match=r"argument 'method': expected one of auto, sequential"):
        seqmix.linear_recurrence(A, b, method="parallel")


@requires_torch
@pytest.mark.parametrize("with_state", [True, False])
def test_torch_gradcheck_float64(with_state):
    import torch

    A, b, h0 = (torch.tensor(x, requires_grad=True) for x in inputs(2, 5, 3, 2))

    def f(A, b, h0):
        return seqmix.linear_recurrence(A, b, h0 if with_state else None, output_final_state=True)

    assert torch.autograd.gradcheck(f, (A, b, h0))
    if not with_state:
        f(A, b, h0)[0].sum().backward()
        assert h0.grad is None


@requires_torch
@pytest.mark.parametrize("method", ["sequential", "chunked", "scan", "cyclic_reduction"])
def test_torch_fast_grads_match_oracle_bf16(method):
    import torch

    A, b, h0 = (torch.tensor(x) for x in inputs(2, 37, 4, 3))
    dh, d_final = torch.randn(2, 37, 4, 3, dtype=torch.float64), torch.randn(2, 4, 3, dtype=torch.float64)

    def run(impl):
        leaves = [t.to(torch.bfloat16).requires_grad_() for t in (A, b, h0)]
        h, final_state = seqmix.linear_recurrence(*leaves, method=method, output_final_state=True, impl=impl)
        assert h.dtype == final_state.dtype == torch.bfloat16
        torch.autograd.backward((h, final_state), (dh.to(torch.bfloat16), d_final.to(torch.bfloat16)))
        return [h, final_state] + [t.grad for t in leaves]

    for got, want in zip(run("fast"), run("reference")):
        assert rel_err(got, want) < TOLERANCE["bfloat16"]


@requires_torch
def test_torch_compile_fullgraph_has_no_graph_break():
    import torch

    A, b, h0 = (torch.tensor(x, dtype=torch.float32) for x in inputs(2, 11, 4, 2))
    A.requires_grad_()
    h0.requires_grad_()

    def layer(A, b, h0):
        h, final_state = seqmix.linear_recurrence(A, b, h0, method="cyclic_reduction", output_final_state=True)
        return (h * 2).sum() + final_state.square().sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(A, b, h0)
    loss.backward()
    assert torch.allclose(loss, layer(A, b, h0))
    compiled_grads = (A.grad.clone(), h0.grad.clone())
    A.grad = h0.grad = None
    layer(A, b, h0).backward()
    assert rel_err(compiled_grads[0], A.grad) < 1e-6 and rel_err(compiled_grads[1], h0.grad) < 1e-6


@requires_torch
def test_full_bench_times_every_method_where_it_fits_memory(monkeypatch):
    """The GPU suite's plan over the issue's grid (on an 80 GiB device): a method is left
    out only where its case would not fit memory, with that reason; a slow one is timed
    forward only, with the predicted time as the reason, and its case gets no backward
    rows for it."""
    from seqmix.bench.gpu import linear_recurrence as bench

    monkeypatch.setattr(bench, "_device_bytes", lambda: 80 * 2**30)
    plan = bench.grid_plan()
    assert len(plan) == 144
    for G, T, n, m, dtype, timed, skipped, forward_only in plan:
        assert set(timed) | set(skipped) == set(bench.METHODS)
        for name, why in skipped.items():
            need = bench.case_bytes(G, T, n, m, torch_itemsize(dtype), name)
            assert need > bench.MEMORY_FRACTION * 80 * 2**30 and "GiB" in why, (G, T, n, m, name, why)
        for name, why in forward_only.items():
            assert name in timed and "predicted" in why
            assert bench.predicted_forward_ms(name, G, T, n, m) > bench.FULL_PREDICTED_LIMIT_MS
    scan_points = [p for p in plan if "scan" in p[5]]
    assert len(scan_points) > 144 - 10  # all but the largest cases
    assert any("scan" in p[7] for p in plan)  # some only forward

    case = bench.recurrence_case(1, 8, 4, 1, device="cpu", baselines=False, methods=("scan", "sequential"),
                                 forward_only=("scan",))
    directions = {m.name: [d for d in ("fwd", "bwd", "fwd+bwd") if m.runs(d)] for m in case.methods}
    assert directions == {"seqmix scan": ["fwd"], "seqmix sequential": ["fwd", "bwd", "fwd+bwd"]}


def torch_itemsize(dtype):
    import torch

    return torch.empty((), dtype=dtype).element_size()
