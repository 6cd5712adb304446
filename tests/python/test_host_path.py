"""The eager host path of the torch ops (python/seqmix/torch/NOTES.md): an eager call skips
the custom-op dispatcher, yet gives exactly what the custom op gives, outputs and
gradients; torch.compile still traces the custom ops without graph breaks; tensors reach
_C as themselves (pointer, shape and strides read in C++); segment lists are parsed once."""

from __future__ import annotations

import pytest

from conftest import requires_torch
from test_torch_paths import NAMES, _cases

pytestmark = requires_torch


def _ops():
    """name -> the TorchOp behind each case's function."""
    import importlib

    def module(op):  # seqmix.torch exports functions named like some of its modules
        return importlib.import_module(f"seqmix.torch.{op}")

    chains = module("chains")
    return {"gated_scan": module("gated_scan")._op, "chunk_gla": module("gla")._op,
            "chunk_gated_delta_rule": module("delta_rule")._op, "flash_attn_func": module("attention")._op,
            "linear_recurrence": module("linear_recurrence")._op, "projection_chain": chains._projection,
            "output_chain": chains._output}


def _run(torch, fn, inputs, used):
    """Outputs and input gradients of fn when the loss uses the outputs at positions `used`
    (weighted, so every used output gets a distinct non-trivial gradient)."""
    gen = torch.Generator().manual_seed(3)
    leaves = [x.clone().requires_grad_() for x in inputs]
    outputs = fn(*leaves)
    loss = sum((outputs[i] * torch.randn(outputs[i].shape, generator=gen)).sum() for i in used)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [y.detach() for y in outputs], grads


def _through_custom_ops(monkeypatch):
    """Makes every TorchOp take its custom op, as under torch.compile."""
    from seqmix.torch import _common

    monkeypatch.setattr(_common, "is_compiling", lambda: True)


@pytest.mark.parametrize("used", ["all", "first"])
@pytest.mark.parametrize("name", NAMES)
def test_eager_path_equals_custom_op_path(name, used, monkeypatch):
    import torch

    fn, inputs = _cases(torch)[name]
    count = len(fn(*inputs))
    positions = range(count) if used == "all" else [0]
    eager_out, eager_grads = _run(torch, fn, inputs, positions)
    with monkeypatch.context() as m:
        _through_custom_ops(m)
        op_out, op_grads = _run(torch, fn, inputs, positions)
    for i, (got, want) in enumerate(zip(eager_out, op_out)):
        assert torch.equal(got, want), f"output {i}"
    for i, (got, want) in enumerate(zip(eager_grads, op_grads)):
        assert (got is None) == (want is None), f"input {i}: gradient present on one path only"
        if got is not None:
            assert torch.equal(got, want), f"input {i}: {(got - want).abs().max()}"


@pytest.mark.parametrize("name", NAMES)
def test_eager_call_never_enters_the_custom_op(name, monkeypatch):
    import torch

    fn, inputs = _cases(torch)[name]
    op = _ops()[name]
    calls = []
    real = op.forward_op
    monkeypatch.setattr(op, "forward_op", lambda *args: calls.append(1) or real(*args))
    leaves = [x.clone().requires_grad_() for x in inputs]
    fn(*leaves)
    with torch.no_grad():
        fn(*inputs)
    assert calls == []
    _through_custom_ops(monkeypatch)
    fn(*leaves)
    assert calls == [1]


def test_unused_outputs_send_no_gradient_in_eager_mode():
    """attention (lse), GLA and the delta rule (final state) are built without materialized
    gradients: their backward gets None, not zeros, for an output the loss did not use."""
    import torch

    import importlib

    attention = importlib.import_module("seqmix.torch.attention")
    seen = []
    backward = attention._op.eager.backward

    class Spy(attention._op.eager):
        @staticmethod
        def backward(ctx, dout, d_lse):
            seen.append(d_lse)
            return backward(ctx, dout, d_lse)

    fn, inputs = _cases(torch)["flash_attn_func"]
    leaves = [x.clone().requires_grad_() for x in inputs]
    out, _lse = Spy.apply(*leaves, None, None, 0, 0, 0.5, True, False, "automatic")
    out.sum().backward()
    assert seen == [None] and all(x.grad is not None for x in leaves)


@pytest.mark.parametrize("name", ["flash_attn_func", "chunk_gla", "projection_chain", "output_chain"])
def test_compile_has_no_graph_breaks(name):
    import torch

    fn, inputs = _cases(torch)[name]
    leaves = [x.clone().requires_grad_() for x in inputs]
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda *args: [y.sum() for y in fn(*args)])(*leaves)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_tensors_reach_c_as_themselves():
    """Strided inputs (a last dimension with stride != 1 is copied in C++), nn.Parameter and
    views give what their contiguous copies give; an unknown dtype names its argument."""
    import torch

    import seqmix

    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 6, 2, 4, generator=gen) for _ in range(3))
    want = seqmix.flash_attn_func(q, k, v, causal=True)
    strided_q = q.transpose(-1, -2).contiguous().transpose(-1, -2)  # strides (48, 8, 1, 2)
    assert strided_q.stride(-1) != 1
    assert torch.equal(seqmix.flash_attn_func(strided_q, torch.nn.Parameter(k), v[:, :, :, :], causal=True), want)
    with pytest.raises(seqmix.SeqmixError, match="argument 'k': expected dtype bf16, f16, f32, f64, int32 or int64, "
                                                 "got torch.complex64"):
        seqmix.flash_attn_func(q, k.to(torch.complex64), v)


def test_segment_lists_are_parsed_once_and_by_content():
    import torch

    import importlib

    import seqmix

    chains = importlib.import_module("seqmix.torch.chains")
    gen = torch.Generator().manual_seed(9)
    x, weight = torch.randn(3, 4, generator=gen), torch.randn(5, 4, generator=gen)
    segments = [(3, "silu"), {"width": 2, "activation": "logsigmoid", "tau": 4.0}]
    first = chains._segment_spec(segments)
    assert chains._segment_spec([(3, "silu"), {"width": 2, "activation": "logsigmoid", "tau": 4.0}]) is first
    changed = [(3, "sigmoid"), {"width": 2, "activation": "logsigmoid", "tau": 4.0}]
    assert chains._segment_spec(changed).activations == ["sigmoid", "logsigmoid"]
    # An unhashable value or a list segment: parsed on every call, with the same results.
    unhashable = [(3, "silu"), {"width": 2, "activation": "logsigmoid", "tau": 4.0, "name": ["gate"]}]
    assert chains._segment_spec(unhashable) is not chains._segment_spec(unhashable)
    got = seqmix.projection_chain(x, weight, [[3, "silu"], (2, "logsigmoid", 4.0)])
    want = seqmix.projection_chain(x, weight, segments)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    # A bad list raises on every call: errors are never cached.
    for _ in range(2):
        with pytest.raises(seqmix.SeqmixError, match="segments\\[0\\]"):
            seqmix.projection_chain(x, weight, [(5, "relu")])
