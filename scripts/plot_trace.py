#!/usr/bin/env python3
"""Draws a --trace file (Chrome-trace JSON from train_pp or train_dp) as a PNG timeline: one
row per rank, forward / backward / waiting / gradient sync / optimizer spans in colour, each
micro-batch's forward (F3) and backward (B3) labelled — the lecture's pipeline picture,
drawn from a real run.

    mpiexec -n 4 build/trainers/train_pp --schedule 1f1b --micro-batches 8 --trace pp.json --max-iters 3
    python3 scripts/plot_trace.py pp.json --out pp.png [--step 2]

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import json
import sys

from pyplot import pyplot

COLOURS = {"data": "#c9a0dc", "forward": "#4c9f50", "backward": "#3b75af", "wait": "#d9d9d9", "comm": "#b5a642",
           "optimizer": "#e6b422", "eval": "#ffffff"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="the --trace file")
    parser.add_argument("--out", default="trace.png", help="the PNG to write")
    parser.add_argument("--title", help="the picture's title (default: the file's name)")
    parser.add_argument("--step", type=int, default=0,
                        help="draw only this step (1 = the first traced; 0 = all of them)")
    args = parser.parse_args()
    plt = pyplot()
    try:
        events = json.load(open(args.trace))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.trace}: {e}", file=sys.stderr)
        return 2
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        print(f"error: {args.trace} has no spans", file=sys.stderr)
        return 2
    if args.step:  # steps end with the optimizer span on every rank: cut at rank 0's
        ends = sorted(e["ts"] + e["dur"] for e in spans if e["cat"] == "optimizer" and e["tid"] == 0)
        if args.step > len(ends):
            print(f"error: the trace has {len(ends)} steps", file=sys.stderr)
            return 2
        lo, hi = (ends[args.step - 2] if args.step > 1 else 0), ends[args.step - 1]
        spans = [e for e in spans if lo <= e["ts"] < hi]
    t0 = min(e["ts"] for e in spans)
    total_ms = (max(e["ts"] + e["dur"] for e in spans) - t0) / 1e3
    # A rank's row, then its communication row (tid 10000 + rank: train_dp's bucket allreduces).
    ranks = sorted({e["tid"] for e in spans}, key=lambda tid: (tid % 10000, tid // 10000))
    fig, ax = plt.subplots(figsize=(13, 0.6 * len(ranks) + 1.5))
    for e in spans:
        y = len(ranks) - 1 - ranks.index(e["tid"])
        start, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
        ax.broken_barh([(start, width)], (y - 0.4, 0.8), facecolors=COLOURS.get(e["cat"], "#999999"),
                       edgecolor="black" if e["cat"] in ("forward", "backward") or e["tid"] >= 10000 else "none", linewidth=0.4)
        if e["cat"] in ("forward", "backward") and width > 0:
            ax.text(start + width / 2, y, e["name"], ha="center", va="center", fontsize=7, color="white")
        elif e["tid"] >= 10000 and width > 0.025 * total_ms:  # a bucket wide enough: its number
            ax.text(start + width / 2, y, e["name"].split(" (")[0].replace("bucket ", "b"), ha="center",
                    va="center", fontsize=7)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([names.get(r, f"rank {r}") for r in reversed(ranks)])
    ax.set_xlabel("time (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="#888888", linewidth=0.5) for c in COLOURS.values()]
    # Right of the plot, clear of the time axis and its label whatever the number of ranks.
    ax.legend(handles, ["data", "forward", "backward", "waiting (bubble)", "gradient sync", "optimizer",
                        "evaluation"], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(args.title or args.trace)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
