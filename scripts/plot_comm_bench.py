#!/usr/bin/env python3
"""Plots comm_bench CSV files: bus bandwidth against message size, one line per backend
(and rank count, and form: out of place or in place), one PNG per collective.

    mpiexec -n 2 build/benchmarks/comm_bench --op allreduce --compare mpi,ring,naive -b 1K -e 256M -f 4 --csv ar.csv
    python3 scripts/plot_comm_bench.py ar.csv --out plots/

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import csv
import os
import sys

from pyplot import pyplot
from collections import defaultdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="CSV files written by comm_bench --csv")
    parser.add_argument("--out", default=".", help="folder for the PNG files")
    args = parser.parse_args()
    plt = pyplot()

    # operation -> (backend, ranks, in place) -> [(size, busbw)]
    series = defaultdict(lambda: defaultdict(list))
    for path in args.csv:
        try:
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    key = (row["backend"], int(row["ranks"]), row["in_place"] == "1")
                    series[row["operation"]][key].append((int(row["size_bytes"]), float(row["busbw_GBps"])))
        except (OSError, KeyError, ValueError) as e:
            print(f"error: cannot read {path} as comm_bench CSV: {e}", file=sys.stderr)
            return 1

    os.makedirs(args.out, exist_ok=True)
    for operation, lines in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (backend, ranks, in_place), points in sorted(lines.items()):
            points.sort()
            copy = backend.startswith("memcpy")  # comm_bench --memcpy: the ceilings, dashed (all ranks: dotted)
            together = backend == "memcpy_all_ranks"
            ax.plot([p[0] for p in points if p[0] > 0], [p[1] for p in points if p[0] > 0], marker="" if copy else "o",
                    linestyle=(":" if together else "--") if copy else "-", color="black" if copy else None,
                    label=(f"memcpy, {ranks} ranks at once" if together else "memcpy, 1 rank") if copy
                    else f"{backend}, {ranks} ranks{', in place' if in_place else ''}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"{operation}: busbw by message size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        path = os.path.join(args.out, f"{operation}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        print(f"wrote {path}; lines: {' · '.join(line.get_label() for line in ax.get_lines())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
