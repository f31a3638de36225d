#!/usr/bin/env python3
"""`nanodist plan`'s predictions against the trainers' own logs, on this machine: for each layout
below (DP, ZeRO 1-3, recompute, PP with 1F1B, GPipe and interleaving, TP with and without SP,
3D, bf16, context parallelism by ring and Ulysses, alone and with DP, PP, TP, mixtures of experts with and
without expert parallelism), the planner's memory of the rank that holds most and its step time beside what the
trainer measures — its "memory rank R (allocator)" lines (the step's peak, largest over ranks)
and the median of its step times after warm-up.

    python3 benchmarks/plan_vs_runs.py [--steps 30] [--markdown] [--rows quick|cp|moe|zero]
    python3 benchmarks/plan_vs_runs.py --rows quick --steps 3 --check-memory 5   # the ctest

--check-memory P exits 1 naming every row whose memory misses by more than P percent."""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# (name, planner flags fixing one layout, global batch, model). Models: gpt-bench-a (4 blocks,
# 128 wide, T 64) so that 4 stages have a block each; the main job's where it is the main job.
ROWS = [
    ("main job (dp 2)", "--dp 2 --zero 0 --micro-batch 12", 24, "main-job", "fp32"),
    ("main job bf16", "--dp 2 --zero 0 --micro-batch 12", 24, "main-job", "bf16"),
    ("one rank", "--dp 1 --zero 0 --micro-batch 12", 24, "gpt-bench-a", "fp32"),
    ("dp 2", "--dp 2 --zero 0 --micro-batch 12", 24, "gpt-bench-a", "fp32"),
    ("dp 4", "--dp 4 --zero 0 --micro-batch 12", 48, "gpt-bench-a", "fp32"),
    ("dp 2, accumulation 4", "--dp 2 --zero 0 --micro-batch 3", 24, "gpt-bench-a", "fp32"),
    ("ZeRO-1 on 2", "--dp 2 --zero 1 --micro-batch 12", 24, "gpt-bench-a", "fp32"),
    ("ZeRO-2 on 2", "--dp 2 --zero 2 --micro-batch 12", 24, "gpt-bench-a", "fp32"),
    ("ZeRO-3 on 4", "--dp 4 --zero 3 --micro-batch 12", 48, "gpt-bench-a", "fp32"),
    ("dp 2 selective", "--dp 2 --zero 0 --recompute selective --micro-batch 12", 24, "gpt-bench-a", "fp32"),
    ("dp 2 full", "--dp 2 --zero 0 --recompute full --micro-batch 12", 24, "gpt-bench-a", "fp32"),
    ("pp 2 1F1B", "--pp 2 --schedule 1f1b --micro-batch 3", 12, "gpt-bench-a", "fp32"),
    ("pp 2 GPipe", "--pp 2 --schedule gpipe --micro-batch 3", 12, "gpt-bench-a", "fp32"),
    ("pp 4 1F1B", "--pp 4 --schedule 1f1b --micro-batch 3", 24, "gpt-bench-a", "fp32"),
    ("pp 2 interleaved v2", "--pp 2 --virtual-stages 2 --schedule interleaved --micro-batch 3", 12, "gpt-bench-a", "fp32"),
    ("dp 2 × pp 2", "--dp 2 --pp 2 --schedule 1f1b --micro-batch 3", 24, "gpt-bench-a", "fp32"),
    ("pp 2 full recompute", "--pp 2 --schedule 1f1b --recompute full --micro-batch 3", 12, "gpt-bench-a", "fp32"),
    ("tp 2", "--tp 2 --sequence-parallel 0 --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("tp 2 + SP", "--tp 2 --sequence-parallel 1 --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("tp 4 + SP", "--tp 4 --sequence-parallel 1 --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("tp 2 selective", "--tp 2 --sequence-parallel 0 --recompute selective --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("3D dp 2 × pp 2 × tp 2", "--dp 2 --pp 2 --tp 2 --sequence-parallel 0 --schedule 1f1b --micro-batch 3", 24,
     "gpt-bench-a", "fp32"),
    ("cp 2 ring", "--cp 2 --cp-attention ring --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("cp 2 Ulysses", "--cp 2 --cp-attention ulysses --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("cp 4 ring", "--cp 4 --cp-attention ring --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("cp 4 Ulysses", "--cp 4 --cp-attention ulysses --micro-batch 12", 12, "gpt-bench-a", "fp32"),
    ("cp 2 ring, T 256", "--cp 2 --cp-attention ring --micro-batch 4 --block-size 256", 4, "gpt-bench-a", "fp32"),
    ("cp 2 Ulysses, T 256", "--cp 2 --cp-attention ulysses --micro-batch 4 --block-size 256", 4, "gpt-bench-a", "fp32"),
    ("cp 2 ring, T 1024", "--cp 2 --cp-attention ring --micro-batch 2 --block-size 1024", 2, "gpt-bench-a", "fp32"),
    ("cp 2 Ulysses, T 1024", "--cp 2 --cp-attention ulysses --micro-batch 2 --block-size 1024", 2, "gpt-bench-a",
     "fp32"),
    ("dp 2 × cp 2 ring", "--dp 2 --cp 2 --cp-attention ring --micro-batch 6", 12, "gpt-bench-a", "fp32"),
    ("pp 2 × cp 2 ring", "--pp 2 --cp 2 --cp-attention ring --schedule 1f1b --micro-batch 3", 12, "gpt-bench-a", "fp32"),
    ("cp 2 × tp 2 Ulysses", "--tp 2 --cp 2 --cp-attention ulysses --sequence-parallel 0 --micro-batch 12", 12,
     "gpt-bench-a", "fp32"),
    ("cp 2 Ulysses selective", "--cp 2 --cp-attention ulysses --recompute selective --micro-batch 12", 12,
     "gpt-bench-a", "fp32"),
    ("cp 2 ring, 2 micro-batches", "--cp 2 --cp-attention ring --micro-batch 6", 12, "gpt-bench-a", "fp32"),
    ("cp 2 × tp 2 + SP ring", "--tp 2 --cp 2 --cp-attention ring --sequence-parallel 1 --micro-batch 12", 12,
     "gpt-bench-a", "fp32"),
    ("MoE main job (dp 2)", "--dp 2 --ep 1 --zero 0 --micro-batch 12", 24, "main-job-moe", "fp32"),
    ("MoE dp 2, top-2", "--dp 2 --ep 1 --zero 0 --micro-batch 12 --experts-per-token 2", 24, "main-job-moe", "fp32"),
    ("MoE ZeRO-1 on 2", "--dp 2 --zero 1 --micro-batch 12", 24, "main-job-moe", "fp32"),
    ("MoE pp 2 1F1B", "--pp 2 --ep 1 --schedule 1f1b --micro-batch 3", 12, "main-job-moe", "fp32"),
    ("MoE dp 2 full", "--dp 2 --ep 1 --zero 0 --recompute full --micro-batch 12", 24, "main-job-moe", "fp32"),
    ("MoE dp 2 ep 2", "--dp 2 --ep 2 --micro-batch 12", 24, "main-job-moe", "fp32"),
    ("MoE dp 4 ep 4", "--dp 4 --ep 4 --micro-batch 6", 24, "main-job-moe", "fp32"),
    ("MoE dp 4 ep 2", "--dp 4 --ep 2 --micro-batch 6", 24, "main-job-moe", "fp32"),
    ("MoE ep 2 × pp 2", "--dp 2 --ep 2 --pp 2 --schedule 1f1b --micro-batch 3", 12, "main-job-moe", "fp32"),
    ("dp 2 × pp 2 ZeRO-1", "--dp 2 --pp 2 --zero 1 --schedule 1f1b --micro-batch 3", 24, "gpt-bench-a", "fp32"),
    ("dp 2 × cp 2 ZeRO-2", "--dp 2 --cp 2 --cp-attention ring --zero 2 --micro-batch 6", 12, "gpt-bench-a", "fp32"),
    ("MoE dp 4 ep 2 ZeRO-2", "--dp 4 --ep 2 --zero 2 --micro-batch 6", 24, "main-job-moe", "fp32"),
]
QUICK = ["main job (dp 2)", "ZeRO-3 on 4", "dp 2 full", "pp 2 1F1B", "pp 2 interleaved v2", "tp 2 + SP",
         "3D dp 2 × pp 2 × tp 2", "cp 2 ring", "cp 2 × tp 2 Ulysses", "MoE main job (dp 2)", "MoE pp 2 1F1B", "MoE dp 4 ep 2"]

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}
MEMORY_LINE = re.compile(r"memory rank (\d+) \(allocator\): parameters ([\d.]+) (\w+), gradients ([\d.]+) (\w+), "
                         r"optimizer ([\d.]+) (\w+) = .*?step peak ([\d.]+) (\w+),")


def size(value, unit):
    return float(value) * UNITS[unit]


def plan(nanodist, flags, batch, model, precision, ranks):
    if "--zero" not in flags:  # a row without ZeRO is one (the sweep tries 1 and 2 on any layout with replicas)
        flags += " --zero 0"
    cmd = [nanodist, "plan", "--model", model, "--precision", precision, "--devices", str(ranks),
           "--global-batch", str(batch), "--machine", "this-cpu", "--json", "--all"] + shlex.split(flags)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"plan_vs_runs: {' '.join(cmd)} failed: {out.stderr.strip()}")
    layouts = json.loads(out.stdout)["layouts"]
    # Every flag fixes one thing but recompute and schedule (their defaults); keep the layout the
    # row names exactly: the first with recompute none unless the row says otherwise.
    wanted = "full" if "--recompute full" in flags else "selective" if "--recompute selective" in flags else "none"
    for layout in layouts:
        if layout["recompute"] == wanted:
            return layout
    sys.exit(f"plan_vs_runs: no layout for {flags}")


def ranks_of(flags):
    degree = {k: 1 for k in ("dp", "tp", "pp", "cp")}
    for k in degree:
        m = re.search(rf"--{k} (\d+)", flags)
        if m:
            degree[k] = int(m.group(1))
    return degree["dp"] * degree["tp"] * degree["pp"] * degree["cp"]


def run(build, mpiexec, command, data_dir, steps, tmp):
    """Runs the planner's command for `steps` steps; the step peak largest over ranks, the median step."""
    words = shlex.split(command)  # mpiexec -n N train_x flags…
    words[0] = mpiexec
    words[3] = os.path.join(build, "trainers", words[3])
    out_dir = os.path.join(tmp, "run")
    words[1:1] = ["--oversubscribe"]
    words += ["--data-dir", data_dir, "--out-dir", out_dir, "--max-iters", str(steps), "--log-interval", "1",
              "--eval-interval", "0", "--eval-iters", "1", "--no-full-val", "--sample-tokens", "0",
              "--warmup-iters", "0", "--metrics", os.path.join(out_dir, "metrics.jsonl")]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(["rm", "-rf", out_dir], check=True)
    out = subprocess.run(words, capture_output=True, text=True, env=env, check=False, timeout=300)
    if out.returncode != 0:
        sys.exit(f"plan_vs_runs: {' '.join(words)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    peaks = [size(m.group(8), m.group(9)) for m in MEMORY_LINE.finditer(out.stdout)]
    if not peaks:
        sys.exit(f"plan_vs_runs: no memory line in the log of {' '.join(words)}")
    times = []
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record.get("kind") == "train":
                times.append(record["step_ms"])
    warm = times[len(times) // 3:] or times
    shown = ["mpiexec"] + words[2:4] + [os.path.basename(words[4])] + words[5:words.index("--data-dir")]
    return max(peaks), statistics.median(warm) / 1e3, " ".join(shown)


def percent(predicted, measured):
    return 100.0 * (predicted - measured) / measured


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
    parser.add_argument("--mpiexec", default="mpiexec")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rows", choices=["all", "quick", "cp", "moe", "zero"], default="all",
                        help="every row, the ctest's few, context parallelism's, or the mixture of experts'")
    parser.add_argument("--markdown", action="store_true", help="a table for docs/planning.md")
    parser.add_argument("--check-memory", type=float, help="exit 1 if a row's memory misses by more than this %%")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    nanodist = os.path.join(args.build_dir, "planning", "nanodist")
    rows = [r for r in ROWS if args.rows == "all" or (args.rows == "quick" and r[0] in QUICK)
            or (args.rows == "cp" and "cp " in r[0]) or (args.rows == "moe" and r[0].startswith("MoE"))
            or (args.rows == "zero" and "ZeRO" in r[0])]
    results, misses = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags, batch, model, precision in rows:
            layout = plan(nanodist, flags, batch, model, precision, ranks_of(flags))
            measured_bytes, measured_s, command = run(args.build_dir, args.mpiexec, layout["command"], args.data_dir, args.steps, tmp)
            predicted_bytes, predicted_s = layout["memory"]["total"], layout["time"]["total"]
            row = {"name": name, "layout": layout["layout"], "command": command,
                   "memory_predicted": predicted_bytes, "memory_measured": measured_bytes,
                   "memory_error_percent": percent(predicted_bytes, measured_bytes),
                   "step_predicted_s": predicted_s, "step_measured_s": measured_s,
                   "step_error_percent": percent(predicted_s, measured_s)}
            results.append(row)
            if args.check_memory is not None and abs(row["memory_error_percent"]) > args.check_memory:
                misses.append(f"{name}: predicted {predicted_bytes / 2**20:.2f} MiB, measured "
                              f"{measured_bytes / 2**20:.2f} MiB ({row['memory_error_percent']:+.1f}%)")
            if not args.markdown:
                print(f"{name:<24} memory {predicted_bytes / 2**20:7.2f} MiB predicted {measured_bytes / 2**20:7.2f} "
                      f"measured ({row['memory_error_percent']:+5.1f}%) | step {predicted_s * 1e3:7.2f} ms predicted "
                      f"{measured_s * 1e3:7.2f} measured ({row['step_error_percent']:+5.1f}%)", flush=True)
    if args.markdown:
        print("| layout | planner's layout | memory predicted | measured | error | step predicted | measured | error |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in results:
            print(f"| {r['name']} | {r['layout']} | {r['memory_predicted'] / 2**20:.2f} MiB | "
                  f"{r['memory_measured'] / 2**20:.2f} MiB | {r['memory_error_percent']:+.1f} % | "
                  f"{r['step_predicted_s'] * 1e3:.1f} ms | {r['step_measured_s'] * 1e3:.1f} ms | "
                  f"{r['step_error_percent']:+.0f} % |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if misses:
        print("memory rows off by more than {}%:\n  {}".format(args.check_memory, "\n  ".join(misses)))
        sys.exit(1)
    if args.check_memory is not None:
        print(f"all {len(results)} memory rows within {args.check_memory}% of the trainers' logs")


if __name__ == "__main__":
    main()
