"""PNG figures of a GPU run, drawn from the results dict with matplotlib's Agg backend
(skipped, with the reason on stderr, when matplotlib is not installed).

A case kind names its figure in ``Case.plot``: "bandwidth" (the work rate of every method
per shape, one panel per direction, the measured ceiling dashed) or "speedup_vs_T" (the
headline speed-up against T, one line per B, one panel per direction; dashed, the same
from CUDA-graph replays where the direction has them).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .case import GRAPH_DIRECTIONS
from .ceilings import ceiling_for
from .env import slug

MAX_PLOTS = 4  # with results.json and results.md: at most 6 files travel back


def _bandwidth(plt, case, rows, ceilings):
    directions, methods = case["directions"], case["methods"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    fig, axes = plt.subplots(1, len(directions), figsize=(5 * len(directions), 4), squeeze=False)
    width = 0.8 / len(methods)
    ceiling = ceiling_for(ceilings, case["unit"])
    for ax, direction in zip(axes[0], directions):
        for i, method in enumerate(methods):
            rate = {r["shape"]: r["work"] for r in rows if (r["direction"], r["method"]) == (direction, method)}
            ax.bar([x + i * width for x in range(len(shapes))], [rate.get(s) or 0 for s in shapes], width,
                   label=method)
        if ceiling:
            ax.axhline(ceiling, color="k", linestyle="--", linewidth=1, label="measured copy")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))], shapes, fontsize=8)
        ax.set_title(f"{case['name']}: {direction}")
        ax.set_ylabel(case["unit"])
    axes[0][0].legend(fontsize=7)
    return fig


def _series(row):
    """The line a row belongs to in a speedup-vs-T plot: its batch, or its layer where the
    case has no batch (the chains)."""
    params = row["params"]
    return f"B = {params['B']}" if "B" in params else str(params.get("layer", ""))


def _speedup_vs_T(plt, case, rows, ceilings):
    method, base = case["headline"]
    directions = case["directions"]
    fig, axes = plt.subplots(1, len(directions), figsize=(5 * len(directions), 4), squeeze=False)
    for ax, direction in zip(axes[0], directions):
        timings = [("speedup", "", "-")]
        if direction in GRAPH_DIRECTIONS:
            timings.append(("speedup_graph", " (graph)", "--"))
        series = sorted({_series(r) for r in rows if r["direction"] == direction})
        for key, suffix, style in timings:
            mine = [r for r in rows
                    if (r["direction"], r["method"]) == (direction, method) and base in r.get(key, {})]
            for name in sorted({_series(r) for r in mine}):
                points = sorted((r["params"]["T"], r[key][base]) for r in mine if _series(r) == name)
                ax.plot([t for t, _ in points], [s for _, s in points], marker="o", linestyle=style,
                        color=f"C{series.index(name)}", label=f"{name}{suffix}")
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("T")
        ax.set_ylabel(f"speed-up over {base}")
        ax.set_title(f"{method}: {direction}")
        ax.legend(fontsize=8)
    return fig


PLOTTERS = {"bandwidth": _bandwidth, "speedup_vs_T": _speedup_vs_T}


def write_plots(res: dict, out_dir, stream=None) -> list:
    """One PNG per case kind that names a plot (at most MAX_PLOTS); returns the paths.
    Reasons for a plot left out go to ``stream`` (stderr)."""
    stream = stream or sys.stderr
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("seqmix bench: no plots (matplotlib is not installed)", file=stream)
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for case in res["cases"]:
        draw = PLOTTERS.get(case.get("plot"))
        rows = [r for r in res["rows"] if (r["op"], r["case"]) == (case["op"], case["name"]) and r["work"]]
        if not draw or not rows:
            continue
        if len(written) == MAX_PLOTS:
            print(f"seqmix bench: plot of {case['op']} {case['name']} left out (at most {MAX_PLOTS})", file=stream)
            continue
        fig = draw(plt, case, rows, res["ceilings"])
        path = out_dir / f"{case['op']}_{slug(case['name'])}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
