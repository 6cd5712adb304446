"""torch ops for the projection chain and the output chain: custom ops with fake kernels and
autograd (each backward is itself a custom op, so torch.compile traces through it), and an
eager path."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from .._ops import chains as ops
from .._ops.chains import low_rank_gate  # noqa: F401  (serves torch tensors through projection_chain)
from ._common import XP, TorchOp, absent, eager_function, fake_grad, is_compiling, present


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


# Custom op schemas have no list of strings: activation and dtype names travel as one
# comma-separated string each, split again here (remembered: a model repeats a few).
@functools.lru_cache(maxsize=256)
def _split(names: str) -> tuple[str, ...]:
    return tuple(names.split(","))


@functools.lru_cache(maxsize=256)
def _dtypes(names: str) -> tuple[torch.dtype, ...]:
    return tuple(_dtype(d) for d in _split(names))


# ---- projection chain ----


def _projection_forward(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], widths: list[int],
                        activations: str, taus: list[float], dtypes: str, impl: str) -> list[torch.Tensor]:
    return ops.projection_forward(XP, x, weight, bias, widths, _split(activations), taus, _dtypes(dtypes), impl)


def _projection_forward_unaliased(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                                  widths: list[int], activations: str, taus: list[float], dtypes: str,
                                  impl: str) -> list[torch.Tensor]:
    """The forward as the custom op runs it. A custom op may not return tensors that alias
    each other, and on a CUDA device the segments are views of one buffer: there (under
    torch.compile or a torch.func transform) each segment is copied out. Eager calls get the
    views themselves (see the end of this section)."""
    outputs = _projection_forward(x, weight, bias, widths, activations, taus, dtypes, impl)
    # Every segment is copied when there are several: views of one buffer need not carry a
    # _base (they may be made from the storage), so their aliasing is not detected per tensor.
    return [y.clone() if len(outputs) > 1 or y._base is not None else y for y in outputs]


def _projection_forward_fake(x, weight, bias, widths, activations, taus, dtypes, impl):
    return [x.new_empty((x.shape[0], w), dtype=d) for w, d in zip(widths, _dtypes(dtypes))]


def _projection_backward(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], widths: list[int],
                         activations: str, taus: list[float], d_outputs: list[torch.Tensor],
                         impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dweight, dbias = ops.projection_backward(XP, x, weight, bias, widths, _split(activations), taus, d_outputs,
                                                 impl)
    return dx, dweight, present(dbias, x)


def _projection_backward_fake(x, weight, bias, widths, activations, taus, d_outputs, impl):
    return torch.empty_like(x), torch.empty_like(weight), fake_grad(bias, x)


def _projection_setup_context(ctx, inputs, output):
    x, weight, bias, widths, activations, taus, dtypes, impl = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.widths, ctx.activations, ctx.taus, ctx.dtypes, ctx.impl = widths, activations, taus, dtypes, impl


def _make_projection_backward(run_backward):
    def backward(ctx, d_outputs):
        x, weight, bias = ctx.saved_tensors
        # A segment the loss never used has no gradient: it contributes zeros.
        d_outputs = [x.new_zeros((x.shape[0], w), dtype=d) if g is None else g
                     for g, w, d in zip(d_outputs, ctx.widths, _dtypes(ctx.dtypes))]
        dx, dweight, dbias = run_backward(x, weight, bias, ctx.widths, ctx.activations, ctx.taus, d_outputs, ctx.impl)
        return dx, dweight, absent(dbias, bias), None, None, None, None, None

    return backward


_projection = TorchOp("projection_chain", _projection_forward_unaliased, _projection_forward_fake,
                      _projection_backward, _projection_backward_fake, _projection_setup_context,
                      _make_projection_backward)
# Eager mode (an autograd.Function, which may return views of one buffer) and the bare call
# keep the segments as views: no copy.
_projection.implementation = _projection_forward
_projection.eager = eager_function(_projection_forward, _projection_setup_context,
                                   _make_projection_backward(_projection_backward), returns_list=True)


# Parsed segment lists by content (see ops.segments_key): parsing and checking a list costs
# ~5 µs, a model passes the same list on every call.
_SPECS: dict = {}
_MAX_SPECS = 256


def _segment_spec(segments) -> ops.SegmentSpec:
    """The parsed segments, from the cache in eager mode; torch.compile traces the parse."""
    if is_compiling():
        return ops.SegmentSpec(segments)
    key = ops.segments_key(segments)
    try:
        spec = None if key is None else _SPECS.get(key)
    except TypeError:  # a segment holds something unhashable
        key = spec = None
    if spec is None:
        spec = ops.SegmentSpec(segments)
        if key is not None:
            if len(_SPECS) >= _MAX_SPECS:
                _SPECS.clear()
            _SPECS[key] = spec
    return spec


def projection_chain(x, weight, segments, bias=None, impl="automatic"):
    """torch version of :func:`seqmix.projection_chain` (same arguments), differentiable in
    x, weight and bias. Returns a list of ``[..., width]`` tensors (``[..., heads, width /
    heads]`` where a segment names its heads); on a CUDA device, in eager mode, column views
    of one ``[..., W_total]`` buffer."""
    spec = _segment_spec(segments)
    dtypes = spec.dtype_names(str(x.dtype)[6:])  # "torch.bfloat16" -> "bfloat16"
    if x.dim() <= 2 and not spec.has_heads:
        return _projection(x, weight, bias, spec.widths, spec.activation_names, spec.taus, dtypes, impl)
    flat = x.reshape(-1, x.shape[-1]) if x.dim() > 2 else x
    outputs = _projection(flat, weight, bias, spec.widths, spec.activation_names, spec.taus, dtypes, impl)
    outputs = [y.reshape(*x.shape[:-1], y.shape[-1]) if x.dim() > 2 else y for y in outputs]
    return ops.split_heads(outputs, spec.heads)


# ---- output chain ----


def _output_forward(o: torch.Tensor, g: torch.Tensor, norm_weight: torch.Tensor, out_weight: torch.Tensor, eps: float,
                    impl: str) -> torch.Tensor:
    return ops.output_forward(XP, o, g, norm_weight, out_weight, eps, impl)


def _output_forward_fake(o, g, norm_weight, out_weight, eps, impl):
    return o.new_empty(ops.output_shape(o, out_weight))


def _output_backward(o: torch.Tensor, g: torch.Tensor, norm_weight: torch.Tensor, out_weight: torch.Tensor,
                     dy: torch.Tensor, eps: float,
                     impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # The CUDA path reads dy with TMA (no broadcast strides): autograd may hand over an
    # expanded gradient (the backward of a sum).
    return ops.output_backward(XP, o, g, norm_weight, out_weight, dy.contiguous(), eps, impl)


def _output_backward_fake(o, g, norm_weight, out_weight, dy, eps, impl):
    return torch.empty_like(o), torch.empty_like(g), torch.empty_like(norm_weight), torch.empty_like(out_weight)


def _output_setup_context(ctx, inputs, output):
    o, g, norm_weight, out_weight, eps, impl = inputs
    ctx.save_for_backward(o, g, norm_weight, out_weight)
    ctx.eps, ctx.impl = eps, impl


def _make_output_backward(run_backward):
    def backward(ctx, dy):
        o, g, norm_weight, out_weight = ctx.saved_tensors
        grads = run_backward(o, g, norm_weight, out_weight, dy, ctx.eps, ctx.impl)
        return (*grads, None, None)

    return backward


_output = TorchOp("output_chain", _output_forward, _output_forward_fake, _output_backward, _output_backward_fake,
                  _output_setup_context, _make_output_backward)


def output_chain(o, g, norm_weight, out_weight, eps=1e-5, impl="automatic"):
    """torch version of :func:`seqmix.output_chain` (same arguments), differentiable in o,
    g, norm_weight and out_weight."""
    return _output(o, g, norm_weight, out_weight, float(eps), impl)
