"""Runs bench cases and renders the table and JSON.

A case is one op at one shape: it builds inputs once and offers several methods (seqmix
fast, the float64 oracle, torch eager, ...), each a callable returning the main output.
Every method is timed on the same inputs and its output compared with the oracle's.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys

import numpy as np

from .timing import Progress, median_ms


@dataclasses.dataclass
class Case:
    op: str
    shape: str
    methods: dict            # name -> callable returning the op's main output
    oracle: str = "seqmix reference"   # the method whose output is the truth
    baseline: str | None = None        # speed-ups are relative to this method


@dataclasses.dataclass
class Row:
    op: str
    shape: str
    method: str
    ms: float
    speedup: float | None
    max_rel_err: float


def _numpy(x):
    if type(x).__module__.startswith("torch"):
        return x.detach().double().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def rel_err(got, want) -> float:
    got, want = _numpy(got), _numpy(want)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


def run_cases(cases, stream=sys.stderr, **timing) -> list[Row]:
    progress = Progress(sum(len(c.methods) for c in cases), stream)
    rows = []
    for case in cases:
        truth = case.methods[case.oracle]()
        times = {}
        for name, fn in case.methods.items():
            progress.step(f"{case.op} {case.shape} {name}")
            times[name] = median_ms(fn, **timing)
            rows.append(Row(case.op, case.shape, name, times[name], None, rel_err(fn(), truth)))
        base = times.get(case.baseline or case.oracle)
        for row in rows[-len(case.methods):]:
            row.speedup = base / row.ms if base else None
    progress.close()
    return rows


def table(rows) -> str:
    lines = ["| op | shape | method | ms | speed-up | max rel err |", "|---|---|---|---|---|---|"]
    for r in rows:
        speedup = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
        lines.append(f"| {r.op} | {r.shape} | {r.method} | {r.ms:.3f} | {speedup} | {r.max_rel_err:.1e} |")
    return "\n".join(lines)


def environment() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
    except ImportError:
        env["torch"] = None
    from .. import _C, __version__

    env.update(seqmix=__version__, built_with_cuda=_C.built_with_cuda(), cuda_devices=_C.cuda_device_count())
    return env


def to_json(rows, path: str, device: str) -> None:
    payload = {"device": device, "environment": environment(), "rows": [dataclasses.asdict(r) for r in rows]}
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
