#!/usr/bin/env python3
"""Draws what one rank keeps for the main job's model, stacked by part — parameters,
gradients, AdamW's moments, activations — for replicated data parallelism and ZeRO-1/2/3 on
d ranks, and with activation recomputation beside them.

    python3 scripts/plot_memory.py --out docs/memory_parts.png [--ranks 2] [--batch-size 12]

Every number is a formula, computed here, for the main job's model (trainers/train_options.hpp:
L = 2 blocks, C = 128 wide, H = 4 heads, T = 64, V = 65, no biases, lm_head tied to wte;
micro-batch B = 12 per rank; fp32; no dropout):

    Ψ = L·(12C² + 2C) + V·C + T·C + C = 410,368      (docs/data_parallel.md, "Exercises")
    state, ZeRO stage k over d ranks (docs/zero.md, "What each stage shards"):
        parameters 4Ψ (stage 3: 4Ψ/d)   gradients 4Ψ (stages 2, 3: 4Ψ/d)   moments 8Ψ (stages 1-3: 8Ψ/d)
    activations, what forward keeps (docs/memory.md, "Cost": the whole step's formula):
        4·B·T·[L·(18C + H·T + 4) + 3C + 2 + 2V + C/B] bytes      --recompute none
        the same without L·H·T                                       --recompute selective
        L·C in place of L·(18C + H·T + 4)                            --recompute full

ZeRO does not shard activations, so they are the same under every stage. nanodist's stage 1
keeps the averaged gradient shard, 4Ψ/d, beside the full gradients (docs/zero.md, "Measured"):
drawn hatched on top of the formula's gradients. Not drawn: the step's peak, which adds
backward's working set and communication buffers (docs/memory.md, "Run this, see that").

Needs Debian's python3-matplotlib (bash scripts/install_deps.sh --plots); run with any python3,
it switches to Debian's when the one given lacks matplotlib.
"""
import argparse
import sys

from pyplot import pyplot

L, C, H, T, V = 2, 128, 4, 64, 65   # the main job's model
MIB = 1024 * 1024
COLOURS = {"parameters": "#3b75af", "gradients": "#e08a1e", "AdamW moments m, v": "#7f5fa6",
           "activations (kept by forward)": "#9bbf85"}


def parameters():
    """Ψ: a block's 12C² matrix weights and two layernorm weights, wte, wpe and ln_f."""
    return L * (12 * C * C + 2 * C) + V * C + T * C + C


def activation_bytes(batch, recompute):
    """docs/memory.md, "Cost": 4·B·T·[per-block floats · L + 3C + 2 + 2V + C/B], fp32."""
    per_block = {"none": 18 * C + H * T + 4, "selective": 18 * C + 4, "full": C}[recompute]
    return 4 * batch * T * (L * per_block + 3 * C + 2 + 2 * V + C / batch)


def state_bytes(psi, stage, d):
    """docs/zero.md, "What each stage shards": (parameters, gradients, moments) of one rank."""
    return (4 * psi / (d if stage >= 3 else 1), 4 * psi / (d if stage >= 2 else 1), 8 * psi / (d if stage >= 1 else 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="memory_parts.png", help="the PNG to write")
    parser.add_argument("--ranks", type=int, default=2, help="d, the data-parallel ranks (default 2, the main job's)")
    parser.add_argument("--batch-size", type=int, default=12, help="B, the micro-batch per rank (default 12)")
    args = parser.parse_args()
    d, batch = args.ranks, args.batch_size
    if d < 2 or batch < 1:
        print("error: needs --ranks ≥ 2 and --batch-size ≥ 1", file=sys.stderr)
        return 2
    psi = parameters()
    stage_formula = {0: "16Ψ", 1: "8Ψ + 8Ψ/d", 2: "4Ψ + 12Ψ/d", 3: "16Ψ/d"}
    bars = []  # (label, stage, recompute)
    for stage in range(4):
        name = "replicated DP\n(ZeRO-0)" if stage == 0 else f"ZeRO-{stage}"
        bars.append((f"{name}\nstate {stage_formula[stage]}", stage, "none"))
    bars += [("replicated DP\n--recompute\nselective", 0, "selective"), ("replicated DP\n--recompute\nfull", 0, "full"),
             ("ZeRO-3\n--recompute\nfull", 3, "full")]
    xs = [0, 1, 2, 3, 4.6, 5.6, 6.6]

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 6.2))
    for x, (label, stage, recompute) in zip(xs, bars):
        params, grads, moments = state_bytes(psi, stage, d)
        acts = activation_bytes(batch, recompute)
        parts = [("parameters", params), ("gradients", grads), ("AdamW moments m, v", moments),
                 ("activations (kept by forward)", acts)]
        bottom = 0.0
        for part, size in parts:
            ax.bar(x, size / MIB, 0.72, bottom=bottom, color=COLOURS[part], edgecolor="white", linewidth=0.8)
            if size / MIB >= 0.7:  # a half-size shard (0.78 MiB at d = 2) still takes its number
                ax.text(x, bottom + size / MIB / 2, f"{size / MIB:.2f}", ha="center", va="center",
                        fontsize=8.5 if size / MIB >= 1.0 else 7,
                        color="white" if part != "activations (kept by forward)" else "#1e3d14")
            bottom += size / MIB
            if part == "gradients" and stage == 1:  # nanodist's stage 1: the averaged shard too
                extra = 4 * psi / d / MIB
                ax.bar(x, extra, 0.72, bottom=bottom, color="white", edgecolor=COLOURS["gradients"], hatch="////",
                       linewidth=0.8)
                bottom += extra
        state = (params + grads + moments) / MIB
        held = f"state {bottom - acts / MIB:.2f} (formula {state:.2f})" if stage == 1 else f"state {state:.2f}"
        ax.text(x, bottom + 0.35, f"{bottom:.1f} MiB", ha="center", va="bottom", fontsize=9.5, weight="bold")
        ax.text(x, bottom + 0.35 + 1.1, held, ha="center", va="bottom", fontsize=8, color="#555555")
        print(f"{label.replace(chr(10), ' ')}: parameters {params / MIB:.2f} gradients {grads / MIB:.2f} "
              f"moments {moments / MIB:.2f} activations {acts / MIB:.2f} MiB")
    handles = [plt.matplotlib.patches.Patch(color=colour, label=part) for part, colour in COLOURS.items()]
    handles.insert(2, plt.matplotlib.patches.Patch(facecolor="white", edgecolor=COLOURS["gradients"], hatch="////",
                                                   label="ZeRO-1 in nanodist: + the averaged gradient shard, 4Ψ/d"))
    ax.legend(handles=handles[::-1], loc="upper right", fontsize=9, framealpha=1)
    ax.axvline(3.8, color="#999999", linestyle=":", linewidth=1)
    ax.set_xticks(xs)
    ax.set_xticklabels([label for label, _, _ in bars], fontsize=9)
    ax.set_ylabel("MiB per rank")
    top = (sum(state_bytes(psi, 0, d)) + activation_bytes(batch, "none")) / MIB  # the tallest bar
    ax.set_ylim(0, top * 1.55)
    ax.set_xlim(-0.6, 7.2)
    ax.grid(True, axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"One rank's memory, main job's model (Ψ = {psi:,}), d = {d} ranks, micro-batch {batch}×{T}, fp32",
                 fontsize=11.5)
    fig.text(0.5, 0.005, "state: docs/zero.md, \"What each stage shards\" (4Ψ + 4Ψ + 8Ψ bytes, sharded over d); "
             "activations: docs/memory.md, \"Cost\", 4·B·T·[L·(18C + H·T + 4) + 3C + 2 + 2V + C/B]",
             ha="center", va="bottom", fontsize=8, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: Ψ = {psi}, d = {d}, B = {batch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
