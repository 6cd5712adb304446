"""The timing helpers of the GPU suite, both with warm-up, the L2 cache flushed before
every timed repetition and the median reported:

- ``CudaTimer.median_ms``: CUDA events around each call, so the time includes what the
  host spends launching it (Python, PyTorch dispatch), which dominates small problems;
- ``CudaTimer.graph_median_ms``: the calls captured once into a CUDA graph and its
  replays timed, which leaves the GPU work and shrinks the launch gaps between kernels.
"""

from __future__ import annotations

import statistics

MIB = 1 << 20


def flush_bytes(torch, device=0) -> int:
    """Twice the L2 cache (at least 256 MiB): writing that much evicts every input."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return max(2 * l2, 256 * MIB)


def _first_cause(e: BaseException) -> BaseException:
    """The exception that started a chain: when ``fn`` raises during capture, leaving
    ``torch.cuda.graph`` ends the capture and raises a vaguer error ("operation failed due
    to a previous error during capture") whose context is the telling one."""
    for _ in range(16):  # chains are short; the bound guards against a cycle
        earlier = e.__cause__ or e.__context__
        if earlier is None:
            break
        e = earlier
    return e


class CudaTimer:
    """Times callables on the current CUDA stream.

    Before each repetition (outside the timed region) it runs the caller's ``before``
    hook, then writes a buffer of ``flush_size`` bytes so no input is left in L2.
    """

    def __init__(self, torch, flush_size: int):
        self.torch = torch
        self.flush_size = flush_size
        self._flush = torch.empty(flush_size // 4, dtype=torch.int32, device="cuda")
        # why the last graph_median_ms returned None ("<Exception>: <message>"), else None
        self.graph_failure = None

    def median_ms(self, fn, reps: int, warmup: int, before=None) -> float:
        """Median time of ``fn()`` in milliseconds over ``reps`` repetitions, after
        ``warmup`` untimed calls (which also absorb compilation and autotuning)."""
        for _ in range(warmup):
            if before:
                before()
            fn()
        return self._timed(fn, reps, before)

    def graph_median_ms(self, fn, reps: int, warmup: int, before=None):
        """Median time in milliseconds of replaying a CUDA graph of ``fn()`` over ``reps``
        replays, or None when ``fn`` cannot be captured (it synchronises, autotunes,
        allocates outside PyTorch...): ``graph_failure`` then says why.

        As PyTorch's documentation asks, ``warmup`` calls run first on a side stream, then
        one call is captured; one untimed replay uploads the graph. What ``fn`` returns
        lives in the graph's memory pool and is overwritten by each replay: the caller
        may read it afterwards. The graph is freed on return.
        """
        torch = self.torch
        self.graph_failure = None
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(max(warmup, 1)):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            graph.replay()
            return self._timed(graph.replay, reps, before)
        except Exception as e:  # the caller reports it; the run goes on
            # text only: the exception's traceback would keep the graph and its pool alive
            cause = _first_cause(e)
            self.graph_failure = f"{type(cause).__name__}: {str(cause).strip()}"
            return None

    def _timed(self, fn, reps: int, before) -> float:
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
