"""The ``seqmix`` command.

    seqmix bench [--quick] [--json PATH] [--markdown PATH] [--device cpu]

Times every op of seqmix against its references side by side (same inputs, same
process) and prints one table: op, shape, method, ms, speed-up over the baseline, and
the max relative error against the float64 oracle.
"""

from __future__ import annotations

import argparse
import sys


def bench(args) -> int:
    from .bench import runner

    if args.device == "cuda":
        print("seqmix bench: this build has no GPU suite yet; use --device cpu", file=sys.stderr)
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
    p.add_argument("--quick", action="store_true", help="tiny shapes, one run each: a smoke test in seconds")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to run")
    p.set_defaults(func=bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
