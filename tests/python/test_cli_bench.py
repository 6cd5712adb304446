"""`seqmix bench` on the CPU: the quick suite runs every op and reports sane numbers."""

import json

import pytest

from conftest import requires_torch


@requires_torch
def test_quick_cpu_bench_covers_every_op(tmp_path, capsys):
    from seqmix.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    ops = {r["op"] for r in rows}
    assert ops == {"gated_scan", "chunk_gla", "chunk_gated_delta_rule", "attention", "linear_recurrence",
                   "projection_chain", "output_chain"}
    for r in rows:
        assert r["ms"] > 0
        # Every method computes the op in float32 or better: far under bf16-level error.
        assert r["max_rel_err"] < 1e-3, r
    assert "| op | shape | method |" in capsys.readouterr().out


def test_cuda_suite_refuses_clearly_without_a_gpu(capsys):
    import seqmix
    from seqmix.cli import main

    if seqmix.cuda_available():
        pytest.skip("a CUDA device is present: the refusal is for machines without one")
    assert main(["bench", "--device", "cuda", "--quick"]) == 2
