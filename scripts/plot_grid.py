#!/usr/bin/env python3
"""Draws train_3d's grid of ranks as a box of boxes: pipeline stages left to right, data-parallel
replicas top to bottom, tensor-parallel ranks front to back; each rank labelled with its
(dp, pp, tp) coordinates, and the three kinds of groups every rank is in drawn as edges.

    python3 scripts/plot_grid.py --out docs/grid_3d.png [--dp 2 --pp 2 --tp 2 --n-layer 4]

The numbering is parallel/grid.hpp's, tp fastest:

    world rank = (dp_rank · pp + pp_rank) · tp + tp_rank

and so are its groups (docs/3d_parallelism.md, "The grid"): a tp group shares dp and pp (one
stage of one replica, neighbours in the numbering: the f/g all-reduces, two per block forward
and two backward), a pp group shares dp and tp (one pipeline: activations to the next stage
per micro-batch, their gradients back), a dp group shares pp and tp (the replicas of one
slice: its gradients averaged once a step). The stages' blocks are --n-layer cut evenly; the
page's command has 4.

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import sys

from pyplot import pyplot

TP_COLOUR, PP_COLOUR, DP_COLOUR = "#e08a1e", "#3b75af", "#4c9f50"
BOX_W, BOX_H = 1.9, 1.1        # a rank's box
STEP_PP, STEP_DP = 5.2, 3.2    # between stages (right), between replicas (down)
DEPTH = (2.5, 1.6)             # one tp rank further back: this much right and up


def world_rank(dp_rank, pp_rank, tp_rank, pp, tp):
    """parallel/grid.hpp: (dp_rank · pp + pp_rank) · tp + tp_rank."""
    return (dp_rank * pp + pp_rank) * tp + tp_rank


def stage_contents(stage, pp, n_layer):
    """What stage `stage` runs when n_layer blocks are cut evenly over pp stages."""
    first, last = stage * n_layer // pp, (stage + 1) * n_layer // pp - 1
    blocks = f"block {first}" if first == last else f"blocks {first}–{last}"
    if pp == 1:
        return f"embedding + {blocks} + head"
    if stage == 0:
        return f"embedding + {blocks}"
    if stage == pp - 1:
        return f"{blocks} + head"
    return blocks


def corner(dp_rank, pp_rank, tp_rank):
    """Lower-left corner of a rank's box."""
    return (pp_rank * STEP_PP + tp_rank * DEPTH[0], -dp_rank * STEP_DP + tp_rank * DEPTH[1])


def centre(coords):
    x, y = corner(*coords)
    return x + BOX_W / 2, y + BOX_H / 2


def exit_point(coords, towards):
    """Where the line from a box's centre towards `towards` leaves the box."""
    (cx, cy), (tx, ty) = centre(coords), towards
    dx, dy = tx - cx, ty - cy
    scale = min(BOX_W / 2 / abs(dx) if dx else float("inf"), BOX_H / 2 / abs(dy) if dy else float("inf"))
    return cx + dx * scale, cy + dy * scale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="grid_3d.png", help="the PNG to write")
    parser.add_argument("--dp", type=int, default=2, help="d, the data-parallel replicas (default 2)")
    parser.add_argument("--pp", type=int, default=2, help="p, the pipeline stages (default 2)")
    parser.add_argument("--tp", type=int, default=2, help="t, the tensor-parallel degree (default 2)")
    parser.add_argument("--n-layer", type=int, default=4, help="the model's blocks, cut over the stages (default 4)")
    args = parser.parse_args()
    d, p, t = args.dp, args.pp, args.tp
    if not (1 <= d <= 3 and 1 <= p <= 3 and 1 <= t <= 2) or args.n_layer < p:
        print("error: the drawing fits --dp 1-3, --pp 1-3, --tp 1-2, and needs --n-layer ≥ --pp", file=sys.stderr)
        return 2
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(11, 7.4))
    ranks = [(a, b, c) for a in range(d) for b in range(p) for c in range(t)]
    # Back to front: a rank further back (larger tp) is drawn first and fainter.
    z_box = {c: 10 + 10 * (t - 1 - c) for c in range(t)}

    def edge(a, b, colour, z, style="-", arrow=False, width=2.4):
        start, end = exit_point(a, centre(b)), exit_point(b, centre(a))
        if arrow:
            ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=18, color=colour,
                                         linewidth=width, linestyle=style, shrinkA=2, shrinkB=2, zorder=z))
        else:
            ax.plot([start[0], end[0]], [start[1], end[1]], linestyle=style, color=colour, linewidth=width,
                    solid_capstyle="round", zorder=z)
        return start, end

    labelled = set()
    for a, b, c in ranks:
        x, y = corner(a, b, c)
        rank = world_rank(a, b, c, p, t)
        ax.add_patch(FancyBboxPatch((x, y), BOX_W, BOX_H, boxstyle="round,pad=0,rounding_size=0.1",
                                    facecolor="white", edgecolor="#333333", linewidth=1.3, zorder=z_box[c]))
        ax.text(x + BOX_W / 2, y + 0.72, f"rank {rank}", ha="center", va="center", fontsize=12.5, weight="bold",
                zorder=z_box[c] + 1)
        ax.text(x + BOX_W / 2, y + 0.32, f"dp {a} · pp {b} · tp {c}", ha="center", va="center", fontsize=9,
                color="#333333", zorder=z_box[c] + 1)
        # tp group: the same (dp, pp), one step back — a band behind the pair, and their all-reduce.
        if c + 1 < t:
            (x0, y0), (x1, y1) = centre((a, b, c)), centre((a, b, c + 1))
            ax.plot([x0, x1], [y0, y1], color=TP_COLOUR, alpha=0.22, linewidth=62, solid_capstyle="round", zorder=1)
            start, end = edge((a, b, c), (a, b, c + 1), TP_COLOUR, z_box[c] - 1, arrow=False, width=3)
            if "tp" not in labelled:
                labelled.add("tp")
                ax.annotate("all-reduce ×2 per block\neach way (f, g)", ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2),
                            xytext=(-8, 26), textcoords="offset points", ha="right", fontsize=9, color="#a05a00",
                            zorder=60, arrowprops={"arrowstyle": "-", "color": "#a05a00", "linewidth": 0.6})
        # pp group: the same (dp, tp), the next stage — activations forward.
        if b + 1 < p:
            start, end = edge((a, b, c), (a, b + 1, c), PP_COLOUR, z_box[c] - 1, arrow=True)
            if "pp" not in labelled and c == 0 and a == d - 1:  # under the bottom row: nothing crosses there
                labelled.add("pp")
                ax.text((start[0] + end[0]) / 2, start[1] - 0.12, "activations ▶\n◀ their gradients", ha="center",
                        va="top", fontsize=9, color=PP_COLOUR, zorder=60)
        # dp group: the same (pp, tp), the next replica — gradients averaged.
        if a + 1 < d:
            start, end = edge((a, b, c), (a + 1, b, c), DP_COLOUR, z_box[c] - 1, style=(0, (4, 3)))
            if "dp" not in labelled and b == 0 and c == 0:
                labelled.add("dp")
                ax.text(start[0] - 0.12, (start[1] + end[1]) / 2, "gradients\naveraged\nonce a step", ha="right",
                        va="center", fontsize=9, color=DP_COLOUR, zorder=60)

    top = max(corner(0, b, t - 1)[1] for b in range(p)) + BOX_H
    for b in range(p):  # the stages' headers, over the front column
        x = corner(0, b, 0)[0] + (BOX_W + (t - 1) * DEPTH[0]) / 2
        ax.text(x, top + 0.75, f"stage pp {b}", ha="center", va="bottom", fontsize=12, weight="bold")
        ax.text(x, top + 0.7, stage_contents(b, p, args.n_layer), ha="center", va="top", fontsize=9.5, color="#555555")
    for a in range(d):  # the replicas, left of each row
        members = [world_rank(a, b, c, p, t) for b in range(p) for c in range(t)]
        y = corner(a, 0, 0)[1] + (BOX_H + (t - 1) * DEPTH[1]) / 2
        ax.text(-1.55, y + 0.2, f"replica dp {a}", ha="right", va="center", fontsize=12, weight="bold")
        ax.text(-1.55, y - 0.25, f"ranks {members[0]}–{members[-1]}", ha="right", va="center", fontsize=9,
                color="#555555")
    # The axes of the grid, bottom right: which way each coordinate grows.
    ox, oy = (p - 1) * STEP_PP + BOX_W + (t - 1) * DEPTH[0] + 0.3, -(d - 1) * STEP_DP - 0.1
    for (dx, dy), name in (((1.2, 0), "pp"), ((0, -1.0), "dp"), ((DEPTH[0] * 0.45, DEPTH[1] * 0.45), "tp")):
        ax.annotate("", (ox + dx, oy + dy), (ox, oy), arrowprops={"arrowstyle": "-|>", "color": "#555555"})
        ax.text(ox + dx * 1.2 + (0.05 if dx else 0.12), oy + dy * 1.2, name, fontsize=10, color="#555555",
                ha="left", va="center")
    right = ox + 1.8
    bottom = -(d - 1) * STEP_DP - 1.4
    ax.text((right - 4.6) / 2, bottom, f"world rank = (dp_rank · {p} + pp_rank) · {t} + tp_rank     "
            "(parallel/grid.hpp: tp fastest, dp slowest)", ha="center", va="top", fontsize=10, family="monospace")
    handles = [
        Line2D([], [], color=TP_COLOUR, linewidth=3,
               label="tp group (same dp, pp): neighbours in the numbering; the f/g all-reduces inside every block"),
        Line2D([], [], color=PP_COLOUR, linewidth=2.4, marker=">", markersize=8,
               label="pp group (same dp, tp): one activation to the next stage per micro-batch, its gradient back"),
        Line2D([], [], color=DP_COLOUR, linewidth=2.4, linestyle=(0, (4, 3)),
               label="dp group (same pp, tp): the replicas of one slice; its gradients averaged once a step"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=9.5, frameon=False,
              handlelength=3)
    ax.set_title(f"train_3d --dp {d} --pp {p} --tp {t}: {d * p * t} ranks on a grid of (dp, pp, tp)", fontsize=13)
    ax.set_xlim(-4.6, right)
    ax.set_ylim(bottom - 0.6, top + 1.7)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110, bbox_inches="tight")
    print(f"wrote {args.out}: {d * p * t} ranks, dp {d} × pp {p} × tp {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
