#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job.
# Until the data-parallel trainer exists, the main job is every collective demo on 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
source scripts/env.sh
for demo in allreduce reduce broadcast allgather gather scatter reduce_scatter barrier; do
  echo
  mpiexec -n 4 "build/examples/$demo" "$@"
done
echo
mpiexec -n 3 build/examples/model_parallel "$@"
