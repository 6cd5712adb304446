"""torch op for the gated-scan layer: one CUDA kernel for projection, scan and gate in the
forward; the backward recomputes the projection and reuses the gated scan's backward."""

from __future__ import annotations

import functools

import torch

from .. import _C
from .._ops import gated_scan as scan_ops
from .._ops import gated_scan_layer as layer_ops
from ._common import XP, TorchOp


def _blocks(x: torch.Tensor, weight: torch.Tensor):
    B, T, d = x.shape
    D = weight.shape[0] // 3
    return B, T, d, D


def _forward(x: torch.Tensor, weight: torch.Tensor, decay: str, impl: str) -> torch.Tensor:
    B, T, _, D = _blocks(x, weight)
    y = x.new_empty((B, T, D))
    workspace = x.new_empty((_C.gated_scan_layer_workspace_size(B, T, D),), dtype=torch.float32)
    _C.gated_scan_layer_forward(XP.arg(x), XP.arg(weight), XP.arg(y), XP.arg(workspace), decay, impl, XP.stream(x))
    return y


def _forward_fake(x, weight, decay, impl):
    B, T, _, D = _blocks(x, weight)
    return x.new_empty((B, T, D))


def _backward(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, decay: str,
              impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dW: u = x·Wᵀ recomputed (never kept), the scan's backward on its column
    blocks, then du·W and duᵀ·x."""
    B, T, d, D = _blocks(x, weight)
    u = x @ weight.T
    da, db, dz, _ = scan_ops.backward(XP, u[..., :D], u[..., D:2 * D], u[..., 2 * D:], None, None, dy.contiguous(),
                                      None, decay, impl)
    du = torch.cat((da, db, dz), dim=-1)
    return du @ weight, du.reshape(B * T, 3 * D).T @ x.reshape(B * T, d)


def _backward_fake(x, weight, dy, decay, impl):
    return torch.empty_like(x), torch.empty_like(weight)


def _setup_context(ctx, inputs, output):
    x, weight, decay, impl = inputs
    ctx.save_for_backward(x, weight)
    ctx.decay, ctx.impl = decay, impl


def _make_backward(run_backward):
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dw = run_backward(x, weight, dy, ctx.decay, ctx.impl)
        return dx, dw, None, None

    return backward


_op = TorchOp("gated_scan_layer", _forward, _forward_fake, _backward, _backward_fake, _setup_context, _make_backward)


# seqmix::DType values of the dtypes the kernel takes.
_DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1}


@functools.lru_cache(maxsize=256)
def _fits(B: int, T: int, D: int, dtype_code: int, device_index: int) -> bool:
    with torch.cuda.device(device_index):
        return _C.gated_scan_layer_fits(B, T, D, dtype_code)


def _aligned(t: torch.Tensor) -> bool:
    """Row starts 16-byte aligned, the last dimension contiguous (the kernel's cp.async)."""
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and t.shape[-1] % 8 == 0
            and all(s % 8 == 0 for s in t.stride()[:-1]))


def uses_layer_kernel(x: torch.Tensor, weight: torch.Tensor, impl: str = "automatic") -> bool:
    """Whether ``gated_scan_layer(x, weight)`` runs the one-kernel forward: CUDA bf16/fp16
    tensors with aligned rows whose grid fits on the GPU at once (else it composes
    ``x @ weight.T`` and ``gated_scan``)."""
    if not (x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and impl != "reference"
            and weight.dtype == x.dtype and weight.device == x.device and x.dim() == 3 and weight.dim() == 2
            and weight.shape[0] % 3 == 0 and weight.shape[1] == x.shape[2] and x.shape[1] > 0
            and _aligned(x) and _aligned(weight)):
        return False
    B, T, _, D = _blocks(x, weight)
    return _fits(B, T, D, _DTYPE_CODES[x.dtype], x.get_device())


def gated_scan_layer(x, weight, decay="logit", impl="automatic"):
    """torch version of :func:`seqmix.gated_scan_layer` (same arguments), differentiable in
    x and weight."""
    if torch.compiler.is_compiling() or uses_layer_kernel(x, weight, impl):
        return _op(x, weight, decay, impl)
    return layer_ops.composed(x, weight, decay, impl)
