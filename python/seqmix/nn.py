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
        identity. Feed ``gk_low`` to a ``LowRankGate(r, H*K)`` for the log decays."""
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
