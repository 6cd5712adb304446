"""Array backends: how the Python surface allocates outputs and finds the CUDA stream.

Each op's Python code (``seqmix._ops.<op>``) is written once against this small
interface and serves both numpy arrays and torch tensors.
"""

from __future__ import annotations

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
    def arg(x):
        """What _C receives: the array itself, with a contiguous last dimension."""
        if x is None:
            return None
        return x if x.ndim == 0 or x.strides[-1] == x.itemsize or x.shape[-1] == 1 else np.ascontiguousarray(x)


class TorchBackend:
    """torch tensors on the CPU or a CUDA device; outputs on the inputs' device."""

    def __init__(self, torch):
        self.torch = torch
        self.float32 = torch.float32
        self.float64 = torch.float64
        # seqmix::DType values, in the order of the C++ enum.
        self._dtype_codes = {dtype: code for code, dtype in enumerate(
            (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.int64))}

    def empty(self, shape, dtype, like):
        return self.torch.empty(tuple(shape), dtype=dtype, device=like.device)

    def empty_like(self, x, dtype=None):
        return self.torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)

    def is_float64(self, x) -> bool:
        return x.dtype == self.torch.float64

    @staticmethod
    def dtype(x):
        return x.dtype

    @staticmethod
    def is_cuda(x) -> bool:
        return x.device.type == "cuda"

    def stream(self, x) -> int:
        if x.device.type == "cuda":
            return self._raw_stream(x.device.index)
        return 0

    def _raw_stream(self, index) -> int:
        # torch's private raw-stream query (what inductor's generated code calls) costs
        # ~0.3 µs; the public current_stream() builds a Stream object (~6 µs).
        raw = getattr(self.torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(index)
        return self.torch.cuda.current_stream(index).cuda_stream

    def arg(self, x):
        """What _C receives: the tuple (data_ptr, dtype code, device type, device index,
        shape, strides, owner) of a tensor with a contiguous last dimension — cheaper than
        DLPack, whose export of a CUDA tensor synchronises streams — or the tensor itself
        for a dtype seqmix does not know, so that _C names it in its error. Kept to a few
        attribute reads: it runs for every argument of every call."""
        if x is None:
            return None
        code = self._dtype_codes.get(x.dtype)
        if code is None:
            return x.detach()
        shape, strides = x.shape, x.stride()
        if shape and strides[-1] != 1 and shape[-1] != 1:
            x = x.contiguous()
            strides = x.stride()
        index = x.get_device()  # -1 on the CPU: one call instead of building a torch.device
        return (x.data_ptr(), code, 2 if index >= 0 else 1, max(index, 0), tuple(shape), strides, x)


NUMPY = NumpyBackend()


def is_torch(x) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch")


def state_dtype(xp, x):
    """Recurrent states are float32, or float64 when the inputs are float64."""
    return xp.float64 if xp.is_float64(x) else xp.float32


def num_sequences(batch: int, cu_seqlens) -> int:
    """N: the batch size, or the number of sequences described by cu_seqlens."""
    return batch if cu_seqlens is None else int(cu_seqlens.shape[0]) - 1
