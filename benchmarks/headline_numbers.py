#!/usr/bin/env python3
"""The headline numbers, one source: run the benchmarks, keep their own output, and render
the one dated table every page cites (docs/numbers.md).

    python3 benchmarks/headline_numbers.py run              # every benchmark, full size (about 8 min)
    python3 benchmarks/headline_numbers.py render           # docs/numbers/*.txt → docs/numbers.md and README's table
    python3 benchmarks/headline_numbers.py ci               # a clean clone's .ci/run → docs/numbers/ci.txt (40 min)
    python3 benchmarks/headline_numbers.py run --small --raw-dir /tmp/n && \\
      python3 benchmarks/headline_numbers.py render --raw-dir /tmp/n --out /tmp/n/numbers.md

`run` writes each benchmark's standard output, as printed, to <raw-dir>/<name>.txt, and the
machine, the CPU, the commit, the date and every command to <raw-dir>/machine.json. `render`
reads only those files, so the table cannot say what the benchmarks did not print; a row
whose output does not parse is an error naming the file (the test command runs both at small
sizes, so a benchmark whose output changed breaks the test, not the table). `--check` renders
to memory and fails when docs/numbers.md differs: the committed table is the committed output's.

`ci` runs `.ci/run` on a clean clone of HEAD (beside the checkout, as CI does) and keeps its
summary lines (`ci: …`, each stage's `run_…: build … s, tests … s`, ctest's `out of N`) in
ci.txt: the CI row. A full `run` or `ci` refuses a tree with uncommitted changes."""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
# Debian's python3-torch is /usr/bin/python3's (docs/troubleshooting.md: "the wrong python3").
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def benchmarks(args):
    """name → command. --small: seconds-long runs with the same output (the test command's)."""
    small, build = args.small, args.build_dir
    data = ["--data-dir", args.data_dir]
    return {
        "main_job": [PY, f"{here}/main_job_vs_nanogpt.py", "--train-dp", f"{build}/trainers/train_dp"] + data + (
            ["--nanogpt-iters", "20", "--probe-iters", "3", "--repeats", "1", "--train-dp-args=--max-iters 20 --eval-iters 2"]
            if small else []),
        "train_dp_vs_ddp": [PY, f"{here}/train_dp_vs_pytorch_ddp.py", "--train-dp", f"{build}/trainers/train_dp"]
        + data + (["--steps", "6", "--rounds", "1", "--ranks", "2"] if small else ["--rounds", "3"]),
        "gpt_bench_vs_pytorch": [PY, f"{here}/gpt_bench_vs_pytorch.py", "--binary", f"{build}/benchmarks/gpt_bench",
                                 "--presets", "a", "--precisions", "fp32" if small else "fp32,bf16",
                                 "--rounds", "1" if small else "3"],
        "comm_bench_allreduce": [
            "mpiexec", "--oversubscribe", "-n", "2", f"{build}/benchmarks/comm_bench", "--op", "allreduce",
            "--compare", "shm,ring,mpi", "--memcpy", "-b", "256K", "-e", "1M" if small else "64M", "-f", "4",
            "-n", "2" if small else "20"],
        "torch_allreduce_vs_gloo": [PY, f"{here}/torch_allreduce_bench.py", "--backends", "default"] + (
            ["--max-mb", "1", "--repeats", "2"] if small else ["--max-mb", "64", "--repeats", "30"]),
        "comm_bench_alltoall": [
            "mpiexec", "--oversubscribe", "-n", "2", f"{build}/benchmarks/comm_bench", "--op", "alltoall",
            "--compare", "shm,mpi", "--memcpy", "-b", "1M", "-e", "1M" if small else "16M", "-f", "4",
            "-n", "2" if small else "20"],
        "torch_alltoall_vs_gloo": [PY, f"{here}/torch_allreduce_bench.py", "--op", "all_to_all_single",
                                   "--backends", "default"] + (
            ["--max-mb", "1", "--repeats", "2"] if small else ["--max-mb", "16", "--repeats", "30"]),
    }


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpu_features():
    """The units the headline numbers depend on: AVX-512 (oneDNN's fp32 kernels), its bf16 units."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    wanted = ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]
    return ", ".join(flag for flag in wanted if flag in flags) or "none of " + ", ".join(wanted)


def shown(command):
    """The command as a reader types it: paths from the repository root, the default folders left out."""
    words, skip = [], False
    for word in command:
        if skip or word in ("--data-dir", "--train-dp", "--binary"):
            skip = not skip
            continue
        words.append(os.path.relpath(word, root) if word.startswith(root) else word)
    return " ".join(words)


def commit_measured(small):
    """The commit the rows measure; a full run refuses a tree with changes (the table would name wrong code)."""
    described = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty", "--abbrev=7"],
                               capture_output=True, text=True).stdout.strip() or "unknown"
    if described.endswith("-dirty") and not small:
        sys.exit("error: the tree has uncommitted changes: commit them first, so the table names the code it measured")
    return described


def run(args):
    os.makedirs(args.raw_dir, exist_ok=True)
    commit = commit_measured(args.small)
    meta = {
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
        "os": platform.platform(),
        "commands": {},
        "measured": {},
    }
    chosen = args.only.split(",") if args.only else None
    env = dict(os.environ)  # the nanodist_torch module of this build, for the PyTorch backend's row
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(args.build_dir, "python"), env.get("PYTHONPATH")]))
    for name, command in benchmarks(args).items():
        if chosen and name not in chosen:
            continue
        print(f"headline_numbers: {name}: {' '.join(command)}", flush=True)
        out = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"error: {name} exited {out.returncode}: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")
        with open(os.path.join(args.raw_dir, f"{name}.txt"), "w") as f:
            f.write(out.stdout)
        meta["commands"][name] = shown(command)
        meta["measured"][name] = f"{meta['date']}, commit {commit}"
    old = os.path.join(args.raw_dir, "machine.json")
    if chosen and os.path.exists(old):  # a partial run keeps the other rows', each with its own date and commit
        with open(old) as f:
            before = json.load(f)
        meta["commands"] = {**before.get("commands", {}), **meta["commands"]}
        meta["measured"] = {**before.get("measured", {}), **meta["measured"]}
    with open(old, "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


class Unreadable(Exception):
    pass


def read(raw_dir, name):
    path = os.path.join(raw_dir, f"{name}.txt")
    if not os.path.exists(path):
        raise Unreadable(f"{path}: missing (run `python3 benchmarks/headline_numbers.py run`)")
    with open(path) as f:
        return path, f.read()


def find(pattern, text, path, what):
    found = re.search(pattern, text, re.MULTILINE)
    if not found:
        raise Unreadable(f"{path}: no {what} in it (the benchmark's output changed?)")
    return found


def main_job_row(raw_dir):
    """Each side's own recipe to the end of training: not the same model or steps (the label says both)."""
    path, text = read(raw_dir, "main_job")
    ours = find(r"^nanodist \(mpiexec -n (\d+)\)\s+([\d.]+)\s+([\d.]+)", text, path, "nanodist row")
    theirs = find(r"^nanoGPT \(PyTorch, 1 proc\)\s+([\d.]+)\s+([\d.]+)\s+\[([^\]]+)\]", text, path, "nanoGPT row")
    spread = find(r"\(wall: median of (\d+) round\(s\); nanodist ([\d.]+–[\d.]+) s, nanoGPT ([\d.]+–[\d.]+) s\)", text,
                  path, "'median of N round(s)' header")
    model = find(r"^nanodist model: (\d+) layers, \d+ heads, (\d+) wide", text, path, "'nanodist model:' line")
    batch = find(r"= (\d+) tokens per step", text, path, "'nanodist global batch:' line")
    steps = find(r"^nanodist steps: (\d+)", text, path, "'nanodist steps:' line")
    compute = find(r"^nanodist compute: .*?\b(fp32|bf16)\b", text, path, "'nanodist compute:' line")
    theirs_recipe = find(r"^nanoGPT recipe: (\d+) layers, \d+ heads, (\d+) wide, .*?= (\d+) tokens per step, (\d+) steps",
                         text, path, "'nanoGPT recipe:' line")
    ours_s, theirs_s = float(ours.group(2)), float(theirs.group(1))
    return (f"time to the end of training, each its own recipe: nanodist {model.group(1)} layers × {model.group(2)} wide, "
            f"{steps.group(1)} steps × {batch.group(1)} tokens on {ours.group(1)} ranks, {compute.group(1)}; nanoGPT's CPU "
            f"recipe {theirs_recipe.group(1)} layers × {theirs_recipe.group(2)} wide, {theirs_recipe.group(4)} steps × "
            f"{theirs_recipe.group(3)} tokens, 1 process, fp32 (median of {spread.group(1)} runs each)",
            f"{ours_s:.1f} s ({spread.group(2)}), val_loss_full {float(ours.group(3)):.3f}",
            f"{theirs_s:.1f} s ({spread.group(3)}), val_loss_full {float(theirs.group(2)):.3f} ({theirs.group(3)})",
            f"{theirs_s / ours_s:.1f}× sooner", "main_job")


def train_dp_rows(raw_dir):
    path, text = read(raw_dir, "train_dp_vs_ddp")
    summary = find(r"^(\w+): global tokens/s, median over (\d+) round", text, path, "summary")
    precision, rounds = summary.group(1), summary.group(2)
    found = re.findall(r"^\s*(\d+)  nanodist / best PyTorch \(([^)]+)\): ([\d.]+)x", text, re.MULTILINE)
    if not found:
        raise Unreadable(f"{path}: no 'nanodist / best PyTorch' line in it")
    best_pytorch = {}
    rows = []
    for ranks, best, ratio in found:
        ours = find(rf"^\s*{ranks}  nanodist train_dp\s+(\d+)", text, path, f"{ranks}-rank nanodist row")
        theirs = find(rf"^\s*{ranks}  {re.escape(best)}\s+(\d+)", text, path, f"{ranks}-rank {best} row")
        settings = len(re.findall(rf"^\s*{ranks}  pytorch DDP, ", text, re.MULTILINE))
        best_pytorch[int(ranks)] = int(theirs.group(1))
        note = ""
        if int(ranks) > 1 and best_pytorch.get(1, 0) > int(theirs.group(1)):
            note = f"; DDP on {ranks} ranks is below its own 1-rank run here ({best_pytorch[1]:,})"
        rows.append((f"train_dp against PyTorch DDP (gloo), {ranks} rank{'s' if ranks != '1' else ''}, {precision}, "
                     f"global tokens/s, median of {rounds} rounds; PyTorch's best of its {settings} thread "
                     f"setting{'s' if settings != 1 else ''} for {ranks} rank{'s' if ranks != '1' else ''}",
                     f"{int(ours.group(1)):,}", f"{int(theirs.group(1)):,} ({best.replace('pytorch DDP, ', '')}{note})",
                     f"{float(ratio):.2f}×", "train_dp_vs_ddp"))
    return rows


def gpt_bench_rows(raw_dir):
    path, text = read(raw_dir, "gpt_bench_vs_pytorch")
    rows = []
    for block in re.finditer(r"^(\w+), preset (\w+) \((\d+) tokens/step\), median[^\n]*\n(.*?)speed-up over the best "
                             r"PyTorch setting \(([^)]+)\): ([\d.]+)x", text, re.MULTILINE | re.DOTALL):
        precision, preset, body, best, ratio = block.group(1), block.group(2), block.group(4), block.group(5), block.group(6)
        ours = find(r"^\s*nanodist\s+([\d.]+)", body, path, f"{precision} nanodist row")
        theirs = find(rf"^\s*{re.escape(best)}\s+([\d.]+)", body, path, f"{precision} {best} row")
        rows.append((f"gpt_bench against PyTorch (eager), preset {preset}, {precision}, ms per training step",
                     f"{float(ours.group(1)):.2f} ms", f"{float(theirs.group(1)):.2f} ms ({best.replace('pytorch, ', '')})",
                     f"{float(ratio):.2f}×", "gpt_bench_vs_pytorch"))
    if not rows:
        raise Unreadable(f"{path}: no 'speed-up over the best PyTorch setting' block in it")
    return rows


def size_label(nbytes):
    return f"{nbytes // 2**20} MB" if nbytes >= 2**20 else f"{nbytes // 2**10} KB"


def comm_bench_rows(raw_dir, name):
    """comm_bench's nccl-tests table: per backend and form (out of place, maybe in place): time, algbw, busbw,
    #wrong. allreduce: busbw, from 16 MiB up (below, the buffers stay in cache and memcpy's figure is no ceiling:
    benchmarks.md). alltoall: algbw, S / t — each rank copies its whole S once, one memcpy's work (alltoall.md)."""
    path, text = read(raw_dir, name)
    head = find(r"^# comm_bench: (\w+) on (\d+) ranks.*?(out of place and in place|out of place)", text, path, "header")
    op, ranks, forms = head.group(1), head.group(2), 2 if head.group(3) == "out of place and in place" else 1
    header = find(r"^#\s+\|(.*)$", text, path, "backend header").group(1)
    backends = [b.strip() for b in header.split("|") if b.strip() in ("shm", "ring", "mpi", "naive", "nccl")]
    if "mpi" not in backends or "shm" not in backends:
        raise Unreadable(f"{path}: needs shm and mpi side by side (--compare shm,...,mpi), found {backends}")
    column = 2 if op == "allreduce" else 1  # busbw, or algbw
    sizes = []
    for line in text.splitlines():
        if line.startswith("#") or "|" not in line:
            continue
        cells = [c for c in line.replace("|", " ").replace(":", " ").split()]
        nbytes = int(cells[0])
        numbers = cells[5:]
        rate = {}
        for i, backend in enumerate(backends):  # 4 numbers per backend and form: (time, algbw, busbw, #wrong)
            block = numbers[4 * forms * i:4 * forms * (i + 1)]
            if len(block) < 4 * forms or any(block[4 * f + 3] != "0" for f in range(forms)):
                raise Unreadable(f"{path}: a row of {nbytes} bytes is short or has wrong elements")
            rate[backend] = max(float(block[4 * f + column]) for f in range(forms))
        tail = numbers[4 * forms * len(backends):]
        together = float(tail[-2])  # memcpy, all ranks: GB/s then best/
        sizes.append((nbytes, rate, together))
    if not sizes:
        raise Unreadable(f"{path}: no size rows in it")
    iterations = find(r", (\d+) iterations after", text, path, "iterations in the header").group(1)
    if op == "allreduce":
        chosen = [row for row in sizes if row[0] >= 16 * 2**20] or sizes[-1:]
        what = "busbw from the mean time of {} iterations (the better of out-of-place and in place)"
    else:
        chosen = [row for row in sizes if row[0] in (2**20, 16 * 2**20)] or sizes[-1:]
        what = ("algbw (each rank copies its whole buffer once: one memcpy's work) from the mean time of {} "
                "iterations, out of place")
    rows = []
    for nbytes, rate, together in chosen:
        ceiling = nbytes >= 16 * 2**20 or op != "allreduce"
        rows.append((f"{op} on {ranks} ranks, {size_label(nbytes)}, {what.format(iterations)}",
                     f"shm {rate['shm']:.1f} GB/s" + (f", ring {rate['ring']:.1f}" if "ring" in rate else ""),
                     f"OpenMPI {rate['mpi']:.1f} GB/s" + (f"; memcpy, every rank at once, {together:.1f} GB/s"
                                                          if ceiling else ""),
                     f"{rate['shm'] / rate['mpi']:.1f}× OpenMPI" + (f", {rate['shm'] / together:.2f} of memcpy"
                                                                    if ceiling else ""),
                     name))
    return rows


def torch_backend_rows(raw_dir, name):
    """torch_allreduce_bench.py's table: all_reduce (busbw) or all_to_all_single (S / t) against gloo."""
    path, text = read(raw_dir, name)
    find(r"^\s*size\s+memcpy GB/s\s+gloo GB/s\s+nanodist/default GB/s\s+default/gloo\s*$", text, path,
         "header 'size memcpy gloo nanodist/default default/gloo' (its columns changed?)")
    rows = {}
    for found in re.finditer(r"^\s*(\d+) (KB|MB)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", text, re.MULTILINE):
        rows[f"{found.group(1)} {found.group(2)}"] = (float(found.group(4)), float(found.group(5)), float(found.group(6)))
    if not rows:
        raise Unreadable(f"{path}: no size rows in it")
    if name == "torch_allreduce_vs_gloo":
        op, measure, sizes = "all_reduce", "busbw", ("1 MB", "64 MB")
    else:
        op, measure, sizes = "all_to_all_single", "S / t", ("1 MB", "16 MB")
    chosen = [label for label in sizes if label in rows] or [list(rows)[-1]]
    return [(f"torch.distributed {op} on 2 ranks, {label}, {measure} from the median of each side's calls "
             "(slowest rank): the nanodist backend (its default) against gloo", f"{rows[label][1]:.2f} GB/s",
             f"gloo {rows[label][0]:.2f} GB/s", f"{rows[label][2]:.1f}×", name)
            for label in chosen]


def ci_row(raw_dir):
    path, text = read(raw_dir, "ci")
    commit = find(r"of commit ([\w.-]+) on (\d{4}-\d\d-\d\d)", text, path, "'of commit … on DATE' line")
    counts = re.findall(r"tests passed, 0 tests failed out of (\d+)", text)
    stages = find(r"^ci: release stage (\d+) min (\d+) s, sanitizer stage (\d+) min (\d+) s, in all (\d+) min (\d+) s"
                  r" \(budget (\d+) min\)", text, path, "'ci:' line")
    if len(counts) != 2:
        raise Unreadable(f"{path}: needs both stages' 'out of N' lines, found {len(counts)}")
    s = [int(x) for x in stages.groups()]
    return (f"CI: a clean clone's `.ci/run` of commit {commit.group(1)} ({commit.group(2)}): the test command, then "
            "every test again under ASan + UBSan", f"{s[4]} min {s[5]} s in all",
            f"release {s[0]} min {s[1]} s ({counts[0]} tests), sanitizers {s[2]} min {s[3]} s ({counts[1]} tests)",
            f"{'inside' if s[4] < s[6] else 'over'} the {s[6]}-minute budget", "ci")


def render(args):
    try:
        with open(os.path.join(args.raw_dir, "machine.json")) as f:
            meta = json.load(f)
        rows = ([main_job_row(args.raw_dir)] + train_dp_rows(args.raw_dir) + gpt_bench_rows(args.raw_dir)
                + comm_bench_rows(args.raw_dir, "comm_bench_allreduce")
                + torch_backend_rows(args.raw_dir, "torch_allreduce_vs_gloo")
                + comm_bench_rows(args.raw_dir, "comm_bench_alltoall")
                + torch_backend_rows(args.raw_dir, "torch_alltoall_vs_gloo") + [ci_row(args.raw_dir)])
    except (Unreadable, OSError, ValueError, KeyError) as problem:
        sys.exit(f"error: {problem}")
    row_by_row = len(set(meta.get("measured", {}).values())) > 1  # a partial run: rows of several commits
    out = [
        "# The numbers",
        "",
        "<!-- Generated by `python3 benchmarks/headline_numbers.py render` from the benchmarks' own output in",
        "     docs/numbers/: edit nothing here; run the benchmarks again instead. -->",
        "",
        "Every headline figure on every page comes from this one table, and every row from a command",
        "you can run on your own machine. The figures are from one machine on one day; yours will differ,",
        "the ratios less than the times.",
        "",
        ("- **Measured** row by row: each command below says its date and commit" if row_by_row
         else f"- **Measured** {meta['date']} at commit {meta['commit']}"),
        f"- **Machine**: {meta['cpu']}, {meta['cores']} cores, {meta['memory_gib']} GiB, {meta['os']}"
        + (f"; CPU features: {meta['cpu_features']}" if meta.get("cpu_features") else ""),
        "- **Again, every row**: `python3 benchmarks/headline_numbers.py run && "
        "python3 benchmarks/headline_numbers.py render` (about 8 minutes; needs the build and "
        "`scripts/install_deps.sh --pytorch`)",
        "- **Fair to PyTorch**: both sides without `OPENBLAS_CORETYPE`, PyTorch under every thread setting "
        "(OpenMP × OpenBLAS threads), its fastest counted and named in brackets (`benchmarks/fair_settings.py`)",
        "",
        "| what | nanodist | the other side | nanodist's edge | output |",
        "|---|---|---|---|---|",
    ]
    for what, ours, theirs, ratio, name in rows:
        out.append(f"| {what} | {ours} | {theirs} | {ratio} | [{name}.txt](numbers/{name}.txt) |")
    out += ["", "The commands, as run:", ""]
    for name, command in meta.get("commands", {}).items():
        out.append(f"- {name}: `{command}`" + (f" ({meta['measured'][name]})" if row_by_row else ""))
    out.append("- ci: `python3 benchmarks/headline_numbers.py ci` (a clean clone's `.ci/run`, its own commit and date "
               "in its row)")
    out += ["", "How to read each benchmark's output: [benchmarks.md](benchmarks.md); what the numbers were before: "
            "[history.md](history.md).", ""]
    text = "\n".join(out)
    results = [(args.out, None, text)]
    if args.readme:  # the README's short table, between its markers, from the same rows
        with open(args.readme) as f:
            readme = f.read()
        begin, end = "<!-- numbers:begin -->\n", "<!-- numbers:end -->"
        if begin not in readme or end not in readme:
            sys.exit(f"error: {args.readme} has no '{begin.strip()}' … '{end}' block for the table")
        short = ["| | nanodist | the other side | |", "|---|---|---|---|"]
        for what, ours, theirs, ratio, name in rows:
            if "all_reduce on 2 ranks, 1 MB" in what or ", 16 MB," in what:
                continue  # the README keeps one row per comparison; docs/numbers.md has them all
            short.append(f"| {what} | {ours} | {theirs} | {ratio} |")
        short.append(f"\n{meta['date']}, commit {meta['commit']}, {meta['cpu']} ({meta['cores']} cores): "
                     "[docs/numbers.md](docs/numbers.md) has every row, the machine and the commands.\n")
        head, rest = readme.split(begin, 1)
        readme_text = head + begin + "\n".join(short) + rest[rest.index(end):]
        results.append((args.readme, readme, readme_text))
    if args.check:
        for path, old, new in results:
            if old is None:
                with open(path) as f:
                    old = f.read()
            if old != new:
                sys.exit(f"error: {path} is not what docs/numbers/ renders to: run "
                         "`python3 benchmarks/headline_numbers.py render`")
        print(f"headline_numbers: {', '.join(os.path.relpath(p, root) for p, _, _ in results)} match the "
              f"{len(rows)} rows")
        return
    for path, _, new in results:
        with open(path, "w") as f:
            f.write(new)
    print(f"headline_numbers: wrote {args.out}: {len(rows)} rows" + (f"; and {args.readme}'s table" if args.readme else ""))


def ci(args):
    """A clean clone of HEAD runs .ci/run; its summary lines become ci.txt (the CI row)."""
    commit = commit_measured(False)
    clone = os.path.abspath(args.clone_dir)
    subprocess.run(["rm", "-rf", clone], check=True)
    subprocess.run(["git", "clone", "-q", root, clone], check=True)
    log = os.path.join(clone, "ci-run.log")
    print(f"headline_numbers: .ci/run of {commit} in {clone} (about 40 minutes; its output in {log})", flush=True)
    with open(log, "w") as f:
        done = subprocess.run(["bash", ".ci/run"], cwd=clone, env=dict(os.environ, CI="true"), stdout=f,
                              stderr=subprocess.STDOUT)
    with open(log) as f:
        lines = [line.rstrip("\n") for line in f if re.match(
            r"^(\d+% tests passed|Total Test time|run_tests: build|run_sanitizer_tests: build|ci: release stage)", line)]
    if done.returncode != 0:
        sys.exit(f"error: .ci/run failed (exit {done.returncode}): see {log}")
    with open(os.path.join(args.raw_dir, "ci.txt"), "w") as f:
        f.write(f"# A clean-clone run of .ci/run (python3 benchmarks/headline_numbers.py ci)\n"
                f"# of commit {commit} on {datetime.date.today().isoformat()}, on the machine in machine.json; "
                "the lines it printed:\n" + "\n".join(lines) + "\n")
    print(f"headline_numbers: wrote {os.path.join(args.raw_dir, 'ci.txt')}: {len(lines)} lines")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["run", "render", "ci"])
    parser.add_argument("--clone-dir", default=os.path.join(os.path.dirname(root), "ci-clone"),
                        help="ci: where the clean clone goes (replaced)")
    parser.add_argument("--raw-dir", default=os.path.join(root, "docs", "numbers"))
    parser.add_argument("--out", default=os.path.join(root, "docs", "numbers.md"))
    parser.add_argument("--build-dir", default=os.path.join(root, "build"))
    parser.add_argument("--data-dir", default=os.path.join(root, "data"), help="the Shakespeare token files' folder")
    parser.add_argument("--small", action="store_true", help="seconds-long runs, the same output (the test)")
    parser.add_argument("--only", help="comma-separated benchmark names to run")
    parser.add_argument("--check", action="store_true", help="render: fail if --out differs")
    parser.add_argument("--readme", help="also the table in this README (default: the repository's, when --out is "
                        "docs/numbers.md)")
    args = parser.parse_args()
    if args.readme is None and os.path.abspath(args.out) == os.path.join(root, "docs", "numbers.md"):
        args.readme = os.path.join(root, "README.md")
    if args.mode == "run":
        run(args)
    elif args.mode == "ci":
        ci(args)
    else:
        render(args)


if __name__ == "__main__":
    main()
