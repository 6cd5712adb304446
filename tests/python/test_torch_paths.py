"""The two torch paths of every op agree: eager calls run through a plain
autograd.Function (or the bare implementation under no_grad), torch.compile through the
custom ops. Gradients from eager autograd must equal those of the compiled graph with the
default inductor backend, whose backward is traced with fake tensors."""

from __future__ import annotations

import pytest

from conftest import requires_torch

pytestmark = requires_torch


def _cases(torch):
    """name -> (function of the inputs returning a tuple of outputs, the inputs). Small
    float32 shapes, T not a multiple of any chunk, every optional differentiable input given."""
    import seqmix.torch as st

    gen = torch.Generator().manual_seed(7)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    def rand(*shape):
        return torch.rand(*shape, generator=gen)

    B, T, H, K, V = 1, 5, 2, 4, 3
    return {
        "gated_scan": (lambda a, b, z, h0: st.gated_scan(a, b, z, h0, output_final_state=True),
                       (0.5 + 0.4 * rand(B, T, 6), randn(B, T, 6), randn(B, T, 6), randn(B, 6))),
        "chunk_gla": (lambda q, k, v, g, h0: st.chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True),
                      (randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V), -0.3 * rand(B, T, H, K),
                       randn(B, H, K, V))),
        "chunk_gated_delta_rule": (
            lambda q, k, v, g, beta, h0: st.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                                                   output_final_state=True,
                                                                   use_qk_l2norm_in_kernel=True),
            (randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V), -0.3 * rand(B, T, H), rand(B, T, H),
             randn(B, H, K, V))),
        # The lse is used too, so its gradient reaches the backward.
        "flash_attn_func": (lambda q, k, v: st.flash_attn_func(q, k, v, causal=True, return_lse=True),
                            (randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, K))),
        "linear_recurrence": (lambda A, b, h0: st.linear_recurrence(A, b, h0, output_final_state=True),
                              (0.4 * randn(2, T, 3, 3), randn(2, T, 3, 2), randn(2, 3, 2))),
        "projection_chain": (lambda x, w, bias: tuple(st.projection_chain(
                                 x, w, [(3, "silu"), {"width": 2, "activation": "logsigmoid", "tau": 4.0}], bias)),
                             (randn(B, T, 4), randn(5, 4), randn(5))),
        "output_chain": (lambda o, g, norm_weight, out_weight: (st.output_chain(o, g, norm_weight, out_weight),),
                         (randn(B, T, H, V), randn(B, T, H, V), 1 + 0.1 * randn(V), randn(4, H * V))),
    }


NAMES = ["gated_scan", "chunk_gla", "chunk_gated_delta_rule", "flash_attn_func", "linear_recurrence",
         "projection_chain", "output_chain"]


def _case(name):
    import torch

    fn, inputs = _cases(torch)[name]
    return torch, fn, inputs


def _weighted_loss(outputs, weights):
    """A scalar whose gradient reaches every output with a different non-trivial weight."""
    return sum((out * w).sum() for out, w in zip(outputs, weights))


def _without_compile_caches():
    """Compile afresh: a graph from the on-disk caches would not trace the fake kernels and
    the backward custom op again, and could hide a regression there."""
    import contextlib

    import torch._functorch.config
    import torch._inductor.config

    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


@pytest.mark.parametrize("name", NAMES)
def test_eager_gradients_equal_inductor_gradients(name):
    torch, fn, inputs = _case(name)
    gen = torch.Generator().manual_seed(11)
    weights = [torch.randn(out.shape, generator=gen) for out in fn(*inputs)]

    def loss(*args):
        return _weighted_loss(fn(*args), weights)

    def gradients(run):
        leaves = [x.clone().requires_grad_() for x in inputs]
        value = run(*leaves)
        return value.detach(), torch.autograd.grad(value, leaves)

    eager_loss, eager_grads = gradients(loss)
    with _without_compile_caches():
        compiled_loss, compiled_grads = gradients(torch.compile(loss, fullgraph=True))
    assert torch.allclose(compiled_loss, eager_loss, rtol=1e-4, atol=1e-5)
    for i, (got, want) in enumerate(zip(compiled_grads, eager_grads)):
        assert want.abs().sum() > 0, f"input {i}: zero eager gradient"
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), f"input {i}: {(got - want).abs().max()}"


@pytest.mark.parametrize("name", NAMES)
def test_eager_call_takes_the_autograd_function_and_no_grad_the_implementation(name):
    torch, fn, inputs = _case(name)
    leaves = [x.clone().requires_grad_() for x in inputs]
    with_grad = fn(*leaves)
    with torch.no_grad():
        without_grad = fn(*leaves)
    for got, want in zip(without_grad, with_grad):
        assert got.grad_fn is None and not got.requires_grad
        assert torch.equal(got, want.detach())
    # The eager graph node is the plain Function, not the custom op's autograd wrapper
    # (which costs ~100 µs of host time per call).
    node = with_grad[0].grad_fn
    while node is not None and not hasattr(node, "_forward_cls"):  # past reshapes
        node = node.next_functions[0][0]
    assert node is not None and node._forward_cls.__name__ == "EagerOp"
