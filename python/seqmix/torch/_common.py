"""Helpers shared by the torch custom ops."""

from __future__ import annotations

import torch

from .._backend import TorchBackend, num_sequences  # noqa: F401  (re-exported for the op modules)

XP = TorchBackend(torch)


def state_dtype(x: torch.Tensor) -> torch.dtype:
    """Recurrent states are float32, or float64 when the inputs are float64."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def present(x, like: torch.Tensor) -> torch.Tensor:
    """custom_op outputs cannot be None: an absent gradient travels as an empty tensor."""
    return like.new_empty((0,)) if x is None else x


def eager_function(forward, setup_context, backward):
    """An autograd.Function that runs an op's forward, setup_context and backward
    directly. A torch.library custom op costs over 100 µs of host time per call in eager
    mode (dispatcher, autograd wrapper, dynamo guards); the ops use this Function in eager
    mode and their custom ops under torch.compile, where that cost is traced away."""

    class EagerOp(torch.autograd.Function):
        @staticmethod
        def forward(*inputs):
            return forward(*inputs)

        @staticmethod
        def setup_context(ctx, inputs, output):
            setup_context(ctx, inputs, output)

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    return EagerOp


def absent(grad: torch.Tensor, input_):
    """The autograd gradient of an optional input: None when the input was not given."""
    return None if input_ is None else grad
