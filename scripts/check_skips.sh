#!/usr/bin/env bash
# Fails when a test outside the `gpu` label was skipped: CI must not pass by skipping (a plot
# test without matplotlib, a Slurm test without Slurm). GPU tests skip on machines without one.
#   bash scripts/check_skips.sh BUILD_DIR CTEST_LOG
set -euo pipefail
build=$1 log=$2
gpu=$(ctest --test-dir "$build" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: //p')
skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
outside=""
while IFS= read -r test; do
  [ -z "$test" ] && continue
  grep -qxF -- "$test" <<<"$gpu" || outside+="  $test"$'\n'
done <<<"$skipped"
if [ -n "$outside" ]; then
  printf 'error: tests skipped outside the gpu label (%s):\n%s' "$log" "$outside" >&2
  exit 1
fi
echo "check_skips: every skipped test in $log is a gpu test"
