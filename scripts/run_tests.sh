#!/usr/bin/env bash
# The README's second command: set up, build, and run every test (ctest; the multi-rank
# ones under mpiexec with several rank counts).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --plots   # the plot scripts are tested too
bash scripts/build.sh
source scripts/env.sh
ctest --preset release "$@"
