# Where the projection chain's forward+backward at 2048 tokens spends its event time beyond the
# forward's and the backward's own: per method of the suite's case, events of fwd, bwd and
# fwd+bwd as the suite times them, the host's time of each part, and a profiler trace of one
# fwd+bwd (CUDA runtime calls, kernels, the GPU's idle gaps).
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from seqmix.bench.gpu import chains

layer, tokens = sys.argv[1], int(sys.argv[2])
case = chains.projection_case(layer, tokens)
inputs = case.make_inputs()
leaves, dy = inputs["leaves"], inputs["dy"]
flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")


def clear():
    for t in leaves:
        t.grad = None


for method in case.methods:
    if method.name not in ("seqmix", "eager"):
        continue
    state = {}

    def step():
        state["y"] = method.run(inputs)
        torch.autograd.backward(state["y"], dy)

    for _ in range(5):
        clear()
        state.clear()
        step()
    torch.cuda.synchronize()
    events, host_fwd, host_bwd = [], [], []
    for _ in range(30):
        clear()
        state.clear()
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        state["y"] = method.run(inputs)
        t1 = time.perf_counter()
        torch.autograd.backward(state["y"], dy)
        t2 = time.perf_counter()
        b.record()
        events.append((a, b))
        host_fwd.append((t1 - t0) * 1e3)
        host_bwd.append((t2 - t1) * 1e3)
    torch.cuda.synchronize()
    ev = statistics.median(a.elapsed_time(b) for a, b in events)
    print(f"== {case.shape} {method.name} fwd+bwd: events {ev:.4f} ms, host fwd {statistics.median(host_fwd):.4f} ms, "
          f"host bwd {statistics.median(host_bwd):.4f} ms", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            clear()
            state.clear()
            flush.zero_()
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    last = None
    for e in kernels[len(kernels) // 2:]:
        gap = "" if last is None else f" gap {e.time_range.start - last:8.1f} us"
        print(f"   {e.name[:80]:80s} {e.time_range.elapsed_us():9.1f} us{gap}")
        last = e.time_range.end
