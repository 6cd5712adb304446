"""The CUDA dense linear recurrence through torch, against the float64 oracle (skips
without a GPU or without the op's CUDA kernels in the build)."""

import pytest

from conftest import TOLERANCE, cuda_kernels_or_skip, rel_err, requires_torch

pytestmark = requires_torch

METHODS = ["sequential", "chunked", "scan", "cyclic_reduction", "auto"]


@pytest.fixture
def torch():
    cuda_kernels_or_skip("linear_recurrence")
    import torch

    return torch


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("method", METHODS)
def test_forward_backward_match_oracle(torch, dtype, method):
    check_against_oracle(torch, dtype, method, G=2, T=77, n=32, m=3)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_vector_state_chunked_in_one_pass_matches_oracle(torch, dtype):
    # From 5 groups up a vector state's chunked chains run in one pass (fused_chunked.cuh).
    check_against_oracle(torch, dtype, "chunked", G=6, T=77, n=40, m=1)


def check_against_oracle(torch, dtype, method, G, T, n, m):
    import seqmix

    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(7)
    A = (torch.rand(G, T, n, n, generator=gen, dtype=torch.float64) * 2 - 1) * 1.2 / n**0.5
    b = torch.randn(G, T, n, m, generator=gen, dtype=torch.float64)
    h0 = torch.randn(G, n, m, generator=gen, dtype=torch.float64)
    dh = torch.randn(G, T, n, m, generator=gen, dtype=torch.float64)
    stored = [x.to(dt) for x in (A, b, h0)]  # the values both paths see

    def run(device, impl, method):
        leaves = [x.to(device).requires_grad_() for x in stored]
        h, hT = seqmix.linear_recurrence(*leaves, method=method, output_final_state=True, impl=impl)
        (h.double() * dh.to(device)).sum().add(hT.double().sum()).backward()
        return [h, hT] + [x.grad for x in leaves]

    got = run("cuda", "automatic", method)
    want = run("cpu", "reference", "sequential")
    for g, w in zip(got, want):
        assert rel_err(g.cpu().double(), w.double()) < TOLERANCE[dtype], (dtype, method)


def test_torch_compile_fullgraph_on_cuda(torch):
    import seqmix

    A = (torch.rand(2, 100, 16, 16, device="cuda") * 2 - 1) * 0.3
    b = torch.randn(2, 100, 16, 1, device="cuda", requires_grad=True)
    f = torch.compile(lambda A, b: seqmix.linear_recurrence(A, b).square().sum(), fullgraph=True)
    loss = f(A, b)
    loss.backward()
    assert torch.isfinite(b.grad).all()
    eager = seqmix.linear_recurrence(A, b).square().sum().item()
    assert abs(loss.item() - eager) < 1e-4 * abs(eager)


def test_unsupported_state_size_is_a_clear_error(torch):
    import seqmix

    A = torch.zeros(1, 4, 12, 12, device="cuda")
    b = torch.ones(1, 4, 12, 1, device="cuda")
    with pytest.raises(seqmix.SeqmixError, match="multiple of 8"):
        seqmix.linear_recurrence(A, b)


def test_grid_run_records_every_method_on_a_small_point(torch, tmp_path):
    """The bench's grid run on two tiny points: every method's forward, repetitions, peak
    memory and error of h against float64, auto's backward, and a report that names the
    cyclic reduction over scan ratio and the skipped method with its reason."""
    from seqmix.bench.gpu import linear_recurrence as bench

    points = [(2, 64, 8, 1, torch.float32, tuple(bench.METHODS), {}, {}),
              (1, 33, 16, 3, torch.bfloat16, ("sequential", "scan", "cyclic_reduction", "auto"),
               {"chunked": "a stated reason"}, {})]
    text = bench.grid(points, str(tmp_path))
    records = bench._record_lines(tmp_path / "grid.jsonl")
    assert records[0]["run"]["points"] == 2 and len(records) == 3
    first, second = records[1], records[2]
    assert set(first["fwd"]) == set(bench.METHODS) and set(first["bwd"]) == {"auto"}
    assert all(ms > 0 for ms in first["fwd"].values()) and first["bwd"]["auto"] > 0
    assert all(first["reps"][k] in (bench.GRID_REPS, bench.GRID_REPS_SLOW) for k in bench.METHODS)
    assert all(err < 1e-5 for err in first["err"].values()), first["err"]
    assert all(err < 2e-2 for err in second["err"].values()), second["err"]
    assert first["peak_mib"]["scan"] >= first["peak_mib"]["cyclic_reduction"] > 0
    assert "chunked" not in second["fwd"]
    assert "G1 T33 n16 m3 bf16: chunked not timed: a stated reason" in text
    assert (tmp_path / "grid.md").read_text().strip() == text.strip()


@requires_torch
def test_grid_summary_and_predicted_duration(monkeypatch):
    """The grid report from records alone (no GPU): the fastest method in bold, its ratio
    to the floor at the run's copy rate, CR ÷ scan with peak memory, auto's backward ratio
    from events and from graph replays;
    and the whole grid predicted inside one device call (280 s) on an 80 GiB device."""
    from seqmix.bench.gpu import linear_recurrence as bench

    floor_ms = bench.recurrence_bytes(16, 4096, 64, 1, 4)["fwd"] / 3000e6
    record = {"point": "G16 T4096 n64 m1 fp32", "G": 16, "T": 4096, "n": 64, "m": 1, "dtype": "fp32", "skipped": {},
              "fwd": {"sequential": 2.0, "chunked": 3 * floor_ms, "scan": 24.0, "cyclic_reduction": 4.0,
                      "auto": 3 * floor_ms},
              "reps": {}, "peak_mib": {"scan": 2000.0, "cyclic_reduction": 1000.0},
              "err": {"scan": 1e-6, "auto": 3e-6}, "bwd": {"auto": 6 * floor_ms},
              "graph": {"fwd": 0.5, "bwd": 1.5, "failure": None}}
    no_graph = dict(record, point="G16 T4096 n64 m1 bf16", dtype="bf16", graph=None)
    text = bench.grid_summary([{"run": {"copy_gbps": 3000.0}}, record, no_graph])
    assert f"**{3 * floor_ms:.3f}**" in text and "3.00× (chunked)" in text
    assert "6.00× (2000 / 1000)" in text and "| 2.00× | 3.00× (0.500 / 1.500) | 3.0e-06 |" in text
    assert "| 2.00× | – | 3.0e-06 |" in text  # a point whose replays failed has no graph ratio
    assert "within 2× at 0 of 2" in text and "within 2.5× at 2 of 2 (CUDA events" in text
    assert "replays (kernels only; the cell gives fwd / bwd ms): 3.00× to 3.00×" in text
    assert "within 2.5× at 0 of 1." in text

    monkeypatch.setattr(bench, "_device_bytes", lambda: 80 * 2**30)
    assert 30 < bench.expected_grid_seconds() < 280
