"""torch layers around the fused chains of a sequence-mixing block.

``ProjectionChain`` holds the concatenated input projections of a layer (q, k, v, gates,
...) as one ``[W_total, d_model]`` weight and returns every named segment already
activated; ``LowRankGate`` is GLA's second low-rank gate GEMM; ``OutputChain`` holds the
per-head RMSNorm weight and o_proj. All run on the seqmix custom ops, so they work under
``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._ops.chains import parse_segments
from .torch.chains import low_rank_gate, output_chain, projection_chain


def _linear_init_(weight: torch.Tensor, bias, fan_in: int) -> None:
    """nn.Linear's default initialisation."""
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(bias, -bound, bound)


class ProjectionChain(nn.Module):
    """All input projections of a layer as one GEMM with per-segment activations.

    Args:
        d_model: input width d.
        segments: named segments in column order, each ``(name, width, activation)``,
            ``(name, width, activation, tau)`` or a dict with ``"name"``, ``"width"`` and
            optional ``"activation"``, ``"tau"``, ``"dtype"`` (see
            :func:`seqmix.projection_chain` for activations, tau and output dtypes).
        bias: learn a ``[W_total]`` bias over all columns.
        impl: ``"automatic"``, ``"reference"`` or ``"fast"``.
        device, dtype: of the parameters.

    ``forward(x [..., d_model])`` returns a dict ``name -> [..., width]`` in segment order.
    """

    def __init__(self, d_model: int, segments, bias: bool = False, impl: str = "automatic", device=None, dtype=None):
        super().__init__()
        self.names, specs = [], []
        for seg in segments:
            if isinstance(seg, dict):
                self.names.append(seg["name"])
                specs.append({k: v for k, v in seg.items() if k != "name"})
            else:
                self.names.append(seg[0])
                specs.append(tuple(seg[1:]))
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"ProjectionChain: segment names must be distinct, got {self.names}")
        widths, activations, taus, dtypes = parse_segments(specs)
        self.segments = [{"width": w, "activation": a, "tau": t, "dtype": d}
                         for w, a, t, d in zip(widths, activations, taus, dtypes)]
        self.d_model, self.impl = d_model, impl
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(sum(widths), d_model, **factory))
        self.bias = nn.Parameter(torch.empty(sum(widths), **factory)) if bias else None
        _linear_init_(self.weight, self.bias, d_model)

    @property
    def widths(self) -> dict:
        """name -> width."""
        return {name: seg["width"] for name, seg in zip(self.names, self.segments)}

    def forward(self, x: torch.Tensor) -> dict:
        outputs = projection_chain(x, self.weight, self.segments, self.bias, self.impl)
        return dict(zip(self.names, outputs))

    @classmethod
    def from_gla_layer_widths(cls, d_model: int, num_heads: int, head_k_dim: int, head_v_dim: int,
                              gate_low_rank_dim: int = 16, **kwargs) -> "ProjectionChain":
        """The projections of a GLA layer (fla ``GatedLinearAttention``): ``q``, ``k``
        ``[H*K]``, ``v`` and the output gate ``g`` ``[H*V]`` (SiLU is applied later by
        ``OutputChain``), and ``gk_low`` ``[r]``, the first GEMM of the low-rank gate, all
        identity. Feed ``gk_low`` to a ``LowRankGate(r, H*K)`` for the log decays, or use
        ``GLAProjection``, which holds both and computes them in one call."""
        hk, hv = num_heads * head_k_dim, num_heads * head_v_dim
        return cls(d_model, [("q", hk, "identity"), ("k", hk, "identity"), ("v", hv, "identity"),
                             ("g", hv, "identity"), ("gk_low", gate_low_rank_dim, "identity")], **kwargs)

    @classmethod
    def from_gated_deltanet_widths(cls, d_model: int, num_heads: int, head_k_dim: int, head_v_dim: int,
                                   qkv_activation: str = "silu", **kwargs) -> "ProjectionChain":
        """The projections of a Gated DeltaNet layer (fla ``GatedDeltaNet``): ``q``, ``k``
        ``[H*K]`` and ``v`` ``[H*V]`` with ``qkv_activation`` (SiLU as fla applies without
        a short convolution; pass ``"identity"`` when a convolution follows), ``beta``
        ``[H]`` sigmoid, ``a`` ``[H]`` softplus in float32 (the decay is
        ``g = -exp(A_log) * a``; a learned bias plays ``dt_bias``), and the output gate
        ``g`` ``[H*V]`` identity."""
        hk, hv = num_heads * head_k_dim, num_heads * head_v_dim
        return cls(d_model, [("q", hk, qkv_activation), ("k", hk, qkv_activation), ("v", hv, qkv_activation),
                             ("beta", num_heads, "sigmoid"),
                             {"name": "a", "width": num_heads, "activation": "softplus", "dtype": "float32"},
                             ("g", hv, "identity")], **kwargs)


class LowRankGate(nn.Module):
    """GLA's low-rank gate, second GEMM: ``logsigmoid(u @ weight.T + bias) / tau`` from the
    rank-r code ``u [..., r]`` to log decays ``[..., width]`` (``width = H*K``), computed by
    :func:`seqmix.low_rank_gate`. ``out_dtype`` (default: u's dtype) is the decays' dtype."""

    def __init__(self, rank: int, width: int, tau: float = 16.0, bias: bool = True, out_dtype=None,
                 impl: str = "automatic", device=None, dtype=None):
        super().__init__()
        self.tau, self.out_dtype, self.impl = tau, out_dtype, impl
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(width, rank, **factory))
        self.bias = nn.Parameter(torch.empty(width, **factory)) if bias else None
        _linear_init_(self.weight, self.bias, rank)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return low_rank_gate(u, self.weight, self.bias, self.tau, self.out_dtype, self.impl)


class GLAProjection(nn.Module):
    """A GLA layer's input projections and its low-rank gate in one call: a
    ``ProjectionChain.from_gla_layer_widths`` (``projections``) and a ``LowRankGate``
    (``gate``), computed by :func:`seqmix.projection_chain` with ``low_rank_gate`` (on a
    CUDA device the gate may run beside the main GEMM, see there).

    Args: as ``ProjectionChain.from_gla_layer_widths`` (``d_model``, ``num_heads``,
    ``head_k_dim``, ``head_v_dim``, ``gate_low_rank_dim``), plus ``gate_logit_normalizer``
    (tau), ``gate_bias`` and ``gate_dtype`` (the decays' dtype, default the parameters'),
    ``bias`` (of the main chain), ``impl``, ``device``, ``dtype``.

    ``forward(x [..., d_model])`` returns a dict with ``q``, ``k`` ``[..., H*K]``, ``v``,
    ``g`` ``[..., H*V]``, ``gk_low`` ``[..., r]`` and ``gk`` ``[..., H*K]``, the log decays
    ``logsigmoid(gk_low @ gate.weight.T + gate.bias) / tau``."""

    def __init__(self, d_model: int, num_heads: int, head_k_dim: int, head_v_dim: int, gate_low_rank_dim: int = 16,
                 gate_logit_normalizer: float = 16.0, gate_bias: bool = True, gate_dtype=None, bias: bool = False,
                 impl: str = "automatic", device=None, dtype=None):
        super().__init__()
        factory = {"impl": impl, "device": device, "dtype": dtype}
        self.projections = ProjectionChain.from_gla_layer_widths(d_model, num_heads, head_k_dim, head_v_dim,
                                                                 gate_low_rank_dim, bias=bias, **factory)
        self.gate = LowRankGate(gate_low_rank_dim, num_heads * head_k_dim, tau=gate_logit_normalizer,
                                bias=gate_bias, out_dtype=gate_dtype, **factory)

    def forward(self, x: torch.Tensor) -> dict:
        p, gate = self.projections, self.gate
        spec = {"segment": -1, "weight": gate.weight, "bias": gate.bias, "tau": gate.tau, "dtype": gate.out_dtype}
        outputs, gk = projection_chain(x, p.weight, p.segments, p.bias, p.impl, low_rank_gate=spec)
        return {**dict(zip(p.names, outputs)), "gk": gk}


class OutputChain(nn.Module):
    """Per-head RMSNorm (weight ``[Dv]``, shared by the heads), SiLU output gate and o_proj
    (``[d_out, H*Dv]``, no bias), fused by :func:`seqmix.output_chain`.

    ``forward(o, g)`` takes ``[tokens, H, Dv]`` or ``[B, T, H, Dv]`` and returns
    ``[tokens, d_out]`` or ``[B, T, d_out]``.
    """

    def __init__(self, num_heads: int, head_v_dim: int, d_out: int, eps: float = 1e-5, impl: str = "automatic",
                 device=None, dtype=None):
        super().__init__()
        self.eps, self.impl = eps, impl
        factory = {"device": device, "dtype": dtype}
        self.norm_weight = nn.Parameter(torch.ones(head_v_dim, **factory))
        self.out_weight = nn.Parameter(torch.empty(d_out, num_heads * head_v_dim, **factory))
        _linear_init_(self.out_weight, None, num_heads * head_v_dim)

    def forward(self, o: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return output_chain(o, g, self.norm_weight, self.out_weight, self.eps, self.impl)


class GatedLinearAttention(nn.Module):
    """A GLA layer (fla's ``GatedLinearAttention`` in chunk mode with its defaults: no short
    convolution, a low-rank decay gate, a SiLU output gate and a per-head RMSNorm) built on
    seqmix's fused ops: :class:`ProjectionChain` (q, k, v, g and the gate's rank-r code in one
    GEMM), :class:`LowRankGate` (log decays ``logsigmoid(.) / gate_logit_normalizer``),
    :func:`seqmix.chunk_gla`, and :class:`OutputChain` (norm, gate and o_proj in one pass).

    Args:
        hidden_size: model width d.
        num_heads: H.
        expand_k, expand_v: key and value widths ``H*K = d*expand_k``, ``H*V = d*expand_v``.
        gate_low_rank_dim: rank r of the decay gate.
        gate_logit_normalizer: tau dividing the gate's log-sigmoid.
        norm_eps: the output RMSNorm's epsilon.
        impl, device, dtype: as for the chains (``dtype`` bf16/fp16 for the CUDA kernels).

    ``forward(hidden_states [B, T, d], initial_state=None, output_final_state=False,
    cu_seqlens=None)`` returns ``(y [B, T, d], final_state)``; ``final_state`` is the
    ``[N, H, K, V]`` float32 state when ``output_final_state``, else None.
    """

    def __init__(self, hidden_size: int = 1024, num_heads: int = 4, expand_k: float = 0.5, expand_v: float = 1.0,
                 gate_low_rank_dim: int = 16, gate_logit_normalizer: float = 16.0, norm_eps: float = 1e-5,
                 impl: str = "automatic", device=None, dtype=None):
        super().__init__()
        key_dim, value_dim = int(hidden_size * expand_k), int(hidden_size * expand_v)
        if key_dim % num_heads or value_dim % num_heads:
            raise ValueError(f"GatedLinearAttention: key width {key_dim} and value width {value_dim} must be "
                             f"multiples of num_heads {num_heads}")
        self.num_heads, self.head_k_dim, self.head_v_dim = num_heads, key_dim // num_heads, value_dim // num_heads
        self.impl = impl
        factory = {"impl": impl, "device": device, "dtype": dtype}
        self.projections = ProjectionChain.from_gla_layer_widths(hidden_size, num_heads, self.head_k_dim,
                                                                 self.head_v_dim, gate_low_rank_dim, **factory)
        self.gate = LowRankGate(gate_low_rank_dim, key_dim, tau=gate_logit_normalizer, **factory)
        self.output = OutputChain(num_heads, self.head_v_dim, hidden_size, eps=norm_eps, **factory)

    def forward(self, hidden_states: torch.Tensor, initial_state=None, output_final_state: bool = False,
                cu_seqlens=None):
        from .torch.gla import chunk_gla

        parts = self.projections(hidden_states)
        heads = lambda t, width: t.unflatten(-1, (self.num_heads, width))  # noqa: E731  views, no copy
        q, k = heads(parts["q"], self.head_k_dim), heads(parts["k"], self.head_k_dim)
        v, g = heads(parts["v"], self.head_v_dim), heads(parts["g"], self.head_v_dim)
        log_decay = heads(self.gate(parts["gk_low"]), self.head_k_dim)
        o, final_state = chunk_gla(q, k, v, log_decay, initial_state=initial_state,
                                   output_final_state=output_final_state, cu_seqlens=cu_seqlens, impl=self.impl)
        return self.output(o, g), final_state


class GatedDeltaNet(nn.Module):
    """A Gated DeltaNet layer (fla's ``GatedDeltaNet`` with ``use_short_conv=False``: SiLU on
    q, k, v, q and k L2-normalised inside the kernel, ``beta = sigmoid``, the decay
    ``g = -exp(A_log) * softplus(a + dt_bias)``, a SiLU output gate and a per-head RMSNorm)
    built on :class:`ProjectionChain`, :func:`seqmix.chunk_gated_delta_rule` and
    :class:`OutputChain`.

    Args:
        hidden_size: model width d.
        num_heads: H.
        head_dim: K; the value head width is ``V = head_dim * expand_v``.
        expand_v: see head_dim.
        norm_eps: the output RMSNorm's epsilon.
        impl, device, dtype: as for the chains.

    ``A_log`` and ``dt_bias`` (float32, ``[H]``) are initialised as in fla; ``dt_bias`` is
    added by the fused GEMM's epilogue as the ``a`` columns' part of the projection bias.

    ``forward(hidden_states [B, T, d], initial_state=None, output_final_state=False,
    cu_seqlens=None)`` returns ``(y [B, T, d], final_state)`` as :class:`GatedLinearAttention`.
    """

    def __init__(self, hidden_size: int = 2048, num_heads: int = 6, head_dim: int = 256, expand_v: float = 2.0,
                 norm_eps: float = 1e-5, impl: str = "automatic", device=None, dtype=None):
        super().__init__()
        self.num_heads, self.head_k_dim, self.head_v_dim = num_heads, head_dim, int(head_dim * expand_v)
        self.impl = impl
        factory = {"impl": impl, "device": device, "dtype": dtype}
        self.projections = ProjectionChain.from_gated_deltanet_widths(hidden_size, num_heads, head_dim,
                                                                      self.head_v_dim, **factory)
        self.output = OutputChain(num_heads, self.head_v_dim, hidden_size, eps=norm_eps, **factory)
        self.A_log = nn.Parameter(torch.empty(num_heads, device=device, dtype=torch.float32).uniform_(1, 16).log())
        self.dt_bias = nn.Parameter(_inverse_softplus(_initial_time_steps(num_heads, device)))
        widths = self.projections.widths
        self._dt_columns = (sum(widths[name] for name in ("q", "k", "v", "beta")), sum(widths.values()))

    def forward(self, hidden_states: torch.Tensor, initial_state=None, output_final_state: bool = False,
                cu_seqlens=None):
        from .torch.delta_rule import chunk_gated_delta_rule

        chain = self.projections
        first, total = self._dt_columns  # the bias is dt_bias on the a columns, zero elsewhere
        bias = nn.functional.pad(self.dt_bias, (first, total - first - self.num_heads)).to(chain.weight.dtype)
        outputs = projection_chain(hidden_states, chain.weight, chain.segments, bias, chain.impl)
        parts = dict(zip(chain.names, outputs))
        heads = lambda t, width: t.unflatten(-1, (self.num_heads, width))  # noqa: E731  views, no copy
        q, k = heads(parts["q"], self.head_k_dim), heads(parts["k"], self.head_k_dim)
        v, g = heads(parts["v"], self.head_v_dim), heads(parts["g"], self.head_v_dim)
        log_decay = (-self.A_log.exp() * parts["a"]).to(q.dtype)
        o, final_state = chunk_gated_delta_rule(q, k, v, log_decay, parts["beta"], initial_state=initial_state,
                                                output_final_state=output_final_state,
                                                use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens, impl=self.impl)
        return self.output(o, g), final_state


def _initial_time_steps(count: int, device, dt_min: float = 1e-3, dt_max: float = 0.1, floor: float = 1e-4):
    """Time steps log-uniform in [dt_min, dt_max] (Mamba's and fla's dt initialisation)."""
    u = torch.rand(count, device=device, dtype=torch.float32)
    return (u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).exp().clamp(min=floor)


def _inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    """x with softplus(x) = y."""
    return y + torch.log(-torch.expm1(-y))
