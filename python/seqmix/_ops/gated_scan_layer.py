"""The gated-scan layer (projection, gated scan, SiLU gate): the public function."""

from __future__ import annotations

from .._backend import is_torch, torch_module
from .gated_scan import gated_scan


def gated_scan_layer(x, weight, decay="logit", impl="automatic"):
    """One gated-scan layer: ``u = x @ weight.T`` split into three column blocks a, b, z of
    D columns each, then ``h_t = decay(a_t) * h_{t-1} + b_t`` (zero initial state) and
    ``y_t = h_t * SiLU(z_t)``.

    On a CUDA device (bf16 or fp16, rows 16-byte aligned, the grid fits on the GPU at
    once: ``seqmix.torch.gated_scan_layer.uses_layer_kernel`` says whether) the forward is
    one kernel and u never reaches memory; otherwise, and always on the CPU, it is
    ``x @ weight.T`` followed by :func:`seqmix.gated_scan` on u's column views. The
    backward recomputes u and runs the gated scan's backward.

    Args:
        x: ``[B, T, d]`` inputs (torch tensor or numpy array).
        weight: ``[3·D, d]``, the rows of the a block, then the b block, then the z block.
        decay: how a becomes the factor of h_{t-1}, as in :func:`seqmix.gated_scan`;
            ``"logit"`` (sigmoid(a), the default), ``"log"`` (exp(a)) or ``"direct"``.
        impl: ``"automatic"``, ``"reference"`` (the float64 oracle, CPU) or ``"fast"``.

    Returns:
        ``y`` ``[B, T, D]`` in x's dtype. torch tensors are differentiable in x and weight
        and trace under torch.compile.
    """
    if is_torch(x):
        return torch_module("gated_scan_layer").gated_scan_layer(x, weight, decay, impl)
    return composed(x, weight, decay, impl)


def composed(x, weight, decay, impl):
    """The layer as ``x @ weight.T``, then :func:`seqmix.gated_scan` on u's column views
    (numpy arrays, and torch tensors the one-kernel forward does not take)."""
    D = weight.shape[0] // 3
    u = x @ weight.T
    return gated_scan(u[..., :D], u[..., D:2 * D], u[..., 2 * D:], decay=decay, impl=impl)
