#!/usr/bin/env bash
# examples/pytorch/ddp_tutorial.py on 2 ranks under gloo and under nanodist, in each DDP mode
# (plain; find_unused_parameters with no_sync accumulation; join with uneven inputs): the losses
# of every step, and the final weights, must be the same.
# Then benchmarks/nanogpt_train.py in nanoGPT's DDP mode (seed per rank, require_backward_grad_sync
# on the last micro-step), with 1 and 2 micro-steps: every step's loss and the weights the same.
#   ddp_same_losses.sh SOURCE_DIR DATA_DIR (DATA_DIR: holds shakespeare_char/{train,val}.bin)
set -euo pipefail
source_dir=$1 data_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A port no socket holds now and no connection will take, for each run's rendezvous.
free_port() { python3 "$source_dir/tests/torch_backend/free_port.py"; }
for flags in "" "--find-unused --accumulate 2" "--uneven"; do
  for backend in gloo nanodist; do
    port=$(free_port)
    # shellcheck disable=SC2086
    MASTER_PORT=$port mpiexec -n 2 python3 "$source_dir/examples/pytorch/ddp_tutorial.py" --backend $backend $flags \
      > "$work/$backend.out" 2>&1 || { status=$?; cat "$work/$backend.out"; echo "FAILED: $backend ${flags:-plain} exited with $status"; exit 1; }
  done
  grep -q "backend nanodist" "$work/nanodist.out" || { cat "$work/nanodist.out"; echo "FAILED: not run on nanodist"; exit 1; }
  if ! diff <(grep -E "^(step|done)" "$work/gloo.out" | sed 's/backend gloo/backend X/') \
            <(grep -E "^(step|done)" "$work/nanodist.out" | sed 's/backend nanodist/backend X/'); then
    echo "FAILED: ${flags:-plain}: gloo and nanodist differ"
    exit 1
  fi
  echo "${flags:-plain}: $(grep -c '^step' "$work/nanodist.out") steps, the same losses and weights on gloo and nanodist"
done

for accum in 1 2; do
  for backend in gloo nanodist; do
    port=$(free_port)
    MASTER_PORT=$port mpiexec -n 2 python3 "$source_dir/benchmarks/nanogpt_train.py" --backend $backend \
      --data-dir "$data_dir" --max-iters 12 --eval-interval 6 --eval-iters 2 --grad-accum $accum --log-losses \
      --no-full-val > "$work/$backend.out" 2>&1 ||
      { status=$?; cat "$work/$backend.out"; echo "FAILED: nanoGPT DDP on $backend exited with $status"; exit 1; }
  done
  if ! diff <(grep -E "^(iter|step|\|weights)" "$work/gloo.out") <(grep -E "^(iter|step|\|weights)" "$work/nanodist.out"); then
    echo "FAILED: nanoGPT DDP, $accum micro-steps: gloo and nanodist differ"
    exit 1
  fi
  echo "nanoGPT DDP, $accum micro-step(s): $(grep -c '^iter' "$work/nanodist.out") steps, the same losses and weights"
done
