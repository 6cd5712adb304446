"""The GPU suite of `seqmix bench` on the CPU: argument handling, the gated-scan case
builders on tiny CPU tensors, a whole case run with a wall-clock timer, the Markdown and
JSON reports, and the plots. The CUDA timers run against a fake torch that logs the order
of operations; the timings themselves run only on a GPU machine."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import time

import pytest

from conftest import requires_torch

pytestmark = requires_torch


@pytest.fixture
def torch():
    import torch

    return torch


@pytest.fixture
def gs(monkeypatch):
    """The gated-scan cases, with torch.compile replaced by the function itself (the
    Inductor compile takes tens of seconds on the CPU; the GPU run compiles for real)."""
    from seqmix.bench.gpu import gated_scan

    monkeypatch.setattr(gated_scan, "compiled", lambda fn: fn)
    return gated_scan


class WallTimer:
    """Stands in for CudaTimer on the CPU: same interface, wall-clock median. Its "graph"
    calls ``fn`` once with ``capturing`` set (where a method may raise as an uncapturable
    op does) and "replays" by calling ``fn`` again with ``replaying`` set."""

    flush_size = 0

    def __init__(self):
        self.calls = 0
        self.graph_calls = 0
        self.graph_failure = None
        self.capturing = self.replaying = False

    def median_ms(self, fn, reps, warmup, before=None):
        times = []
        for i in range(warmup + reps):
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            self.calls += 1
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def graph_median_ms(self, fn, reps, warmup, before=None):
        self.graph_calls += 1
        self.graph_failure = None
        try:
            for _ in range(warmup):
                fn()
            self.capturing = True
            fn()
        except Exception as e:
            self.graph_failure = f"{type(e).__name__}: {e}"
            return None
        finally:
            self.capturing = False
        self.replaying = True
        try:
            return self.median_ms(fn, reps, 0, before)
        finally:
            self.replaying = False


class NoProgress:
    def step(self, label):
        pass


CEILINGS = {"copy": {"GB/s": 100.0, "bytes": 2 << 30, "ms": 1.0}, "gemm": {"TFLOP/s": 1.0, "n": 4096, "ms": 1.0}}


def run_cases(torch, cases, reps=2, timer=None):
    from seqmix.bench.gpu import suite

    settings = suite.Settings(True, reps, 1)
    timer = timer or WallTimer()
    return [row for case in cases for row in suite.run_case(torch, timer, case, settings, CEILINGS, NoProgress())]


# --- arguments -------------------------------------------------------------------------

def test_parse_ops_accepts_known_and_names_them_on_error():
    from seqmix.bench.gpu.suite import OPS, parse_ops

    assert parse_ops(" gated_scan ,") == ["gated_scan"]
    with pytest.raises(ValueError, match="unknown op.*attention_x.*known: " + ", ".join(OPS)):
        parse_ops("gated_scan,attention_x")
    with pytest.raises(ValueError, match="none given"):
        parse_ops(",")


def test_cli_passes_cuda_options_to_the_suite(monkeypatch, tmp_path):
    from seqmix import cli
    from seqmix.bench.gpu import suite

    calls = []
    monkeypatch.setattr(suite, "run", lambda *args, **kwargs: calls.append((args, kwargs)) or 0)
    assert cli.main(["bench", "--device", "cuda", "--quick", "--out", str(tmp_path), "--ops", "gated_scan",
                     "--json", "r.json", "--markdown", "r.md"]) == 0
    assert calls == [((["gated_scan"], True), {"out": str(tmp_path), "json_path": "r.json", "markdown_path": "r.md"})]
    assert cli.main(["bench", "--device", "cuda"]) == 0
    assert calls[1] == ((list(suite.OPS), False), {"out": None, "json_path": None, "markdown_path": None})
    assert cli.main(["bench", "--device", "cuda", "--full", "--out", "d"]) == 0  # as scripts/gpu_check.sh asks
    assert calls[2] == ((list(suite.OPS), False), {"out": "d", "json_path": None, "markdown_path": None})


def test_cli_rejects_unknown_ops_and_gpu_options_on_the_cpu(capsys):
    from seqmix import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--device", "cuda", "--ops", "nope"])
    assert exit_.value.code == 2
    assert "unknown op(s) nope; known: gated_scan" in capsys.readouterr().err
    assert cli.main(["bench", "--device", "cpu", "--ops", "gated_scan"]) == 2
    assert "--out and --ops apply to --device cuda" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--quick", "--full"])
    assert "not allowed with argument" in capsys.readouterr().err
    assert cli.main(["bench", "--out", "d"]) == 2
    assert "--out and --ops apply to --device cuda" in capsys.readouterr().err


def test_cli_without_a_gpu_says_why(capsys, tmp_path):
    import seqmix
    from seqmix import cli

    if seqmix.cuda_available():
        pytest.skip("a GPU is present: this checks the message on machines without one")
    assert cli.main(["bench", "--device", "cuda", "--quick", "--out", str(tmp_path)]) == 2
    assert "CUDA" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# --- the gated-scan cases ----------------------------------------------------------------

def test_case_lists_quick_and_full(gs):
    quick, full = gs.cases(quick=True), gs.cases(quick=False)
    assert [c.shape for c in quick] == ["B4 T2048 D4096 bf16", "B4 T2048 d256 dv64 bf16", "B16 T512 d256 dv64 bf16"]
    assert len(full) == 2 + 9
    assert {(c.params["B"], c.params["T"]) for c in full if c.name == "semi-fused layer"} == {
        (B, T) for B in (1, 4, 16) for T in (512, 2048, 8192)}
    scan = quick[0]
    assert [m.name for m in scan.methods] == ["seqmix", "seqmix no gate", "fla chunk_hgrn", "torch eager",
                                              "torch.compile"]
    assert scan.directions == ("fwd", "bwd", "fwd+bwd") and scan.steps() == 15
    assert [m.name for m in quick[1].methods] == ["seqmix fused layer", "seqmix semi-fused", "three-kernel", "torch.compile unfused"]
    assert quick[1].directions == ("fwd", "fwd+bwd") and quick[1].headline == ("seqmix fused layer", "three-kernel")
    assert [m.name for m in scan.methods if m.baseline] == ["fla chunk_hgrn", "torch eager", "torch.compile"]


def test_bytes_formulas(gs):
    n = 4 * 2048 * 4096 * 2
    assert gs.scan_bytes(4, 2048, 4096, gate=True) == {"fwd": 4 * n, "bwd": 7 * n, "fwd+bwd": 11 * n}
    assert gs.scan_bytes(4, 2048, 4096, gate=False) == {"fwd": 3 * n, "bwd": 5 * n, "fwd+bwd": 8 * n}
    work = gs.layer_bytes(16, 512)
    assert work["fwd"] == 2 * (16 * 512 * (256 + 64) + 192 * 256)
    assert work["fwd+bwd"] == work["fwd"] + 2 * (16 * 512 * (512 + 64) + 2 * 192 * 256)
    scan = gs.scan_case(2, 8, 16, device="cpu")
    assert [m.work["fwd"] for m in scan.methods] == [4 * 2 * 8 * 16 * 2] + [3 * 2 * 8 * 16 * 2] * 2 + [
        4 * 2 * 8 * 16 * 2] * 2


def test_scan_inputs_have_mild_log_decays(gs, torch):
    inputs = gs.scan_case(2, 64, 32, device="cpu").make_inputs()
    a, b, z = inputs["leaves"]
    assert a.dtype == torch.bfloat16 and a.shape == (2, 64, 32) and inputs["dy"].shape == (2, 64, 32)
    assert all(t.requires_grad for t in (a, b, z))
    a = a.detach().float()
    assert float(a.max()) < 0 and float(a.min()) >= -0.05 * (1 + 2**-8)  # [−0.05, 0) up to bf16 rounding


def test_strided_column_views_match_contiguous_copies(gs, torch):
    import seqmix

    gen = torch.Generator().manual_seed(3)
    B, T, d, dv = 2, 37, 16, 8
    x, W = torch.randn(B, T, d, generator=gen), torch.randn(3 * dv, d, generator=gen) / 4
    u = x @ W.T
    a, b, z = u[..., :dv], u[..., dv:2 * dv], u[..., 2 * dv:]
    assert not a.is_contiguous() and a.stride() == (T * 3 * dv, 3 * dv, 1)
    want = seqmix.gated_scan(a.contiguous(), b.contiguous(), z.contiguous(), decay="logit")
    assert torch.allclose(gs.semi_fused_layer(x, W), want, rtol=1e-5, atol=1e-6)
    assert torch.allclose(gs.three_kernel_layer(x, W), want, rtol=1e-5, atol=1e-6)
    oracle = gs.sequential_scan(a.double().sigmoid(), b.double(), z.double())
    assert torch.allclose(want.double(), oracle, rtol=1e-4, atol=1e-5)


def test_eager_scan_matches_the_sequential_definition(gs, torch):
    gen = torch.Generator().manual_seed(4)
    a = -0.05 * torch.rand(2, 300, 8, generator=gen, dtype=torch.float64)
    b, z = torch.randn(2, 300, 8, generator=gen, dtype=torch.float64), torch.randn(2, 300, 8, generator=gen,
                                                                                    dtype=torch.float64)
    got = gs.eager_scan(a, b, z).double()  # float32 inside
    want = gs.sequential_scan(a.exp(), b, z)
    assert float((got - want).norm() / want.norm()) < 1e-5


# --- running cases ------------------------------------------------------------------------

def test_forward_only_baselines_get_no_backward_rows(torch):
    """A method limited to some directions (the dense recurrence's PyTorch loops, whose
    backward takes seconds) is timed in those only; the progress count agrees."""
    from seqmix.bench.gpu import linear_recurrence

    case = linear_recurrence.recurrence_case(2, 16, 8, 2, device="cpu")
    rows = run_cases(torch, [case])
    assert len(rows) == case.steps() == 5 * 3 + 2
    baselines = {(r.method, r.direction) for r in rows if r.method.startswith("torch")}
    assert baselines == {("torch Hillis–Steele", "fwd"), ("torch loop", "fwd")}
    for r in rows:
        assert r.status == "ok", (r.method, r.direction, r.status)
        assert r.max_rel_err < 1e-4, (r.method, r.direction, r.max_rel_err)
        if r.method.startswith("seqmix") and r.direction == "fwd":
            assert set(r.speedup) == {"torch Hillis–Steele", "torch loop"}


def test_attention_cases_time_every_direction_on_cpu(torch):
    """The attention cases (here the small fp16 configuration, in float32 on CPU tensors):
    the forward is checked against float64; the backward rows are timed and, having no
    gradient reference in the suite (the GPU tests compare gradients), carry no error."""
    from seqmix.bench.gpu import attention

    case = attention.small_case(32, True, device="cpu", dtype=torch.float32)
    rows = run_cases(torch, [case])
    assert {(r.method, r.direction) for r in rows} == {(m, d) for m in ("seqmix", "SDPA default")
                                                       for d in ("fwd", "bwd", "fwd+bwd")}
    for r in rows:
        assert r.status == "ok", (r.method, r.direction, r.status)
        if r.direction == "bwd":
            assert r.max_rel_err is None
        else:
            assert r.max_rel_err < 1e-5
    assert len(attention.cases(quick=False)) == 36 + 10


def test_every_row_waits_its_settle_time_before_it_is_timed(torch, monkeypatch):
    """The suite's settings pause before each row (a row timed right after a heavy one read
    slow on the H100); the pause comes before the row's first call, once per row, and a
    setting of 0 never sleeps."""
    from seqmix.bench.gpu import attention, suite

    assert suite.settings_for(True).settle_s > 0 and suite.settings_for(False).settle_s > 0
    log = []
    monkeypatch.setattr(suite.time, "sleep", lambda s: log.append(("sleep", s)))
    measure = suite.measure_row

    def logged(torch, timer, case, method, direction, *args):
        log.append(("row", method.name, direction))
        return measure(torch, timer, case, method, direction, *args)

    monkeypatch.setattr(suite, "measure_row", logged)
    case = attention.small_case(32, True, device="cpu", dtype=torch.float32)
    for settle_s in (0.25, 0.0):
        log.clear()
        settings = suite.Settings(True, 1, 1, settle_s)
        rows = suite.run_case(torch, WallTimer(), case, settings, CEILINGS, NoProgress())
        assert [entry[0] for entry in log] == ["sleep", "row"] * len(rows) if settle_s else ["row"] * len(rows)
        assert all(entry == ("sleep", settle_s) for entry in log if entry[0] == "sleep")


def test_gla_case_times_inference_without_grad_and_training_with_it(torch):
    """GLA's case times the forward twice: "infer" under torch.no_grad() (graph replays too)
    and "fwd" with autograd recording, where seqmix's training forward keeps chunk states."""
    import dataclasses

    from seqmix.bench.gpu import gla

    case = gla.gla_case(2, 70, 2, 16, 16, device="cpu", dtype=torch.float32)
    seen = []
    methods = []
    for m in case.methods:
        def run(x, run=m.run, name=m.name):
            seen.append((name, torch.is_grad_enabled()))
            return run(x)
        methods.append(dataclasses.replace(m, run=run))
    case = dataclasses.replace(case, methods=methods)
    timer = WallTimer()
    rows = {(r.method, r.direction): r for r in run_cases(torch, [case], timer=timer)}
    assert case.directions == ("infer", "fwd", "fwd+bwd")
    assert rows[("seqmix", "infer")].status == "ok" and rows[("seqmix", "infer")].max_rel_err < 1e-4
    assert rows[("seqmix", "infer")].ms_graph is not None and rows[("seqmix", "fwd")].ms_graph is not None
    assert rows[("seqmix", "fwd+bwd")].status == "ok"
    modes = {mode for name, mode in seen if name == "seqmix"}
    assert modes == {False, True}
    # The first call of each direction: infer first, without grad; then fwd with it.
    first = [mode for name, mode in seen if name == "seqmix"][0]
    assert first is False


def test_run_case_on_cpu_fills_every_row(gs, torch):
    cases = [gs.scan_case(3, 50, 272, device="cpu"), gs.layer_case(3, 40, d=32, dv=8, device="cpu")]
    rows = run_cases(torch, cases)
    assert len(rows) == sum(c.steps() for c in cases)
    fla_present = importlib.util.find_spec("fla") is not None
    for r in rows:
        if r.method == "fla chunk_hgrn" and not fla_present:
            assert r.status.startswith("refused: RuntimeError: fla is not importable"), r.status
            assert r.ms is None and r.speedup == {} and r.ms_graph is None and r.speedup_graph == {}
            continue
        if r.method == "fla chunk_hgrn":  # fla's Triton kernels do not run on CPU tensors
            assert r.status.startswith("refused"), r.status
            continue
        assert r.status == "ok", (r.method, r.direction, r.status)
        assert r.ms > 0 and r.work > 0 and r.pct_of_ceiling == pytest.approx(100 * r.work / 100.0)
        bound = 1e-2 if r.case == "scan kernel" else 2e-2
        assert 0 < r.max_rel_err < bound, (r.method, r.direction, r.max_rel_err)
        if r.direction in ("fwd", "fwd+bwd"):  # also timed as graph replays
            assert r.ms_graph > 0, (r.method, r.direction)
        else:
            assert r.ms_graph is None and r.speedup_graph == {}, (r.method, r.direction)
    for time_of, speedup_of in (("ms", "speedup"), ("ms_graph", "speedup_graph")):
        times = {(r.shape, r.direction, r.method): getattr(r, time_of) for r in rows}
        for r in rows:
            for base, x in getattr(r, speedup_of).items():
                want = times[(r.shape, r.direction, base)] / getattr(r, time_of)
                assert base != r.method and x == pytest.approx(want)
    layer_fwd = next(r for r in rows if (r.method, r.direction) == ("seqmix semi-fused", "fwd"))
    assert set(layer_fwd.speedup_graph) == {"three-kernel", "torch.compile unfused"}
    seqmix_fwd = next(r for r in rows if (r.method, r.direction) == ("seqmix", "fwd"))
    timed_baselines = {r.method for r in rows if r.case == "scan kernel" and r.ms and r.method in cases[0].speedup_over}
    assert set(seqmix_fwd.speedup) == timed_baselines >= {"torch eager", "torch.compile"}


def test_failures_are_reported_not_raised(gs, torch):
    from seqmix.bench.gpu.case import Method

    case = gs.scan_case(2, 16, 8, device="cpu", dtype=torch.float32)
    work = case.methods[0].work

    def boom(_):
        raise MemoryError("out of memory here")

    wrong = Method("seqmix off by a lot", lambda x: 2 * case.methods[0].run(x), work, reference="gated")
    case.methods = [case.methods[0], Method("broken baseline", boom, work, baseline=True),
                    Method("broken seqmix", boom, work), wrong]
    case.speedup_over = ("broken baseline",)
    status = {(r.direction, r.method): r.status for r in run_cases(torch, [case])}
    assert len(status) == 12
    assert status[("fwd", "seqmix")] == "ok"
    assert status[("fwd", "broken baseline")] == "refused: MemoryError: out of memory here"
    assert status[("bwd", "broken seqmix")] == "error: MemoryError: out of memory here"
    assert status[("fwd", "seqmix off by a lot")] == "error: max rel err 1.0e+00 above the 1e-02 bound"  # no graph
    assert status[("bwd", "seqmix off by a lot")].startswith("error: max rel err")

    case.make_inputs = lambda: boom(None)
    rows = run_cases(torch, [case])
    assert len(rows) == 12 and {r.status for r in rows} == {"error: making the inputs: MemoryError: out of memory here"}


def test_graph_capture_failures_are_recorded_and_the_run_goes_on(gs, torch):
    """A method that raises while captured (an op that synchronises, say) keeps its event
    time and says why it has no graph time; one whose replays compute something else has
    its graph time dropped; the methods after them are timed both ways."""
    from seqmix.bench.gpu.case import Method

    timer = WallTimer()
    case = gs.layer_case(2, 16, d=16, dv=8, device="cpu")
    _fused, semi_fused, three_kernel, compiled_layer = case.methods

    def uncapturable(x):
        if timer.capturing:
            raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
        return three_kernel.run(x)

    def replays_differ(x):
        y = compiled_layer.run(x)
        return 2 * y if timer.replaying else y

    case.methods = [Method("three-kernel", uncapturable, three_kernel.work),
                    Method("torch.compile unfused", replays_differ, compiled_layer.work, baseline=True), semi_fused]
    rows = {(r.direction, r.method): r for r in run_cases(torch, [case], timer=timer)}
    assert timer.graph_calls == 6  # one capture per fwd and fwd+bwd measurement, none for bwd
    stuck = rows[("fwd", "three-kernel")]
    assert stuck.status == "ok; graph: not capturable: RuntimeError: operation not permitted when stream is capturing"
    assert stuck.ms > 0 and stuck.ms_graph is None and stuck.speedup_graph == {}
    differ = rows[("fwd", "torch.compile unfused")]
    assert differ.status == "ok; graph: replay max rel err 1.0e+00 above the bound"
    assert differ.ms > 0 and differ.ms_graph is None
    mine = rows[("fwd", "seqmix semi-fused")]
    assert mine.status == "ok" and mine.ms_graph > 0
    assert set(mine.speedup) == {"three-kernel", "torch.compile unfused"} and mine.speedup_graph == {}
    assert rows[("fwd+bwd", "three-kernel")].status == stuck.status
    assert rows[("fwd+bwd", "torch.compile unfused")].status == differ.status
    assert rows[("fwd+bwd", "seqmix semi-fused")].status == "ok" and rows[("fwd+bwd", "seqmix semi-fused")].ms_graph > 0


def test_backward_that_cannot_run_twice_rebuilds_its_graph(gs, torch):
    from seqmix.bench.gpu.case import Method

    class Once(torch.autograd.Function):
        """Identity whose backward refuses a second call on one graph."""

        @staticmethod
        def forward(ctx, y):
            ctx.calls = 0
            return y.clone()

        @staticmethod
        def backward(ctx, g):
            ctx.calls += 1
            if ctx.calls > 1:
                raise RuntimeError("backward through this graph twice")
            return g

    case = gs.scan_case(2, 16, 8, device="cpu", dtype=torch.float32)
    seqmix_method = case.methods[0]
    case.methods = [Method("once", lambda x: Once.apply(seqmix_method.run(x)), seqmix_method.work, "gated")]
    rows = run_cases(torch, [case])
    assert [r.status for r in rows] == ["ok"] * 3 and all(r.ms > 0 for r in rows)


class FakeCuda:
    """Just enough of torch for CudaTimer: events on a fake clock, a logged flush, streams
    and CUDA graphs whose capture and replays are logged (a replay takes the next of
    ``replay_ms``)."""

    int32 = "int32"

    def __init__(self, l2_bytes=50 << 20, replay_ms=()):
        self.log, self.now, self.capturing = [], 0.0, False
        replay_ms = iter(replay_ms)
        fake = self

        class Stream:
            def __init__(self, name="side"):
                self.name = name

            def wait_stream(self, other):
                fake.log.append(f"{self.name} waits for {other.name}")

        class UseStream:
            def __init__(self, stream):
                self.stream = stream

            def __enter__(self):
                fake.log.append(f"on {self.stream.name}")

            def __exit__(self, *exc):
                fake.log.append("on main")

        class CUDAGraph:
            def replay(self):
                fake.log.append("replay")
                fake.now += next(replay_ms)

        class Capture:
            def __init__(self, graph):
                assert isinstance(graph, CUDAGraph)

            def __enter__(self):
                fake.log.append("capture")
                fake.capturing = True

            def __exit__(self, exc_type, *exc):
                fake.capturing = False
                fake.log.append("end capture")
                if exc_type:  # as torch's capture_end on an invalidated capture
                    raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

        class Event:
            def __init__(self, enable_timing):
                assert enable_timing

            def record(self):
                fake.log.append("record")
                self.t = fake.now

            def elapsed_time(self, end):
                return end.t - self.t

        class Buffer:
            def zero_(self):
                fake.log.append("flush")

        class Props:
            L2_cache_size = l2_bytes

        self.cuda = type("cuda", (), {"Event": Event, "synchronize": lambda: fake.log.append("sync"),
                                      "get_device_properties": lambda device: Props(), "Stream": Stream,
                                      "current_stream": lambda: Stream("main"), "stream": UseStream,
                                      "CUDAGraph": CUDAGraph, "graph": Capture})
        self.empty = lambda n, dtype, device: fake.log.append(("alloc", n, dtype, device)) or Buffer()


def test_cuda_timer_flushes_outside_the_timed_region_and_takes_the_median():
    from seqmix.bench.gpu.timing import CudaTimer, flush_bytes

    assert flush_bytes(FakeCuda(50 << 20)) == 256 << 20 and flush_bytes(FakeCuda(200 << 20)) == 400 << 20
    fake = FakeCuda()
    timer = CudaTimer(fake, 1 << 20)
    assert fake.log == [("alloc", 1 << 18, "int32", "cuda")]
    durations = iter([9.0, 9.0, 1.0, 5.0, 3.0])  # two warm-ups, then three timed calls

    def fn():
        fake.log.append("fn")
        fake.now += next(durations)

    ms = timer.median_ms(fn, reps=3, warmup=2, before=lambda: fake.log.append("before"))
    assert ms == 3.0
    assert fake.log[1:] == ["before", "fn"] * 2 + ["before", "flush", "record", "fn", "record"] * 3 + ["sync"]


def test_graph_timer_warms_up_on_a_side_stream_captures_once_and_times_replays():
    from seqmix.bench.gpu.timing import CudaTimer

    fake = FakeCuda(replay_ms=[100.0, 4.0, 2.0, 8.0])  # the untimed upload replay, then three timed
    timer = CudaTimer(fake, 1 << 20)
    fake.log.clear()

    def fn():
        fake.log.append("fn captured" if fake.capturing else "fn")

    ms = timer.graph_median_ms(fn, reps=3, warmup=2, before=lambda: fake.log.append("before"))
    assert ms == 4.0 and timer.graph_failure is None
    assert fake.log == (["side waits for main", "on side", "fn", "fn", "on main", "main waits for side",
                         "capture", "fn captured", "end capture", "replay"]
                        + ["before", "flush", "record", "replay", "record"] * 3 + ["sync"])


def test_graph_timer_returns_none_when_capture_fails_and_stays_usable():
    from seqmix.bench.gpu.timing import CudaTimer

    fake = FakeCuda(replay_ms=[1.0, 3.0])
    timer = CudaTimer(fake, 1 << 20)
    fake.log.clear()

    def synchronising_op():
        fake.log.append("fn")
        if fake.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    assert timer.graph_median_ms(synchronising_op, reps=3, warmup=1) is None
    # the error fn raised, not the vaguer one that ending the capture raised after it
    assert timer.graph_failure == "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert fake.log[-3:] == ["capture", "fn", "end capture"] and "replay" not in fake.log  # capture ended
    fake.log.clear()
    assert timer.median_ms(lambda: fake.log.append("fn"), reps=1, warmup=0) == 0.0
    assert fake.log == ["flush", "record", "fn", "record", "sync"]

    assert timer.graph_median_ms(lambda: None, reps=1, warmup=0) == 3.0  # a success clears the reason
    assert timer.graph_failure is None


def test_run_writes_the_report_and_returns_the_status(gs, torch, monkeypatch, tmp_path, capsys):
    """suite.run's glue on the CPU: the GPU parts (device checks, environment, timer,
    ceilings) replaced by stand-ins, the cases tiny CPU ones."""
    import seqmix
    from seqmix.bench.gpu import ceilings, env, suite, timing

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(seqmix, "cuda_available", lambda: True)
    monkeypatch.setattr(env, "environment", lambda torch: dict(ENV))
    monkeypatch.setattr(timing, "CudaTimer", lambda torch, size: WallTimer())
    monkeypatch.setattr(timing, "flush_bytes", lambda torch: 256 << 20)
    monkeypatch.setattr(ceilings, "measure", lambda torch, timer, quick, reps, warmup: CEILINGS)
    monkeypatch.setattr(suite.time, "sleep", lambda s: None)  # the settle time before each row
    monkeypatch.setattr(suite, "build_cases", lambda ops, quick: [gs.scan_case(2, 16, 8, device="cpu"),
                                                                  gs.layer_case(2, 16, d=16, dv=8, device="cpu")])
    extra = tmp_path / "extra.json"
    assert suite.run(["gated_scan"], True, out=tmp_path / "out", json_path=str(extra)) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# seqmix GPU benchmark: NVIDIA H100 80GB HBM3")
    assert "seqmix bench on NVIDIA H100 80GB HBM3 (quick suite: gated_scan)" in err and "wrote " in err
    assert "without a graph replay time" not in err
    assert (tmp_path / "out" / "results.md").read_text() == out
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved == json.loads(extra.read_text())
    assert saved["settings"] == {"quick": True, "reps": 10, "warmup": 3, "settle_s": 1.0, "flush_bytes": 0}
    assert len(saved["rows"]) == 15 + 8

    broken = gs.scan_case(2, 16, 8, device="cpu")
    broken.methods[0].run = lambda x: 2 * gs.seqmix.gated_scan(*x["leaves"], decay="log")
    monkeypatch.setattr(suite, "build_cases", lambda ops, quick: [broken])
    assert suite.run(["gated_scan"], True, out=tmp_path / "again") == 1
    assert "3 seqmix row(s) failed" in capsys.readouterr().err

    class NoGraphs(WallTimer):  # as on a GPU where nothing can be captured
        def graph_median_ms(self, fn, reps, warmup, before=None):
            self.graph_failure = "RuntimeError: capture refused"
            return None

    # A run stopped mid-way (a time limit) keeps every finished case on disk, and the log
    # has each finished row.
    stopped = gs.layer_case(2, 16, d=16, dv=8, device="cpu")

    def interrupted():
        raise KeyboardInterrupt

    stopped.make_inputs = interrupted
    monkeypatch.setattr(suite, "build_cases", lambda ops, quick: [gs.scan_case(2, 16, 8, device="cpu"), stopped])
    with pytest.raises(KeyboardInterrupt):
        suite.run(["gated_scan"], True, out=tmp_path / "stopped")
    kept = json.loads((tmp_path / "stopped" / "results.json").read_text())
    assert len(kept["rows"]) == 15 and {r["case"] for r in kept["rows"]} == {"scan kernel"}
    assert "scan kernel" in (tmp_path / "stopped" / "results.md").read_text()
    err = capsys.readouterr().err
    assert " fwd seqmix: " in err and "[ok]" in err

    monkeypatch.setattr(timing, "CudaTimer", lambda torch, size: NoGraphs())
    monkeypatch.setattr(suite, "build_cases", lambda ops, quick: [gs.scan_case(2, 16, 8, device="cpu")])
    assert suite.run(["gated_scan"], True, out=tmp_path / "no-graphs") == 0  # event times still count
    out, err = capsys.readouterr()
    assert "8 row(s) without a graph replay time" in err  # every ok fwd and fwd+bwd row; fla is refused on the CPU
    assert out.count("; graph: not capturable: RuntimeError: capture refused |") == 8


def test_ceilings_and_timer_interface_on_cpu(torch):
    from seqmix.bench.gpu import ceilings

    timer = WallTimer()
    copy = ceilings.copy_bandwidth(torch, timer, 3, 1, size=1 << 20, device="cpu")
    gemm = ceilings.gemm_throughput(torch, timer, 3, 1, n=64, device="cpu")
    assert copy["bytes"] == 2 << 20 and copy["GB/s"] == pytest.approx(copy["bytes"] / copy["ms"] / 1e6)
    assert gemm["TFLOP/s"] == pytest.approx(2 * 64**3 / gemm["ms"] / 1e9)
    assert timer.calls == 8
    assert ceilings.ceiling_for({"copy": copy, "gemm": gemm}, "GB/s") == copy["GB/s"]
    assert ceilings.ceiling_for({"copy": copy, "gemm": gemm}, "TFLOP/s") == gemm["TFLOP/s"]


def test_environment_helpers_tolerate_absence():
    from seqmix.bench.gpu import env

    assert env.package_version("surely-not-an-installed-distribution-xyz") is None
    assert env.package_version("surely-not-an-installed-distribution-xyz", "numpy") is not None
    assert env.driver_version() is None or isinstance(env.driver_version(), str)
    assert env.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert env.slug("  ") == "unknown-gpu"


def test_environment_reads_device_properties_and_versions():
    import types

    import seqmix
    from seqmix.bench.gpu import env

    props = types.SimpleNamespace(multi_processor_count=132, major=9, minor=0, L2_cache_size=50 << 20,
                                  total_memory=80 << 30)
    fake = types.SimpleNamespace(
        __version__="2.11.0", version=types.SimpleNamespace(cuda="12.8"),
        cuda=types.SimpleNamespace(get_device_properties=lambda d: props, get_device_name=lambda d: "NVIDIA H100"))
    got = env.environment(fake)
    assert {k: got[k] for k in ("gpu", "sm_count", "compute_capability", "l2_bytes", "cuda", "torch", "seqmix")} == {
        "gpu": "NVIDIA H100", "sm_count": 132, "compute_capability": "9.0", "l2_bytes": 50 << 20, "cuda": "12.8",
        "torch": "2.11.0", "seqmix": seqmix.__version__}
    assert {"driver", "triton", "fla", "date", "seqmix_commit"} <= set(got) and got["date"].endswith("+00:00")


def test_progress_falls_back_to_the_plain_bar(monkeypatch):
    import builtins
    import io

    from seqmix.bench.gpu import suite

    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name == "tqdm":
            raise ImportError("no tqdm")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    stream = io.StringIO()
    bar = suite.make_progress(2, stream)
    bar.step("first")
    bar.step("second")
    bar.close()
    assert "2/2 second" in stream.getvalue()


def test_tqdm_progress_notes_go_to_the_bar_stream_not_stdout(monkeypatch, capsys):
    """With tqdm installed the per-row notes go through tqdm.write, which prints to stdout
    unless given a file; stdout carries the report, so the notes must go to the bar's stream."""
    import io
    import sys
    import types

    from seqmix.bench.gpu import suite

    class FakeTqdm:
        def __init__(self, total, file, dynamic_ncols):
            self.file = file

        def set_description_str(self, text):
            pass

        def update(self, n):
            pass

        @staticmethod
        def write(text, file=None):
            print(text, file=file or sys.stdout)

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    stream = io.StringIO()
    bar = suite.make_progress(1, stream)
    bar.step("only")
    bar.note("  a row line")
    bar.close()
    assert "a row line" in stream.getvalue()
    assert "a row line" not in capsys.readouterr().out


# --- reports ------------------------------------------------------------------------------

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "compute_capability": "9.0", "l2_bytes": 50 << 20,
       "memory_bytes": 80 << 30, "driver": "570.86.15", "cuda": "12.8", "torch": "2.11.0", "triton": "3.6.0",
       "fla": None, "seqmix": "0.1.0", "seqmix_commit": "abc123", "python": "3.12", "date": "2025-01-01T00:00:00+00:00"}


@pytest.fixture
def results(gs, torch):
    from seqmix.bench.gpu import report

    cases = [gs.scan_case(2, 32, 16, device="cpu"), gs.layer_case(1, 32, d=16, dv=8, device="cpu"),
             gs.layer_case(2, 64, d=16, dv=8, device="cpu"), gs.layer_case(1, 64, d=16, dv=8, device="cpu")]
    rows = run_cases(torch, cases, reps=1)
    rows[0].max_rel_err = math.inf  # JSON stores it as null
    settings = {"quick": True, "reps": 1, "warmup": 1, "flush_bytes": 256 << 20}
    return report.results(ENV, CEILINGS, settings, cases, rows)


def test_markdown_has_header_formulas_tables_and_headline(results):
    from seqmix.bench.gpu import report

    text = report.markdown(results)
    assert text.startswith("# seqmix GPU benchmark: NVIDIA H100 80GB HBM3\n")
    for piece in ("132 SMs", "570.86.15", "| CUDA (torch build) | 12.8 |", "| fla | not installed |",
                  "0.1.0 (commit abc123)", "device copy **100 GB/s**", "bf16 GEMM **1 TFLOP/s**", "4096³",
                  "median of 1 repetitions", "(256 MiB written)", "## gated_scan: scan kernel",
                  "## gated_scan: semi-fused layer", "fwd with gate 4·N·2", "float64 token-by-token loop",
                  "**Headline**: speed-up of seqmix fused layer over three-kernel, from the event times (fwd, "
                  "fwd+bwd) and from the graph replays (fwd, fwd+bwd, with both replay times).",
                  "| shape | fwd | fwd+bwd | fwd (graph) | fwd ms (graph): seqmix fused layer / three-kernel | "
                  "fwd+bwd (graph) | fwd+bwd ms (graph): seqmix fused layer / three-kernel |",
                  "| shape | dir | method | ms | ms (graph) | GB/s | % of copy | vs fla chunk_hgrn | vs torch eager "
                  "| vs torch.compile | max rel err | status |",
                  "**ms**: CUDA events around each call", "**ms (graph)**: the call captured once into a CUDA graph",
                  "captured in one graph, gradients reset before it; the backward alone is not captured"):
        assert piece in text, piece
    table_rows = [line for line in text.splitlines() if line.startswith("| B")]
    assert len(table_rows) == len(results["rows"]) + 3  # every row, plus the headline's three shapes
    assert text.index("## gated_scan: scan kernel") < text.index("## gated_scan: semi-fused layer")
    for r in results["rows"]:  # the graph time next to the event time; '-' where not measured
        assert r["direction"] in ("fwd", "fwd+bwd") or r["ms_graph"] is None
        prefix = f"| {r['shape']} | {r['direction']} | {r['method']} | {report._ms(r['ms'])} | "
        assert any(line.startswith(prefix + f"{report._ms(r['ms_graph'])} | ") for line in table_rows), r
    rows = {(r["shape"], r["direction"], r["method"]): r for r in results["rows"]}
    for shape in ("B1 T32 d16 dv8 bf16", "B2 T64 d16 dv8 bf16", "B1 T64 d16 dv8 bf16"):
        cells = [report._times(rows[(shape, d, "seqmix fused layer")]["speedup"]["three-kernel"])
                 for d in ("fwd", "fwd+bwd")]
        for d in ("fwd", "fwd+bwd"):
            mine, base = rows[(shape, d, "seqmix fused layer")], rows[(shape, d, "three-kernel")]
            cells += [report._times(mine["speedup_graph"]["three-kernel"]),
                      f"{report._ms(mine['ms_graph'])} / {report._ms(base['ms_graph'])}"]
        assert f"| {shape} | " + " | ".join(cells) + " |" in table_rows, shape


def test_markdown_of_results_without_graph_times(results):
    """A row without a graph time (not capturable, or a results.json from before graph
    timing) renders '-' in its graph cells."""
    from seqmix.bench.gpu import report

    for r in results["rows"]:
        r["ms_graph"], r["speedup_graph"] = None, {}
    blank = report.markdown(results)
    for r in results["rows"]:
        del r["ms_graph"], r["speedup_graph"]
    assert report.markdown(results) == blank
    table_rows = [line for line in blank.splitlines() if line.startswith("| B")]
    assert all(line.split(" | ")[4] == "-" for line in table_rows[:15])  # the scan rows' ms (graph)
    headline_rows = [line for line in table_rows if line.count(" | ") == 6]
    assert len(headline_rows) == 3 and all(line.endswith(" | - | - / - | - | - / - |") for line in headline_rows)


def test_json_round_trip_renders_the_same(results, tmp_path):
    from seqmix.bench.gpu import report

    written = report.write(results, tmp_path / "out")
    assert written[:2] == [tmp_path / "out" / "results.json", tmp_path / "out" / "results.md"]
    assert len(list((tmp_path / "out").iterdir())) <= 6
    loaded = report.load_json(tmp_path / "out" / "results.json")
    assert loaded["rows"][0]["max_rel_err"] is None
    assert loaded["environment"] == ENV and loaded["ceilings"] == CEILINGS
    assert [c["name"] for c in loaded["cases"]] == ["scan kernel", "semi-fused layer"]
    assert loaded["rows"][1] == json.loads(json.dumps(results["rows"][1]))
    assert report.markdown(loaded) == (tmp_path / "out" / "results.md").read_text().rstrip("\n") + "\n"
    assert report.markdown(loaded) == report.markdown(results)


def test_plots_are_written(results, tmp_path):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed: plots not checked on this machine")
    from seqmix.bench.gpu.plots import write_plots

    paths = write_plots(results, tmp_path)
    assert [p.name for p in paths] == ["gated_scan_scan-kernel.png", "gated_scan_semi-fused-layer.png"]
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_plot_logic_with_a_stand_in_matplotlib(results, tmp_path, monkeypatch):
    """Runs the plotting code against a recording stand-in for matplotlib (the real one
    is checked above where installed): every figure drawn, saved and closed."""
    import sys
    import types
    from unittest import mock

    from seqmix.bench.gpu.plots import write_plots

    plt = mock.MagicMock(name="pyplot")
    figures = []

    def subplots(nrows, ncols, **kwargs):
        assert nrows == 1 and kwargs["squeeze"] is False
        fig = mock.MagicMock(name="figure")
        fig.savefig.side_effect = lambda path, **kw: path.write_bytes(b"png")
        figures.append((fig, [[mock.MagicMock(name=f"axes{i}") for i in range(ncols)]]))
        return figures[-1]

    plt.subplots.side_effect = subplots
    matplotlib = types.ModuleType("matplotlib")
    matplotlib.use = mock.MagicMock()
    matplotlib.pyplot = plt
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", plt)
    paths = write_plots(results, tmp_path)
    assert [p.name for p in paths] == ["gated_scan_scan-kernel.png", "gated_scan_semi-fused-layer.png"]
    matplotlib.use.assert_called_once_with("Agg")
    (scan_fig, scan_axes), (layer_fig, layer_axes) = figures
    assert len(scan_axes[0]) == 3 and len(layer_axes[0]) == 2
    bars = scan_axes[0][0].bar.call_args_list
    assert [c.kwargs["label"] for c in bars] == ["seqmix", "seqmix no gate", "fla chunk_hgrn", "torch eager",
                                                 "torch.compile"]
    scan_axes[0][0].axhline.assert_called_once()
    assert scan_axes[0][0].axhline.call_args.args == (100.0,)  # the copy ceiling
    lines = layer_axes[0][0].plot.call_args_list  # fwd: one line per B, points sorted by T, then graph replays
    assert [c.kwargs["label"] for c in lines] == ["B = 1", "B = 2", "B = 1 (graph)", "B = 2 (graph)"]
    assert list(lines[0].args[0]) == [32, 64] and list(lines[1].args[0]) == [64]
    assert [c.kwargs["linestyle"] for c in lines] == ["-", "-", "--", "--"]
    assert [c.kwargs["color"] for c in lines] == ["C0", "C1", "C0", "C1"]  # one colour per B
    graph_fwd = {(r["params"]["B"], r["params"]["T"]): r["speedup_graph"]["three-kernel"] for r in results["rows"]
                 if (r["case"], r["direction"], r["method"]) == ("semi-fused layer", "fwd", "seqmix fused layer")}
    assert list(lines[2].args[1]) == [graph_fwd[(1, 32)], graph_fwd[(1, 64)]]
    fwd_bwd = layer_axes[0][1].plot.call_args_list  # fwd+bwd: events, then graph replays too
    assert [c.kwargs["label"] for c in fwd_bwd] == ["B = 1", "B = 2", "B = 1 (graph)", "B = 2 (graph)"]
    assert plt.close.call_count == 2


def test_plots_skip_visibly_without_matplotlib(results, tmp_path, monkeypatch, capsys):
    import builtins

    from seqmix.bench.gpu.plots import write_plots

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert write_plots(results, tmp_path) == []
    assert "no plots (matplotlib is not installed)" in capsys.readouterr().err
