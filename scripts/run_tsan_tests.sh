#!/usr/bin/env bash
# The communication thread under ThreadSanitizer: the library's collectives, blocking and
# asynchronous, caller and thread progress, tagged point-to-point (test_collectives on 2 to 4
# ranks). The tsan preset builds only what they need (and the PyTorch module), in build-tsan/;
# any report outside Open MPI, PMIx and libevent (tests/sanitizers/tsan.supp) fails a test.
# Not part of CI's run (its budget); docs/pytorch.md, "ThreadSanitizer", has the last result.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --pytorch
start=$SECONDS
cmake --preset tsan
cmake --build --preset tsan
build_seconds=$((SECONDS - start))
source scripts/env.sh
start=$SECONDS
ctest --preset tsan "$@" 2>&1 | tee build-tsan/ctest.log
echo "run_tsan_tests: build ${build_seconds} s, tests $((SECONDS - start)) s"
