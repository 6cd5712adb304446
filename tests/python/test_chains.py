import numpy as np
import pytest
import seqmix

from conftest import TOLERANCE, rel_err, requires_torch

rng = np.random.default_rng(11)

# Every activation, widths straddling the GEMM's 64-column tiles.
SEGMENTS = [(5, "identity"), (70, "silu"), (3, "sigmoid"), (33, "logsigmoid", 16.0), (9, "softplus")]
W_TOTAL = sum(s[0] for s in SEGMENTS)


def projection_inputs(leading, d, width=W_TOTAL):
    return (rng.uniform(-1, 1, (*leading, d)), rng.uniform(-0.5, 0.5, (width, d)), rng.uniform(-1, 1, width))


def output_inputs(leading, H, Dv, d_out):
    return (rng.uniform(-2, 2, (*leading, H, Dv)), rng.uniform(-3, 3, (*leading, H, Dv)), rng.uniform(0.5, 1.5, Dv),
            rng.uniform(-0.3, 0.3, (d_out, H * Dv)))


def f32(*arrays):
    return [a.astype(np.float32) for a in arrays]


# ---------------------------------------------------------------- numpy


@pytest.mark.parametrize("leading", [(1,), (7,), (2, 50)])
def test_numpy_projection_fast_matches_oracle(leading):
    x, w, b = projection_inputs(leading, 37)
    ref = seqmix.projection_chain(x, w, SEGMENTS, b, impl="reference")
    fast = seqmix.projection_chain(*f32(x, w), SEGMENTS, f32(b)[0], impl="fast")
    for (width, *_), r, f in zip(SEGMENTS, ref, fast):
        assert r.shape == (*leading, width) and f.dtype == np.float32
        assert rel_err(f, r) < TOLERANCE["float32"]
    dys = [rng.standard_normal(r.shape) for r in ref]
    grads_ref = seqmix.projection_chain_backward(x, w, dys, SEGMENTS, b, impl="reference")
    grads_fast = seqmix.projection_chain_backward(*f32(x, w), f32(*dys), SEGMENTS, f32(b)[0], impl="fast")
    for got, want in zip(grads_fast, grads_ref):
        assert got.shape == want.shape and rel_err(got, want) < TOLERANCE["float32"]


def test_numpy_projection_per_segment_dtypes_and_plain_formula():
    x, w, b = projection_inputs((9,), 12, 10)
    segments = [{"width": 4, "activation": "silu", "dtype": "float64"},
                {"width": 6, "activation": "logsigmoid", "tau": 8.0, "dtype": np.float32}]
    q, gk = seqmix.projection_chain(x, w, segments, b)
    z = x @ w.T + b
    assert q.dtype == np.float64 and gk.dtype == np.float32
    assert rel_err(q, z[:, :4] / (1 + np.exp(-z[:, :4]))) < 1e-14
    assert rel_err(gk, -np.log1p(np.exp(-z[:, 4:])) / 8.0) < 1e-6


@pytest.mark.parametrize("leading", [(1,), (7,), (3, 33)])
def test_numpy_output_chain_fast_matches_oracle_and_formula(leading):
    o, g, nw, ow = output_inputs(leading, 3, 20, 70)
    ref = seqmix.output_chain(o, g, nw, ow, impl="reference")
    normed = o / np.sqrt(np.mean(o**2, axis=-1, keepdims=True) + 1e-5) * nw * g / (1 + np.exp(-g))
    assert ref.shape == (*leading, 70)
    assert rel_err(ref, normed.reshape(*leading, 60) @ ow.T) < 1e-13
    fast = seqmix.output_chain(*f32(o, g, nw, ow), impl="fast")
    assert fast.dtype == np.float32 and rel_err(fast, ref) < TOLERANCE["float32"]
    dy = rng.standard_normal(ref.shape)
    grads_ref = seqmix.output_chain_backward(o, g, nw, ow, dy, impl="reference")
    grads_fast = seqmix.output_chain_backward(*f32(o, g, nw, ow, dy), impl="fast")
    for got, want in zip(grads_fast, grads_ref):
        assert rel_err(got, want) < TOLERANCE["float32"]


def test_bad_input_raises_seqmix_error():
    x, w, b = projection_inputs((5,), 8, 12)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'weight': expected shape \[12, 8\] \[W_total, d\], "
                                                 r"got \[12, 7\]"):
        seqmix.projection_chain(x, w[:, :7], [(12, "identity")])
    with pytest.raises(seqmix.SeqmixError, match=r"expected widths summing to W_total = 12 \(the rows of weight\), "
                                                 r"got widths summing to 11"):
        seqmix.projection_chain(x, w, [(8, "silu"), (3, "sigmoid")])
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'segments\[1\]': expected tau > 0, got tau = -2"):
        seqmix.projection_chain(x, w, [(8, "silu"), (4, "logsigmoid", -2.0)])
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'segments\[0\]': expected width >= 1, got width = 0"):
        seqmix.projection_chain(x, w, [(0, "silu"), (12, "identity")])
    with pytest.raises(seqmix.SeqmixError, match=r"expected an activation in identity, .*, got 'gelu'"):
        seqmix.projection_chain(x, w, [(12, "gelu")])
    with pytest.raises(seqmix.SeqmixError, match="expected a floating dtype"):
        seqmix.projection_chain(x, w, [{"width": 12, "dtype": "int32"}])
    with pytest.raises(seqmix.SeqmixError, match="numpy has no bfloat16"):
        seqmix.projection_chain(x, w, [{"width": 12, "dtype": "bfloat16"}])
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'bias': expected dtype f64 \(the dtype of x\), got f32"):
        seqmix.projection_chain(x, w, [(12, "identity")], b.astype(np.float32))
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'x': expected tokens >= 1, got tokens = 0"):
        seqmix.projection_chain(x[:0], w, [(12, "identity")])

    o, g, nw, ow = output_inputs((5,), 2, 4, 6)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'norm_weight': expected shape \[4\] \[Dv\], got \[3\]"):
        seqmix.output_chain(o, g, nw[:3], ow)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'out_weight': expected shape \[6, 8\] \[d_out, H·Dv\]"):
        seqmix.output_chain(o, g, nw, ow[:, :7])
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'g': expected shape \[5, 2, 4\]"):
        seqmix.output_chain(o, g[:4], nw, ow)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'eps': expected eps > 0, got eps = 0"):
        seqmix.output_chain(o, g, nw, ow, eps=0.0)
    with pytest.raises(seqmix.SeqmixError, match=r"argument 'o': expected 3 dimensions \[tokens, H, Dv\]"):
        seqmix.output_chain(o[:, 0], g[:, 0], nw, ow)


# ---------------------------------------------------------------- torch

ACTIVATIONS = {
    "identity": lambda z, tau: z,
    "silu": lambda z, tau: __import__("torch").nn.functional.silu(z),
    "sigmoid": lambda z, tau: z.sigmoid(),
    "logsigmoid": lambda z, tau: __import__("torch").nn.functional.logsigmoid(z) / tau,
    "softplus": lambda z, tau: __import__("torch").nn.functional.softplus(z),
}


def eager_projection(x, w, segments, b=None):
    """F.linear and the activations, one segment at a time."""
    import torch.nn.functional as F

    z = F.linear(x, w, b)
    outputs, start = [], 0
    for width, name, *tau in segments:
        outputs.append(ACTIVATIONS[name](z[..., start:start + width], tau[0] if tau else 1.0))
        start += width
    return outputs


def eager_output_chain(o, g, nw, ow, eps=1e-5):
    import torch
    import torch.nn.functional as F

    normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * nw * F.silu(g)
    return F.linear(normed.flatten(-2), ow)


def torch_leaves(arrays, dtype):
    import torch

    return [torch.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]


@requires_torch
@pytest.mark.parametrize("with_bias", [True, False])
def test_torch_projection_matches_eager_composition(with_bias):
    import torch

    x, w, b = torch_leaves(projection_inputs((2, 50), 37), torch.float32)
    b = b if with_bias else None
    dys = [torch.randn(2, 50, s[0]) for s in SEGMENTS]
    got = seqmix.projection_chain(x, w, SEGMENTS, b)
    want = eager_projection(x, w, SEGMENTS, b)
    for g_, w_ in zip(got, want):
        assert rel_err(g_, w_) < TOLERANCE["float32"]
    leaves = [t for t in (x, w, b) if t is not None]
    grads = torch.autograd.grad(got, leaves, dys)
    grads_eager = torch.autograd.grad(want, leaves, dys)
    for g_, w_ in zip(grads, grads_eager):
        assert rel_err(g_, w_) < TOLERANCE["float32"]


@requires_torch
def test_torch_projection_unused_segment_and_float32_gate_from_bf16():
    import torch

    x, w, b = (torch.tensor(a, dtype=torch.bfloat16) for a in projection_inputs((7,), 16, 12))
    segments = [{"width": 8, "activation": "silu"},
                {"width": 4, "activation": "logsigmoid", "tau": 16.0, "dtype": torch.float32}]
    x.requires_grad_()
    q, gk = seqmix.projection_chain(x, w, segments, b)
    assert q.dtype == torch.bfloat16 and gk.dtype == torch.float32
    want = eager_projection(x.double(), w.double(), [(8, "silu"), (4, "logsigmoid", 16.0)], b.double())
    assert rel_err(gk, want[1]) < TOLERANCE["float32"] and rel_err(q, want[0]) < TOLERANCE["bfloat16"]
    (gk.sum() * 3).backward()  # q unused: its gradient is zero
    x64 = x.detach().double().requires_grad_()
    (eager_projection(x64, w.double(), [(8, "silu"), (4, "logsigmoid", 16.0)], b.double())[1].sum() * 3).backward()
    assert rel_err(x.grad, x64.grad) < TOLERANCE["bfloat16"]


@requires_torch
@pytest.mark.parametrize("leading", [(7,), (2, 5)])
def test_torch_output_chain_matches_eager_composition(leading):
    import torch

    o, g, nw, ow = torch_leaves(output_inputs(leading, 3, 20, 70), torch.float32)
    y = seqmix.output_chain(o, g, nw, ow)
    want = eager_output_chain(o, g, nw, ow)
    assert y.shape == (*leading, 70) and rel_err(y, want) < TOLERANCE["float32"]
    dy = torch.randn_like(y)
    for g_, w_ in zip(torch.autograd.grad(y, (o, g, nw, ow), dy), torch.autograd.grad(want, (o, g, nw, ow), dy)):
        assert rel_err(g_, w_) < TOLERANCE["float32"]


@requires_torch
def test_torch_gradcheck_float64():
    import torch

    segments = [(2, "identity"), (3, "silu"), (2, "sigmoid"), (2, "logsigmoid", 4.0), (2, "softplus")]
    x, w, b = torch_leaves(projection_inputs((3,), 4, 11), torch.float64)
    assert torch.autograd.gradcheck(lambda x, w, b: seqmix.projection_chain(x, w, segments, b), (x, w, b))
    o, g, nw, ow = torch_leaves(output_inputs((2, 2), 2, 3, 4), torch.float64)
    assert torch.autograd.gradcheck(lambda *a: seqmix.output_chain(*a), (o, g, nw, ow))


@requires_torch
def test_torch_fast_grads_match_oracle_bf16():
    import torch

    x, w, b = projection_inputs((100,), 37)
    # Odd segments in float32, even ones in the input dtype (bf16).
    segments = [{"width": s[0], "activation": s[1], "tau": s[2] if len(s) == 3 else 1.0,
                 "dtype": "float32" if i % 2 else None} for i, s in enumerate(SEGMENTS)]
    dys = [torch.randn(100, s["width"]) for s in segments]

    def run(impl):
        leaves = torch_leaves((x, w, b), torch.bfloat16)
        outs = seqmix.projection_chain(*leaves[:2], segments, leaves[2], impl=impl)
        torch.autograd.backward(outs, [dy.to(o.dtype) for dy, o in zip(dys, outs)])
        return outs + [t.grad for t in leaves]

    for got, want in zip(run("fast"), run("reference")):
        assert rel_err(got, want) < TOLERANCE["bfloat16"]


@requires_torch
def test_torch_compile_fullgraph_has_no_graph_break():
    import torch

    x, w, b = (torch.tensor(a, dtype=torch.float32) for a in projection_inputs((2, 9), 16, 28))
    gate_w, gate_b = torch.randn(8, 4) * 0.3, torch.randn(8)
    nw, ow = torch.rand(4) + 0.5, torch.randn(5, 8) * 0.3
    w.requires_grad_(), nw.requires_grad_(), gate_w.requires_grad_()
    segments = [(8, "silu"), (8, "identity"), (8, "identity"), (4, "identity")]

    def layer(x, w, b, gate_w, gate_b, nw, ow):
        v, g, o, low = seqmix.projection_chain(x, w, segments, b)
        gk = seqmix.low_rank_gate(low, gate_w, gate_b, tau=16.0, dtype=torch.float32)
        y = seqmix.output_chain((o * gk.exp() + v).unflatten(-1, (2, 4)), g.unflatten(-1, (2, 4)), nw, ow)
        return y.square().sum()

    args = (x, w, b, gate_w, gate_b, nw, ow)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(*args)
    grads = torch.autograd.grad(loss, (w, gate_w, nw))
    loss_eager = layer(*args)
    grads_eager = torch.autograd.grad(loss_eager, (w, gate_w, nw))
    assert torch.allclose(loss, loss_eager)
    for g_, w_ in zip(grads, grads_eager):
        assert rel_err(g_, w_) < TOLERANCE["float32"]


@requires_torch
def test_nn_modules_match_eager_composition():
    import torch
    import torch.nn.functional as F
    from seqmix.nn import LowRankGate, OutputChain, ProjectionChain

    torch.manual_seed(0)
    proj = ProjectionChain.from_gla_layer_widths(24, num_heads=2, head_k_dim=4, head_v_dim=6, gate_low_rank_dim=3)
    gate = LowRankGate(3, 8, tau=16.0)
    out = OutputChain(2, 6, 24)
    x = torch.randn(2, 5, 24)
    parts = proj(x)
    assert list(parts) == ["q", "k", "v", "g", "gk_low"] and parts["gk_low"].shape == (2, 5, 3)
    z = F.linear(x, proj.weight)
    assert rel_err(parts["v"], z[..., 16:28]) < TOLERANCE["float32"]
    gk = gate(parts["gk_low"])
    assert rel_err(gk, F.logsigmoid(F.linear(parts["gk_low"], gate.weight, gate.bias)) / 16.0) < TOLERANCE["float32"]
    o, g = parts["v"].unflatten(-1, (2, 6)), parts["g"].unflatten(-1, (2, 6))
    assert rel_err(out(o, g), eager_output_chain(o, g, out.norm_weight, out.out_weight)) < TOLERANCE["float32"]

    gdn = ProjectionChain.from_gated_deltanet_widths(24, num_heads=2, head_k_dim=4, head_v_dim=6, bias=True,
                                                     dtype=torch.bfloat16)
    parts = gdn(x.bfloat16())
    assert parts["a"].dtype == torch.float32 and parts["beta"].shape == (2, 5, 2)
    assert bool((parts["beta"] > 0).all()) and bool((parts["a"] >= 0).all())
    parts["a"].sum().backward()
    assert gdn.weight.grad is not None and gdn.bias.grad is not None


# ---------------------------------------------------------------- the chain with its low-rank gate

GATE_SEGMENTS = [(6, "silu"), (4, "identity"), (5, "identity")]  # the code: segment 1, r = 4


def gate_inputs(leading, with_bias=True):
    x, w, b = projection_inputs(leading, 8, 15)
    gate_bias = rng.uniform(-1, 1, 7) if with_bias else None
    return x, w, b, rng.uniform(-1, 1, (7, 4)), gate_bias


@pytest.mark.parametrize("leading", [(1,), (37,), (2, 9)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_numpy_chain_with_gate_equals_the_two_calls(leading, with_bias):
    x, w, b, gw, gb = gate_inputs(leading, with_bias)
    spec = dict(segment=1, weight=gw, bias=gb, tau=8.0)
    outputs, gate = seqmix.projection_chain(x, w, GATE_SEGMENTS, b, low_rank_gate=spec)
    two = seqmix.projection_chain(x, w, GATE_SEGMENTS, b)
    assert all(np.array_equal(o, t) for o, t in zip(outputs, two))
    assert np.array_equal(gate, seqmix.low_rank_gate(two[1], gw, gb, tau=8.0))
    z = x @ w.T + b
    u = z[..., 6:10]
    want = -np.logaddexp(0, -(u @ gw.T + (0 if gb is None else gb))) / 8.0
    assert gate.shape == (*leading, 7) and rel_err(gate, want) < TOLERANCE["float64"]


def test_chain_with_gate_bad_input_raises_seqmix_error():
    x, w, b, gw, gb = gate_inputs((3,))
    for spec, text in [({"segment": 1}, "expected a dict with 'weight'"),
                       ({"weight": gw, "segment": 3}, "expected 'segment' the index of a segment"),
                       ({"weight": gw, "segment": 1, "size": 2}, "expected a dict with 'weight'"),
                       ({"weight": gw, "segment": 0}, "argument 'gate.segment': expected an identity segment"),
                       ({"weight": gw[:, :3], "segment": 1}, "argument 'gate.weight': expected shape [7, 4]"),
                       ({"weight": gw, "segment": 1, "tau": -1.0}, "argument 'gate.tau': expected tau > 0")]:
        with pytest.raises(seqmix.SeqmixError) as info:
            seqmix.projection_chain(x, w, GATE_SEGMENTS, b, low_rank_gate=spec)
        assert text in str(info.value)


@requires_torch
def test_torch_chain_with_gate_matches_the_two_calls_and_gradcheck():
    import torch

    x, w, b, gw, gb = torch_leaves(gate_inputs((2, 5)), torch.float64)
    spec = dict(segment=1, weight=gw, bias=gb, tau=8.0, dtype=torch.float32)
    outputs, gate = seqmix.projection_chain(x, w, GATE_SEGMENTS, b, low_rank_gate=spec)
    two = seqmix.projection_chain(x, w, GATE_SEGMENTS, b)
    gate_two = seqmix.low_rank_gate(two[1], gw, gb, tau=8.0, dtype=torch.float32)
    assert gate.dtype == torch.float32 and gate.shape == (2, 5, 7)
    dys = [torch.randn_like(o) for o in outputs] + [torch.randn_like(gate)]
    leaves = (x, w, b, gw, gb)
    got = torch.autograd.grad([*outputs, gate], leaves, dys)
    want = torch.autograd.grad([*two, gate_two], leaves, dys)
    for g_, w_ in zip(got, want):
        assert rel_err(g_, w_) < TOLERANCE["float32"]

    def call(x, w, b, gw, gb):
        outputs, gate = seqmix.projection_chain(x, w, GATE_SEGMENTS, b,
                                                low_rank_gate=dict(segment=1, weight=gw, bias=gb, tau=8.0))
        return (*outputs, gate)

    assert torch.autograd.gradcheck(call, leaves)


@requires_torch
def test_torch_chain_with_gate_compiles_fullgraph_and_unused_gate():
    import torch

    x, w, b, gw, gb = torch_leaves(gate_inputs((2, 9)), torch.float32)

    def layer(x, w, b, gw, gb):
        (v, low, o), gk = seqmix.projection_chain(x, w, GATE_SEGMENTS, b,
                                                  low_rank_gate=dict(segment=-2, weight=gw, bias=gb, tau=16.0))
        return (v.sum(-1) * gk.exp().sum(-1) + o.square().sum(-1) + low.sum(-1)).sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(x, w, b, gw, gb)
    grads = torch.autograd.grad(loss, (x, w, b, gw, gb))
    loss_eager = layer(x, w, b, gw, gb)
    grads_eager = torch.autograd.grad(loss_eager, (x, w, b, gw, gb))
    assert torch.allclose(loss, loss_eager)
    for g_, w_ in zip(grads, grads_eager):
        assert rel_err(g_, w_) < TOLERANCE["float32"]
    # The gate unused by the loss: its gradient is zeros, the chain's still flow.
    outputs, _ = seqmix.projection_chain(x, w, GATE_SEGMENTS, b, low_rank_gate=dict(segment=1, weight=gw, bias=gb))
    dx, dgw = torch.autograd.grad(outputs[0].sum(), (x, gw), allow_unused=True)
    assert dx is not None and (dgw is None or float(dgw.abs().max()) == 0.0)


@requires_torch
def test_nn_gla_projection_matches_projection_chain_and_low_rank_gate():
    import torch
    from seqmix.nn import GLAProjection

    torch.manual_seed(0)
    layer = GLAProjection(24, num_heads=2, head_k_dim=4, head_v_dim=6, gate_low_rank_dim=3)
    x = torch.randn(2, 5, 24)
    parts = layer(x)
    assert list(parts) == ["q", "k", "v", "g", "gk_low", "gk"] and parts["gk"].shape == (2, 5, 8)
    separate = layer.projections(x)
    for name in separate:
        assert torch.equal(parts[name], separate[name])
    assert torch.equal(parts["gk"], layer.gate(separate["gk_low"]))
    parts["gk"].sum().backward()
    assert layer.gate.weight.grad is not None and layer.projections.weight.grad is not None
