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


def absent(grad: torch.Tensor, input_):
    """The autograd gradient of an optional input: None when the input was not given."""
    return None if input_ is None else grad
