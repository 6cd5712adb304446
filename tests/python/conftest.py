"""Shared pytest helpers: relative-norm errors, dtype bounds, and the torch/GPU markers."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None


def rel_err(got, want) -> float:
    """‖got − want‖ / ‖want‖ in float64 (inf when got has a non-finite value)."""
    got = np.asarray(_to_numpy(got), dtype=np.float64)
    want = np.asarray(_to_numpy(want), dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


def _to_numpy(x):
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().numpy() if x.dtype != _torch().float64 else x.detach().cpu().numpy()
    return x


def _torch():
    import torch

    return torch


# Bound on ‖fast − oracle‖/‖oracle‖ by input dtype name.
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}

requires_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def cuda_or_skip():
    """Skips (visibly, with the reason) when no CUDA device can run seqmix kernels."""
    import seqmix

    if not seqmix.cuda_available():
        pytest.skip("no CUDA device: GPU test not run on this machine")


def cuda_kernels_or_skip(op: str):
    """Skips (visibly) without a CUDA device, or when this build left ``op``'s CUDA kernels
    out (SEQMIX_CUDA_KERNELS)."""
    import seqmix

    cuda_or_skip()
    if not seqmix.cuda_kernels(op):
        pytest.skip(f"this build has no CUDA kernels for {op} (SEQMIX_CUDA_KERNELS)")


def runs_without_and_with_final_state(layer, base, dy, compiled):
    """Two runs of ``layer(*leaves, keep)`` (eager, or under torch.compile's aot_eager with
    fullgraph when ``compiled``) on fresh leaves cloned from ``base``, backward from ``dy``:
    [output, *gradients] with keep False, then with keep True."""
    import torch

    def run(keep):
        leaves = [t.clone().requires_grad_() for t in base]
        fn = torch.compile(layer, fullgraph=True, backend="aot_eager") if compiled else layer
        out = fn(*leaves, keep)
        out.backward(dy)
        return [out.detach()] + [t.grad for t in leaves]

    return run(False), run(True)
