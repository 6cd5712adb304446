"""The results of a GPU run: one JSON-serialisable dict, rendered to results.json,
results.md (header, ceilings, one section per case with its formulas and table) and the
plots. Everything renders from the dict alone, so a saved results.json re-renders."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

from .case import GRAPH_DIRECTIONS
from .ceilings import CEILING_OF_UNIT

MIB, GIB = 1 << 20, 1 << 30


def results(environment: dict, ceilings: dict, settings: dict, cases, rows) -> dict:
    """The run as one dict: environment, ceilings, settings, case kinds, rows (non-finite
    numbers as None, as JSON stores them)."""
    kinds = {}
    for case in cases:
        kinds.setdefault((case.op, case.name), case.meta())
    return _finite({"environment": environment, "ceilings": ceilings, "settings": settings,
                    "cases": list(kinds.values()),
                    "rows": [dataclasses.asdict(r) if dataclasses.is_dataclass(r) else dict(r) for r in rows]})


def _finite(x):
    """JSON has no inf/NaN: such values are stored as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def write_json(res: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(res), indent=2, allow_nan=False) + "\n")


def load_json(path) -> dict:
    return json.loads(Path(path).read_text())


def write_markdown(res: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(res) + "\n")


def write(res: dict, out_dir) -> list:
    """results.json, results.md and the plots (at most 4) under out_dir; returns the paths."""
    from .plots import write_plots

    out_dir = Path(out_dir)
    write_json(res, out_dir / "results.json")
    write_markdown(res, out_dir / "results.md")
    return [out_dir / "results.json", out_dir / "results.md"] + write_plots(res, out_dir)


# --- Markdown ------------------------------------------------------------------------

def _num(x, fmt: str, dash: str = "-") -> str:
    return dash if x is None else format(x, fmt)


def _ms(x) -> str:
    return "-" if x is None else f"{x:.4f}" if x < 1 else f"{x:.3f}"


def _times(x) -> str:
    """A speed-up: '1.23×', or '-' when there is none."""
    return "-" if x is None else f"{x:.2f}×"


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def header(res: dict) -> list:
    env, ceil, s = res["environment"], res["ceilings"], res["settings"]
    gpu = f"{env.get('gpu')}, {env.get('sm_count')} SMs"
    if env.get("compute_capability"):
        gpu += f", compute capability {env['compute_capability']}"
    if env.get("l2_bytes"):
        gpu += f", L2 {env['l2_bytes'] / MIB:.0f} MiB"
    if env.get("memory_bytes"):
        gpu += f", {env['memory_bytes'] / GIB:.0f} GiB"
    seqmix = env.get("seqmix") or "?"
    if env.get("seqmix_commit"):
        seqmix += f" (commit {env['seqmix_commit']})"
    lines = [f"# seqmix GPU benchmark: {env.get('gpu')}", "", "| environment | |", "|---|---|",
             f"| GPU | {gpu} |", f"| driver | {env.get('driver') or 'unknown'} |",
             f"| CUDA (torch build) | {env.get('cuda') or 'unknown'} |"]
    for key in ("torch", "triton", "fla"):
        lines.append(f"| {key} | {env.get(key) or 'not installed'} |")
    lines += [f"| seqmix | {seqmix} |", f"| date | {env.get('date')} |",
              f"| suite | {'quick' if s.get('quick') else 'full'} |", ""]
    copy, gemm = ceil.get("copy", {}), ceil.get("gemm", {})
    flush_mib = s.get("flush_bytes") and s["flush_bytes"] / MIB
    lines += [f"**Ceilings**, measured at the start of this run: device copy **{_num(copy.get('GB/s'), '.0f')} GB/s** "
              f"({_num(copy.get('bytes') and copy['bytes'] / 2 / GIB, '.0f')} GiB bf16 tensor copied, bytes read "
              f"+ written), bf16 GEMM **{_num(gemm.get('TFLOP/s'), '.0f')} TFLOP/s** (torch.matmul, "
              f"{gemm.get('n')}³, 2·n³ FLOP).", "",
              f"**Timing**, two ways, each after {s.get('warmup')} warm-up calls as the median of "
              f"{s.get('reps')} repetitions, the L2 cache flushed ({_num(flush_mib, '.0f')} MiB "
              "written) before each, outside the timed region; before each row the GPU sits idle for "
              f"{_num(s.get('settle_s'), 'g')} s, so that no row inherits the state a heavy row before it "
              "left. **ms**: CUDA events around each call, so it "
              "includes the host's time to issue the call (Python, PyTorch dispatch), which dominates problems "
              "whose GPU work takes a few tens of µs. **ms (graph)**: the call captured once into a CUDA graph "
              "and the graph's replays timed, which leaves the GPU work and the short gaps between its kernels; "
              f"measured for {', '.join(GRAPH_DIRECTIONS)} (fwd+bwd: the forward and its autograd backward "
              "captured in one graph, gradients reset before it; the backward alone is not captured) where the "
              "event timing passed its check, the last replay's output checked against the same reference, and "
              "'-' with the reason in the status where a method cannot be captured or its replays differ. "
              "**fwd** is the training forward (autograd "
              "graph recorded); **infer** (where a case lists it) the same call under torch.no_grad(); **bwd** times `torch.autograd.backward(y, dy)` alone (graph built once and "
              "kept with retain_graph, or rebuilt untimed where a method cannot run backward twice; gradients "
              "reset before each repetition); **fwd+bwd** both. "
              "Rates, % of ceiling and the vs X columns come from **ms**; speed-up vs X = t_X / t_method (above 1: the "
              "method is faster). Status: ok, refused (a baseline "
              "that raised), or error (a failure, or max rel err above the case's bound).", ""]
    return lines


def _headline(case: dict, rows: list) -> list:
    """Speed-up of the headline method per shape: from the event times per direction, then
    a column pair from the graph replays (speed-up, and both methods' replay times)."""
    method, base = case["headline"]
    directions = case["directions"]
    graphed = [d for d in directions if d in GRAPH_DIRECTIONS]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))

    def find(shape, d, name):
        hit = [r for r in rows if (r["shape"], r["direction"], r["method"]) == (shape, d, name)]
        return hit[0] if hit else {}

    columns = list(directions) + [c for d in graphed for c in (f"{d} (graph)", f"{d} ms (graph): {method} / {base}")]
    lines = [f"**Headline**: speed-up of {method} over {base}, from the event times ({', '.join(directions)}) and "
             f"from the graph replays ({', '.join(graphed) or 'none'}, with both replay times).", "",
             "| shape | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for shape in shapes:
        cells = [_times(find(shape, d, method).get("speedup", {}).get(base)) for d in directions]
        for d in graphed:
            mine, theirs = find(shape, d, method), find(shape, d, base)
            cells += [_times(mine.get("speedup_graph", {}).get(base)),
                      f"{_ms(mine.get('ms_graph'))} / {_ms(theirs.get('ms_graph'))}"]
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return lines + [""]


def case_section(case: dict, rows: list) -> list:
    """The Markdown of one case kind: notes (inputs, formulas, reference), headline, table."""
    unit = case["unit"]
    ceiling_name = CEILING_OF_UNIT[unit][1]
    lines = [f"## {case['op']}: {case['name']}", ""] + [f"- {note}" for note in case["notes"]]
    lines += [f"- Bound on max rel err: {case['tolerance']:.0e}.", ""]
    if case.get("headline"):
        lines += _headline(case, rows)
    bases = case["speedup_over"]
    lines += ["| shape | dir | method | ms | ms (graph) | " + unit + f" | % of {ceiling_name} | "
              + "".join(f"vs {b} | " for b in bases) + "max rel err | status |",
              "|---|---|---|---:|---:|---:|---:|" + "---:|" * len(bases) + "---:|---|"]
    for r in rows:
        speedups = "".join(f"{_times(r['speedup'].get(b))} | " for b in bases)
        lines.append(f"| {r['shape']} | {r['direction']} | {r['method']} | {_ms(r['ms'])} | {_ms(r.get('ms_graph'))} | "
                     f"{_num(r['work'], '.0f' if unit == 'GB/s' else '.1f')} | {_num(r['pct_of_ceiling'], '.0f')} | "
                     f"{speedups}{_num(r['max_rel_err'], '.1e')} | {_cell(r['status'])} |")
    return lines + [""]


def markdown(res: dict) -> str:
    """results.md: the header, then one section per case kind, in run order."""
    lines = header(res)
    for case in res["cases"]:
        rows = [r for r in res["rows"] if (r["op"], r["case"]) == (case["op"], case["name"])]
        lines += case_section(case, rows)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    """Re-renders results.md and the plots from a results.json: python -m seqmix.bench.gpu.report PATH."""
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0])
    res = load_json(path)
    write_markdown(res, path.with_name("results.md"))
    from .plots import write_plots

    write_plots(res, path.parent)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
