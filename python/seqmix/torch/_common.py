"""Helpers shared by the torch custom ops."""

from __future__ import annotations

import inspect
import typing
from typing import Optional

import torch

from .._backend import TorchBackend, num_sequences  # noqa: F401  (re-exported for the op modules)

XP = TorchBackend(torch)

# The three questions every eager call asks, bound once (each ~0.1 µs).
is_compiling = torch.compiler.is_compiling
_transforms_active = torch._C._are_functorch_transforms_active
_grad_enabled = torch.is_grad_enabled


def state_dtype(x: torch.Tensor) -> torch.dtype:
    """Recurrent states are float32, or float64 when the inputs are float64."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def present(x, like: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """custom_op outputs cannot be None: an absent result travels as an empty tensor (of
    `like`'s dtype, or `dtype`)."""
    return like.new_empty((0,), dtype=dtype) if x is None else x


def contiguous_or_none(grad):
    """An output's gradient for the implementation: contiguous, or None where the loss did
    not use the output (eager ops built with ``materialize_grads=False``)."""
    return None if grad is None else grad.contiguous()


def absent(grad: torch.Tensor, input_):
    """The autograd gradient of an optional input: None when the input was not given."""
    return None if input_ is None else grad


def fake_grad(x, like: torch.Tensor) -> torch.Tensor:
    """A backward fake kernel's gradient for an optional input x: shaped like x, or the
    empty tensor that stands for an absent gradient (see ``present``)."""
    return present(None if x is None else torch.empty_like(x), like)


def _returns_list(function) -> bool:
    """Whether `function` is annotated to return list[Tensor] (a custom op's variable
    number of outputs), which autograd.Function cannot return and hands back as a tuple."""
    return typing.get_origin(typing.get_type_hints(function).get("return")) is list


def _tensor_positions(function) -> tuple:
    """Positions of the parameters annotated ``torch.Tensor`` or ``Optional[torch.Tensor]``:
    the arguments whose ``requires_grad`` decides whether a call needs autograd."""
    hints = typing.get_type_hints(function)
    names = inspect.signature(function).parameters
    return tuple(i for i, name in enumerate(names) if hints.get(name) in (torch.Tensor, Optional[torch.Tensor]))


def eager_function(forward, setup_context, backward, returns_list=False, materialize_grads=True):
    """An autograd.Function that runs an op's forward, setup_context and backward
    directly. A torch.library custom op costs tens of µs of host time per eager call
    (dispatcher, schema, autograd wrapper); the ops use this Function in eager mode and
    their custom ops under torch.compile, where that cost is traced away.

    It is written in the ``forward(ctx, *inputs)`` style on purpose: a Function with a
    separate setup_context staticmethod binds its arguments through inspect.signature on
    every apply (about 20 µs). That style only matters to torch.func transforms, under
    which ``TorchOp`` calls the custom ops instead (and reports what they report).

    With `returns_list` the Function returns the forward's list as a tuple and gives the
    backward the gradients as one list, as the custom op's autograd does. Without
    `materialize_grads` an output the loss never used sends None to the backward instead
    of a tensor of zeros (which costs an allocation and a fill kernel per call)."""

    class EagerOp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            if not materialize_grads:
                ctx.set_materialize_grads(False)
            outputs = forward(*inputs)
            setup_context(ctx, inputs, outputs)
            return tuple(outputs) if returns_list else outputs

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, list(grads)) if returns_list else backward(ctx, *grads)

    return EagerOp


class TorchOp:
    """One seqmix op in torch: the forward and backward custom ops ``seqmix::<name>_fwd``
    and ``seqmix::<name>_bwd`` with their fake kernels and autograd, plus an eager path.

    Why two paths: a torch.library custom op costs tens of µs of host time per eager call
    (dispatcher, schema checks, autograd wrapper; about 100 µs on a busy host), more than
    the kernels themselves on small inputs. torch.compile needs the custom ops (they trace with fake tensors and
    their cost is compiled away); eager mode does not, so there the op runs through a
    plain autograd.Function, or through the bare implementation when nothing needs a
    gradient. Calling the op picks the path (see ``__call__``).

    Args:
        name: the op's name: the custom ops are ``seqmix::<name>_fwd`` and ``_bwd``.
        forward, backward: the implementations, type-annotated as custom_op requires.
            They return tensors only (an absent optional result travels as an empty
            tensor, see ``present``).
        forward_fake, backward_fake: their fake kernels (shapes and dtypes only).
        setup_context: ``(ctx, inputs, output)``, shared by both paths.
        make_backward: ``make_backward(run_backward)`` returns the autograd backward
            ``(ctx, *grads) -> one gradient per forward input``, which computes through
            ``run_backward`` (called with the backward's arguments). The custom op's
            autograd gets the backward CUSTOM OP: inductor traces the compiled backward
            with fake tensors, and the implementation would read data pointers there. The
            eager Function gets the backward implementation, skipping the dispatcher.
            The choice is made here, once per path, never with
            torch.compiler.is_compiling() inside the backward, which does not reliably
            say that AOTAutograd/inductor is tracing it (a fake trace must never reach
            the implementation).
        materialize_grads: False when the backward takes None for the gradient of an
            output the loss did not use (the eager path then sends None; see
            ``eager_function``).
    """

    def __init__(self, name, forward, forward_fake, backward, backward_fake, setup_context, make_backward,
                 materialize_grads=True):
        self.implementation = forward
        self.forward_op = torch.library.custom_op(f"seqmix::{name}_fwd", forward, mutates_args=())
        self.forward_op.register_fake(forward_fake)
        self.backward_op = torch.library.custom_op(f"seqmix::{name}_bwd", backward, mutates_args=())
        self.backward_op.register_fake(backward_fake)
        self.forward_op.register_autograd(make_backward(self.backward_op), setup_context=setup_context)
        self.returns_list = _returns_list(forward)
        self.tensor_positions = _tensor_positions(forward)
        self.eager = eager_function(forward, setup_context, make_backward(backward), self.returns_list,
                                    materialize_grads)

    def needs_autograd(self, args) -> bool:
        """Whether grad mode is on and a tensor argument requires grad."""
        if _grad_enabled():
            for i in self.tensor_positions:
                a = args[i]
                if a is not None and a.requires_grad:
                    return True
        return False

    def __call__(self, *args):
        """Runs the forward with the custom op's positional arguments: the custom op while
        torch.compile traces or a torch.func transform (vmap, grad, ...) is active; the
        eager autograd.Function when grad mode is on and a tensor argument requires grad;
        otherwise the implementation itself, without autograd's bookkeeping. Returns what
        the forward implementation returns."""
        if is_compiling() or _transforms_active():
            return self.forward_op(*args)
        if self.needs_autograd(args):
            outputs = self.eager.apply(*args)
            return list(outputs) if self.returns_list else outputs
        return self.implementation(*args)
