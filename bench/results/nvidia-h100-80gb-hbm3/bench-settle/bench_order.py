# The suite's GLA case at B1 T32768 three ways in one process: as the suite runs it, then with
# a 1 s pause before every row, then as it runs it again; the seqmix and fla rows of each.
import sys
import time

import torch

from seqmix.bench.gpu import gla, suite
from seqmix.bench.gpu.timing import CudaTimer, flush_bytes

shape = tuple(int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1,32768,16,128,128").split(","))
timer = CudaTimer(torch, flush_bytes(torch))
settings = suite.settings_for(False)
plain = suite.measure_row


def paused(*args, **kwargs):
    torch.cuda.synchronize()
    time.sleep(1.0)
    return plain(*args, **kwargs)


class Quiet:
    def step(self, label):
        pass


for name, measure in (("suite order", plain), ("1 s pause before each row", paused), ("suite order again", plain)):
    suite.measure_row = measure
    rows = suite.run_case(torch, timer, gla.gla_case(*shape), settings, {}, Quiet())
    print(f"== {name}")
    for r in rows:
        ms = "-" if r.ms is None else f"{r.ms:.4f}"
        graph = "-" if r.ms_graph is None else f"{r.ms_graph:.4f}"
        print(f"  {r.direction:8s} {r.method:18s} events {ms:>8s} graph {graph:>8s} {r.status[:60]}", flush=True)
