#!/usr/bin/env bash
# The communication thread under ThreadSanitizer: the library's collectives (blocking and
# asynchronous, caller and thread progress: test_collectives on 2 and 3 ranks) and the PyTorch
# backend (its collectives under mpiexec and started apart, issue 46's programs, a rank that
# fails). The tsan preset builds only what these need, in build-tsan/; any report fails a test.
# Not part of CI's run (its budget); docs/pytorch.md has the last result.
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
