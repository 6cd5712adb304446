"""GPU cases of the dense linear recurrence h_t = A_t h_{t−1} + b_t: seqmix's four methods
(and its automatic choice) against the PyTorch formulations a user writes without a
kernel — a loop of batched matrix products, and a Hillis–Steele scan of the affine maps
with batched matrix products.

Every builder takes ``device`` and ``dtype`` so the same cases run on CPU tensors with
tiny shapes in the tests.
"""

from __future__ import annotations

import math
import sys
import time

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
    "Full suite: a method whose forward is slow (predicted, or measured by its first call) is timed with a few "
    "repetitions when the case's inputs are made (CUDA events, L2 flushed, median) instead of the suite's 50 + 5: "
    "its forward ms is the case parameter `fwd_ms_few` (and for auto its backward ms `bwd_ms_few`), and it has "
    "no row; stderr says which and why.",
)


FEW_REPS = 3  # repetitions of a method timed in the probe (the full suite's slow entries)
_few_timer = None


def _timer():
    """One CUDA-event timer (with its L2-flush buffer) for the probes of this process."""
    global _few_timer
    if _few_timer is None:
        from .timing import CudaTimer, flush_bytes

        _few_timer = CudaTimer(torch, flush_bytes(torch))
    return _few_timer


def recurrence_case(G, T, n, m, device="cuda", dtype=torch.float32, baselines=True, seed=0,
                    methods=METHODS, call_limit_ms=None, forward_only=(), few=(), case_cap_s=None) -> Case:
    """The recurrence on [G, T, n, m]: the named seqmix methods, and the PyTorch baselines.

    On a CUDA device every seqmix method is first called once on the case's inputs
    (``probe``): its peak memory goes into the case's parameters (so into every row), and
    a method whose single forward took longer than ``call_limit_ms`` (one limit, or a
    dict of limits by method name) is left out of the timing with a printed reason.
    Methods named in ``forward_only`` are timed in the forward direction only. Methods
    named in ``few``, and any whose suite timing that first call predicts over
    ``case_cap_s`` seconds, are timed right there instead: the median of ``FEW_REPS``
    forwards goes into the parameter ``fwd_ms_few`` and the suite leaves them out, with a
    printed reason (the suite itself repeats every measurement 50 + 5 times)."""
    ref = slice(0, REFERENCE_GROUPS)
    params = {"G": G, "T": T, "n": n, "m": m, "dtype": _dtype_name(dtype)}

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed)
        scale = 1.2 / n**0.5
        A = ((torch.rand((G, T, n, n), generator=gen, device=device) * 2 - 1) * scale).to(dtype)
        b = torch.randn((G, T, n, m), generator=gen, device=device).to(dtype)
        dy = torch.randn((G, T, n, m), generator=gen, device=device).to(dtype)
        inputs = {"leaves": [A.requires_grad_(), b.requires_grad_()], "dy": dy}
        if torch.device(device).type == "cuda":
            probe(inputs)
        return inputs

    def probe(inputs):
        # Runs when the inputs exist, before the suite times anything: the case's methods
        # and parameters are still open to change here.
        params["peak_mib"], params["probe_ms"] = {}, {}
        for method in seqmix_methods:
            peak, ms = peak_memory(lambda: method.run(inputs))
            params["peak_mib"][method.name], params["probe_ms"][method.name] = peak / 2**20, ms
            name = method.name.removeprefix("seqmix ")
            limit = call_limit_ms.get(name) if isinstance(call_limit_ms, dict) else call_limit_ms
            if limit is not None and ms > limit:
                method.directions = ()
                print(f"linear_recurrence {shape}: {method.name} skipped: one forward took {ms:.0f} ms, over the "
                      f"{limit:.0f} ms limit per call", file=sys.stderr)
                continue
            calls = _FORWARD_ONLY_CALLS if method.directions == ("fwd",) else _ALL_DIRECTIONS_CALLS
            if name not in few and case_cap_s is not None and calls * ms / 1e3 > case_cap_s:
                ms = min(ms, _timer().median_ms(lambda: method.run(inputs), 1, 0))  # the first call's setup aside
            why = ("predicted slow" if name in few else
                   f"its suite timing would take ~{calls * ms / 1e3:.0f} s, over the case's {case_cap_s:.0f} s"
                   if case_cap_s is not None and calls * ms / 1e3 > case_cap_s else None)
            if why:
                time_few(method, inputs, backward=name == "auto")
                method.directions = ()
                timed = ", ".join(f"{d} {params[d + '_ms_few'][method.name]:.2f} ms"
                                  for d in ("fwd", "bwd") if method.name in params.get(d + "_ms_few", {}))
                print(f"linear_recurrence {shape}: {method.name} timed in {FEW_REPS} repetitions ({timed}; {why})",
                      file=sys.stderr)

    def time_few(method, inputs, backward):
        # The forward's median of FEW_REPS (after the probe's call), and for "auto", whose
        # backward the criteria compare, the backward's on one kept graph.
        timer = _timer()
        params.setdefault("fwd_ms_few", {})[method.name] = timer.median_ms(lambda: method.run(inputs), FEW_REPS, 0)
        if backward:
            leaves = inputs["leaves"]
            y = method.run(inputs)
            params.setdefault("bwd_ms_few", {})[method.name] = timer.median_ms(
                lambda: torch.autograd.backward(y, inputs["dy"], retain_graph=True), FEW_REPS, 0,
                before=lambda: [setattr(t, "grad", None) for t in leaves])
            del y
            for t in leaves:
                t.grad = None

    def references(inputs, name):
        A, b = (t[ref].detach().to(torch.float64).requires_grad_() for t in inputs["leaves"])
        h = torch_loop(A, b)
        h.backward(inputs["dy"][ref].to(torch.float64))
        return h.detach(), [A.grad, b.grad]

    def observe(inputs, y, grads):
        return (None if y is None else y[ref],
                None if grads is None else [None if g is None else g[ref] for g in grads])

    work = recurrence_bytes(G, T, n, m, torch.empty((), dtype=dtype).element_size())
    seqmix_methods = [Method(f"seqmix {name}",
                             (lambda name: lambda x: seqmix.linear_recurrence(*x["leaves"], method=name))(name), work,
                             directions=("fwd",) if name in forward_only else None)
                      for name in methods]
    methods = list(seqmix_methods)
    shape = f"G{G} T{T} n{n} m{m} {_dtype_name(dtype)}"
    if baselines:
        # Forward only: the acceptance compares forwards, and the loop's backward through
        # autograd took ~6 s a repetition at G16 T4096 n64 on the H100 machine.
        methods += [Method("torch Hillis–Steele", lambda x: torch_hillis_steele(*x["leaves"]), work, baseline=True,
                           directions=("fwd",)),
                    Method("torch loop", lambda x: torch_loop(*x["leaves"]), work, baseline=True,
                           directions=("fwd",))]
    return Case("linear_recurrence", "dense recurrence", shape, params, make_inputs,
                methods, references, observe,
                speedup_over=("torch Hillis–Steele", "torch loop") if baselines else (),
                headline=("seqmix auto", "torch Hillis–Steele") if baselines else None,
                tolerance=1e-2, notes=NOTES, plot="bandwidth")


def first_call(call) -> tuple:
    """(output, peak bytes allocated above what was allocated before, wall ms) of one
    call, its output (and autograd graph) alive while the peak is read."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    out = call()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) * 1e3
    return out, torch.cuda.max_memory_allocated() - before, ms


def peak_memory(call) -> tuple:
    """(peak bytes, wall ms) of one call (``first_call``), its output then dropped."""
    _, peak, ms = first_call(call)
    return peak, ms


# --- the grid, and what of it is worth timing ------------------------------------

GRID = {"n": (32, 64, 128), "T": (1024, 2048, 4096, 8192), "G": (1, 16, 64), "m": (1, 64),
        "dtype": (torch.float32, torch.bfloat16)}
ANCHOR = (16, 4096, 64, 1, torch.float32)  # the acceptance point: the only one with the PyTorch baselines

# Forward times measured at the anchor on the H100 (bench/results/.../linear_recurrence-quick):
# the cost model below scales them by each method's work to skip what would take absurdly
# long; it only decides what to time, never what "auto" picks.
_ANCHOR_MS = {"sequential": 1.9, "chunked": 0.94, "scan": 24.5, "cyclic_reduction": 4.5}


def predicted_forward_ms(method, G, T, n, m) -> float:
    """A rough forward time: the anchor's, scaled by the method's work (products of
    n×n maps: G·T·n²·(n+m), times log2 T for the scan; the sequential method's depth T
    times its waves of blocks, its step cost growing with n²). "auto" runs the fastest
    measured method: the least of the four predictions."""
    if method == "auto":
        return min(predicted_forward_ms(k, G, T, n, m) for k in METHODS if k != "auto")
    products = G * T * n * n * (n + m) / (16 * 4096 * 64 * 64 * 65)
    if method == "sequential":
        waves = math.ceil(G * math.ceil(m / 8) / 132)
        return _ANCHOR_MS[method] * T / 4096 * waves * max(1.0, (n / 64) ** 2 / 2)
    if method == "chunked" and n <= 64 and m <= 8:  # tensor cores: about one pass over A
        return max(0.15, _ANCHOR_MS[method] * G * T * n * n / (16 * 4096 * 64 * 64))
    if method == "chunked":
        return _ANCHOR_MS["cyclic_reduction"] * products
    if method == "scan":
        return _ANCHOR_MS[method] * products * math.log2(T) / 12
    return _ANCHOR_MS[method] * products


def case_bytes(G, T, n, m, itemsize, method) -> int:
    """Memory one case holds while a method's backward runs: A, b, dy, h, dA, db and the
    method's float workspace."""
    tensors = itemsize * G * T * (2 * n * n + 4 * n * m)
    dtype = "bf16" if itemsize == 2 else "f32"
    workspace = 4 * seqmix._C.linear_recurrence_workspace_size(G, T, n, m, dtype, True, method)
    return tensors + workspace


def _device_bytes() -> int:
    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 80 * 2**30


# Full suite: every method is timed wherever its case fits memory, in one of three ways
# by its predicted forward, which is what the criteria compare (cyclic reduction against
# the scan at every grid point, the fastest method against the floor):
# - "auto" (the fastest method, whose backward the criteria also compare), and any method
#   predicted under FULL_PREDICTED_LIMIT_MS: every direction (50 + 5 calls in each of fwd,
#   bwd, fwd+bwd and graph replays: ~8 forwards' worth × 55);
# - up to FEW_LIMIT_MS: forward only (eager and graph replays: ~2 forwards' worth × 55);
# - slower: forward only, FEW_REPS repetitions taken when the case's inputs are made
#   (`recurrence_case`'s probe), the result a case parameter.
# The probe's first call also caps each case: a method whose suite timing it predicts
# over CASE_CAP_S is timed the few-repetition way too, and one over FULL_CALL_LIMIT_MS,
# or over 3× its prediction for the slow ones, is left out (the prediction was wrong).
# Every such choice is printed with its reason. Predicted duration: expected_full_seconds.
FULL_PREDICTED_LIMIT_MS = 1.0
FEW_LIMIT_MS = 3.0
CASE_CAP_S = 3.0
FULL_CALL_LIMIT_MS = 60.0
MEMORY_FRACTION = 0.8  # of the device's memory a case may use

_ALL_DIRECTIONS_CALLS, _FORWARD_ONLY_CALLS = 440, 110  # forwards' worth per timed method
_CALL_OVERHEAD_MS = 0.15  # per timed call: the L2 flush, the launch and Python


def grid_plan(limit_ms=FULL_PREDICTED_LIMIT_MS):
    """[(G, T, n, m, dtype, methods timed, {method: why skipped}, {method: why forward
    only})] over the whole grid: a method is skipped only where its case would not fit
    the device's memory, and timed forward only where its predicted forward is over
    ``limit_ms``."""
    plan = []
    for dtype in GRID["dtype"]:
        itemsize = torch.empty((), dtype=dtype).element_size()
        for n in GRID["n"]:
            for m in GRID["m"]:
                for G in GRID["G"]:
                    for T in GRID["T"]:
                        timed, skipped, forward_only = [], {}, {}
                        for name in METHODS:
                            need = case_bytes(G, T, n, m, itemsize, name)
                            ms = predicted_forward_ms(name, G, T, n, m)
                            if need > MEMORY_FRACTION * _device_bytes():
                                skipped[name] = (f"needs {need / 2**30:.0f} GiB, over {MEMORY_FRACTION:.0%} of the "
                                                 f"device's {_device_bytes() / 2**30:.0f} GiB")
                                continue
                            timed.append(name)
                            if name != "auto" and ms > limit_ms:
                                forward_only[name] = f"predicted {ms:.0f} ms a forward, over {limit_ms:.0f} ms"
                        plan.append((G, T, n, m, dtype, tuple(timed), skipped, forward_only))
    return plan


def call_limit_ms(name, G, T, n, m) -> float:
    """The longest probe call that keeps ``name`` in the full suite's timing."""
    return max(FULL_CALL_LIMIT_MS, 3 * predicted_forward_ms(name, G, T, n, m))


def few_repetitions(G, T, n, m, timed) -> tuple:
    """The timed methods the full suite times in FEW_REPS repetitions at this point:
    those predicted over FEW_LIMIT_MS a forward ("auto" never)."""
    return tuple(k for k in timed if k != "auto" and predicted_forward_ms(k, G, T, n, m) > FEW_LIMIT_MS)


def expected_full_seconds(plan=None) -> float:
    """The full suite's predicted duration for this op: each timed method's first
    (probe) call, then in all directions ~8 forwards' worth × 55 calls, forward only
    ~2 × 55, or (predicted slow, or over the case cap) FEW_REPS forwards, and for "auto"
    FEW_REPS backwards at ~2.5 forwards each; every call with its overhead. Plus each
    case's float64 reference (a Python loop of T steps at about 0.1 ms a step, forward
    and backward) and its inputs."""
    total = 0.0
    for G, T, n, m, dtype, timed, _, forward_only in plan or grid_plan():
        few = few_repetitions(G, T, n, m, timed)
        for k in timed:
            ms = predicted_forward_ms(k, G, T, n, m) + _CALL_OVERHEAD_MS
            calls = _FORWARD_ONLY_CALLS if k in forward_only else _ALL_DIRECTIONS_CALLS
            if k in few or calls * ms > CASE_CAP_S * 1e3:
                calls = FEW_REPS * (3.5 if k == "auto" else 1)
            total += ms * (1 + calls) / 1e3
        total += 0.1e-3 * T + 1.0
    return total


def cases(quick: bool = False) -> list:
    """The dense-recurrence cases of the GPU suite. Quick: the acceptance point with the
    PyTorch baselines, the same at one group and in bf16. Full: the issue's whole grid
    (144 points), the PyTorch baselines at the acceptance point only; every method is
    timed wherever the case fits memory, forward only where its forward is predicted
    slow, and the reason for each skip or reduction is printed."""
    if quick:
        return [recurrence_case(16, 4096, 64, 1),
                recurrence_case(1, 4096, 64, 1, baselines=False),
                recurrence_case(16, 4096, 64, 1, dtype=torch.bfloat16, baselines=False)]
    grid = []
    for G, T, n, m, dtype, timed, skipped, forward_only in grid_plan():
        shape = f"G{G} T{T} n{n} m{m} {_dtype_name(dtype)}"
        for name, why in skipped.items():
            print(f"linear_recurrence {shape}: seqmix {name} skipped: {why}", file=sys.stderr)
        for name, why in forward_only.items():
            print(f"linear_recurrence {shape}: seqmix {name} timed forward only: {why}", file=sys.stderr)
        if not timed:
            continue
        grid.append(recurrence_case(G, T, n, m, dtype=dtype, baselines=(G, T, n, m, dtype) == ANCHOR, methods=timed,
                                    call_limit_ms={k: call_limit_ms(k, G, T, n, m) for k in timed},
                                    forward_only=tuple(forward_only), few=few_repetitions(G, T, n, m, timed),
                                    case_cap_s=CASE_CAP_S))
    return grid


# --- the whole grid in one call, and a per-phase profile (python -m ...) -----------------

# The grid run times every method at every point where its case fits memory (nothing is
# left out for being slow): its forward as the median of GRID_REPS timed calls (CUDA
# events, L2 flushed) after the first call, which also reads the peak memory and checks h
# against a float64 loop on the first group; GRID_REPS_SLOW repetitions for a forward over
# GRID_SLOW_MS, whose spread is small against its length. "auto" (the fastest method by
# the measured table, what the criteria compare) also gets its backward.
GRID_REPS, GRID_REPS_SLOW, GRID_SLOW_MS = 5, 3, 20.0
_GRID_POINT_OVERHEAD_S = 0.3  # inputs, the float64 reference, empty_cache
_REFERENCE_STEP_S = 12e-6    # one step of the float64 reference loop (a baddbmm launch)


def grid_reps(forward_ms: float) -> int:
    return GRID_REPS if forward_ms < GRID_SLOW_MS else GRID_REPS_SLOW


def expected_grid_seconds(plan=None) -> float:
    """The grid run's predicted duration: per timed method its first call and its
    repetitions (each with the call overhead), "auto"'s backward at ~2.5 forwards a call
    (one building call, a warm-up and the repetitions), and per point the inputs and the
    float64 reference."""
    total = 0.0
    for G, T, n, m, dtype, timed, _, _ in plan or grid_plan():
        for k in timed:
            ms = predicted_forward_ms(k, G, T, n, m) + _CALL_OVERHEAD_MS
            total += ms * (1 + grid_reps(ms)) / 1e3
            if k == "auto":
                total += 2.5 * ms * (2 + grid_reps(ms)) / 1e3
        total += _GRID_POINT_OVERHEAD_S + _REFERENCE_STEP_S * T
    return total


def _record_lines(path):
    import json

    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def grid(points, out_dir, stream=sys.stderr) -> str:
    """Runs ``points`` (entries of ``grid_plan``) and writes ``grid.jsonl`` (one record a
    point, written as each finishes, so a run cut short keeps what it measured; the first
    line describes the run) and ``grid.md`` (``grid_summary``) to ``out_dir``. Returns the
    Markdown."""
    import json
    import os

    from .ceilings import copy_bandwidth
    from .timing import CudaTimer, flush_bytes

    os.makedirs(out_dir, exist_ok=True)
    timer = CudaTimer(torch, flush_bytes(torch))
    small = torch.randn((1, 16, 8, 8), device="cuda")
    for name in METHODS:  # the first calls' context and kernel loading, outside every timing
        seqmix.linear_recurrence(small, small[..., :1].contiguous(), method=name)
    warm_up(torch)
    copy = copy_bandwidth(torch, timer, 5, 2)
    torch.cuda.empty_cache()
    path = os.path.join(out_dir, "grid.jsonl")
    started = time.perf_counter()
    with open(path, "w") as out:
        run_info = {"run": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                            "copy_gbps": round(copy["GB/s"], 1), "points": len(points),
                            "predicted_s": round(expected_grid_seconds(points), 1),
                            "reps": [GRID_REPS, GRID_REPS_SLOW, GRID_SLOW_MS]}}
        print(json.dumps(run_info), file=out, flush=True)
        for G, T, n, m, dtype, timed, skipped, _ in points:
            try:
                record = grid_point(timer, G, T, n, m, dtype, timed, skipped)
            except Exception as e:  # a point that fails (out of memory, say) is reported, the rest still run
                torch.cuda.empty_cache()
                record = {"point": f"G{G} T{T} n{n} m{m} {_dtype_name(dtype)}", "error": f"{type(e).__name__}: {e}"[:300]}
            print(json.dumps(record), file=out, flush=True)
            print(f"linear_recurrence grid {record['point']}: {time.perf_counter() - started:.0f} s", file=stream,
                  flush=True)
    records = _record_lines(path)
    records[0]["run"]["wall_s"] = round(time.perf_counter() - started, 1)
    text = grid_summary(records)
    with open(os.path.join(out_dir, "grid.md"), "w") as f:
        f.write(text + "\n")
    return text


def warm_up(torch, seconds: float = 1.0) -> None:
    """Keeps the GPU busy with matrix products for `seconds` before the first timing: a grid
    run right after idle time read every method of its first point 2–3× slower than the
    same point did in other runs (its clocks not yet up)."""
    a = torch.randn((4096, 4096), device="cuda", dtype=torch.bfloat16)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(20):
            a = torch.matmul(a, a).clamp_(-1, 1)
        torch.cuda.synchronize()


def grid_point(timer, G, T, n, m, dtype, timed, skipped) -> dict:
    """One point of the grid: every timed method's forward ms, repetitions, peak memory
    (above the inputs, outputs and workspace alive) and h's error against a float64 loop
    on group 0; "auto"'s backward ms."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    # Made in place in their dtype: the largest points hold tens of GiB of transitions.
    A = torch.empty((G, T, n, n), dtype=dtype, device="cuda").uniform_(-1.2 / n**0.5, 1.2 / n**0.5, generator=gen)
    b = torch.empty((G, T, n, m), dtype=dtype, device="cuda").normal_(generator=gen)
    dy = torch.empty((G, T, n, m), dtype=dtype, device="cuda").normal_(generator=gen)
    reference = torch_loop(A[:1].double(), b[:1].double())
    A.requires_grad_(), b.requires_grad_()
    record = {"point": f"G{G} T{T} n{n} m{m} {_dtype_name(dtype)}", "G": G, "T": T, "n": n, "m": m,
              "dtype": _dtype_name(dtype), "skipped": dict(skipped), "fwd": {}, "reps": {}, "peak_mib": {},
              "err": {}, "bwd": {}}
    for name in timed:
        def run(name=name):
            return seqmix.linear_recurrence(A, b, method=name)

        h, peak, first_ms = first_call(run)
        record["peak_mib"][name] = round(peak / 2**20, 3)
        record["err"][name] = float((h[:1].detach().double() - reference).norm() / reference.norm())
        del h
        reps = grid_reps(first_ms)
        record["fwd"][name], record["reps"][name] = timer.median_ms(run, reps, 0), reps
        if name == "auto":
            h = run()
            record["bwd"][name] = timer.median_ms(
                lambda: torch.autograd.backward(h, dy, retain_graph=True), reps, 1,
                before=lambda: setattr(A, "grad", None) or setattr(b, "grad", None))
            record["graph"] = graph_times(timer, A.detach(), b.detach(), h.detach(), dy, reps)
            del h
            A.grad = b.grad = None
    del A, b, dy, reference
    torch.cuda.empty_cache()
    return record


def graph_times(timer, A, b, h, dy, reps) -> dict:
    """"auto"'s forward and backward as CUDA-graph replays: the kernels and the gaps between
    them, without the host's time. The backward replayed is the call autograd makes (the
    forward's h given, the final state's gradient zero), so its ratio to the forward is
    the kernels' own; the event-timed columns add PyTorch's autograd engine, which on the
    smallest points takes longer than the kernels (NOTES.md, version 16)."""
    from seqmix._ops import linear_recurrence as ops
    from seqmix.torch._common import XP

    d_final_state = torch.zeros_like(h[:, -1])
    fwd = timer.graph_median_ms(lambda: seqmix.linear_recurrence(A, b, method="auto"), reps, 1)
    bwd = timer.graph_median_ms(
        lambda: ops.backward(XP, A, b, None, dy, d_final_state, "auto", "automatic", states=h), reps, 1)
    return {"fwd": fwd, "bwd": bwd, "failure": timer.graph_failure}


def grid_summary(records, copy_gbps=None) -> str:
    """A Markdown report of ``grid``'s records: per point each method's forward ms (bold:
    the fastest), the fastest against the memory floor (fwd bytes at the run's measured
    copy rate), cyclic reduction over the scan in time and their peak memory, "auto"'s
    backward over its forward, and the largest error of h against float64; then the
    criteria's ranges and every skipped method with its reason."""
    run = records[0].get("run", {}) if records and "run" in records[0] else {}
    points = [r for r in records if "point" in r and "error" not in r]
    failed = [r for r in records if "error" in r]
    copy_gbps = copy_gbps or run.get("copy_gbps") or 3000.0
    names = [k for k in METHODS]
    head = (f"Dense recurrence grid on {run.get('device', 'the GPU')} (torch {run.get('torch', '?')}): "
            f"{len(points)} points; floor = A, b read and h written once at the measured copy rate "
            f"{copy_gbps:.0f} GB/s; forward medians of {GRID_REPS} timed calls ({GRID_REPS_SLOW} over "
            f"{GRID_SLOW_MS:.0f} ms) after a first call, L2 flushed; peak = memory allocated above the inputs "
            f"during one forward; err = max over methods of ‖h − h₆₄‖/‖h₆₄‖ on group 0."
            + (f" Wall time {run['wall_s']:.0f} s (predicted {run['predicted_s']:.0f} s)." if "wall_s" in run else ""))
    out = [head, "",
           "| point | " + " | ".join(names) + " | fastest × floor | CR ÷ scan (peak MiB scan / CR) | auto bwd ÷ fwd "
           "| auto bwd ÷ fwd (graph) | max err |", "|---" * (len(names) + 6) + "|"]
    cr_scan, floors, back, back_graph, notes = [], [], [], [], []
    for r in points:
        fwd, peak = r["fwd"], r["peak_mib"]
        itemsize = 4 if r["dtype"] == "fp32" else 2
        floor_ms = recurrence_bytes(r["G"], r["T"], r["n"], r["m"], itemsize)["fwd"] / (copy_gbps * 1e6)
        methods = {k: v for k, v in fwd.items() if k != "auto"}
        best = min(methods, key=methods.get) if methods else None
        cells = [(f"**{fwd[k]:.3f}**" if k == best else f"{fwd[k]:.3f}") if k in fwd else "–" for k in names]
        ratio = "–"
        if {"scan", "cyclic_reduction"} <= set(fwd):
            q = fwd["scan"] / fwd["cyclic_reduction"]
            cr_scan.append((q, peak["cyclic_reduction"] <= peak["scan"], r["point"]))
            ratio = f"{q:.2f}× ({peak['scan']:.0f} / {peak['cyclic_reduction']:.0f})"
        floor = "–"
        if best:
            floor = f"{fwd[best] / floor_ms:.2f}× ({best})"
            if r["G"] == 16 and r["n"] <= 64:
                floors.append((fwd[best] / floor_ms, r["point"]))
        bwd = "–"
        if "auto" in r["bwd"]:
            bwd = f"{r['bwd']['auto'] / fwd['auto']:.2f}×"
            back.append((r["bwd"]["auto"] / fwd["auto"], r["point"]))
        graph, bwd_graph = r.get("graph") or {}, "–"
        if graph.get("fwd") and graph.get("bwd"):
            bwd_graph = f"{graph['bwd'] / graph['fwd']:.2f}× ({graph['fwd']:.3f} / {graph['bwd']:.3f})"
            back_graph.append((graph["bwd"] / graph["fwd"], r["point"]))
        err = f"{max(r['err'].values()):.1e}" if r["err"] else "–"
        out.append(f"| {r['point']} | " + " | ".join(cells) + f" | {floor} | {ratio} | {bwd} | {bwd_graph} | {err} |")
        notes += [f"- {r['point']}: {k} not timed: {why}" for k, why in r["skipped"].items()]
    out.append("")
    if cr_scan:
        low, high = min(cr_scan), max(cr_scan)
        out.append(f"- Cyclic reduction ÷ scan (forward time): {low[0]:.2f}× ({low[2]}) to {high[0]:.2f}× ({high[2]}) "
                   f"at {len(cr_scan)} points; {sum(q >= 1.5 for q, _, _ in cr_scan)} at ≥ 1.5×; peak memory no "
                   f"higher at {sum(lower for _, lower, _ in cr_scan)}.")
    if floors:
        out.append(f"- Fastest method ÷ floor at G = 16, n ≤ 64: {min(floors)[0]:.2f}× ({min(floors)[1]}) to "
                   f"{max(floors)[0]:.2f}× ({max(floors)[1]}); within 2× at {sum(f <= 2 for f, _ in floors)} of "
                   f"{len(floors)}.")
    if back:
        out.append(f"- auto backward ÷ forward: {min(back)[0]:.2f}× to {max(back)[0]:.2f}× ({max(back)[1]}); "
                   f"within 2.5× at {sum(q <= 2.5 for q, _ in back)} of {len(back)} (CUDA events around the Python "
                   "calls: PyTorch's autograd engine included).")
    if back_graph:
        out.append(f"- auto backward ÷ forward, CUDA-graph replays (kernels only; the cell gives fwd / bwd ms): "
                   f"{min(back_graph)[0]:.2f}× to {max(back_graph)[0]:.2f}× ({max(back_graph)[1]}); within 2.5× at "
                   f"{sum(q <= 2.5 for q, _ in back_graph)} of {len(back_graph)}.")
    notes += [f"- {r['point']}: failed: {r['error']}" for r in failed]
    return "\n".join(out + ([""] + notes if notes else []))


def profile(G=16, T=4096, n=64, m=1, dtype=torch.float32, method="chunked", reps=5) -> str:
    """Per-kernel GPU time of ``reps`` forwards and backwards (torch.profiler): where each
    phase of a method spends its time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    A = ((torch.rand((G, T, n, n), device="cuda") * 2 - 1) * (1.2 / n**0.5)).to(dtype).requires_grad_()
    b = torch.randn((G, T, n, m), device="cuda").to(dtype).requires_grad_()
    dy = torch.randn_like(b)
    for _ in range(2):
        torch.autograd.backward(seqmix.linear_recurrence(A, b, method=method), dy)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            h = seqmix.linear_recurrence(A, b, method=method)
            torch.cuda.synchronize()
            torch.autograd.backward(h, dy)
            torch.cuda.synchronize()
    title = f"{method} G{G} T{T} n{n} m{m} {_dtype_name(dtype)}, {reps} forwards and backwards"
    return title + "\n" + prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60)


def _main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m seqmix.bench.gpu.linear_recurrence")
    parser.add_argument("what", choices=("plan", "grid", "profile", "summary"))
    parser.add_argument("--out", default="linear_recurrence-grid", help="grid: the folder for grid.jsonl, grid.md")
    parser.add_argument("--grid-file", help="summary: the grid.jsonl a grid run wrote")
    parser.add_argument("--n", type=int, nargs="*", help="limit the grid to these state sizes")
    parser.add_argument("--dtype", choices=("fp32", "bf16"),
                        help="limit the grid to one dtype (each is about half of the grid's time)")
    args = parser.parse_args(argv)
    plan = grid_plan()
    if args.n:
        plan = [p for p in plan if p[2] in args.n]
    if args.dtype:
        plan = [p for p in plan if _dtype_name(p[4]) == args.dtype]
    if args.what == "plan":
        for G, T, n, m, dtype, timed, skipped, forward_only in plan:
            few = few_repetitions(G, T, n, m, timed)
            print(f"G{G} T{T} n{n} m{m} {_dtype_name(dtype)}: {', '.join(timed) or '-'}"
                  + "".join(f"; {k} skipped ({why})" for k, why in skipped.items())
                  + "".join(f"; {k} forward only ({why})" for k, why in forward_only.items() if k not in few)
                  + "".join(f"; {k} forward in {FEW_REPS} repetitions (predicted "
                            f"{predicted_forward_ms(k, G, T, n, m):.0f} ms, over {FEW_LIMIT_MS:.0f} ms)" for k in few))
        print(f"full suite, this op: about {expected_full_seconds(plan) / 60:.0f} min (predicted)")
        print(f"grid run (every method timed, forward; auto's backward): about {expected_grid_seconds(plan):.0f} s "
              "(predicted)")
    elif args.what == "summary":
        print(grid_summary(_record_lines(args.grid_file)))
    elif args.what == "grid":
        print(grid([p for p in plan if p[5]], args.out))
    else:
        for dtype in (torch.float32, torch.bfloat16):
            for method in ("chunked", "sequential"):
                print(profile(dtype=dtype, method=method))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
