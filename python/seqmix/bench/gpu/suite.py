"""Runs the GPU suite: ceilings first, then every case's methods per direction, each
timed with CUDA events and checked against the case's reference; the forward, and the
forward with its backward, also timed as CUDA-graph replays (and their results checked
too); then the report.

A failing baseline never aborts the run: its rows read "refused: <reason>". A method
that cannot be captured into a graph keeps its event timing; its status says why the
graph timing is missing.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
import time
from pathlib import Path

from . import ceilings as ceilings_mod
from .case import FORWARD_DIRECTIONS, GRAPH_DIRECTIONS, Row, rate, rel_err

# op -> module of this package whose cases(quick) lists the op's cases
OPS = {"gated_scan": "gated_scan", "attention": "attention", "gla": "gla", "linear_recurrence": "linear_recurrence", "chains": "chains"}


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    reps: int       # timed repetitions per measurement (the median is reported)
    warmup: int     # untimed calls first (compilation, autotuning, allocator)
    # Seconds the GPU sits idle before each row's timing. A row timed right after a heavy one
    # read slow: on the H100, seqmix's GLA training forward at B1 T32768 took 0.79-0.96 ms by
    # events right after causal attention's rows and 0.728 ms after a 1 s pause, with fla and
    # attention unchanged (bench/results/nvidia-h100-80gb-hbm3/bench-settle/).
    settle_s: float = 0.0


def settings_for(quick: bool) -> Settings:
    return Settings(quick, 10, 3, 1.0) if quick else Settings(quick, 50, 5, 1.0)


def settle(torch, settings) -> None:
    """Lets the GPU finish and sit idle for ``settings.settle_s`` seconds before a row."""
    if settings.settle_s <= 0:
        return
    if torch.cuda.is_initialized():  # CUDA work may be in flight
        torch.cuda.synchronize()
    time.sleep(settings.settle_s)


def parse_ops(text: str) -> list:
    """'gated_scan,attention' -> ['gated_scan', 'attention']; ValueError naming the known
    ops for an unknown one."""
    ops = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in ops if name not in OPS]
    if unknown or not ops:
        raise ValueError(f"unknown op(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(OPS)}")
    return ops


def build_cases(ops, quick: bool) -> list:
    """Every case of the named ops (no tensors yet: each case makes its inputs when run)."""
    cases = []
    for op in ops:
        module = importlib.import_module(f"{__package__}.{OPS[op]}")
        cases += module.cases(quick)
    return cases


def _first_line(e: BaseException) -> str:
    return _clip(f"{type(e).__name__}: {str(e).strip()}")


def _clip(text: str) -> str:
    """The first line of an error's text, at most 200 characters, for a status cell."""
    lines = str(text).strip().splitlines()
    return (lines[0] if lines else "").strip().rstrip(":")[:200]


def _measure(torch, timer, method, inputs, direction, settings):
    """Times one method in one direction; returns (ms, y or None, leaf grads or None).

    fwd: the training forward (graph recorded). infer: the forward under torch.no_grad().
    bwd: the backward alone, on a graph built once and kept with retain_graph; where a
    method cannot run backward twice, the graph is rebuilt before each repetition, outside
    the timed region. fwd+bwd: both."""
    leaves, dy = inputs["leaves"], inputs["dy"]
    state = {}

    def clear_grads():
        for t in leaves:
            t.grad = None

    def reset():  # frees the last output and its graph outside the timed region
        clear_grads()
        state.pop("y", None)

    def forward():
        state["y"] = method.run(inputs)

    if direction in FORWARD_DIRECTIONS:
        with torch.set_grad_enabled(direction == "fwd"):
            ms = timer.median_ms(forward, settings.reps, settings.warmup, before=reset)
        return ms, state["y"], None
    if direction == "fwd+bwd":
        def step():
            forward()
            torch.autograd.backward(state["y"], dy)

        ms = timer.median_ms(step, settings.reps, settings.warmup, before=reset)
        return ms, state["y"], [t.grad for t in leaves]

    def backward(retain):
        return lambda: torch.autograd.backward(state["y"], dy, retain_graph=retain)

    forward()
    try:
        ms = timer.median_ms(backward(True), settings.reps, settings.warmup, before=clear_grads)
    except RuntimeError:
        def fresh_graph():
            reset()
            forward()

        ms = timer.median_ms(backward(False), settings.reps, settings.warmup, before=fresh_graph)
    return ms, None, [t.grad for t in leaves]


def _max_rel_err(case, method, inputs, direction, y, grads, references):
    if method.reference not in references:
        references[method.reference] = case.references(inputs, method.reference)
    y_ref, grads_ref = references[method.reference]
    y_got, grads_got = case.observe(inputs, y, grads)
    pairs = [] if direction == "bwd" else [(y_got, y_ref)]
    if direction not in FORWARD_DIRECTIONS:
        pairs += [(g, r) for g, r in zip(grads_got, grads_ref) if r is not None]
    # None: the case checks nothing in this direction (a backward whose gradients only the
    # op's GPU tests compare).
    return max((rel_err(g, r) for g, r in pairs), default=None)


def _row(case, method, direction, status="ok") -> Row:
    """A row with nothing measured yet."""
    return Row(op=case.op, case=case.name, shape=case.shape, direction=direction, method=method.name, ms=None,
               work=None, unit=case.unit, pct_of_ceiling=None, speedup={}, max_rel_err=None, status=status,
               params=dict(case.params))


def measure_row(torch, timer, case, method, direction, inputs, settings, ceiling, references) -> Row:
    """One row: time, rate, % of ceiling, max rel err and status; in GRAPH_DIRECTIONS the
    graph replay time too (never raises)."""
    row = _row(case, method, direction)
    try:
        row.ms, y, grads = _measure(torch, timer, method, inputs, direction, settings)
    except Exception as e:  # a method that cannot run is reported, never fatal
        row.status = ("refused: " if method.baseline else "error: ") + _first_line(e)
        _recover(torch)
        return row
    row.work = rate(method.work[direction], row.ms, case.unit)
    row.pct_of_ceiling = 100 * row.work / ceiling if ceiling else None
    try:
        err = _max_rel_err(case, method, inputs, direction, y, grads, references)
    except Exception as e:
        row.status = "error: reference check failed: " + _first_line(e)
        _recover(torch)
        return row
    if err is not None and math.isfinite(err):
        row.max_rel_err = err
    if err is not None and not err <= case.tolerance:
        row.status = (f"error: max rel err {err:.1e} above the {case.tolerance:.0e} bound" if math.isfinite(err)
                      else "error: non-finite or missing output")
    if direction in GRAPH_DIRECTIONS and row.status == "ok":  # graph times of a correct method only
        del y, grads  # the event timing's output is not needed any more: free it first
        _time_graph_replays(torch, timer, case, method, inputs, settings, references, row)
    return row


def _time_graph_replays(torch, timer, case, method, inputs, settings, references, row) -> None:
    """row.ms_graph: the row's call captured once into a CUDA graph and its replays timed,
    which leaves the GPU work without the host's time per call: the forward (fwd, infer), or
    the forward and its backward in one graph (fwd+bwd; the gradients reset before the
    captured call, as the event timing resets them, so each replay writes them where the
    capture allocated them). The last replay's output, and its gradients where the case has
    references for them, are checked against the reference like the eager call's. A method
    that cannot be captured (or whose replays compute something else) keeps ms_graph None
    and its status says why."""
    leaves, dy = inputs["leaves"], inputs["dy"]
    state = {}

    def forward():
        state["y"] = method.run(inputs)

    def step():
        for t in leaves:
            t.grad = None
        forward()
        torch.autograd.backward(state["y"], dy)

    with torch.set_grad_enabled(row.direction != "infer"):
        ms = timer.graph_median_ms(step if row.direction == "fwd+bwd" else forward, settings.reps, settings.warmup)
    if ms is None:
        _recover(torch)
        row.status += "; graph: not capturable: " + _clip(timer.graph_failure)
        return
    grads = None if row.direction in FORWARD_DIRECTIONS else [t.grad for t in leaves]
    try:
        err = _max_rel_err(case, method, inputs, row.direction, state.get("y"), grads, references)
    except Exception as e:
        row.status += "; graph: replay check failed: " + _first_line(e)
        return
    if err is not None and err <= case.tolerance:
        row.ms_graph = ms
    else:
        row.status += (f"; graph: replay max rel err {err:.1e} above the bound" if err is not None and
                       math.isfinite(err) else "; graph: replay output non-finite or missing")


def _recover(torch):
    """Frees what a failed call left behind (an out-of-memory baseline, say)."""
    try:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:
        pass


def fill_speedups(rows, speedup_over) -> None:
    """speed-up of each row over each baseline of the same case, shape and direction:
    t_baseline / t_method, from the event times (speedup) and from the graph replay
    times (speedup_graph)."""
    for time_of, speedup_of in (("ms", "speedup"), ("ms_graph", "speedup_graph")):
        times = {(r.shape, r.direction, r.method): getattr(r, time_of) for r in rows if getattr(r, time_of)}
        for r in rows:
            mine = getattr(r, time_of)
            if not mine:
                continue
            for base in speedup_over:
                t = times.get((r.shape, r.direction, base))
                if t and base != r.method:
                    getattr(r, speedup_of)[base] = t / mine


def run_case(torch, timer, case, settings, ceilings, progress) -> list:
    """Every method of ``case`` in every direction, on one set of inputs."""
    try:
        inputs = case.make_inputs()
    except Exception as e:  # too large for this device, say: the case's rows say so
        inputs, failure = None, "error: making the inputs: " + _first_line(e)
        _recover(torch)
    references = {}  # reference name -> (y, grads), computed once per case
    ceiling = ceilings_mod.ceiling_for(ceilings, case.unit)
    rows = []
    for direction in case.directions:
        for method in case.methods:
            if not method.runs(direction):
                continue
            progress.step(f"{case.name} {case.shape} {direction} {method.name}")
            if inputs is None:
                rows.append(_row(case, method, direction, status=failure))
                continue
            settle(torch, settings)
            rows.append(measure_row(torch, timer, case, method, direction, inputs, settings, ceiling, references))
    fill_speedups(rows, case.speedup_over)
    del inputs, references
    _recover(torch)
    return rows


class _TqdmProgress:
    def __init__(self, bar, stream):
        self.bar, self.stream = bar, stream

    def step(self, label: str) -> None:
        self.bar.set_description_str(label[:70])
        self.bar.update(1)

    def note(self, text: str) -> None:
        # tqdm.write prints to stdout unless told otherwise; stdout carries the report.
        self.bar.write(text, file=self.stream)

    def close(self) -> None:
        self.bar.close()


def row_lines(rows) -> list:
    """One line per measured row, for the log: shape, direction, method, ms, rate and
    speed-ups, status."""
    lines = []
    for r in rows:
        ms = "-" if r.ms is None else f"{r.ms:.4f} ms"
        speed = " ".join(f"{v:.2f}x vs {k}" for k, v in r.speedup.items() if v is not None)
        pct = "" if r.pct_of_ceiling is None else f" {r.pct_of_ceiling:.0f}%"
        lines.append(f"  {r.shape} {r.direction} {r.method}: {ms}{pct} {speed} [{r.status}]".rstrip())
    return lines


def _note(progress, stream, text: str) -> None:
    note = getattr(progress, "note", None)
    if note:
        note(text)
    else:
        print(text, file=stream)


def make_progress(total: int, stream=None):
    """A progress bar on ``stream`` (stderr): tqdm when installed, else seqmix's own one-line bar."""
    stream = stream or sys.stderr
    try:
        from tqdm import tqdm
    except ImportError:
        from ..timing import Progress

        return Progress(total, stream)
    return _TqdmProgress(tqdm(total=total, file=stream, dynamic_ncols=True), stream)


def configure_compile(torch) -> None:
    """torch.compile settings for a benchmark: enough recompiles for every shape (so no
    case silently falls back to eager), and no donated buffers (whose compiled backward
    refuses retain_graph, which the bwd timing uses)."""
    try:
        dynamo = importlib.import_module("torch._dynamo.config")
        functorch = importlib.import_module("torch._functorch.config")
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, name):
                setattr(dynamo, name, 64)
        if hasattr(functorch, "donated_buffer"):
            functorch.donated_buffer = False
    except Exception as e:  # older or newer torch without these knobs: defaults still work
        print(f"seqmix bench: torch.compile settings left as they are ({_first_line(e)})", file=sys.stderr)


def default_out_dir(gpu_name: str) -> Path:
    from .env import slug

    return Path("bench") / "results" / slug(gpu_name)


def run(ops, quick: bool, out=None, json_path=None, markdown_path=None, stream=None) -> int:
    """The whole GPU run; returns the exit status (0 ok, 1 a seqmix method failed, 2 no GPU).
    Progress and notes go to ``stream`` (stderr), the Markdown report to stdout."""
    stream = stream or sys.stderr
    import torch

    import seqmix

    from . import report
    from .env import environment
    from .timing import CudaTimer, flush_bytes

    if not torch.cuda.is_available():
        print("seqmix bench: torch sees no CUDA device; use --device cpu", file=stream)
        return 2
    if not seqmix.cuda_available():
        print("seqmix bench: this seqmix build has no CUDA backend (build with SEQMIX_CUDA=ON)", file=stream)
        return 2
    settings = settings_for(quick)
    env = environment(torch)
    out = Path(out) if out else default_out_dir(env["gpu"])
    print(f"seqmix bench on {env['gpu']} ({'quick' if quick else 'full'} suite: {', '.join(ops)}) -> {out}",
          file=stream)
    timer = CudaTimer(torch, flush_bytes(torch))
    print("measuring the ceilings (copy bandwidth, bf16 GEMM)", file=stream)
    ceilings = ceilings_mod.measure(torch, timer, quick, settings.reps, settings.warmup)
    configure_compile(torch)
    cases = build_cases(ops, quick)
    progress = make_progress(sum(c.steps() for c in cases), stream)
    rows, done = [], []
    settings_record = dataclasses.asdict(settings) | {"flush_bytes": timer.flush_size}
    for case in cases:
        case_rows = run_case(torch, timer, case, settings, ceilings, progress)
        rows += case_rows
        done.append(case)
        for line in row_lines(case_rows):
            _note(progress, stream, line)
        # Rewritten after every case, so that a run stopped by a time limit keeps what it measured.
        partial = report.results(env, ceilings, settings_record, done, rows)
        report.write_json(partial, out / "results.json")
        report.write_markdown(partial, out / "results.md")
    progress.close()

    results = report.results(env, ceilings, settings_record, cases, rows)
    written = report.write(results, out)
    for path, write in ((json_path, report.write_json), (markdown_path, report.write_markdown)):
        if path:
            write(results, Path(path))
            written.append(Path(path))
    print(report.markdown(results))
    print("wrote " + ", ".join(str(p) for p in written), file=stream)
    baselines = {(c.op, c.name, m.name) for c in cases for m in c.methods if m.baseline}
    failed = [r for r in rows if r.status.startswith("error") and (r.op, r.case, r.method) not in baselines]
    if failed:
        print(f"seqmix bench: {len(failed)} seqmix row(s) failed (see the status column)", file=stream)
    no_graph = [r for r in rows if "; graph: " in r.status]
    if no_graph:
        print(f"seqmix bench: {len(no_graph)} row(s) without a graph replay time (see the status column)",
              file=stream)
    return 1 if failed else 0

