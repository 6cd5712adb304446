"""The one timing helper of the GPU suite: CUDA events around each call, warm-up, the L2
cache flushed before every timed repetition, the median reported."""

from __future__ import annotations

import statistics

MIB = 1 << 20


def flush_bytes(torch, device=0) -> int:
    """Twice the L2 cache (at least 256 MiB): writing that much evicts every input."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return max(2 * l2, 256 * MIB)


class CudaTimer:
    """Times callables on the current CUDA stream.

    Before each repetition (outside the timed region) it runs the caller's ``before``
    hook, then writes a buffer of ``flush_size`` bytes so no input is left in L2.
    """

    def __init__(self, torch, flush_size: int):
        self.torch = torch
        self.flush_size = flush_size
        self._flush = torch.empty(flush_size // 4, dtype=torch.int32, device="cuda")

    def median_ms(self, fn, reps: int, warmup: int, before=None) -> float:
        """Median time of ``fn()`` in milliseconds over ``reps`` repetitions, after
        ``warmup`` untimed calls (which also absorb compilation and autotuning)."""
        for _ in range(warmup):
            if before:
                before()
            fn()
        events = [(self._event(), self._event()) for _ in range(reps)]
        for start, end in events:
            if before:
                before()
            self._flush.zero_()
            start.record()
            fn()
            end.record()
        self.torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events)

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)
