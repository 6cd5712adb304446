"""Array backends: how the Python surface allocates outputs and finds the CUDA stream.

Each op's Python code (``seqmix._ops.<op>``) is written once against this small
interface and serves both numpy arrays and torch tensors.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np


class NumpyBackend:
    """numpy arrays on the CPU (no bf16 in numpy: use torch for bf16)."""

    float32 = np.float32
    float64 = np.float64

    @staticmethod
    def empty(shape, dtype, like=None):
        return np.empty(tuple(shape), dtype=dtype)

    @staticmethod
    def empty_like(x, dtype=None):
        return np.empty(x.shape, dtype=dtype or x.dtype)

    @staticmethod
    def is_float64(x) -> bool:
        return x.dtype == np.float64

    @staticmethod
    def dtype(x):
        return x.dtype

    @staticmethod
    def is_cuda(_x) -> bool:
        return False

    @staticmethod
    def stream(_x) -> int:
        return 0

    @staticmethod
    def split_columns(x, widths):
        """Column views [:, a:b] of a 2-d array, one per width."""
        bounds = np.cumsum(widths)
        return [x[:, b - w:b] for w, b in zip(widths, bounds)]

    @staticmethod
    def arg(x):
        """What _C receives: the array itself, with a contiguous last dimension."""
        if x is None:
            return None
        return x if x.ndim == 0 or x.strides[-1] == x.itemsize or x.shape[-1] == 1 else np.ascontiguousarray(x)


class TorchBackend:
    """torch tensors on the CPU or a CUDA device; outputs on the inputs' device.

    Its methods run for every argument of every call, so each is kept to one or two torch
    calls: tensors go to _C as themselves (_C reads their pointer, shape and strides in
    C++), and the CUDA stream comes from torch's raw-stream query."""

    def __init__(self, torch):
        self.torch = torch
        self.float32 = torch.float32
        self.float64 = torch.float64
        # torch's private raw-stream query (what inductor's generated code calls) costs
        # ~0.3 µs; the public current_stream() builds a Stream object (~6 µs).
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda index: torch.cuda.current_stream(index).cuda_stream)

    def empty(self, shape, dtype, like):
        return like.new_empty(shape, dtype=dtype)

    @staticmethod
    def empty_like(x, dtype=None):
        return x.new_empty(x.shape, dtype=dtype) if dtype is not None else x.new_empty(x.shape)

    def is_float64(self, x) -> bool:
        return x.dtype == self.torch.float64

    @staticmethod
    def dtype(x):
        return x.dtype

    @staticmethod
    def is_cuda(x) -> bool:
        return x.is_cuda

    @staticmethod
    def split_columns(x, widths):
        """Column views of a 2-d tensor, one per width (one split call: ~0.6 µs a view,
        where slicing costs ~1.5 µs each)."""
        return x.split(widths, 1)

    def stream(self, x) -> int:
        index = x.get_device()  # -1 on the CPU
        return self._raw_stream(index) if index >= 0 else 0

    @staticmethod
    def arg(x):
        """What _C receives: the tensor itself (or None). _C reads its data pointer, dtype,
        device, shape and strides in C++ and copies a tensor with a strided last dimension;
        DLPack is avoided because its export of a CUDA tensor synchronises streams."""
        return x


NUMPY = NumpyBackend()


def is_torch(x) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch")


_TORCH_PACKAGE = __name__.rpartition(".")[0] + ".torch."


def torch_module(op: str):
    """The module ``seqmix.torch.<op>`` that serves torch tensors. Imported on the first
    torch call (numpy users never load torch), then found in sys.modules: a function-level
    ``from ..torch.<op> import f`` costs ~1 µs per call, this lookup ~0.1 µs."""
    name = _TORCH_PACKAGE + op
    return sys.modules.get(name) or importlib.import_module(name)


def state_dtype(xp, x):
    """Recurrent states are float32, or float64 when the inputs are float64."""
    return xp.float64 if xp.is_float64(x) else xp.float32


def num_sequences(batch: int, cu_seqlens) -> int:
    """N: the batch size, or the number of sequences described by cu_seqlens."""
    return batch if cu_seqlens is None else int(cu_seqlens.shape[0]) - 1
