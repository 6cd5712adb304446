"""seqmix: sequence-mixing kernels with a float64 oracle.

Every function accepts numpy arrays (CPU, forward; ``*_backward`` for gradients) or torch
tensors (CPU or CUDA, with autograd and torch.compile support through ``seqmix.torch``).
``impl`` selects the implementation: ``"automatic"``, ``"reference"`` (the float64
oracle) or ``"fast"``. Bad input raises :class:`SeqmixError` (a ``ValueError``).
"""

import importlib.util as _importlib_util

# torch, where installed, is loaded before the extension: on a CUDA 13 machine with torch
# 2.11, `import torch` after seqmix's extension crashed inside torch's operator
# registration (cause not yet found); in this order both load.
if _importlib_util.find_spec("torch") is not None:
    import torch as _torch  # noqa: F401

from . import _C
from ._C import SeqmixError
from ._ops.attention import attention_backward, flash_attn_func, flash_attn_varlen_func
from ._ops.chains import (low_rank_gate, output_chain, output_chain_backward, projection_chain,
                          projection_chain_backward)
from ._ops.delta_rule import chunk_gated_delta_rule, chunk_gated_delta_rule_backward
from ._ops.gated_scan import gated_scan, gated_scan_backward
from ._ops.gated_scan_layer import gated_scan_layer
from ._ops.gla import chunk_gla, chunk_gla_backward
from ._ops.linear_recurrence import linear_recurrence, linear_recurrence_backward

__version__ = "0.1.0"

SeqmixError.__doc__ = ("Bad input to a seqmix op (a ValueError): the message names the function and the argument, "
                       "what was expected and what was given.")


def cuda_available() -> bool:
    """True when this build has its CUDA backend and a CUDA device is visible."""
    return _C.built_with_cuda() and _C.cuda_device_count() > 0


def cuda_kernels(op: str) -> bool:
    """True when this build compiled the CUDA kernels of ``op`` (a folder of src/cuda, such
    as "gated_scan" or "attention") and a CUDA device is visible. Builds may leave some
    ops' kernels out (CMake option SEQMIX_CUDA_KERNELS); those ops refuse CUDA tensors."""
    return cuda_available() and op in _C.cuda_kernel_ops()


__all__ = [
    "SeqmixError", "attention_backward", "chunk_gated_delta_rule", "chunk_gated_delta_rule_backward", "chunk_gla",
    "chunk_gla_backward", "cuda_available", "cuda_kernels", "flash_attn_func", "flash_attn_varlen_func", "gated_scan",
    "gated_scan_backward", "gated_scan_layer", "linear_recurrence", "linear_recurrence_backward", "low_rank_gate", "output_chain",
    "output_chain_backward", "projection_chain", "projection_chain_backward",
]
