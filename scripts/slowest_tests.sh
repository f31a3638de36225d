#!/usr/bin/env bash
# The slowest tests of a ctest run, from the output it printed:
#   bash scripts/slowest_tests.sh build/ctest.log 10
# prints "  74.47 s  demos: …" lines, slowest first (CI prints them for each stage).
set -euo pipefail
log="$1"; count="${2:-10}"
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: (.*[^. ])[ .]+(\*\*\*)?[A-Z][a-zA-Z]*.* ([0-9.]+) sec$/\3 \1/p' "$log" |
  sort -rn | awk -v n="$count" 'NR <= n {t = $1; $1 = ""; printf "%9.2f s %s\n", t, $0}'
