#!/usr/bin/env bash
# hostfiles/train_dp.sbatch run as a batch script (no Slurm needed for this part): scancel's
# TERM ends it with 143 (128 + TERM) after passing it on to mpiexec, not with mpiexec's status;
# and a TRAIN_DP_ARGS that is not shell words (an unbalanced quote) is one line naming it, exit 2.
#   tests/sbatch_term.sh SOURCE_DIR BUILD_DIR DATA_DIR
set -euo pipefail
source_dir=$1 build_dir=$2 data_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$source_dir"
status=0
env SLURM_JOB_ID=7 OUT_DIR="$work/bad" DATA_DIR="$data_dir" BUILD_DIR="$build_dir" TRAIN_DP_ARGS="--prompt 'abc" \
  bash hostfiles/train_dp.sbatch > "$work/bad.out" 2>&1 || status=$?
[ "$status" -eq 2 ] || { cat "$work/bad.out"; echo "FAILED: an unbalanced quote gave status $status, not 2"; exit 1; }
grep -q "train_dp.sbatch: TRAIN_DP_ARGS is not a list of shell words" "$work/bad.out" ||
  { cat "$work/bad.out"; echo "FAILED: TRAIN_DP_ARGS not named"; exit 1; }

env SLURM_JOB_ID=8 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 OUT_DIR="$work/out" DATA_DIR="$data_dir" BUILD_DIR="$build_dir" \
  TRAIN_DP_ARGS="--max-iters 1000000 --n-layer 1 --n-embd 32 --log-interval 50 --eval-interval 0" \
  bash hostfiles/train_dp.sbatch > "$work/run.out" 2>&1 &
script=$!
for _ in $(seq 600); do grep -q "step .*/1000000" "$work/run.out" && break; sleep 0.1; done
grep -q "step .*/1000000" "$work/run.out" || { cat "$work/run.out"; echo "FAILED: train_dp logged no step"; exit 1; }
kill -TERM "$script"
status=0
wait "$script" || status=$?
[ "$status" -eq 143 ] || { cat "$work/run.out"; echo "FAILED: scancel's TERM gave status $status, not 143"; exit 1; }
echo "train_dp.sbatch: TERM → 143; an unbalanced quote → one line, exit 2"
