"""GPU cases of the projection and output chains (issue 6's shapes): seqmix's fused GEMMs
against the bare cuBLAS GEMM of the same total width, the unfused chain in PyTorch eager
and under torch.compile, on the same inputs.

Every builder takes ``device`` and ``dtype`` so the same cases run on CPU tensors with tiny
shapes in the tests (seqmix's CPU path then stands in for the CUDA one).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import seqmix

from .case import Case, Method

REFERENCE_TOKENS = 512  # leading tokens the float64 forward reference covers (rows are independent)
GLA_TAU = 16.0          # fla's gate_logit_normalizer

# (name, width, activation) of each layer's input projection, d = 2048.
#   GLA (fla defaults: expand_k 0.5, expand_v 1): q, k 1024; v, g 2048; the low-rank gate's
#   code 16, whose second GEMM 16 -> 1024 has the logsigmoid / 16 epilogue.
#   Gated DeltaNet (H 16, K 128, V 256: v and g 2x wider): q, k 2048; v, g 4096; the decay
#   input a (softplus) and beta (sigmoid), one column per head.
LAYERS = {
    "gla": [("q", 1024, "identity"), ("k", 1024, "identity"), ("v", 2048, "identity"), ("g", 2048, "identity"),
            ("gk_code", 16, "identity")],
    "gated_deltanet": [("q", 2048, "identity"), ("k", 2048, "identity"), ("v", 4096, "identity"),
                       ("g", 4096, "identity"), ("a", 16, "softplus"), ("beta", 16, "sigmoid")],
}
LOW_RANK = {"gla": 1024}  # layers whose code segment feeds a low-rank gate of this width
# Output chain per layer: heads, head dim of o and g, d_out.
OUTPUTS = {"gla": (4, 512, 2048), "gated_deltanet": (16, 256, 2048)}

_ACT = {"identity": lambda z: z, "silu": F.silu, "sigmoid": torch.sigmoid, "softplus": F.softplus}


def _dtype_name(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))


# ---- projection chain ----


def unfused_projection(layer, x, weight, gate_weight):
    """The chain as a PyTorch model writes it: one nn.Linear per projection (slices of the
    concatenated weight, one split node), then each activation; GLA's low-rank gate as a
    second Linear and logsigmoid / 16."""
    spec = LAYERS[layer]
    outputs = []
    for (name, _, activation), w in zip(spec, weight.split([s[1] for s in spec])):
        z = F.linear(x, w)
        if name == "gk_code":
            outputs.append(F.logsigmoid(F.linear(z, gate_weight)) / GLA_TAU)
        else:
            outputs.append(_ACT[activation](z))
    return outputs


def seqmix_projection(layer, x, weight, gate_weight):
    """The chain through seqmix: one fused GEMM (every activation in its epilogue, the
    segments column views of one buffer), and for GLA the low-rank gate's second GEMM on the
    code segment in the same call (``low_rank_gate=``)."""
    spec = LAYERS[layer]
    segments = [(width, activation) for _, width, activation in spec]
    if layer not in LOW_RANK:
        return seqmix.projection_chain(x, weight, segments)
    gate_spec = {"weight": gate_weight, "tau": GLA_TAU}
    outputs, gate = seqmix.projection_chain(x, weight, segments, low_rank_gate=gate_spec)
    return [*outputs[:-1], gate]


@functools.lru_cache(maxsize=None)
def _compiled_projection(layer):
    return torch.compile(functools.partial(unfused_projection, layer))


def projection_flops(layer, tokens, d=2048) -> dict:
    width = sum(s[1] for s in LAYERS[layer])
    fwd = 2 * tokens * width * d + 2 * tokens * 16 * LOW_RANK.get(layer, 0)
    return {"fwd": fwd, "bwd": 2 * fwd, "fwd+bwd": 3 * fwd}


PROJECTION_NOTES = (
    "Inputs: x [tokens, 2048] standard normal, the concatenated weight [W_total, 2048] normal / sqrt(2048) "
    "(pre-activations of unit scale); GLA's low-rank gate weight [1024, 16] normal / 4.",
    "Layers: **gla** q, k 1024; v, g 2048; low-rank code 16 (identity), then its second GEMM 16 → 1024 with "
    "logsigmoid / 16 (W_total 6160); **gated_deltanet** q, k 2048; v, g 4096; a 16 softplus; beta 16 sigmoid "
    "(W_total 12320).",
    "Methods: **seqmix** `seqmix.projection_chain` (one CUTLASS sm90 GEMM, activations in its epilogue, segments "
    "written as column views of one buffer), for GLA with the low-rank gate in the same call (`low_rank_gate=`); "
    "**cuBLAS GEMM** `torch.matmul` of the whole width (forward only: no activations, no second GEMM); **eager** "
    "one `F.linear` per projection on slices of the same weight, then each activation; **torch.compile** of that "
    "eager chain.",
    "Work: 2·tokens·W_total·d FLOP (+ the low-rank GEMM) forward, twice that backward. max rel err: the outputs "
    f"on the first {REFERENCE_TOKENS} tokens against float64 on the same bf16 inputs (the cuBLAS row against "
    "float64 x·Wᵀ). Gradients are compared with the oracle by the GPU tests, not here.",
)


def projection_case(layer, tokens, device="cuda", dtype=torch.bfloat16, seed=0, d=2048) -> Case:
    spec = LAYERS[layer]
    width = sum(s[1] for s in spec)
    n = min(tokens, REFERENCE_TOKENS)

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)

        def randn(*shape, s=1.0):
            return (torch.randn(shape, generator=gen, device=device) * s).to(dtype).requires_grad_()

        x, weight, gate_weight = randn(tokens, d), randn(width, d, s=d ** -0.5), randn(LOW_RANK.get(layer, 8), 16,
                                                                                       s=0.25)
        outputs = unfused_projection(layer, x.detach(), weight.detach(), gate_weight.detach())
        dy = [torch.randn(y.shape, generator=gen, device=device).to(dtype) for y in outputs]
        leaves = [x, weight] + ([gate_weight] if layer in LOW_RANK else [])
        return {"leaves": leaves, "dy": dy, "gate_weight": gate_weight}

    def gate(inputs):
        return inputs["gate_weight"]

    def references(inputs, name):
        x, weight = (t.detach()[:n].double() if i == 0 else t.detach().double()
                     for i, t in enumerate(inputs["leaves"][:2]))
        no_grads = [None] * len(inputs["leaves"])  # gradients: the GPU tests compare them with the oracle
        if name == "gemm":
            return x @ weight.t(), no_grads
        return torch.cat(unfused_projection(layer, x, weight, gate(inputs).detach().double()), dim=-1), no_grads

    def observe(inputs, y, grads):
        return (None if y is None else torch.cat([t[:n] for t in y], dim=-1)), grads and [None] * len(grads)

    work = projection_flops(layer, tokens, d)
    methods = [
        Method("seqmix", lambda i: seqmix_projection(layer, i["leaves"][0], i["leaves"][1], gate(i)), work),
        # The floor of the fused forward: no activations, no second GEMM, no layouts.
        Method("cuBLAS GEMM", lambda i: [torch.matmul(i["leaves"][0], i["leaves"][1].t())], work, reference="gemm",
               baseline=True, directions=("fwd",)),
        Method("eager", lambda i: unfused_projection(layer, i["leaves"][0], i["leaves"][1], gate(i)), work,
               baseline=True),
        Method("torch.compile", lambda i: _compiled_projection(layer)(i["leaves"][0], i["leaves"][1], gate(i)),
               work, baseline=True),
    ]
    shape = f"{layer} tokens {tokens} d {d} W {width} {_dtype_name(dtype)}"
    return Case("chains", "projection_chain", shape, {"layer": layer, "T": tokens, "d": d, "W": width}, make_inputs,
                methods, references, observe, unit="TFLOP/s", speedup_over=("cuBLAS GEMM", "eager", "torch.compile"),
                headline=("seqmix", "eager"), tolerance=1e-2, notes=PROJECTION_NOTES, plot="speedup_vs_T")


# ---- output chain ----


def unfused_output(o, g, norm_weight, out_weight, eps=1e-5):
    """fla's FusedRMSNormGated then o_proj, unfused: RMSNorm over each head, times SiLU(g),
    heads flattened, then the Linear."""
    u = F.rms_norm(o, (o.shape[-1],), norm_weight, eps) * F.silu(g)
    return F.linear(u.flatten(-2), out_weight)


@functools.lru_cache(maxsize=None)
def _compiled_output():
    return torch.compile(unfused_output)


OUTPUT_NOTES = (
    "Inputs: o, g [tokens, H, Dv] standard normal, norm weight 1 + 0.1·normal, out weight [2048, H·Dv] normal / "
    "sqrt(H·Dv). Layers: **gla** H 4, Dv 512; **gated_deltanet** H 16, Dv 256.",
    "Methods: **seqmix** `seqmix.output_chain` (a norm-gate kernel writing the bf16 GEMM operand, then the sm90 "
    "GEMM; the backward recomputes it); **eager** `F.rms_norm(o)·F.silu(g)` then `F.linear`; **torch.compile** of "
    "that.",
    f"Work: 2·tokens·H·Dv·d_out FLOP forward, twice that backward. max rel err: y on the first {REFERENCE_TOKENS} "
    "tokens against float64.",
)


def output_case(layer, tokens, device="cuda", dtype=torch.bfloat16, seed=0) -> Case:
    H, Dv, d_out = OUTPUTS[layer]
    n = min(tokens, REFERENCE_TOKENS)

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)

        def randn(*shape, s=1.0, shift=0.0):
            return (torch.randn(shape, generator=gen, device=device) * s + shift).to(dtype).requires_grad_()

        leaves = [randn(tokens, H, Dv), randn(tokens, H, Dv), randn(Dv, s=0.1, shift=1.0),
                  randn(d_out, H * Dv, s=(H * Dv) ** -0.5)]
        dy = torch.randn((tokens, d_out), generator=gen, device=device).to(dtype)
        return {"leaves": leaves, "dy": dy}

    def references(inputs, name):
        o, g, w, ow = (t.detach().double() for t in inputs["leaves"])
        return unfused_output(o[:n], g[:n], w, ow), [None] * 4

    def observe(inputs, y, grads):
        return (None if y is None else y[:n]), grads and [None] * 4

    flops = 2 * tokens * H * Dv * d_out
    work = {"fwd": flops, "bwd": 2 * flops, "fwd+bwd": 3 * flops}
    methods = [
        Method("seqmix", lambda i: seqmix.output_chain(*i["leaves"]), work),
        Method("eager", lambda i: unfused_output(*i["leaves"]), work, baseline=True),
        Method("torch.compile", lambda i: _compiled_output()(*i["leaves"]), work, baseline=True),
    ]
    shape = f"{layer} tokens {tokens} H {H} Dv {Dv} d_out {d_out} {_dtype_name(dtype)}"
    return Case("chains", "output_chain", shape, {"layer": layer, "T": tokens, "H": H, "Dv": Dv, "d_out": d_out},
                make_inputs, methods, references, observe, unit="TFLOP/s", speedup_over=("eager", "torch.compile"),
                headline=("seqmix", "eager"), tolerance=1e-2, notes=OUTPUT_NOTES, plot="speedup_vs_T")


def cases(quick: bool = False) -> list:
    """Both layers' projection and output chains, bf16 on the current CUDA device, at issue
    6's token counts 2048, 8192 and 32768. The quick suite runs them all too: each case takes
    seconds, and the acceptance holds at every token count. ``quick`` is accepted for the
    suite's signature."""
    del quick
    token_counts = (2048, 8192, 32768)
    return ([projection_case(layer, t) for layer in LAYERS for t in token_counts]
            + [output_case(layer, t) for layer in OUTPUTS for t in token_counts])
