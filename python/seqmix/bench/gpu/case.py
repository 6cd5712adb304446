"""The data model of the GPU suite.

A Case is one op at one shape. It builds its inputs on demand (so only one case's
tensors live at a time) and offers Methods: seqmix and its baselines, all run on the
same inputs. Each method is timed per direction ("fwd", "bwd", "fwd+bwd", and for cases
that ask for it "infer") into a Row; the forwards and fwd+bwd are also timed as CUDA-graph
replays (GRAPH_DIRECTIONS).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
# "fwd" is the training forward (autograd records its graph, and an op may keep tensors for
# its backward); "infer" the same call under torch.no_grad(), as inference runs it. A case
# whose ops differ between the two (GLA's training forward keeps its chunk states) lists both.
FORWARD_DIRECTIONS = ("fwd", "infer")
# Directions also timed as CUDA-graph replays: the forwards, and the forward with its
# backward captured in one graph. The backward alone is not: its autograd graph would come
# from a forward outside the capture, whose stream the backward's kernels would run on.
GRAPH_DIRECTIONS = (*FORWARD_DIRECTIONS, "fwd+bwd")


@dataclasses.dataclass
class Method:
    name: str
    run: Callable[[dict], Any]      # the case's inputs -> output y (autograd graph recorded)
    work: dict                      # direction -> bytes that must move (unit GB/s) or FLOP (TFLOP/s)
    reference: str = "main"         # which of the case's references y must match
    baseline: bool = False          # a baseline: an exception reads as "refused: <reason>"
    # The directions this method is timed in (None: all of the case's). A baseline whose
    # backward takes seconds (a Python loop over T steps under autograd) is timed forward only.
    directions: Optional[tuple] = None

    def runs(self, direction: str) -> bool:
        return self.directions is None or direction in self.directions


@dataclasses.dataclass
class Case:
    op: str
    name: str                       # the kind of case; the report has one section per (op, name)
    shape: str
    params: dict                    # the numbers behind the shape (B, T, ...), for the plots
    make_inputs: Callable[[], dict]  # -> {"leaves": [tensors needing grads], "dy": tensor, ...}
    methods: list
    # (inputs, reference name) -> (y, [grad per leaf or None]): the truth, as observed slices
    references: Callable[[dict, str], tuple]
    # (inputs, y or None, [leaf grads] or None) -> the same slices of a method's results
    observe: Callable[[dict, Any, Optional[list]], tuple]
    directions: tuple = DIRECTIONS
    unit: str = "GB/s"              # "GB/s" (work in bytes) or "TFLOP/s" (work in FLOP)
    speedup_over: tuple = ()        # baseline methods every row is compared with
    headline: Optional[tuple] = None  # (method, baseline): the speed-up the report lifts out
    tolerance: float = 1e-2         # max rel err above this is reported as an error
    notes: tuple = ()               # Markdown lines: inputs, formulas, what the reference is
    plot: Optional[str] = None      # "bandwidth" or "speedup_vs_T" (see plots.py)

    def steps(self) -> int:
        return sum(m.runs(d) for m in self.methods for d in self.directions)

    def meta(self) -> dict:
        """What the report needs of the case kind (JSON-serialisable)."""
        return {"op": self.op, "name": self.name, "unit": self.unit, "directions": list(self.directions),
                "methods": [m.name for m in self.methods], "speedup_over": list(self.speedup_over),
                "headline": list(self.headline) if self.headline else None, "tolerance": self.tolerance,
                "notes": list(self.notes), "plot": self.plot}


@dataclasses.dataclass
class Row:
    op: str
    case: str
    shape: str
    direction: str
    method: str
    ms: Optional[float]
    work: Optional[float]            # in `unit`
    unit: str
    pct_of_ceiling: Optional[float]
    speedup: dict                    # baseline -> t_baseline / t_method
    max_rel_err: Optional[float]
    status: str                      # "ok", "refused: <reason>" or "error: <msg>", then
                                     # "; graph: <why>" when ms_graph was not measured
    params: dict
    ms_graph: Optional[float] = None  # median CUDA-graph replay (GRAPH_DIRECTIONS), else None
    speedup_graph: dict = dataclasses.field(default_factory=dict)  # baseline -> from ms_graph


def rate(work: float, ms: float, unit: str) -> float:
    """GB/s from bytes or TFLOP/s from FLOP."""
    scale = {"GB/s": 1e9, "TFLOP/s": 1e12}[unit]
    return work / (ms * 1e-3) / scale


def rel_err(got, want) -> float:
    """‖got − want‖ / ‖want‖ in float64 on the tensors' device; inf for a missing or
    non-finite result or a shape mismatch."""
    if got is None or tuple(got.shape) != tuple(want.shape):
        return math.inf
    got, want = got.detach().double(), want.detach().double()
    if not bool(got.isfinite().all()):
        return math.inf
    return float((got - want).norm() / want.norm().clamp_min(1e-300))
