"""Projection chain and output chain: segment specs, allocation and _C calls."""

from __future__ import annotations

from .. import _C
from .._backend import NUMPY, is_torch, torch_module

ACTIVATIONS = ("identity", "silu", "sigmoid", "logsigmoid", "softplus")

# Spellings accepted for a segment's output dtype, mapped to the numpy/torch name.
_DTYPE_NAMES = {
    "float16": "float16", "f16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "f32": "float32", "float": "float32",
    "float64": "float64", "f64": "float64", "double": "float64",
}


def _dtype_name(dtype):
    """'float32', 'bfloat16', ... for a string, a numpy dtype or a torch.dtype; None stays None."""
    if dtype is None:
        return None
    text = dtype.__name__ if isinstance(dtype, type) else str(dtype).removeprefix("torch.")  # np.float32, torch.float32
    if text not in _DTYPE_NAMES:
        raise _C.SeqmixError(f"seqmix.projection_chain: argument 'segments': expected a floating dtype "
                             f"(float16, bfloat16, float32 or float64), got {dtype!r}")
    return _DTYPE_NAMES[text]


def parse_segments(segments):
    """Normalises segment specs to four lists: widths, activation names, taus, dtype names
    (None: the dtype of x). See ``projection_chain`` for the accepted forms."""
    if isinstance(segments, (str, dict)) or not hasattr(segments, "__iter__"):
        raise _C.SeqmixError("seqmix.projection_chain: argument 'segments': expected a list of segments, "
                             f"got {type(segments).__name__}")
    widths, activations, taus, dtypes = [], [], [], []
    for i, seg in enumerate(segments):
        if isinstance(seg, dict):
            unknown = set(seg) - {"width", "activation", "tau", "dtype", "heads", "name"}
            if "width" not in seg or unknown:
                raise _C.SeqmixError(f"seqmix.projection_chain: argument 'segments[{i}]': expected a dict with "
                                     f"'width' and optional 'activation', 'tau', 'dtype', 'heads', "
                                     f"got keys {sorted(seg)}")
            width, activation = seg["width"], seg.get("activation", "identity")
            tau, dtype = seg.get("tau", 1.0), seg.get("dtype")
        elif isinstance(seg, (tuple, list)) and len(seg) in (2, 3):
            width, activation, tau, dtype = seg[0], seg[1], seg[2] if len(seg) == 3 else 1.0, None
        else:
            raise _C.SeqmixError(f"seqmix.projection_chain: argument 'segments[{i}]': expected (width, activation), "
                                 f"(width, activation, tau) or a dict, got {seg!r}")
        if activation not in ACTIVATIONS:
            raise _C.SeqmixError(f"seqmix.projection_chain: argument 'segments[{i}]': expected an activation in "
                                 f"{', '.join(ACTIVATIONS)}, got {activation!r}")
        widths.append(int(width))
        activations.append(str(activation))
        taus.append(float(tau))
        dtypes.append(_dtype_name(dtype))
    return widths, activations, taus, dtypes


class SegmentSpec:
    """A segment list, parsed and checked once: what every call of the chain needs.

    widths, activations, taus, dtypes: as ``parse_segments`` returns them; heads: as
    ``segment_heads``; activation_names: the activations joined by commas (custom op
    schemas have no list of strings)."""

    def __init__(self, segments):
        self.widths, self.activations, self.taus, self.dtypes = parse_segments(segments)
        self.heads = segment_heads(segments)
        self.has_heads = any(h is not None for h in self.heads)
        self.activation_names = ",".join(self.activations)
        self._dtype_names = {}

    def dtype_names(self, default: str) -> str:
        """The segments' dtype names joined by commas, absent ones given as ``default``
        (the name of x's dtype); remembered per default."""
        names = self._dtype_names.get(default)
        if names is None:
            names = self._dtype_names[default] = ",".join(default if d is None else d for d in self.dtypes)
        return names


def segments_key(segments):
    """A key equal for segment lists that parse alike (a tuple of the tuple segments and of
    each dict segment's items, marked by ``dict``, which no valid tuple segment holds), or
    None for a container or segment of another kind (those are parsed on every call). The
    key may still hold something unhashable: looking it up raises TypeError then."""
    if type(segments) not in (list, tuple):
        return None
    parts = []
    for seg in segments:
        if type(seg) is tuple:
            parts.append(seg)
        elif type(seg) is dict:
            parts.append((dict, *seg.items()))
        else:
            return None
    return tuple(parts)


def _numpy_dtype(name):
    import numpy as np

    if name == "bfloat16":
        raise _C.SeqmixError("seqmix.projection_chain: argument 'segments': numpy has no bfloat16 "
                             "(use torch tensors for bfloat16 outputs)")
    return np.dtype(name)


def segment_heads(segments):
    """The ``"heads"`` of each segment dict (None where absent), checked to divide the width."""
    heads = []
    for i, seg in enumerate(segments):
        h = seg.get("heads") if isinstance(seg, dict) else None
        if h is not None and (int(h) < 1 or int(seg["width"]) % int(h) != 0):
            raise _C.SeqmixError(f"seqmix.projection_chain: argument 'segments[{i}]': expected 'heads' dividing "
                                 f"the width {seg['width']}, got {h!r}")
        heads.append(None if h is None else int(h))
    return heads


def split_heads(outputs, heads):
    """[..., width] -> [..., heads, width / heads] views where a segment names its heads."""
    return [y if h is None else y.reshape(*y.shape[:-1], h, y.shape[-1] // h) for y, h in zip(outputs, heads)]


def _allocate_outputs(xp, x, widths, dtypes):
    """One [tokens, width] array per segment. On a CUDA device consecutive segments of one
    dtype are column views of one buffer: the fused GEMM writes such a run at once (all of
    the chain when every segment keeps x's dtype), an f32 run (a gate a consumer wants in
    f32) with a second GEMM."""
    tokens = x.shape[0] if x.ndim >= 1 else 0
    if not xp.is_cuda(x):
        return [xp.empty((tokens, w), dtype, x) for w, dtype in zip(widths, dtypes)]
    outputs, s = [], 0
    while s < len(widths):
        end = s
        while end < len(widths) and dtypes[end] == dtypes[s]:
            end += 1
        run = widths[s:end]
        outputs.extend(xp.split_columns(xp.empty((tokens, sum(run)), dtypes[s], x), run))
        s = end
    return outputs


def projection_forward(xp, x, weight, bias, widths, activations, taus, dtypes, impl):
    """x [tokens, d]; dtypes holds resolved backend dtypes. Returns one [tokens, width] per
    segment (on a CUDA device: column views of one buffer, see ``_allocate_outputs``)."""
    outputs = _allocate_outputs(xp, x, widths, dtypes)
    _C.projection_chain_forward(xp.arg(x), xp.arg(weight), xp.arg(bias), widths, activations, taus,
                                [xp.arg(o) for o in outputs], impl, xp.stream(x))
    return outputs


def projection_with_gate_forward(xp, x, weight, bias, widths, activations, taus, dtypes, code, gate_weight, gate_bias,
                                 tau, gate_dtype, impl):
    """The chain and its low-rank gate in one call: (outputs as ``projection_forward``, gate
    ``[tokens, gate width]`` in gate_dtype)."""
    outputs = _allocate_outputs(xp, x, widths, dtypes)
    tokens = x.shape[0] if x.ndim >= 1 else 0
    gate = xp.empty((tokens, gate_weight.shape[0] if gate_weight.ndim >= 1 else 0), gate_dtype, x)
    _C.projection_chain_with_gate_forward(xp.arg(x), xp.arg(weight), xp.arg(bias), widths, activations, taus,
                                          [xp.arg(o) for o in outputs], code, xp.arg(gate_weight), xp.arg(gate_bias),
                                          float(tau), xp.arg(gate), impl, xp.stream(x))
    return outputs, gate


def parse_low_rank_gate(spec, segment_count):
    """``(code segment index, weight, bias, tau, dtype name or None)`` from a
    ``low_rank_gate`` dict (see ``projection_chain``); a negative index counts from the end."""
    if not isinstance(spec, dict) or "weight" not in spec or set(spec) - {"segment", "weight", "bias", "tau", "dtype"}:
        got = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise _C.SeqmixError("seqmix.projection_chain: argument 'low_rank_gate': expected a dict with 'weight' and "
                             f"optional 'segment', 'bias', 'tau', 'dtype', got {got}")
    code = int(spec.get("segment", -1))
    if code < 0:
        code += segment_count
    if not 0 <= code < segment_count:
        raise _C.SeqmixError("seqmix.projection_chain: argument 'low_rank_gate': expected 'segment' the index of "
                             f"a segment (-{segment_count} to {segment_count - 1}), got {spec.get('segment')}")
    return code, spec["weight"], spec.get("bias"), float(spec.get("tau", 16.0)), _dtype_name(spec.get("dtype"))


def projection_backward(xp, x, weight, bias, widths, activations, taus, d_outputs, impl):
    """Returns (dx, dweight, dbias or None)."""
    dx, dweight = xp.empty_like(x), xp.empty_like(weight)
    dbias = None if bias is None else xp.empty_like(bias)
    _C.projection_chain_backward(xp.arg(x), xp.arg(weight), xp.arg(bias), widths, activations, taus,
                                 [xp.arg(d) for d in d_outputs], xp.arg(dx), xp.arg(dweight), xp.arg(dbias), impl,
                                 xp.stream(x))
    return dx, dweight, dbias


def output_shape(o, out_weight):
    """y's shape: o's leading dims (tokens, or B and T), then d_out."""
    d_out = out_weight.shape[0] if out_weight.ndim >= 1 else 0
    return (*o.shape[:-2], d_out)


def output_forward(xp, o, g, norm_weight, out_weight, eps, impl):
    y = xp.empty(output_shape(o, out_weight), xp.dtype(o), o)
    _C.output_chain_forward(xp.arg(o), xp.arg(g), xp.arg(norm_weight), xp.arg(out_weight), xp.arg(y), float(eps), impl,
                            xp.stream(o))
    return y


def output_backward(xp, o, g, norm_weight, out_weight, dy, eps, impl):
    """Returns (do, dg, dnorm_weight, dout_weight)."""
    d_o, dg = xp.empty_like(o), xp.empty_like(g)
    dnorm_weight, dout_weight = xp.empty_like(norm_weight), xp.empty_like(out_weight)
    _C.output_chain_backward(xp.arg(o), xp.arg(g), xp.arg(norm_weight), xp.arg(out_weight), xp.arg(dy),
                             xp.arg(d_o), xp.arg(dg), xp.arg(dnorm_weight), xp.arg(dout_weight), float(eps), impl,
                             xp.stream(o))
    return d_o, dg, dnorm_weight, dout_weight


def _flatten_tokens(x):
    """[..., d] -> [tokens, d] (rank <= 2 passes through, so validation sees the real rank)."""
    return x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x


def _unflatten_tokens(y, x):
    return y.reshape(*x.shape[:-1], y.shape[-1]) if x.ndim > 2 else y


def projection_chain(x, weight, segments, bias=None, impl="automatic", low_rank_gate=None):
    """One GEMM ``z = x @ weight.T + bias`` whose columns are split into segments, each
    activated and returned as its own array; optionally GLA's low-rank gate on one of them
    in the same call.

    Args:
        x: ``[..., d]`` inputs (leading dims are flattened into tokens and restored on
            every output); bf16, fp16, fp32 or fp64.
        weight: ``[W_total, d]`` in x's dtype (the nn.Linear convention: rows are output
            columns), typically ``torch.cat([W_q, W_k, W_v, W_g, ...])``.
        segments: consecutive column segments, widths summing to ``W_total``. Each is
            ``(width, activation)``, ``(width, activation, tau)`` or a dict with keys
            ``"width"``, ``"activation"`` (default ``"identity"``), ``"tau"`` (default 1),
            ``"dtype"`` (default: x's dtype; any floating dtype on the CPU, e.g.
            ``"float32"`` for a log-decay gate computed from bf16 inputs; numpy has no
            bfloat16) and ``"heads"`` (the output is returned as ``[..., heads,
            width / heads]``, the ``[B, T, H, D]`` layout of the mixers). A ``"name"`` key
            is allowed and ignored. Activations: ``"identity"``,
            ``"silu"``, ``"sigmoid"``, ``"logsigmoid"`` (``logsigmoid(z) / tau``, fla's GLA
            gate with ``gate_logit_normalizer = tau``; other activations need tau = 1) and
            ``"softplus"``.
        bias: optional ``[W_total]`` in x's dtype.
        impl: ``"automatic"``, ``"reference"`` (float64 oracle) or ``"fast"`` (float32
            blocked GEMM with the activation fused into its tile epilogue).
        low_rank_gate: optional dict: the second GEMM of GLA's low-rank gate on one identity
            segment u (the rank-r code), ``logsigmoid(u @ weight.T + bias) / tau``, computed
            in the same call (the result equals ``low_rank_gate(outputs[segment], ...)``).
            Keys: ``"weight"`` ``[width, r]`` in x's dtype (required), ``"segment"`` the
            code segment's index (default -1, the last), ``"bias"`` optional ``[width]``,
            ``"tau"`` (default 16), ``"dtype"`` the gate's dtype (default x's dtype). On a
            CUDA device the two calls' kernels run; with ``SEQMIX_CHAINS_GATE_EPILOGUE=1``
            (off by default, measured slower on the H100), for GLA's layout (bf16, the code
            last and starting on a multiple of 128 columns, a gate width that is a multiple
            of 32) the main GEMM computes the gate too, in each CTA's otherwise idle
            epilogue load warp.

    Returns:
        Without ``low_rank_gate``: a list with one ``[..., width]`` array per segment (``[..., heads, width / heads]``
        where the segment names its heads), in the segment's dtype. On the CPU each is
        contiguous. On a CUDA device (bf16 x and weight; segments bf16 or float32) the
        segments are column views of one ``[..., W_total]`` buffer written by a single
        fused GEMM; consecutive float32 segments share a buffer of their own, written by a
        second GEMM over their columns. There W_total and d must be multiples of 8, and a
        float32 run must start at a multiple of 8 columns and span a multiple of 4.
        With ``low_rank_gate``: ``(that list, gate [..., width])``; the code segment stays
        in the list (the gate's backward reads it).

    The backward (torch autograd, or ``projection_chain_backward``) recomputes the
    pre-activation ``x @ weight.T + bias`` rather than storing it, and gives gradients for
    x, weight and bias. numpy arrays give numpy results; torch tensors go through
    ``seqmix.torch`` custom ops (autograd, torch.compile).
    """
    if is_torch(x):
        return torch_module("chains").projection_chain(x, weight, segments, bias, impl, low_rank_gate)
    widths, activations, taus, dtypes = parse_segments(segments)
    dtypes = [x.dtype if d is None else _numpy_dtype(d) for d in dtypes]
    if low_rank_gate is None:
        outputs = projection_forward(NUMPY, _flatten_tokens(x), weight, bias, widths, activations, taus, dtypes, impl)
        return split_heads([_unflatten_tokens(y, x) for y in outputs], segment_heads(segments))
    code, gate_weight, gate_bias, tau, gate_dtype = parse_low_rank_gate(low_rank_gate, len(widths))
    outputs, gate = projection_with_gate_forward(NUMPY, _flatten_tokens(x), weight, bias, widths, activations, taus,
                                                 dtypes, code, gate_weight, gate_bias, tau,
                                                 x.dtype if gate_dtype is None else _numpy_dtype(gate_dtype), impl)
    return (split_heads([_unflatten_tokens(y, x) for y in outputs], segment_heads(segments)),
            _unflatten_tokens(gate, x))


def low_rank_gate(u, weight, bias=None, tau=16.0, dtype=None, impl="automatic"):
    """The second GEMM of GLA's low-rank gate (fla's ``gk_proj[1]`` followed by
    ``logsigmoid(·) / gate_logit_normalizer``), as a projection chain with one segment:
    ``logsigmoid(u @ weight.T + bias) / tau``.

    Args:
        u: ``[..., r]`` the rank-r code (r = 16 in GLA), e.g. an identity segment of the
            layer's main projection chain.
        weight: ``[H*K, r]``; bias: optional ``[H*K]``; both in u's dtype.
        tau: the gate normaliser (> 0), 16 in fla's GLA.
        dtype: the gate's dtype (default: u's dtype); ``"float32"`` keeps the log decays exact.
        impl: as for ``projection_chain``.

    Returns:
        ``[..., H*K]`` log decays (<= 0), differentiable in u, weight and bias for torch.
        Reshape to ``[B, T, H, K]`` for ``chunk_gla``.
    """
    width = weight.shape[0]
    segment = {"width": width, "activation": "logsigmoid", "tau": tau, "dtype": dtype}
    return projection_chain(u, weight, [segment], bias, impl)[0]


def projection_chain_backward(x, weight, d_outputs, segments, bias=None, impl="automatic"):
    """Gradients of ``projection_chain`` for numpy arrays: ``(dx, dweight, dbias)`` with
    ``dbias`` None when no bias is given. ``d_outputs`` holds one ``[..., width]`` array per
    segment (same leading dims as x); the gradients have x's dtype."""
    widths, activations, taus, _ = parse_segments(segments)
    d_flat = [d.reshape(-1, d.shape[-1]) if x.ndim > 2 else d for d in d_outputs]
    dx, dweight, dbias = projection_backward(NUMPY, _flatten_tokens(x), weight, bias, widths, activations, taus,
                                             d_flat, impl)
    return dx.reshape(x.shape), dweight, dbias


def output_chain(o, g, norm_weight, out_weight, eps=1e-5, impl="automatic"):
    """Per-head RMSNorm, SiLU output gate and output projection, fused (fla's
    ``FusedRMSNormGated`` followed by ``o_proj``):
    ``y = (o / sqrt(mean(o**2, -1) + eps) * norm_weight * silu(g)).reshape(tokens, H*Dv) @ out_weight.T``.

    Args:
        o: ``[tokens, H, Dv]`` or ``[B, T, H, Dv]`` the mixer's output; bf16, fp16, fp32 or fp64.
        g: the output gate, same shape and dtype as o (SiLU is applied here).
        norm_weight: ``[Dv]`` RMSNorm scale shared by the heads, o's dtype.
        out_weight: ``[d_out, H*Dv]`` o_proj weight (nn.Linear convention, no bias), o's dtype.
        eps: added to the mean square (> 0).
        impl: ``"automatic"``, ``"reference"`` (float64 oracle) or ``"fast"`` (float32 GEMM;
            on a CUDA device the bf16 kernels: a norm-gate kernel writing the bf16 GEMM
            operand, then the sm90 GEMM; H*Dv and d_out multiples of 8).

    Returns:
        ``y`` ``[tokens, d_out]`` (``[B, T, d_out]`` for rank-4 o) in o's dtype. torch
        tensors are differentiable in o, g, norm_weight and out_weight (the normalised
        gated heads are recomputed in the backward, not stored).
    """
    if is_torch(o):
        return torch_module("chains").output_chain(o, g, norm_weight, out_weight, eps, impl)
    return output_forward(NUMPY, o, g, norm_weight, out_weight, eps, impl)


def output_chain_backward(o, g, norm_weight, out_weight, dy, eps=1e-5, impl="automatic"):
    """Gradients of ``output_chain`` for numpy arrays: ``(do, dg, dnorm_weight, dout_weight)``
    from ``dy`` (y's shape, o's dtype)."""
    return output_backward(NUMPY, o, g, norm_weight, out_weight, dy, eps, impl)
