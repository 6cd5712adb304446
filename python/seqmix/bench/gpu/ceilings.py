"""The ceilings every result is measured against, taken at the start of each run on the
GPU at hand: device-to-device copy bandwidth and bf16 GEMM throughput."""

from __future__ import annotations

GIB = 1 << 30


def copy_bandwidth(torch, timer, reps: int, warmup: int, size: int = GIB, device="cuda") -> dict:
    """GB/s of ``dst.copy_(src)`` for a ``size``-byte bf16 tensor, counting bytes read
    plus bytes written (2·size)."""
    src = torch.ones(size // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = timer.median_ms(lambda: dst.copy_(src), reps, warmup)
    return {"GB/s": 2 * size / (ms * 1e-3) / 1e9, "bytes": 2 * size, "ms": ms}


def gemm_throughput(torch, timer, reps: int, warmup: int, n: int = 8192, device="cuda") -> dict:
    """TFLOP/s of ``torch.matmul`` on n×n bf16 matrices (cuBLAS), 2·n³ FLOP per call."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(n, n, generator=gen, device=device).to(torch.bfloat16)
    ms = timer.median_ms(lambda: torch.matmul(a, b), reps, warmup)
    return {"TFLOP/s": 2 * n**3 / (ms * 1e-3) / 1e12, "n": n, "ms": ms}


def measure(torch, timer, quick: bool, reps: int, warmup: int, device="cuda") -> dict:
    """Both ceilings: 1 GiB copy, 8192³ GEMM (4096³ with ``quick``). Memory is freed after."""
    ceilings = {"copy": copy_bandwidth(torch, timer, reps, warmup, device=device),
                "gemm": gemm_throughput(torch, timer, reps, warmup, n=4096 if quick else 8192, device=device)}
    if device == "cuda":
        torch.cuda.empty_cache()
    return ceilings


# Which ceiling a row's work unit is a fraction of, and how the report names it.
CEILING_OF_UNIT = {"GB/s": ("copy", "copy"), "TFLOP/s": ("gemm", "GEMM")}


def ceiling_for(ceilings: dict, unit: str):
    """The measured ceiling in ``unit`` (None when not measured)."""
    key, _ = CEILING_OF_UNIT[unit]
    return ceilings.get(key, {}).get(unit)
