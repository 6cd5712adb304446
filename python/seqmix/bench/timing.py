"""Timing helpers: warm-up, then the median of repeated wall-clock runs (CPU)."""

from __future__ import annotations

import statistics
import time


def median_ms(fn, warmup: int = 1, min_runs: int = 3, min_seconds: float = 0.2, max_runs: int = 50) -> float:
    """Median wall time of fn() in milliseconds over at least min_runs runs (and at
    least min_seconds in total, at most max_runs)."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < min_seconds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class Progress:
    """A one-line progress bar on stderr: ``[#####.....] 5/10 label``."""

    def __init__(self, total: int, stream, width: int = 30):
        self.total, self.done, self.stream, self.width = max(total, 1), 0, stream, width

    def step(self, label: str) -> None:
        self.done += 1
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} {label[:60]:<60}")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own above the bar (the bar is redrawn by the next step)."""
        self.stream.write(f"\r{text:<{self.width + 72}}\n")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()
