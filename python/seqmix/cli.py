"""The ``seqmix`` command.

    seqmix bench [--quick | --full] [--json PATH] [--markdown PATH] [--device cpu]
    seqmix bench --device cuda [--quick | --full] [--out DIR] [--ops gated_scan,...] [--json PATH] [--markdown PATH]

Times every op of seqmix against its references side by side (same inputs, same
process) and prints one table: op, shape, method, ms, speed-up over the baseline, and
the max relative error against the float64 oracle.

On the GPU (``--device cuda``) it first measures the copy bandwidth and bf16 GEMM rate,
then times each op's cases against its baselines (fla, torch eager, torch.compile) and
writes results.json, results.md and plots under DIR (default
bench/results/<gpu name>/); see seqmix.bench.gpu.
"""

from __future__ import annotations

import argparse
import sys


def _ops_list(text: str) -> list:
    """--ops: a comma-separated list of ops that have GPU cases."""
    from .bench.gpu.suite import parse_ops

    try:
        return parse_ops(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def bench(args) -> int:
    from .bench import runner

    if args.device == "cuda":
        from .bench.gpu import suite

        ops = args.ops or list(suite.OPS)
        return suite.run(ops, args.quick, out=args.out, json_path=args.json, markdown_path=args.markdown)
    if args.out or args.ops:
        print("seqmix bench: --out and --ops apply to --device cuda", file=sys.stderr)
        return 2
    device = "cpu"
    from .bench.cpu_cases import cpu_cases

    print(f"seqmix bench on the CPU ({'quick' if args.quick else 'full'} suite)", file=sys.stderr)
    timing = {"min_runs": 1, "min_seconds": 0.0, "warmup": 0} if args.quick else {}
    rows = runner.run_cases(cpu_cases(args.quick), **timing)
    text = runner.table(rows)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        runner.to_json(rows, args.json, device)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="seqmix", description="seqmix sequence-mixing kernels")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("bench", help="time every op against its references and print a table")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="quick", action="store_true", help="small shapes, few runs: a smoke test "
                      "(seconds on the CPU, about two minutes on the GPU)")
    size.add_argument("--full", dest="quick", action="store_false", help="every shape (the default)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to run")
    p.add_argument("--out", metavar="DIR", help="(cuda) folder for results.json, results.md and the plots "
                   "(default bench/results/<gpu name>/)")
    p.add_argument("--ops", type=_ops_list, metavar="OP,...", help="(cuda) only these ops' cases "
                   "(default: every op with GPU cases)")
    p.set_defaults(func=bench, quick=False)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
