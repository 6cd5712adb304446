"""GPU cases of the gated scan: the scan kernel against fla and PyTorch, and one layer of
a gated-scan seed (projection GEMM, scan, output gate) fused two ways.

Every builder takes ``device`` and ``dtype`` so the same cases run on CPU tensors with
tiny shapes in the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import seqmix

from .case import Case, Method

REFERENCE_BATCHES = 2      # sequences the float64 references cover
REFERENCE_CHANNELS = 256   # channels the scan kernel's reference covers


# --- the formulations ----------------------------------------------------------------

def sequential_scan(factor, b, z=None):
    """The definition token by token (the float64 reference): h_t = f_t·h_{t−1} + b_t,
    y_t = h_t·SiLU(z_t). ``factor``, ``b``, ``z``: [B, T, D]."""
    h, hs = torch.zeros_like(b[:, 0]), []
    for f_t, b_t in zip(factor.unbind(1), b.unbind(1)):
        h = f_t * h + b_t
        hs.append(h)
    y = torch.stack(hs, 1)
    return y if z is None else y * F.silu(z)


def eager_scan(a, b, z):
    """The gated scan as a PyTorch user writes it without a scan kernel, in float32:
    L = cumsum(a), h_t = exp(L_t)·Σ_{s≤t} b_s·exp(−L_s), y = h·SiLU(z), with a the log
    decay. Exact algebra, but exp(±L) over/underflows once |L| passes ~88 (long T or
    strong decays), so the bench keeps decays mild."""
    L = a.float().cumsum(1)
    h = L.exp() * (b.float() * (-L).exp()).cumsum(1)
    return (h * F.silu(z.float())).to(b.dtype)


def semi_fused_layer(x, W):
    """u = x·Wᵀ (cuBLAS), then one seqmix.gated_scan reading a, b, z as strided column
    blocks of u (no copies) with decay sigmoid(a) and the SiLU gate fused.
    x: [B, T, d], W: [3·dv, d] -> y [B, T, dv]."""
    dv = W.shape[0] // 3
    u = x @ W.T
    return seqmix.gated_scan(u[..., :dv], u[..., dv:2 * dv], u[..., 2 * dv:], decay="logit")


def three_kernel_layer(x, W):
    """The same layer unfused: GEMM, seqmix.gated_scan without gate, then h·SiLU(z) in eager."""
    dv = W.shape[0] // 3
    u = x @ W.T
    h = seqmix.gated_scan(u[..., :dv], u[..., dv:2 * dv], decay="logit")
    return h * F.silu(u[..., 2 * dv:])


_COMPILED = {}


def compiled(fn):
    """torch.compile(fn) in its default mode, made once per function so that every case
    shares one compile cache (later shapes reuse the dynamic-shape graph)."""
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn)
    return _COMPILED[fn]


def fla_chunk_hgrn(a, b):
    """fla's chunk_hgrn(x=b, g=a): h_t = exp(g_t)·h_{t−1} + x_t (no output gate)."""
    try:
        from fla.ops.hgrn import chunk_hgrn
    except Exception as e:  # absent, or its Triton stack fails to import here
        raise RuntimeError(f"fla is not importable ({type(e).__name__}: {e})") from e
    return chunk_hgrn(x=b, g=a)[0]


def _randn(shape, gen, device, dtype, scale=1.0):
    return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)


def _dtype_name(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))


def _leaf(t):
    return t.requires_grad_()


def _float64_copy(t):
    return t.detach().to(torch.float64, copy=True)


# --- case a: the scan kernel -----------------------------------------------------------

SCAN_NOTES = (
    "Inputs bf16 [B, T, D]: a = log decay uniform in [−0.05, 0) (`decay=\"log\"`: the factor is exp(a)), "
    "b, z and dy standard normal.",
    "Methods: **seqmix** `gated_scan(a, b, z, decay=\"log\")` (SiLU gate fused); **seqmix no gate** "
    "`gated_scan(a, b, decay=\"log\")`; **fla chunk_hgrn** `chunk_hgrn(x=b, g=a)`, h_t = exp(g_t)·h_{t−1} + x_t, "
    "the same op as *seqmix no gate* and checked against its reference; **torch eager** L = cumsum(a), "
    "h = exp(L)·cumsum(b·exp(−L)), y = h·SiLU(z) in float32 (exp(±L) over/underflows for long T or strong "
    "decays, hence the mild decays); **torch.compile** the same function compiled (default mode).",
    "Bytes that must move, N = B·T·D elements of 2 bytes: fwd with gate 4·N·2 (read a, b, z; write y), "
    "without gate 3·N·2; bwd with gate 7·N·2 (read a, b, z, dy; write da, db, dz), without gate 5·N·2; "
    "fwd+bwd the sum. GB/s = bytes / median time; % of the measured copy bandwidth.",
    f"max rel err: ‖out − ref‖/‖ref‖ on the first {REFERENCE_BATCHES} sequences × first "
    f"{REFERENCE_CHANNELS} channels, against a float64 token-by-token loop on the same bf16 inputs "
    "(not the cumsum trick, which has its own error): y for fwd; da, db (and dz with the gate) for bwd; "
    "all of them for fwd+bwd.",
)


def scan_bytes(B, T, D, gate: bool, itemsize=2) -> dict:
    """The fewest bytes each direction of the scan must move."""
    n = B * T * D * itemsize
    fwd, bwd = (4 * n, 7 * n) if gate else (3 * n, 5 * n)
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}


def scan_case(B, T, D, device="cuda", dtype=torch.bfloat16, seed=0) -> Case:
    """The scan kernel on [B, T, D]: seqmix (with and without gate), fla, torch eager and
    torch.compile, forward, backward and both."""
    ref_slice = (slice(0, REFERENCE_BATCHES), slice(None), slice(0, REFERENCE_CHANNELS))

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)
        a = (-0.05 * (1 - torch.rand((B, T, D), generator=gen, device=device))).to(dtype)
        b, z, dy = (_randn((B, T, D), gen, device, dtype) for _ in range(3))
        return {"leaves": [_leaf(a), _leaf(b), _leaf(z)], "dy": dy}

    def references(inputs, name):
        gated = name == "gated"
        a, b, z = (_float64_copy(t[ref_slice]).requires_grad_() for t in inputs["leaves"])
        y = sequential_scan(a.exp(), b, z if gated else None)
        y.backward(_float64_copy(inputs["dy"][ref_slice]))
        return y.detach(), [a.grad, b.grad, z.grad if gated else None]

    def observe(inputs, y, grads):
        def cut(t):
            return None if t is None else t[ref_slice]

        return cut(y), None if grads is None else [cut(g) for g in grads]

    def seqmix_method(gate):
        def run(x):
            a, b, z = x["leaves"]
            return seqmix.gated_scan(a, b, z if gate else None, decay="log")

        return Method("seqmix" if gate else "seqmix no gate", run, scan_bytes(B, T, D, gate),
                      reference="gated" if gate else "no gate")

    gated = scan_bytes(B, T, D, gate=True)
    methods = [
        seqmix_method(gate=True),
        seqmix_method(gate=False),
        Method("fla chunk_hgrn", lambda x: fla_chunk_hgrn(*x["leaves"][:2]), scan_bytes(B, T, D, False),
               reference="no gate", baseline=True),
        Method("torch eager", lambda x: eager_scan(*x["leaves"]), gated, reference="gated", baseline=True),
        Method("torch.compile", lambda x: compiled(eager_scan)(*x["leaves"]), gated, reference="gated",
               baseline=True),
    ]
    shape = f"B{B} T{T} D{D} {_dtype_name(dtype)}"
    return Case("gated_scan", "scan kernel", shape, {"B": B, "T": T, "D": D}, make_inputs, methods,
                references, observe, speedup_over=("fla chunk_hgrn", "torch eager", "torch.compile"),
                tolerance=1e-2, notes=SCAN_NOTES, plot="bandwidth")


# --- case b: one semi-fused layer ------------------------------------------------------

LAYER_D, LAYER_DV = 256, 64

LAYER_NOTES = (
    f"One layer of a gated-scan seed: x [B·T, d = {LAYER_D}] bf16, W [3·dv, d] with dv = {LAYER_DV}; "
    "u = x·Wᵀ (torch.matmul, cuBLAS) viewed as [B, T, 3·dv]; a, b, z its three dv-column blocks; "
    "y = scan(factor sigmoid(a), input b)·SiLU(z), `decay=\"logit\"`. x, dy standard normal, W normal / √d.",
    "Methods: **seqmix semi-fused** GEMM, then one `seqmix.gated_scan(a, b, z, decay=\"logit\")` reading "
    "a, b, z as strided column views of u (no copies); **three-kernel** GEMM, `seqmix.gated_scan(a, b, "
    "decay=\"logit\")` without gate, then h·SiLU(z) in eager PyTorch; **torch.compile unfused** the "
    "three-kernel layer compiled (default mode; the scan stays seqmix's custom op); **seqmix fused layer** "
    "`seqmix.gated_scan_layer(x, W)`: GEMM, scan and gate in one kernel when its grid (B · ⌈T/64⌉ · ⌈dv/16⌉ "
    "CTAs) fits on the GPU at once, else the semi-fused form; its backward recomputes u and runs the scan's "
    "backward.",
    "Bytes that must move (the fewest: u need not leave the chip): fwd 2·(B·T·(d + dv) + 3·dv·d) "
    "(read x and W, write y); fwd+bwd adds 2·(B·T·(2·d + dv) + 2·3·dv·d) (read x, dy and W, write dx "
    "and dW). GB/s = bytes / median time; % of the measured copy bandwidth.",
    f"max rel err: against a float64 token-by-token loop on the first min(B, {REFERENCE_BATCHES}) sequences "
    "(all dv channels) from the same bf16 x and W, with u in float64: y for fwd, y and dx for fwd+bwd "
    "(dW sums over every sequence and is not checked). The bound, 2e-2, covers the bf16 rounding of u.",
    "The GPU work of the smaller shapes takes a few tens of µs, less than the host's time to issue the calls: "
    "there the event times (ms) mostly measure Python and PyTorch, and the graph replays (ms (graph)) compare "
    "the kernels.",
)


def layer_bytes(B, T, d=LAYER_D, dv=LAYER_DV, itemsize=2) -> dict:
    """The fewest bytes the layer must move, forward and forward plus backward."""
    fwd = itemsize * (B * T * (d + dv) + 3 * dv * d)
    bwd = itemsize * (B * T * (2 * d + dv) + 2 * 3 * dv * d)
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}


def layer_case(B, T, d=LAYER_D, dv=LAYER_DV, device="cuda", dtype=torch.bfloat16, seed=0) -> Case:
    """The layer on B sequences of T tokens: fused and semi-fused against three-kernel and compiled."""
    n = min(B, REFERENCE_BATCHES)

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)
        x = _randn((B * T, d), gen, device, dtype)
        W = _randn((3 * dv, d), gen, device, dtype, scale=d**-0.5)
        return {"leaves": [_leaf(x), _leaf(W)], "dy": _randn((B, T, dv), gen, device, dtype)}

    def references(inputs, name):
        x, W = inputs["leaves"]
        x = _float64_copy(x[: n * T]).requires_grad_()
        u = (x @ _float64_copy(W).T).view(n, T, 3 * dv)
        y = sequential_scan(u[..., :dv].sigmoid(), u[..., dv:2 * dv], u[..., 2 * dv:])
        y.backward(_float64_copy(inputs["dy"][:n]))
        return y.detach(), [x.grad, None]

    def observe(inputs, y, grads):
        return (None if y is None else y[:n],
                None if grads is None else [None if grads[0] is None else grads[0][: n * T], grads[1]])

    def layer(fn):
        return lambda x: fn(x["leaves"][0].view(B, T, d), x["leaves"][1])

    work = layer_bytes(B, T, d, dv)
    methods = [
        Method("seqmix fused layer", layer(seqmix.gated_scan_layer), work),
        Method("seqmix semi-fused", layer(semi_fused_layer), work),
        Method("three-kernel", layer(three_kernel_layer), work),
        Method("torch.compile unfused", layer(lambda x, W: compiled(three_kernel_layer)(x, W)), work,
               baseline=True),
    ]
    shape = f"B{B} T{T} d{d} dv{dv} {_dtype_name(dtype)}"
    return Case("gated_scan", "semi-fused layer", shape, {"B": B, "T": T}, make_inputs, methods,
                references, observe, directions=("fwd", "fwd+bwd"),
                speedup_over=("three-kernel", "torch.compile unfused"), headline=("seqmix fused layer", "three-kernel"),
                tolerance=2e-2, notes=LAYER_NOTES, plot="speedup_vs_T")


def cases(quick: bool = False) -> list:
    """The gated-scan cases of the GPU suite (bf16 on the current CUDA device)."""
    scan_batches = (4,) if quick else (4, 16)
    layer_shapes = ((4, 2048), (16, 512)) if quick else [(B, T) for B in (1, 4, 16) for T in (512, 2048, 8192)]
    return [scan_case(B, 2048, 4096) for B in scan_batches] + [layer_case(B, T) for B, T in layer_shapes]
