#!/usr/bin/env bash
# What the cross-node status exchange costs a collective when nothing is wrong: comm_bench's
# small-message allreduce latency, built from this checkout and from REF (default: the commit
# before the exchange existed), run interleaved, medians over the repeats.
#
#   bash benchmarks/watchdog_cost.sh [REF] [REPEATS]         # 4 ranks on this machine
#   sudo MULTIHOST=1 bash benchmarks/watchdog_cost.sh         # 4 ranks on two namespace hosts
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ref="${1:-5561d58}"
repeats="${2:-5}"
old="build-watchdog-cost/$ref"
if [ ! -x "$old/benchmarks/comm_bench" ]; then  # the old comm_bench, built once
  rm -rf "$old-src" && git worktree add --force --detach "$old-src" "$ref" >/dev/null 2>&1
  cmake -S "$old-src" -B "$old" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$old" -j2 --target comm_bench >/dev/null
  git worktree remove --force "$old-src"
fi
bench=(--op allreduce --compare mpi,ring -b 8 -e 4K -f 8 -n 2000 -w 200 --csv)
run() {  # run BINARY CSV
  if [ "${MULTIHOST:-0}" = 1 ]; then
    scripts/two_hosts.sh "mpiexec --hostfile \$NANODIST_HOSTFILE -n 4 $1 ${bench[*]} $2" >/dev/null
  else
    mpiexec -n 4 "$1" "${bench[@]}" "$2" >/dev/null
  fi
}
out="$(mktemp -d)"
for i in $(seq "$repeats"); do
  run "$old/benchmarks/comm_bench" "$out/before-$i.csv"
  run build/benchmarks/comm_bench "$out/now-$i.csv"
done
python3 - "$out" "$repeats" "$ref" <<'PY'
import csv, statistics, sys
out, repeats, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
times = {}
for which in ("before", "now"):
    for i in range(1, repeats + 1):
        for row in csv.DictReader(open(f"{out}/{which}-{i}.csv")):
            times.setdefault((row["backend"], int(row["size_bytes"]), which), []).append(float(row["time_us"]))
print(f"allreduce time per call, µs, 4 ranks (median of {repeats} interleaved runs; before = {ref})")
print("| backend | size | before | now | now / before |")
print("|---|---:|---:|---:|---:|")
for backend, size in sorted({(b, s) for (b, s, _) in times}):
    before = statistics.median(times[(backend, size, "before")])
    now = statistics.median(times[(backend, size, "now")])
    print(f"| {backend} | {size} B | {before:.2f} | {now:.2f} | {now / before:.3f} |")
PY
rm -rf "$out"
