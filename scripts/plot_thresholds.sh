#!/usr/bin/env bash
# docs/thresholds.png from the planner's machine models (docs/thresholds.md): an H100 in bf16
# and this machine in fp32, as `nanodist plan --print-machine` gives them (their sources and
# dates are in planning/machine.cpp).
#   bash scripts/plot_thresholds.sh [build dir, default build] [out, default docs/thresholds.png]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-docs/thresholds.png}
nanodist="$build/planning/nanodist"
[ -x "$nanodist" ] || { echo "plot_thresholds: $nanodist not built (bash scripts/build.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$nanodist" plan --print-machine --machine h100-80gb > "$work/h100.json"
"$nanodist" plan --print-machine --machine this-cpu > "$work/cpu.json"
python3 scripts/plot_thresholds.py "$work/h100.json:bf16" "$work/cpu.json:fp32" --date "$(date +%Y-%m-%d)" --out "$out"
