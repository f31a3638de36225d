#!/usr/bin/env bash
# Times the README's first command as a new user meets it: a fresh clone of this repository's
# last commit, then `bash scripts/run_main_job.sh`. Prints every line with the seconds since
# the command started, then when the first training step ended (the memory line comes right
# after it) and when the main job ended. Extra arguments go to train_dp.
#   bash scripts/time_first_run.sh
# With the Debian packages missing (a new machine), run it there: docs/history.md, "The first
# run from a fresh clone", says how it was measured in a fresh Debian 12 root.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
source "$repo/scripts/env.sh"   # keeps the data mirror this checkout sees
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/nanodist"

micros() { local t=$EPOCHREALTIME; echo "${t/./}"; }   # bash 5: seconds.microseconds
start=$(micros)
since_start() { local us=$(($(micros) - start)); printf '%d.%d' $((us / 1000000)) $((us / 100000 % 10)); }
bash "$work/nanodist/scripts/run_main_job.sh" "$@" 2>&1 | while IFS= read -r line; do
  printf '%7s s  %s\n' "$(since_start)" "$line"
done | tee "$work/log"
first_step=$(grep -m1 ' s  memory rank ' "$work/log" | awk '{print $1}')
echo "time_first_run: first training step done at ${first_step:-?} s, main job done at $(since_start) s"
