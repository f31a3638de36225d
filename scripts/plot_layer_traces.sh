#!/usr/bin/env bash
# The pictures of the new dimensions from real --trace runs (docs/context_parallel.md,
# docs/expert_parallel.md): train_3d on 2 ranks, one traced step each —
#   trace_cp_ring.png     --cp 2, ring attention: each block beside the hop that brings the next
#   trace_cp_ulysses.png  --cp 2, Ulysses: the two all-to-alls around the local heads
#   trace_ep.png          --dp 2 --ep 2: the dispatch and combine around the experts
# Each title carries the day it was drawn (a picture is of one run on one day: redraw it, not edit it).
#   bash scripts/plot_layer_traces.sh [build dir, default build] [data dir, default data] [out dir, default docs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
data=${2:-data}
out=${3:-docs}
train_3d="$build/trainers/train_3d"
[ -x "$train_3d" ] || { echo "plot_layer_traces: $train_3d not built (bash scripts/build.sh)" >&2; exit 2; }
source scripts/env.sh
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
day=$(date +%Y-%m-%d)
# A small GPT whose step is a few hundred ms on 2 cores: the blocks and the exchanges both visible.
# Two steps traced, the second drawn (the first pays for first touches of memory).
model=(--data-dir "$data" --n-layer 2 --n-head 4 --n-embd 128 --block-size 256 --batch-size 4 --max-iters 2
       --eval-interval 0 --eval-iters 1 --no-full-val --sample-tokens 0 --log-interval 1 --trace-steps 2 --threads 1)
trace() {  # name, title, train_3d's flags
  local name=$1 title=$2
  shift 2
  mpiexec -n 2 "$train_3d" "${model[@]}" --out-dir "$work/$name" --trace "$work/$name.json" "$@" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
  python3 scripts/plot_trace.py "$work/$name.json" --step 2 --title "$title (a real run, $day)" --out "$out/$name.png"
}
trace trace_cp_ring "train_3d --cp 2, ring attention, 2 layers, T = 256" --cp 2 --cp-attention ring
trace trace_cp_ulysses "train_3d --cp 2 --cp-attention ulysses, 2 layers, T = 256" --cp 2 --cp-attention ulysses
trace trace_ep "train_3d --dp 2 --ep 2, 4 experts, top-2, 2 layers" --dp 2 --ep 2 --n-experts 4 --experts-per-token 2
