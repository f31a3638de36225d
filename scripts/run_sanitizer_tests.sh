#!/usr/bin/env bash
# Every test again under AddressSanitizer + UndefinedBehaviorSanitizer (the debug preset: a
# build in build-debug/; any UB report or any leak in the project's code fails a test; Open
# MPI's own once-per-process allocations are suppressed by tests/sanitizers/lsan.supp).
# About 13 minutes to build and 12 to run on 2 cores. CI runs it after the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset debug
cmake --build --preset debug
source scripts/env.sh
ctest --preset debug "$@"
