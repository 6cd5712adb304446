"""fla's GatedLinearAttention layer with its own chunk_gla and with seqmix.chunk_gla in its place.

Times one training step of the layer (forward and backward through every weight) both ways in
one process, on the same weights and inputs: CUDA events, the L2 flushed before each step,
medians, the two forms taken in turn. Also reports how far the two forms' outputs and
gradients are apart. Needs a GPU, seqmix built with its gla kernels, and fla.

    python bench/fla_layer_swap.py OUT_DIR [B,T,hidden,heads ...]

Writes OUT_DIR/fla_layer_swap.json and prints a Markdown table.
"""

from __future__ import annotations

import json
import os
import sys

import torch

import seqmix
from seqmix.bench.gpu.case import rel_err
from seqmix.bench.gpu.timing import CudaTimer, flush_bytes


def measure(fla_gla, shape, timer, rounds=3, reps=20):
    B, T, hidden, heads = shape
    torch.manual_seed(0)
    layer = fla_gla.GatedLinearAttention(mode="chunk", hidden_size=hidden, num_heads=heads).cuda().bfloat16()
    x = torch.randn(B, T, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    own = fla_gla.chunk_gla

    def use(chunk_gla):
        fla_gla.chunk_gla = chunk_gla

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x)[0].backward(dy)

    def results():
        step()
        return [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]

    times = {"fla": [], "seqmix": []}
    try:
        for _ in range(rounds):
            for name, chunk_gla in (("fla", own), ("seqmix", seqmix.chunk_gla)):
                use(chunk_gla)
                times[name].append(timer.median_ms(step, reps, warmup=3))
                print(f"{shape} {name}: {times[name][-1]:.3f} ms", file=sys.stderr, flush=True)
        use(own)
        theirs = results()
        use(seqmix.chunk_gla)
        ours = results()
    finally:
        use(own)
    apart = max(rel_err(a, b) for a, b in zip(ours, theirs))
    head_k, head_v = layer.head_k_dim, layer.head_v_dim
    return {"B": B, "T": T, "hidden": hidden, "heads": heads, "K": head_k, "V": head_v,
            "fla_ms": times["fla"], "seqmix_ms": times["seqmix"], "max_rel_apart": apart}


def main(argv):
    out = argv[1]
    shapes = [tuple(int(v) for v in a.split(",")) for a in argv[2:]] or [(8, 2048, 2048, 16), (4, 4096, 2048, 16)]
    import fla.layers.gla as fla_gla  # not a seqmix dependency: the caller installs it

    timer = CudaTimer(torch, flush_bytes(torch))
    rows = [measure(fla_gla, shape, timer) for shape in shapes]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "fla_layer_swap.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    print("| B | T | hidden | heads | K, V a head | fla's chunk_gla (ms) | seqmix.chunk_gla (ms) | speed-up | "
          "max rel apart |")
    print("|---:|---:|---:|---:|---|---|---|---:|---:|")
    for r in rows:
        fla_ms, ours_ms = sorted(r["fla_ms"])[1], sorted(r["seqmix_ms"])[1]
        print(f"| {r['B']} | {r['T']} | {r['hidden']} | {r['heads']} | {r['K']}, {r['V']} | "
              f"{' / '.join(f'{t:.3f}' for t in r['fla_ms'])} | {' / '.join(f'{t:.3f}' for t in r['seqmix_ms'])} | "
              f"{fla_ms / ours_ms:.2f}× | {r['max_rel_apart']:.1e} |")


if __name__ == "__main__":
    main(sys.argv)
