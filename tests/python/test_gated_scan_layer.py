"""The gated-scan layer on the CPU (the composed form): against the float64 definition,
gradients included, and its numpy path."""

import numpy as np
import pytest

from conftest import rel_err, requires_torch


def _definition(x, w):
    """y from u = x·Wᵀ and the scan token by token, float64 numpy."""
    D = w.shape[0] // 3
    u = x @ w.T
    a, b, z = 1 / (1 + np.exp(-u[..., :D])), u[..., D:2 * D], u[..., 2 * D:]
    h = np.zeros(x.shape[:1] + (D,))
    y = np.empty(x.shape[:2] + (D,))
    for t in range(x.shape[1]):
        h = a[:, t] * h + b[:, t]
        y[:, t] = h * z[:, t] / (1 + np.exp(-z[:, t]))
    return y


def test_numpy_layer_matches_definition():
    import seqmix

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 37, 16)), rng.standard_normal((3 * 5, 16)) / 4
    assert rel_err(seqmix.gated_scan_layer(x, w, impl="reference"), _definition(x, w)) < 1e-12


@requires_torch
def test_torch_layer_gradients_match_definition():
    import torch

    import seqmix

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 19, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    w = (torch.randn(3 * 4, 8, generator=gen, dtype=torch.float64) / 3).requires_grad_()
    torch.autograd.gradcheck(lambda x, w: seqmix.gated_scan_layer(x, w, impl="reference"), (x, w))
    y = seqmix.gated_scan_layer(x, w, impl="reference")
    assert rel_err(y.detach().numpy(), _definition(x.detach().numpy(), w.detach().numpy())) < 1e-12


@requires_torch
def test_cpu_layer_does_not_take_the_kernel_path():
    import torch

    from seqmix.torch.gated_scan_layer import uses_layer_kernel

    x, w = torch.randn(1, 4, 8, dtype=torch.bfloat16), torch.randn(6, 8, dtype=torch.bfloat16)
    assert not uses_layer_kernel(x, w)


@pytest.mark.parametrize("decay", ["log", "direct"])
def test_numpy_layer_decay_forms(decay):
    import seqmix

    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 9, 8)), rng.standard_normal((6, 8)) / 4
    u = x @ w.T
    want = seqmix.gated_scan(u[..., :2], u[..., 2:4], u[..., 4:], decay=decay, impl="reference")
    assert rel_err(seqmix.gated_scan_layer(x, w, decay=decay, impl="reference"), want) < 1e-12
