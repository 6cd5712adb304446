"""GPU cases of the dense linear recurrence h_t = A_t h_{t−1} + b_t: seqmix's four methods
(and its automatic choice) against the PyTorch formulations a user writes without a
kernel — a loop of batched matrix products, and a Hillis–Steele scan of the affine maps
with batched matrix products.

Every builder takes ``device`` and ``dtype`` so the same cases run on CPU tensors with
tiny shapes in the tests.
"""

from __future__ import annotations

import torch

import seqmix

from .case import Case, Method

REFERENCE_GROUPS = 1  # groups the float64 reference covers (the whole length T)
METHODS = ("sequential", "chunked", "scan", "cyclic_reduction", "auto")


# --- the formulations ----------------------------------------------------------------

def torch_loop(A, b):
    """The definition step by step with torch.bmm: A [G, T, n, n], b [G, T, n, m]."""
    h, hs = torch.zeros_like(b[:, 0]), []
    for t in range(A.shape[1]):
        h = torch.baddbmm(b[:, t], A[:, t], h)
        hs.append(h)
    return torch.stack(hs, 1)


def torch_hillis_steele(A, b):
    """Hillis–Steele prefix scan of the affine maps (A_t, b_t) with batched matrix
    products: round d composes every map with the one d steps back (log2 T rounds of
    T products of n×n matrices), then the offsets are the states (zero start)."""
    G, T, n, m = b.shape
    M, v = A, b
    d = 1
    while d < T:
        M_back, v_back = M[:, :-d], v[:, :-d]
        M_new = torch.matmul(M[:, d:], M_back)
        v_new = torch.baddbmm(v[:, d:].reshape(-1, n, m), M[:, d:].reshape(-1, n, n),
                              v_back.reshape(-1, n, m)).view(G, T - d, n, m)
        M = torch.cat([M[:, :d], M_new], 1)
        v = torch.cat([v[:, :d], v_new], 1)
        d *= 2
    return v


def _dtype_name(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))


def recurrence_bytes(G, T, n, m, itemsize) -> dict:
    """The fewest bytes each direction must move: fwd reads A, b and writes h; bwd reads
    A, b, dh and writes dA, db."""
    maps, states = G * T * n * n * itemsize, G * T * n * m * itemsize
    fwd, bwd = maps + 2 * states, 2 * maps + 3 * states
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}


NOTES = (
    "Inputs [G, T, n, n] transitions with iid entries uniform in ±1.2/√n (spectral radius about 0.7), "
    "b and dh standard normal; zero initial state.",
    "Methods: **seqmix <method>** `seqmix.linear_recurrence(A, b, method=...)` (sequential: one block per "
    "group and 8 state columns walks T steps with the transitions streamed through shared memory; chunked: "
    "chunk-local prefix maps, the sequential kernel over chunk summaries, then h = P·start + local; scan: "
    "Hillis–Steele over the affine maps; cyclic_reduction: odd–even elimination in place); **torch loop** "
    "`baddbmm` step by step; **torch Hillis–Steele** the prefix scan with batched matrix products.",
    "Bytes that must move: fwd (A + b + h), bwd (A + b + dh + dA + db), each read or written once; GB/s = "
    "bytes / median time, % of the measured copy bandwidth.",
    f"max rel err: ‖out − ref‖/‖ref‖ on the first {REFERENCE_GROUPS} group(s) against a float64 step-by-step "
    "loop on the same stored inputs: h for fwd; dA, db for bwd.",
)


def recurrence_case(G, T, n, m, device="cuda", dtype=torch.float32, baselines=True, seed=0) -> Case:
    """The recurrence on [G, T, n, m]: every seqmix method, and the PyTorch baselines."""
    ref = slice(0, REFERENCE_GROUPS)

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)
        scale = 1.2 / n**0.5
        A = ((torch.rand((G, T, n, n), generator=gen, device=device) * 2 - 1) * scale).to(dtype)
        b = torch.randn((G, T, n, m), generator=gen, device=device).to(dtype)
        dy = torch.randn((G, T, n, m), generator=gen, device=device).to(dtype)
        return {"leaves": [A.requires_grad_(), b.requires_grad_()], "dy": dy}

    def references(inputs, name):
        A, b = (t[ref].detach().to(torch.float64).requires_grad_() for t in inputs["leaves"])
        h = torch_loop(A, b)
        h.backward(inputs["dy"][ref].to(torch.float64))
        return h.detach(), [A.grad, b.grad]

    def observe(inputs, y, grads):
        return (None if y is None else y[ref],
                None if grads is None else [None if g is None else g[ref] for g in grads])

    work = recurrence_bytes(G, T, n, m, torch.empty((), dtype=dtype).element_size())
    methods = [Method(f"seqmix {name}", (lambda name: lambda x: seqmix.linear_recurrence(*x["leaves"], method=name))(name),
                      work) for name in METHODS]
    if baselines:
        # Forward only: the acceptance compares forwards, and the loop's backward through
        # autograd took ~6 s a repetition at G16 T4096 n64 on the H100 machine.
        methods += [Method("torch Hillis–Steele", lambda x: torch_hillis_steele(*x["leaves"]), work, baseline=True,
                           directions=("fwd",)),
                    Method("torch loop", lambda x: torch_loop(*x["leaves"]), work, baseline=True,
                           directions=("fwd",))]
    shape = f"G{G} T{T} n{n} m{m} {_dtype_name(dtype)}"
    return Case("linear_recurrence", "dense recurrence", shape, {"G": G, "T": T, "n": n, "m": m}, make_inputs,
                methods, references, observe,
                speedup_over=("torch Hillis–Steele", "torch loop") if baselines else (),
                headline=("seqmix auto", "torch Hillis–Steele") if baselines else None,
                tolerance=1e-2, notes=NOTES, plot="bandwidth")


def cases(quick: bool = False) -> list:
    """The dense-recurrence cases of the GPU suite (the acceptance shape with the PyTorch
    baselines; the rest of the grid against each other)."""
    if quick:
        return [recurrence_case(16, 4096, 64, 1),
                recurrence_case(1, 4096, 64, 1, baselines=False),
                recurrence_case(16, 4096, 64, 1, dtype=torch.bfloat16, baselines=False)]
    grid = [recurrence_case(16, 4096, 64, 1)]
    for dtype in (torch.float32, torch.bfloat16):
        for G in (1, 16, 64):
            for n in (32, 64, 128):
                for m in (1, 64):
                    for T in (1024, 4096):
                        if (G, T, n, m, dtype) != (16, 4096, 64, 1, torch.float32) and G * T * n * n * (n + m) <= 2**34:
                            grid.append(recurrence_case(G, T, n, m, dtype=dtype, baselines=False))
    return grid
