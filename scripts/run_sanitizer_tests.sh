#!/usr/bin/env bash
# Every test again under AddressSanitizer + UndefinedBehaviorSanitizer (the debug preset: a
# build in build-debug/; any UB report or any leak in the project's code fails a test; Open
# MPI's own once-per-process allocations are suppressed by tests/sanitizers/lsan.supp).
# CI runs it after the README's test command; it prints how long the build and the tests
# took, and the slowest tests (their log: build-debug/ctest.log).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --slurm
start=$SECONDS
cmake --preset debug
cmake --build --preset debug
build_seconds=$((SECONDS - start))
source scripts/env.sh
start=$SECONDS
ctest --preset debug "$@" 2>&1 | tee build-debug/ctest.log
echo "run_sanitizer_tests: build ${build_seconds} s, tests $((SECONDS - start)) s; the slowest tests:"
bash scripts/slowest_tests.sh build-debug/ctest.log 10
