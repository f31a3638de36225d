#!/usr/bin/env python3
"""Draws when each dimension pays (docs/thresholds.md): for data, tensor, context and expert
parallelism the compute a rank runs beside a collective and the collective's time, against the
one quantity the layout sets — the crossing is the threshold — and the pipeline's bubble against
its micro-batches. One row per machine, from the planner's own machine models:

    nanodist plan --print-machine --machine h100-80gb > h100.json
    nanodist plan --print-machine --machine this-cpu > cpu.json
    python3 scripts/plot_thresholds.py h100.json:bf16 cpu.json:fp32 --out docs/thresholds.png

Each panel is per unit of what both sides share (per parameter, per token, per hop), so the
lines cross where the page's formula says. β: the link the dimension's group crosses on the
recipes' layouts — between nodes for dp, cp and ep, inside a node for tp (a CPU has one).
Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots).
"""
import argparse
import json
import sys

from pyplot import pyplot


def machine_numbers(path_and_precision):
    path, _, precision = path_and_precision.partition(":")
    precision = precision or "fp32"
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
        peak = m["peak_flops_bf16"] if precision == "bf16" else m["peak_flops_fp32"]
        efficiency = m["matmul_efficiency_bf16"] if precision == "bf16" else m["matmul_efficiency"]
        inside, between = m["intra_node"]["bytes_per_s"], m["inter_node"]["bytes_per_s"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {path}: not a machine from `nanodist plan --print-machine` ({e})", file=sys.stderr)
        sys.exit(2)
    return {"name": m.get("name", path), "F": peak * efficiency, "bytes": 2 if precision == "bf16" else 4,
            "inside": inside, "between": between, "precision": precision, "one_node": m.get("ranks_share_devices", False)}


def geometric(lo, hi, n=200):
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def crossing(ax, x, label):
    ax.axvline(x, color="#888888", linestyle=":", linewidth=1)
    ax.annotate(label, (x, 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=7, color="#555555",
                ha="right", va="bottom")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("machines", nargs="+", help="machine JSON files, each :bf16 or :fp32 (default fp32)")
    parser.add_argument("--out", default="thresholds.png", help="the PNG to write")
    parser.add_argument("--date", default="", help="the date it is drawn, for the title")
    args = parser.parse_args()
    rows = [machine_numbers(m) for m in args.machines]
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), 5, figsize=(18, 3.6 * len(rows)), squeeze=False, constrained_layout=True)
    compute_colour, comm_colour = "#3b75af", "#c0504d"
    for row, m in zip(axes, rows):
        F, b = m["F"], m["bytes"]
        slow = m["inside"] if m["one_node"] else m["between"]
        # dp: per parameter, backward's 4·n FLOPs against the all-reduce's 2(N−1)/N·4 bytes (fp32 gradients);
        # N = 8 replicas on a cluster, 2 on a CPU (e and t alike below)
        N, g = (8 if not m["one_node"] else 2), 4
        n = geometric(1, 1e7)
        ax = row[0]
        ax.loglog(n, [4 * x / F for x in n], color=compute_colour, label="backward, 4n/F")
        ax.loglog(n, [2 * (N - 1) / N * g / slow] * len(n), color=comm_colour, label="all-reduce, 2(N−1)/N·4/β")
        crossing(ax, (N - 1) / N * g * F / (2 * slow), "n*")
        ax.set(title=f"dp over N = {N}: tokens per replica n", xlabel="n (tokens a step)", ylabel=f"{m['name']}\nseconds per parameter")
        # tp: per token and block, 72C²/(tF) against 8(t−1)/t·C·bytes/β, t = 8 inside a node
        t = 8 if not m["one_node"] else 2
        C = geometric(4, 65536)
        ax = row[1]
        ax.loglog(C, [72 * c * c / (t * F) for c in C], color=compute_colour, label="block, 72C²/(tF)")
        ax.loglog(C, [8 * (t - 1) / t * c * b / m["inside"] for c in C], color=comm_colour, label="4 all-reduces")
        crossing(ax, (t - 1) * b * F / (9 * m["inside"]), "C*")
        ax.set(title=f"tp {t}: the width C", xlabel="C", ylabel="seconds per token")
        # pp: the bubble's share of the step against M, p = 16 and 4, v = 1
        ax = row[2]
        Ms = list(range(1, 129))
        for p, style in ((16, "-"), (4, "--")):
            ax.plot(Ms, [(p - 1) / (M + p - 1) for M in Ms], style, color=comm_colour, label=f"bubble, p = {p}")
            crossing(ax, 4 * (p - 1), f"4(p−1), p = {p}")
        ax.axhline(0.2, color=compute_colour, linewidth=1, label="a fifth of the step")
        ax.set(title="pp: micro-batches M", xlabel="M", ylabel="share of the step", xscale="log")
        # cp: per hop and per C/t, the causal half of 4(T/c)²·C/t FLOPs against 2·T/c·C/t·bytes/β
        S = geometric(16, 1e6)
        ax = row[3]
        ax.loglog(S, [2 * s * s / F for s in S], color=compute_colour, label="attention, 2(T/c)²/F")
        ax.loglog(S, [2 * s * b / slow for s in S], color=comm_colour, label="K and V, 2(T/c)·bytes/β")
        crossing(ax, b * F / slow, "(T/c)*")
        ax.set(title="cp (ring): positions per rank T/c", xlabel="T/c", ylabel="seconds per hop and C/t")
        # ep: per token, k experts' 48kC² FLOPs against 4 all-to-alls of k·C numbers, e = 8
        e = 8 if not m["one_node"] else 2
        ax = row[4]
        ax.loglog(C, [48 * c * c / F for c in C], color=compute_colour, label="experts, 48C²/F")
        ax.loglog(C, [4 * (e - 1) / e * c * b / slow for c in C], color=comm_colour, label="4 all-to-alls")
        crossing(ax, (e - 1) / e * b * F / (12 * slow), "C*")
        ax.set(title=f"ep {e}: the width C", xlabel="C", ylabel="seconds per token and choice")
        for ax in row:
            ax.legend(fontsize=7, loc="upper left")
            ax.grid(True, which="both", alpha=0.25)
        row[0].annotate(f"{m['precision']}, F = {F:.3g} FLOP/s, β {m['inside']:.3g} inside / {m['between']:.3g} between (B/s)",
                        (0, 1.12), xycoords="axes fraction", fontsize=8)
    fig.suptitle("When each dimension pays: compute against communication" + (f" (drawn {args.date})" if args.date else ""))
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {len(rows)} machine(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
