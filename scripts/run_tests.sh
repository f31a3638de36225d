#!/usr/bin/env bash
# The README's second command: set up, build, and run every test (ctest; the multi-rank
# ones under mpiexec with several rank counts). Prints how long the build and the tests took,
# and the slowest tests (their log: build/ctest.log).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --plots --slurm --pytorch   # the plot scripts, the Slurm script and the PyTorch backend are tested too
start=$SECONDS
bash scripts/build.sh
build_seconds=$((SECONDS - start))
source scripts/env.sh
start=$SECONDS
ctest --preset release "$@" 2>&1 | tee build/ctest.log
echo "run_tests: build ${build_seconds} s, tests $((SECONDS - start)) s; the slowest tests:"
bash scripts/slowest_tests.sh build/ctest.log 10
