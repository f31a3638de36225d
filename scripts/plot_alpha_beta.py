#!/usr/bin/env python3
"""Draws the α–β model of an allreduce: time against message size for the ring, the naive
(everything through rank 0) and the tree (a binomial reduce, then a broadcast), with the
size where the tree and the ring cost the same marked.

    python3 scripts/plot_alpha_beta.py --out docs/alpha_beta.png

β is the ring's bus bandwidth in the generated table, docs/numbers.md (its allreduce row on 2
ranks at 16 MB, or --size-mb 64). α is not in that table (its smallest message is 256 KB): it
is calibrate_machine's, 0.86 µs on the 2-core test machine (docs/concepts.md, "What a message
costs"). The formulas are
docs/allreduce.md's "Cost" table, on n ranks:

    naive  2(n−1)·(α + m/β)
    ring   2(n−1)·α + 2(n−1)/n · m/β
    tree   2⌈log₂n⌉·(α + m/β)

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import math
import os
import re
import sys

from pyplot import pyplot

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TABLE = os.path.join(ROOT, "docs", "numbers.md")


def ring_busbw(path, size_mb):
    """The ring's busbw (bytes/s) in the generated table's allreduce row of `size_mb` MB."""
    with open(path) as f:
        for line in f:
            if line.startswith(f"| allreduce on 2 ranks, {size_mb} MB,"):
                found = re.search(r"ring ([0-9.]+)", line)
                if found:
                    return float(found.group(1)) * 1e9
    raise ValueError(f"no allreduce row of {size_mb} MB with a ring figure")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="alpha_beta.png", help="the PNG to write")
    parser.add_argument("--ranks", type=int, default=4, help="n, the ranks (default 4)")
    parser.add_argument("--alpha-us", type=float, default=0.86, help="α in µs (default 0.86, the ring's)")
    parser.add_argument("--table", default=TABLE, help="the generated table to take β from")
    parser.add_argument("--size-mb", type=int, default=16, choices=(16, 64), help="its row β is read from (default 16)")
    args = parser.parse_args()
    if args.ranks < 2:
        print("error: --ranks must be at least 2", file=sys.stderr)
        return 2
    try:
        beta = ring_busbw(args.table, args.size_mb)
    except (OSError, ValueError) as e:
        print(f"error: {args.table}: {e}", file=sys.stderr)
        return 2
    plt = pyplot()
    n, alpha = args.ranks, args.alpha_us * 1e-6
    logn = math.ceil(math.log2(n))
    sizes = [2 ** (k / 4) for k in range(0, 4 * 27 + 1)]  # 1 B … 128 MB
    curves = {
        "naive: 2(n−1)·(α + m/β)": lambda m: 2 * (n - 1) * (alpha + m / beta),
        "ring: 2(n−1)·α + 2(n−1)/n · m/β": lambda m: 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / beta,
        "tree: 2⌈log₂n⌉·(α + m/β)": lambda m: 2 * logn * (alpha + m / beta),
    }
    fig, ax = plt.subplots(figsize=(8, 5))
    for (label, time), colour in zip(curves.items(), ("#c0504d", "#3b75af", "#4c9f50")):
        ax.loglog(sizes, [time(m) * 1e6 for m in sizes], label=label, color=colour, linewidth=2)
    # The tree and the ring cost the same at m* = αβ · (2(n−1) − 2⌈log₂n⌉) / (2⌈log₂n⌉ − 2(n−1)/n).
    if 2 * logn < 2 * (n - 1):
        crossover = alpha * beta * (2 * (n - 1) - 2 * logn) / (2 * logn - 2 * (n - 1) / n)
        t = 2 * logn * (alpha + crossover / beta) * 1e6
        ax.axvline(crossover, color="black", linestyle=":", linewidth=1)
        ax.plot([crossover], [t], "o", color="black")
        ax.annotate(f"tree = ring at m* ≈ {crossover / 1e3:.1f} KB\n(below: the tree; above: the ring)",
                    (crossover, t), xytext=(crossover * 6, t / 4), textcoords="data", fontsize=9,
                    arrowprops={"arrowstyle": "-", "color": "black", "linewidth": 0.5})
    ax.set_ylim(bottom=min(curves["tree: 2⌈log₂n⌉·(α + m/β)"](1), 2 * (n - 1) * alpha) * 1e6 / 5)
    ax.axvline(alpha * beta, color="#999999", linestyle="--", linewidth=1)
    ax.annotate(f"αβ ≈ {alpha * beta / 1e3:.1f} KB", (alpha * beta, ax.get_ylim()[1]), xytext=(4, -14),
                textcoords="offset points", fontsize=8, color="#666666")
    ax.set_xlabel("m, bytes per rank")
    ax.set_ylabel("time (µs)")
    ax.set_title(f"allreduce on n = {n} ranks, α = {args.alpha_us:g} µs, β = {beta / 1e9:.1f} GB/s")
    ax.grid(True, which="major", linewidth=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: β = {beta / 1e9:g} GB/s (the ring's {args.size_mb} MB row of {os.path.relpath(args.table, ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
