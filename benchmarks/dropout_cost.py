#!/usr/bin/env python3
"""What dropout costs a training step: train_dp on one rank with --dropout 0 and with --dropout P,
for one or more builds side by side (rounds interleaved, so that the machine's drift falls on
every column alike). Prints the median ms per step over the log's windows and dropout's share.

  python3 benchmarks/dropout_cost.py --data-dir build/tests/shakespeare_data \\
      --binary new=build/trainers/train_dp --binary old=/tmp/train_dp_old [--rounds 5] [--steps 500]

Extra trainer flags go after --, e.g. -- --n-layer 6 --n-embd 384 --block-size 256 --batch-size 8.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile


def step_ms(binary, data_dir, dropout, steps, threads, extra):
    with tempfile.TemporaryDirectory() as out:
        command = [binary, "--data-dir", data_dir, "--max-iters", str(steps), "--eval-interval", "0",
                   "--sample-tokens", "0", "--threads", str(threads), "--dropout", str(dropout),
                   "--log-interval", "10", "--out-dir", out] + extra
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"dropout_cost: {' '.join(command)} failed:\n{run.stderr.strip()}")
        with open(os.path.join(out, "metrics.csv")) as f:  # a row per log window, full precision
            rows = [r for r in csv.DictReader(f) if r["kind"] == "train"]
        return [float(r["step_ms"]) for r in rows][1:]  # the first window warms up


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", action="append", required=True, help="NAME=PATH of a train_dp build")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("extra", nargs="*", help="more train_dp flags (after --)")
    a = parser.parse_args()
    builds = []
    for spec in a.binary:
        name, _, path = spec.partition("=")
        if not path or not os.access(path, os.X_OK):
            sys.exit(f"dropout_cost: --binary {spec!r} is not NAME=PATH of an executable")
        builds.append((name, path))
    windows = {(name, p): [] for name, _ in builds for p in (0.0, a.dropout)}
    for _ in range(a.rounds):
        for name, path in builds:
            for p in (0.0, a.dropout):
                windows[(name, p)] += step_ms(path, a.data_dir, p, a.steps, a.threads, a.extra)
    print(f"train_dp, 1 rank × {a.threads} threads, {a.rounds} rounds of {a.steps} steps, median ms/step "
          f"over windows of 10 steps {' '.join(a.extra)}")
    print(f"| build | --dropout 0 | --dropout {a.dropout} | dropout's share | windows |")
    print("|---|---|---|---|---|")
    for name, _ in builds:
        off, on = statistics.median(windows[(name, 0.0)]), statistics.median(windows[(name, a.dropout)])
        print(f"| {name} | {off:.2f} ms | {on:.2f} ms | {100 * (on - off) / on:.0f} % | "
              f"{len(windows[(name, 0.0)])} / {len(windows[(name, a.dropout)])} |")


if __name__ == "__main__":
    main()
