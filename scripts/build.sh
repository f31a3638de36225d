#!/usr/bin/env bash
# Installs what is missing, configures and builds (Release, in build/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release
cmake --build --preset release
