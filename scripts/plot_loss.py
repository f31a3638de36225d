#!/usr/bin/env python3
"""Plots train_dp's metrics file (CSV or JSONL) as a loss curve: the logged training loss per
step, and the train/val estimates at each evaluation.

    mpiexec -n 2 build/trainers/train_dp                 # writes out/train_dp/metrics.csv
    python3 scripts/plot_loss.py out/train_dp/metrics.csv --out loss.png

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import csv
import json
import sys

from pyplot import pyplot


def read_records(path):
    if path.endswith(".jsonl"):
        return [json.loads(line) for line in open(path) if line.strip()]
    rows = list(csv.DictReader(open(path)))
    return [{k: (v if k == "kind" else float(v)) for k, v in row.items() if v != ""} for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="metrics file written by train_dp (.csv or .jsonl)")
    parser.add_argument("--out", default="loss.png", help="the PNG to write")
    args = parser.parse_args()
    plt = pyplot()
    try:
        records = read_records(args.metrics)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.metrics}: {e}", file=sys.stderr)
        return 1
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    final = [r for r in records if r.get("kind") == "final"]
    if not train and not evals:
        print(f"error: {args.metrics} has no train or eval records", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss (logged, mean over ranks)",
            alpha=0.6)
    ax.plot([r["step"] for r in evals], [r["train_loss"] for r in evals], "o-", label="train loss (estimate)")
    ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "s-", label="val loss (estimate)")
    for r in final:
        ax.axhline(r["val_loss_full"], color="gray", linestyle="--", label=f"val_loss_full = {r['val_loss_full']:.4f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats per character)")
    ax.set_title("train_dp on tiny Shakespeare")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
