import numpy as np
import pytest
import seqmix

from conftest import TOLERANCE, rel_err, requires_torch, runs_without_and_with_final_state

rng = np.random.default_rng(7)


def decays(decay, shape):
    """Decay inputs in the range each form expects."""
    if decay == "log":
        return rng.uniform(-2, -0.01, shape)
    if decay == "logit":
        return rng.normal(0, 2, shape)
    return rng.uniform(0.5, 0.999, shape)


def inputs(B, T, D, decay="direct"):
    a = decays(decay, (B, T, D))
    return a, rng.standard_normal((B, T, D)), rng.standard_normal((B, T, D)), rng.standard_normal((B, D))


@pytest.mark.parametrize("decay", ["direct", "log", "logit"])
def test_numpy_fast_matches_oracle(decay):
    a, b, z, h0 = inputs(2, 37, 5, decay)
    ref, ref_state = seqmix.gated_scan(a, b, z, h0, True, decay=decay, impl="reference")
    fast, fast_state = seqmix.gated_scan(a.astype(np.float32), b.astype(np.float32), z.astype(np.float32),
                                         h0.astype(np.float32), True, decay=decay, impl="fast")
    assert fast.dtype == np.float32 and fast_state.dtype == np.float32
    assert rel_err(fast, ref) < TOLERANCE["float32"]
    assert rel_err(fast_state, ref_state) < TOLERANCE["float32"]


def test_numpy_matches_python_loop_and_varlen_restarts():
    a, b, _, _ = inputs(1, 12, 3)
    cu = np.array([0, 5, 12], dtype=np.int32)
    y = seqmix.gated_scan(a, b, cu_seqlens=cu)
    want = np.empty_like(b)
    for start, end in [(0, 5), (5, 12)]:
        h = np.zeros(3)
        for t in range(start, end):
            h = a[0, t] * h + b[0, t]
            want[0, t] = h
    assert rel_err(y, want) < 1e-14


@pytest.mark.parametrize("B,T,cu", [(1, 1, None), (3, 1000, None), (1, 777, [0, 100, 101, 777])])
def test_tile_state_shape_formula_matches_the_library(B, T, cu):
    from seqmix import _C
    from seqmix._ops.gated_scan import tile_states_shape

    cu = None if cu is None else np.array(cu, np.int32)
    N = B if cu is None else len(cu) - 1
    assert tile_states_shape(np.empty((B, T, 5)), cu) == tuple(_C.gated_scan_tile_states_shape(B, T, N, 5))


def test_bad_input_raises_seqmix_error():
    a, b, _, _ = inputs(2, 8, 4)
    with pytest.raises(seqmix.SeqmixError, match="argument 'a': expected shape \\[2, 8, 4\\]"):
        seqmix.gated_scan(a[:, :7], b)
    with pytest.raises(ValueError, match="expected dtype f64 \\(the dtype of b\\), got f32"):
        seqmix.gated_scan(a.astype(np.float32), b)


@requires_torch
@pytest.mark.parametrize("gated,with_state,decay", [(True, True, "direct"), (False, False, "log"), (True, False, "logit")])
def test_torch_gradcheck_float64(gated, with_state, decay):
    import torch

    a, b, z, h0 = (torch.tensor(x, requires_grad=True) for x in inputs(2, 6, 3, decay))
    cu = None

    def f(a, b, z, h0):
        y, hT = seqmix.gated_scan(a, b, z if gated else None, h0 if with_state else None, True, cu,
                                  decay=decay)
        return y, hT

    assert torch.autograd.gradcheck(f, (a, b, z, h0))


@requires_torch
def test_torch_fast_grads_match_oracle_bf16():
    import torch

    a, b, z, h0 = (torch.tensor(x) for x in inputs(1, 20, 8))
    cu = torch.tensor([0, 7, 20], dtype=torch.int32)
    dy = torch.randn(1, 20, 8, dtype=torch.float64)

    def grads(dtype, impl):
        leaves = [t.to(dtype).requires_grad_() for t in (a, b, z)] + [h0[:1].repeat(2, 1).float().requires_grad_()]
        y = seqmix.gated_scan(*leaves, cu_seqlens=cu, impl=impl)
        y.backward(dy.to(dtype))
        return [t.grad for t in leaves]

    for got, want in zip(grads(torch.bfloat16, "fast"), grads(torch.bfloat16, "reference")):
        assert rel_err(got, want) < TOLERANCE["bfloat16"]


@requires_torch
def test_torch_compile_fullgraph_has_no_graph_break():
    import torch

    a, b, z, h0 = (torch.tensor(x, dtype=torch.float32) for x in inputs(2, 9, 4))
    b.requires_grad_()

    def layer(a, b, z):
        return (seqmix.gated_scan(a, b, z) * 2).sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(a, b, z)
    loss.backward()
    assert torch.allclose(loss, layer(a, b, z))
    assert b.grad is not None and torch.isfinite(b.grad).all()



@requires_torch
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_without_final_state_gives_the_same_outputs_and_grads(compiled):
    """output_final_state=False skips the final state (neither allocated nor written) and
    changes nothing else: y and the gradients equal those of a call that keeps it."""
    import torch

    base = [torch.tensor(x, dtype=torch.float32) for x in inputs(2, 9, 4)]
    dy = torch.randn(2, 9, 4, generator=torch.Generator().manual_seed(5))

    def layer(a, b, z, h0, keep):
        out = seqmix.gated_scan(a, b, z, h0, keep)
        assert isinstance(out, tuple) == keep
        return out[0] if keep else out

    runs = runs_without_and_with_final_state(layer, base, dy, compiled)
    for name, without, with_state in zip(["y", "da", "db", "dz", "dh0"], *runs):
        assert torch.equal(without, with_state), name


@requires_torch
def test_torch_loss_on_the_final_state_alone():
    """A loss that reads only the final state sends no gradient for y (eager: None, which
    the backward takes as zeros): the gradients equal those of a loss that adds 0·y."""
    import torch

    base = [torch.tensor(x) for x in inputs(1, 11, 3, "log")]

    def grads(with_y):
        leaves = [t.clone().requires_grad_() for t in base]
        y, hT = seqmix.gated_scan(*leaves, output_final_state=True, decay="log")
        loss = (hT * torch.arange(1.0, 4.0, dtype=hT.dtype)).sum() + (0 * y.sum() if with_y else 0)
        loss.backward()
        return [t.grad for t in leaves]

    for name, alone, with_y in zip(["da", "db", "dz", "dh0"], grads(False), grads(True)):
        assert alone is not None and torch.equal(alone, with_y), name


def test_numpy_without_final_state_returns_y_alone_and_the_same_y():
    a, b, z, h0 = inputs(2, 10, 3)
    y = seqmix.gated_scan(a, b, z, h0)
    y_kept, hT = seqmix.gated_scan(a, b, z, h0, True)
    assert isinstance(y, np.ndarray) and hT.shape == (2, 3)
    assert np.array_equal(y, y_kept)
