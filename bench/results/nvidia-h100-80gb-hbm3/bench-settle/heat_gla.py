# Does a long run of causal attention just before slow the GLA forward's timing after it?
# seqmix's training forward at B1 T32768 timed cold, then right after 55 calls of SDPA causal
# attention on the same shape (as the suite's order has it), then again after a pause.
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import seqmix

B, T, H, K, V = 1, 32768, 16, 128, 128
flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
gen = torch.Generator(device="cuda").manual_seed(0)


def randn(*shape, s=1.0):
    return (torch.randn(shape, generator=gen, device="cuda") * s).to(torch.bfloat16).requires_grad_()


q, k, v = randn(B, T, H, K, s=K ** -0.25), randn(B, T, H, K, s=K ** -0.25), randn(B, T, H, V)
g = F.logsigmoid(torch.randn((B, T, H, K), generator=gen, device="cuda") / 16 + 3).to(torch.bfloat16).requires_grad_()
state = {}


def gla():
    state["y"] = seqmix.chunk_gla(q, k, v, g, scale=K ** -0.5)[0]


def attention():
    state["y"] = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                is_causal=True)


def timed(fn, reps=50, warmup=5):
    for _ in range(warmup):
        state.pop("y", None)
        fn()
    events = []
    for _ in range(reps):
        state.pop("y", None)
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        events.append((a, b))
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) for a, b in events]
    return statistics.median(times), times[:3], times[-3:]


for mode in sys.argv[1:] or ["fwd", "infer"]:
    with torch.set_grad_enabled(mode == "fwd"):
        print(f"{mode}: gla cold {timed(gla)}", flush=True)
        print(f"{mode}: attention {timed(attention)}", flush=True)
        print(f"{mode}: gla right after attention {timed(gla)}", flush=True)
        time.sleep(2)
        print(f"{mode}: gla after a 2 s pause {timed(gla)}", flush=True)
