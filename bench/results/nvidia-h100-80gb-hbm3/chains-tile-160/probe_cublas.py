# cuBLAS's kernels for the chains' forward GEMMs: names, times (events, L2 flushed).
import sys, torch
torch.manual_seed(0)
dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
shapes = [(m, n) for n in (6160, 12320, 6144, 12288) for m in (2048, 8192, 32768)]
only_once = len(sys.argv) > 1
for m, n in shapes:
    x = torch.randn(m, 2048, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, 2048, device=dev, dtype=torch.bfloat16)
    if only_once:
        torch.matmul(x, w.t()); torch.cuda.synchronize(); continue
    for _ in range(3): torch.matmul(x, w.t())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.matmul(x, w.t()); torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    times = []
    for _ in range(20):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); torch.matmul(x, w.t()); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    print(f"M {m:6d} N {n:6d}: {times[len(times)//2]*1000:8.1f} us  {names}", flush=True)
