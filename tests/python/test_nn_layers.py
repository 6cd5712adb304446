"""The layer modules of seqmix.nn (GLA and Gated DeltaNet) against their definitions written
in plain torch: linear projections, gates, a token-by-token recurrence, RMSNorm, SiLU gate
and o_proj. Small float64 shapes on the CPU; the GPU case compares bf16 kernels to the
float32 CPU layer with the same parameters."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch


def _rms_gate_project(o, g, norm_weight, out_weight, eps):
    import torch.nn.functional as F

    normed = o * (o.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * norm_weight
    y = normed * F.silu(g)
    return y.flatten(-2) @ out_weight.T


def _gla_recurrence(q, k, v, log_decay, scale):
    """o_t = scale q_t S_t, S_t = diag(exp g_t) S_{t-1} + k_t^T v_t, per batch and head."""
    import torch

    B, T, H, K = q.shape
    state = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        state = log_decay[:, t].exp().unsqueeze(-1) * state + k[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    return torch.stack(out, 1), state


def _delta_recurrence(q, k, v, log_decay, beta, scale):
    """S_t = exp(g_t)(I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t, o_t = scale q_t S_t."""
    import torch

    B, T, H, K = q.shape
    state = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        kt, b = k[:, t], beta[:, t].unsqueeze(-1)
        state = log_decay[:, t].exp()[..., None, None] * state
        state = state + (b * kt).unsqueeze(-1) * (v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, state)).unsqueeze(-2)
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    return torch.stack(out, 1), state


def _gla_definition(layer, x):
    import torch.nn.functional as F

    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    z = F.linear(x, layer.projections.weight)
    q, k, v, g, low = z.split([H * K, H * K, H * V, H * V, layer.gate.weight.shape[1]], -1)
    log_decay = F.logsigmoid(F.linear(low, layer.gate.weight, layer.gate.bias)) / layer.gate.tau
    heads = lambda t, w: t.unflatten(-1, (H, w))  # noqa: E731
    o, state = _gla_recurrence(heads(q, K), heads(k, K), heads(v, V), heads(log_decay, K), K ** -0.5)
    return _rms_gate_project(o, heads(g, V), layer.output.norm_weight, layer.output.out_weight, layer.output.eps), state


def _gdn_definition(layer, x):
    import torch.nn.functional as F

    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    z = F.linear(x, layer.projections.weight)
    q, k, v, b, a, g = z.split([H * K, H * K, H * V, H, H, H * V], -1)
    heads = lambda t, w: t.unflatten(-1, (H, w))  # noqa: E731
    l2 = lambda t: t / (t.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()  # noqa: E731
    # the decay is float32 whatever x's dtype, as in fla (the a segment and A_log are float32)
    log_decay = (-layer.A_log.exp() * F.softplus(a + layer.dt_bias).float()).to(a.dtype)
    o, state = _delta_recurrence(l2(heads(F.silu(q), K)), l2(heads(F.silu(k), K)), heads(F.silu(v), V), log_decay,
                                 b.sigmoid(), K ** -0.5)
    return _rms_gate_project(o, heads(g, V), layer.output.norm_weight, layer.output.out_weight, layer.output.eps), state


def _layers():
    import torch

    from seqmix.nn import GatedDeltaNet, GatedLinearAttention

    torch.manual_seed(3)
    gla = GatedLinearAttention(hidden_size=24, num_heads=2, expand_k=0.5, expand_v=1.0, gate_low_rank_dim=3,
                               dtype=torch.float64)
    gdn = GatedDeltaNet(hidden_size=24, num_heads=2, head_dim=4, expand_v=1.5, dtype=torch.float64)
    for layer in (gla, gdn):  # random norm weights, so a wrong norm cannot hide behind ones
        torch.nn.init.uniform_(layer.output.norm_weight, 0.5, 1.5)
    return {"gla": (gla, _gla_definition), "gdn": (gdn, _gdn_definition)}


@pytest.mark.parametrize("name", ["gla", "gdn"])
def test_layer_matches_its_definition_forward_and_gradients(name):
    import torch

    layer, definition = _layers()[name]
    x = torch.randn(2, 7, 24, dtype=torch.float64, requires_grad=True)
    y, state = layer(x, output_final_state=True)
    want_y, want_state = definition(layer, x)
    assert y.shape == (2, 7, 24) and state.shape == want_state.shape
    assert rel_err(y, want_y) < 1e-10 and rel_err(state, want_state) < 1e-10
    dy = torch.randn_like(y)
    params = [x] + list(layer.parameters())
    grads = torch.autograd.grad(y, params, dy)
    want = torch.autograd.grad(want_y, params, dy)
    for (pname, _), got, ref in zip([("x", x)] + list(layer.named_parameters()), grads, want):
        assert float(ref.abs().max()) > 0, pname  # every parameter is reached
        assert rel_err(got, ref) < 1e-9, pname


@pytest.mark.parametrize("name", ["gla", "gdn"])
def test_layer_compiles_without_graph_breaks(name):
    import torch

    layer, _ = _layers()[name]
    x = torch.randn(1, 5, 24, dtype=torch.float64)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert rel_err(compiled(x)[0], layer(x)[0]) < TOLERANCE["float64"] * 1e3


def test_layer_rejects_head_widths_that_do_not_divide():
    from seqmix.nn import GatedLinearAttention

    with pytest.raises(ValueError, match="multiples of num_heads"):
        GatedLinearAttention(hidden_size=24, num_heads=5)


def test_gla_layer_cuda_bf16_matches_cpu():
    import torch

    cuda_kernels_or_skip("gla")
    cuda_kernels_or_skip("chains")
    from seqmix.nn import GatedLinearAttention

    torch.manual_seed(5)
    cpu = GatedLinearAttention(hidden_size=256, num_heads=2, gate_low_rank_dim=16)
    gpu = GatedLinearAttention(hidden_size=256, num_heads=2, gate_low_rank_dim=16, device="cuda",
                               dtype=torch.bfloat16)
    gpu.load_state_dict({k: v.to(torch.bfloat16) for k, v in cpu.state_dict().items()})
    cpu.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in cpu.state_dict().items()})
    x = torch.randn(2, 100, 256).bfloat16()
    y_gpu, _ = gpu(x.cuda())
    y_cpu, _ = cpu(x.float())
    assert rel_err(y_gpu, y_cpu) < 3 * TOLERANCE["bfloat16"]
    y_gpu.float().square().sum().backward()
    for pname, p in gpu.named_parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all()), pname
