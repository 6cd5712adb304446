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


def projection_chain(x, weight, segments, bias=None, impl="automatic", low_rank_gate=None):
    """torch version of :func:`seqmix.projection_chain` (same arguments), differentiable in
    x, weight and bias (and the gate's weight and bias). Returns a list of ``[..., width]``
    tensors (``[..., heads, width / heads]`` where a segment names its heads); on a CUDA
    device, in eager mode, column views of one ``[..., W_total]`` buffer. With
    ``low_rank_gate``: ``(that list, gate [..., width])``."""
    spec = _segment_spec(segments)
    dtypes = spec.dtype_names(str(x.dtype)[6:])  # "torch.bfloat16" -> "bfloat16"
    if low_rank_gate is not None:
        return _projection_chain_with_gate(x, weight, bias, spec, dtypes, low_rank_gate, impl)
    if x.dim() <= 2 and not spec.has_heads:
        return _projection(x, weight, bias, spec.widths, spec.activation_names, spec.taus, dtypes, impl)
    flat = x.reshape(-1, x.shape[-1]) if x.dim() > 2 else x
    outputs = _projection(flat, weight, bias, spec.widths, spec.activation_names, spec.taus, dtypes, impl)
    outputs = [y.reshape(*x.shape[:-1], y.shape[-1]) if x.dim() > 2 else y for y in outputs]
    return ops.split_heads(outputs, spec.heads)


# ---- projection chain with GLA's low-rank gate in the same call ----


def _gated_forward(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], widths: list[int],
                   activations: str, taus: list[float], dtypes: str, code: int, gate_weight: torch.Tensor,
                   gate_bias: Optional[torch.Tensor], tau: float, gate_dtype: str, impl: str) -> list[torch.Tensor]:
    """The segments, then the gate, as one list."""
    outputs, gate = ops.projection_with_gate_forward(XP, x, weight, bias, widths, _split(activations), taus,
                                                     _dtypes(dtypes), code, gate_weight, gate_bias, tau,
                                                     _dtype(gate_dtype), impl)
    return [*outputs, gate]


def _gated_forward_unaliased(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], widths: list[int],
                             activations: str, taus: list[float], dtypes: str, code: int, gate_weight: torch.Tensor,
                             gate_bias: Optional[torch.Tensor], tau: float, gate_dtype: str,
                             impl: str) -> list[torch.Tensor]:
    """As the custom op runs it: the segments copied out of their shared buffer (see
    ``_projection_forward_unaliased``); the gate is a tensor of its own."""
    *outputs, gate = _gated_forward(x, weight, bias, widths, activations, taus, dtypes, code, gate_weight, gate_bias,
                                    tau, gate_dtype, impl)
    return [*(y.clone() if len(outputs) > 1 or y._base is not None else y for y in outputs), gate]


def _gated_forward_fake(x, weight, bias, widths, activations, taus, dtypes, code, gate_weight, gate_bias, tau,
                        gate_dtype, impl):
    return [*_projection_forward_fake(x, weight, bias, widths, activations, taus, dtypes, impl),
            x.new_empty((x.shape[0], gate_weight.shape[0]), dtype=_dtype(gate_dtype))]


def _gated_backward(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], widths: list[int],
                    activations: str, taus: list[float], code: int, gate_weight: torch.Tensor,
                    gate_bias: Optional[torch.Tensor], tau: float, u: torch.Tensor, d_outputs: list[torch.Tensor],
                    impl: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two calls' backwards: the gate's (from u, the code segment's output) first, its du
    added to the code segment's gradient, then the chain's."""
    *d_chain, d_gate = d_outputs
    du, dgate_weight, dgate_bias = ops.projection_backward(XP, u, gate_weight, gate_bias, [gate_weight.shape[0]],
                                                           ("logsigmoid",), [tau], [d_gate], impl)
    d_chain[code] = d_chain[code] + du.to(d_chain[code].dtype)
    dx, dweight, dbias = ops.projection_backward(XP, x, weight, bias, widths, _split(activations), taus, d_chain, impl)
    return dx, dweight, present(dbias, x), dgate_weight, present(dgate_bias, x)


def _gated_backward_fake(x, weight, bias, widths, activations, taus, code, gate_weight, gate_bias, tau, u, d_outputs,
                         impl):
    return (torch.empty_like(x), torch.empty_like(weight), fake_grad(bias, x), torch.empty_like(gate_weight),
            fake_grad(gate_bias, x))


def _gated_setup_context(ctx, inputs, output):
    x, weight, bias, widths, activations, taus, dtypes, code, gate_weight, gate_bias, tau, gate_dtype, impl = inputs
    ctx.save_for_backward(x, weight, bias, gate_weight, gate_bias, output[code])
    ctx.widths, ctx.activations, ctx.taus, ctx.dtypes, ctx.impl = widths, activations, taus, dtypes, impl
    ctx.code, ctx.tau, ctx.gate_dtype = code, tau, gate_dtype


def _make_gated_backward(run_backward):
    def backward(ctx, d_outputs):
        x, weight, bias, gate_weight, gate_bias, u = ctx.saved_tensors
        widths = [*ctx.widths, gate_weight.shape[0]]
        dtypes = [*_dtypes(ctx.dtypes), _dtype(ctx.gate_dtype)]
        d_outputs = [x.new_zeros((x.shape[0], w), dtype=d) if g is None else g
                     for g, w, d in zip(d_outputs, widths, dtypes)]
        dx, dweight, dbias, dgate_weight, dgate_bias = run_backward(x, weight, bias, ctx.widths, ctx.activations,
                                                                    ctx.taus, ctx.code, gate_weight, gate_bias,
                                                                    ctx.tau, u, d_outputs, ctx.impl)
        return (dx, dweight, absent(dbias, bias), None, None, None, None, None, dgate_weight,
                absent(dgate_bias, gate_bias), None, None, None)

    return backward


_gated = TorchOp("projection_chain_with_gate", _gated_forward_unaliased, _gated_forward_fake, _gated_backward,
                 _gated_backward_fake, _gated_setup_context, _make_gated_backward)
_gated.implementation = _gated_forward
_gated.eager = eager_function(_gated_forward, _gated_setup_context, _make_gated_backward(_gated_backward),
                              returns_list=True)


def _projection_chain_with_gate(x, weight, bias, spec, dtypes, low_rank_gate, impl):
    code, gate_weight, gate_bias, tau, gate_dtype = ops.parse_low_rank_gate(low_rank_gate, len(spec.widths))
    gate_dtype = gate_dtype or str(x.dtype)[6:]
    flat = x.reshape(-1, x.shape[-1]) if x.dim() > 2 else x
    *outputs, gate = _gated(flat, weight, bias, spec.widths, spec.activation_names, spec.taus, dtypes, code,
                            gate_weight, gate_bias, tau, gate_dtype, impl)
    if x.dim() > 2:
        outputs = [y.reshape(*x.shape[:-1], y.shape[-1]) for y in outputs]
        gate = gate.reshape(*x.shape[:-1], gate.shape[-1])
    return ops.split_heads(outputs, spec.heads), gate


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
