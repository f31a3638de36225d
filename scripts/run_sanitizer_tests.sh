#!/usr/bin/env bash
# Every test again under AddressSanitizer + UndefinedBehaviorSanitizer but those labelled
# release_only (CMake's install, the batch schedulers' scripts, collectives on 4 and 5 ranks,
# tensor_parallel on 4, the planner's memory rows, the trace pictures), the debug preset: a
# build in build-debug/; any UB report or any leak in the project's code fails a test; Open
# MPI's own once-per-process allocations are suppressed by tests/sanitizers/lsan.supp).
# CI runs it after the README's test command; it prints how long the build and the tests
# took, and the slowest tests (their log: build-debug/ctest.log).
#   run_sanitizer_tests.sh [ctest args]           the debug preset (ASan + UBSan), every test
#   run_sanitizer_tests.sh --preset tsan [args]   ThreadSanitizer (scripts/run_tsan_tests.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=debug
if [ "${1:-}" = "--preset" ]; then
  preset=$2
  shift 2
fi
case $preset in
  debug) bash scripts/install_deps.sh --slurm ;;
  tsan) bash scripts/install_deps.sh --pytorch ;;
  *) echo "run_sanitizer_tests: unknown preset '$preset' (debug or tsan)" >&2; exit 2 ;;
esac
build_dir=build-$preset
start=$SECONDS
cmake --preset "$preset"
cmake --build --preset "$preset"
build_seconds=$((SECONDS - start))
source scripts/env.sh
start=$SECONDS
ctest --preset "$preset" "$@" 2>&1 | tee "$build_dir/ctest.log"
echo "run_sanitizer_tests: build ${build_seconds} s, tests $((SECONDS - start)) s; the slowest tests:"
bash scripts/slowest_tests.sh "$build_dir/ctest.log" 10
