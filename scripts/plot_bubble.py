#!/usr/bin/env python3
"""Draws a pipeline's bubble against the micro-batches M, one line per number of virtual
stages v (1: GPipe and 1F1B; 2, 4: interleaved 1F1B), in its two forms: the share of the
whole step, (p − 1)/(v·M + p − 1), which train_pp's log prints, and the ratio to the ideal
time (the compute alone), (p − 1)/(v·M), which the planner and Megatron's paper use
(docs/pipeline_parallel.md, "The schedules").

    python3 scripts/plot_bubble.py --out docs/pipeline_bubble.png [--stages 4] [--virtual 1,2,4]

Interleaving needs M to be a multiple of p, so its lines are drawn at those M only.
Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import sys

from pyplot import pyplot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="pipeline_bubble.png", help="the PNG to write")
    parser.add_argument("--stages", type=int, default=4, help="p, the pipeline stages (default 4)")
    parser.add_argument("--virtual", default="1,2,4", help="the values of v to draw (default 1,2,4)")
    parser.add_argument("--max-micro-batches", type=int, default=32, help="M from 1 to this (default 32)")
    args = parser.parse_args()
    try:
        vs = [int(v) for v in args.virtual.split(",")]
    except ValueError:
        print(f"error: --virtual {args.virtual}: a list of whole numbers, e.g. 1,2,4", file=sys.stderr)
        return 2
    p = args.stages
    if p < 2 or min(vs) < 1 or args.max_micro_batches < p:
        print("error: needs --stages ≥ 2, every v ≥ 1 and --max-micro-batches ≥ --stages", file=sys.stderr)
        return 2
    plt = pyplot()
    fig, (share, ratio) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = ("#3b75af", "#4c9f50", "#c0504d", "#e6b422", "#7f5fa6")
    for v, colour in zip(vs, colours):
        ms = [m for m in range(1, args.max_micro_batches + 1) if v == 1 or m % p == 0]
        label = "v = 1 (GPipe, 1F1B)" if v == 1 else f"v = {v} (interleaved)"
        share.plot(ms, [100 * (p - 1) / (v * m + p - 1) for m in ms], "o-", markersize=3, color=colour, label=label)
        ratio.plot(ms, [100 * (p - 1) / (v * m) for m in ms], "o-", markersize=3, color=colour, label=label)
    share.set_title(f"share of the step: (p − 1)/(v·M + p − 1), p = {p}")
    ratio.set_title(f"against the compute: (p − 1)/(v·M), p = {p}")
    for ax in (share, ratio):
        ax.set_xlabel("M, micro-batches per step")
        ax.set_ylabel("bubble (%)")
        ax.set_xscale("log", base=2)
        ax.set_xticks([m for m in (1, 2, 4, 8, 16, 32, 64, 128) if m <= args.max_micro_batches])
        ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        ax.set_ylim(bottom=0)
        ax.grid(True, linewidth=0.3)
        ax.legend(fontsize=9)
    # The page's example: p = 4, M = 8 — 3/11 of the step, 3/8 of the compute.
    if p == 4 and args.max_micro_batches >= 8 and 1 in vs:
        share.annotate("M = 8: 3/11 = 27 %", (8, 100 * 3 / 11), xytext=(10, 12), textcoords="offset points", fontsize=8)
        ratio.annotate("M = 8: 3/8 = 38 %", (8, 100 * 3 / 8), xytext=(10, 12), textcoords="offset points", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: p = {p}, v = {args.virtual}, M = 1 … {args.max_micro_batches}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
