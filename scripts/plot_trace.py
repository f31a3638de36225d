#!/usr/bin/env python3
"""Draws a --trace file (Chrome-trace JSON from any trainer) as a PNG timeline: one row per
rank, forward / backward / waiting / gradient sync / optimizer spans in colour, each
micro-batch's forward (F3) and backward (B3) labelled — the lecture's pipeline picture,
drawn from a real run. The layers' own spans are drawn over the forward and backward ones
(shorter spans on top): ring attention's blocks and the wait for each hop, Ulysses' two
all-to-alls, the experts' dispatch, experts and combine; what moves beside the compute (a
bucket's allreduce, a ring hop from its post to its end) is on a second row under the rank's.

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
           "optimizer": "#e6b422", "eval": "#ffffff", "attention": "#c0504d", "experts": "#8c564b",
           "exchange": "#f28e2b"}
LEGEND = {"data": "data", "forward": "forward", "backward": "backward", "wait": "waiting (bubble)", "comm": "gradient sync",
          "optimizer": "optimizer", "eval": "evaluation", "attention": "attention (a block, or the local heads)",
          "experts": "experts (forward)", "exchange": "exchange (ring hop, all-to-all, dispatch/combine)"}


def short_label(name: str) -> str:
    """A layer span's name as it fits on its bar: "K,V of rank 1" → "KV1", "combine's gradient" → "∂combine"."""
    if name.startswith("K,V of rank "):
        return "KV" + name.rsplit(" ", 1)[1]
    if name.startswith("all-to-all: "):
        return name.split(" ")[-2] + " " + name.split(" ")[-1]  # "→ heads", "→ positions"
    if name.endswith("'s gradient"):
        return "∂" + name[:-len("'s gradient")]
    return {"dK,dV hop": "dKV"}.get(name, name.split(":")[0])


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
    layers = {"attention", "experts", "exchange"}  # the layers' spans, inside a forward or backward
    nested = any(e["cat"] in layers and e["tid"] < 10000 for e in spans)
    for e in sorted(spans, key=lambda e: -e["dur"]):  # the longest first: what runs inside a span is drawn on it
        y = len(ranks) - 1 - ranks.index(e["tid"])
        start, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
        inner = e["cat"] in layers or (nested and e["cat"] == "wait")
        ax.broken_barh([(start, width)], (y - 0.4, 0.8) if not inner else (y - 0.4, 0.55),
                       facecolors=COLOURS.get(e["cat"], "#999999"),
                       edgecolor="black" if e["cat"] in ("forward", "backward") or e["tid"] >= 10000 else "none", linewidth=0.4)
        if e["cat"] in ("forward", "backward") and width > 0:  # over the layers' spans: in the band they leave
            ax.text(start + width / 2, y + 0.28 if nested else y, e["name"], ha="center", va="center", fontsize=7,
                    color="black" if nested else "white")
        elif e["tid"] >= 10000 and width > 0.025 * total_ms:  # a bucket or a hop wide enough: its number
            ax.text(start + width / 2, y, e["name"].split(" (")[0].split(":")[0].replace("bucket ", "b"), ha="center",
                    va="center", fontsize=7)
        elif e["cat"] in layers and width > len(short_label(e["name"])) * total_ms / 160:  # a layer span: what it is
            ax.text(start + width / 2, y - 0.125, short_label(e["name"]), ha="center", va="center", fontsize=6,
                    color="white")
    ax.set_yticks(range(len(ranks)))
    # (a stage that holds the whole model says so of no row: "rank 0 = dp 0 · pp 0 · cp 0")
    ax.set_yticklabels([names.get(r, f"rank {r}").replace(" (embedding) (head)", "") for r in reversed(ranks)])
    ax.set_xlabel("time (ms)")
    present = [c for c in COLOURS if any(e["cat"] == c for e in spans)]  # the legend: what this trace has
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLOURS[c], edgecolor="#888888", linewidth=0.5) for c in present]
    # Right of the plot, clear of the time axis and its label whatever the number of ranks.
    labels = [LEGEND[c] if not (c == "wait" and nested) else "waiting (for a hop)" for c in present]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    ax.set_title(args.title or args.trace)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
