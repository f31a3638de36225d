#!/usr/bin/env bash
# Installs what is missing, configures and builds (Release, in build/).
#   bash scripts/build.sh               every target: libraries, programs, tests
#   bash scripts/build.sh train_dp      only that program and what it links (the main job)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release
if [ $# -eq 0 ]; then
  cmake --build --preset release
else
  cmake --build --preset release --target "$@"
fi
