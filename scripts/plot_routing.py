#!/usr/bin/env python3
"""Plots a mixture-of-experts run's routing from its metrics file (CSV or JSONL): the tokens
each expert took per step (the fewest, the mean and the most, over every mixture block's
experts), the share of choices dropped over capacity, and the balancing loss (1: balanced,
E: one expert takes everything) — docs/expert_parallel.md.

    mpiexec -n 2 build/trainers/train_dp --n-experts 4          # writes out/train_dp/metrics.csv
    python3 scripts/plot_routing.py out/train_dp/metrics.csv --out routing.png

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import sys

from plot_loss import read_records
from pyplot import pyplot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="metrics file of a run with --n-experts (.csv or .jsonl)")
    parser.add_argument("--out", default="routing.png", help="the PNG to write")
    args = parser.parse_args()
    plt = pyplot()
    try:
        records = read_records(args.metrics)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.metrics}: {e}", file=sys.stderr)
        return 1
    rows = [r for r in records if r.get("kind") == "train" and "expert_tokens_mean" in r]
    if not rows:
        print(f"error: {args.metrics} has no routing columns: was the run a mixture of experts (--n-experts)?",
              file=sys.stderr)
        return 1
    steps = [r["step"] for r in rows]
    fig, (load, dropped, aux) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    load.fill_between(steps, [r["expert_tokens_min"] for r in rows], [r["expert_tokens_max"] for r in rows],
                      alpha=0.3, label="fewest … most (over blocks and experts)")
    load.plot(steps, [r["expert_tokens_mean"] for r in rows], label="mean")
    load.set_ylabel("tokens per expert and step")
    load.legend()
    dropped.plot(steps, [100 * r["dropped_fraction"] for r in rows], color="tab:red")
    dropped.set_ylabel("choices dropped (%)")
    aux.plot(steps, [r["aux_loss"] for r in rows], color="tab:green")
    aux.axhline(1.0, color="gray", linestyle="--", label="balanced")
    aux.set_ylabel("balancing loss")
    aux.set_xlabel("step")
    aux.legend()
    for ax in (load, dropped, aux):
        ax.grid(alpha=0.3)
    load.set_title("the router over training")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
