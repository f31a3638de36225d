#!/usr/bin/env python3
"""Draws a `nanodist plan --json` sweep: every layout's memory per rank against its predicted
step time (the device's memory a line: right of it nothing fits), coloured by its tp × pp; and
beside it the step time of the fastest that fit, broken into its parts.

    build/planning/nanodist plan --model gpt-bench-b --devices 8 --global-batch 64 --json --all > plan.json
    python3 scripts/plot_plan.py plan.json --out plan.png

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import json
import sys

from pyplot import pyplot

PARTS = [("compute", "compute"), ("tp", "tensor-parallel"), ("cp", "context-parallel (exposed)"),
         ("pp", "pipeline sends"), ("bubble", "bubble"), ("dp_exposed", "data-parallel (exposed)"),
         ("optimizer", "optimizer"), ("time_sharing", "waiting for a core")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="the output of nanodist plan --json (with --all for the whole sweep)")
    parser.add_argument("--out", default="plan.png", help="the PNG to write")
    parser.add_argument("--top", type=int, default=8, help="layouts in the breakdown")
    args = parser.parse_args()
    plt = pyplot()
    try:
        with open(args.plan) as f:
            plan = json.load(f)
        layouts = plan["layouts"]
        limit = plan["machine"]["device_memory_bytes"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.plan}: not a nanodist plan --json output ({e})", file=sys.stderr)
        return 1
    if not layouts:
        print(f"error: {args.plan}: no layouts", file=sys.stderr)
        return 1
    gib = 2 ** 30
    fig, (sweep, parts) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 2]})
    degrees = sorted({l["tp"] for l in layouts})
    colours = plt.get_cmap("tab10")
    for i, tp in enumerate(degrees):  # a colour a tensor degree; filled: fits, x: does not
        for fits, marker in ((True, "o"), (False, "x")):
            chosen = [l for l in layouts if l["tp"] == tp and l["fits"] == fits]
            if chosen:
                sweep.scatter([l["memory"]["total"] / gib for l in chosen], [l["time"]["total"] for l in chosen],
                              marker=marker, s=16, color=colours(i % 10), alpha=0.6,
                              label=f"tp {tp}" + ("" if fits else ", does not fit"))
    if not plan["machine"].get("ranks_share_devices"):
        sweep.axvline(limit / gib, color="black", linestyle="--", linewidth=1)
        sweep.text(limit / gib, sweep.get_ylim()[1], " device memory", va="top", fontsize=8)
    best = next((l for l in layouts if l["fits"]), None)
    if best:
        sweep.annotate("fastest that fits:\n" + best["layout"], (best["memory"]["total"] / gib, best["time"]["total"]),
                       xytext=(20, 30), textcoords="offset points", fontsize=8, arrowprops={"arrowstyle": "->"})
    model = plan["model"]
    sweep.set_xlabel("memory per rank (GiB)")
    sweep.set_ylabel("predicted step time (s)")
    sweep.set_yscale("log")
    sweep.set_xscale("log")
    sweep.set_title(f"{model['n_layer']} layers × {model['n_embd']} wide on {plan['devices']} × {plan['machine']['name']}, "
                    f"global batch {plan['global_batch']}: {len(layouts)} layouts", fontsize=9)
    sweep.legend(fontsize=7, loc="best")
    top = [l for l in layouts if l["fits"]][: args.top]
    left = [0.0] * len(top)
    for key, name in PARTS:
        values = [l["time"][key] for l in top]
        if any(values):
            parts.barh(range(len(top)), values, left=left, label=name)
            left = [a + b for a, b in zip(left, values)]
    parts.set_yticks(range(len(top)))
    parts.set_yticklabels([l["layout"] for l in top], fontsize=7)
    parts.invert_yaxis()
    parts.set_xlabel("predicted step time (s)")
    parts.set_title(f"the {len(top)} fastest that fit, by part", fontsize=9)
    parts.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {len(layouts)} layouts, {sum(l['fits'] for l in layouts)} fit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
