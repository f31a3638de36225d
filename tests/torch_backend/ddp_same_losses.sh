#!/usr/bin/env bash
# examples/pytorch/ddp_tutorial.py on 2 ranks under gloo and under nanodist, in each DDP mode
# (plain; find_unused_parameters with no_sync accumulation; join with uneven inputs): the losses
# of every step, and the final weights, must be the same.
#   ddp_same_losses.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((30000 + RANDOM % 20000))
for flags in "" "--find-unused --accumulate 2" "--uneven"; do
  for backend in gloo nanodist; do
    port=$((port + 1))
    # shellcheck disable=SC2086
    MASTER_PORT=$port mpiexec -n 2 python3 "$source_dir/examples/pytorch/ddp_tutorial.py" --backend $backend $flags \
      > "$work/$backend.out" 2>&1 || { cat "$work/$backend.out"; echo "FAILED: $backend ${flags:-plain} exited with $?"; exit 1; }
  done
  grep -q "backend nanodist" "$work/nanodist.out" || { cat "$work/nanodist.out"; echo "FAILED: not run on nanodist"; exit 1; }
  if ! diff <(grep -E "^(step|done)" "$work/gloo.out" | sed 's/backend gloo/backend X/') \
            <(grep -E "^(step|done)" "$work/nanodist.out" | sed 's/backend nanodist/backend X/'); then
    echo "FAILED: ${flags:-plain}: gloo and nanodist differ"
    exit 1
  fi
  echo "${flags:-plain}: $(grep -c '^step' "$work/nanodist.out") steps, the same losses and weights on gloo and nanodist"
done
