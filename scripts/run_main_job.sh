#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job — data-parallel training
# of a GPT on tiny Shakespeare with 2 ranks, ending with the exact val loss and a sample.
# Extra arguments go to train_dp (e.g. --max-iters 100, --backend ring, --ddp naive).
set -euo pipefail
cd "$(dirname "$0")/.."
# Builds only train_dp and the libraries it links (it prepares the data itself): about half
# of the whole build. scripts/run_tests.sh builds everything.
bash scripts/build.sh train_dp
source scripts/env.sh
# The main job's matrix multiplies run in bf16 where the CPU has bf16 units (same loss, 1.7×
# faster: docs/nn.md, "Mixed precision"), in fp32 elsewhere; --precision fp32 keeps fp32.
precision=(--precision auto)
for arg in "$@"; do case "$arg" in --precision|--precision=*) precision=() ;; esac; done
mpiexec -n 2 build/trainers/train_dp --data-dir data --out-dir out/train_dp "${precision[@]}" "$@"
