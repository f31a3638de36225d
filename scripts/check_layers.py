#!/usr/bin/env python3
"""Checks that every #include points down: each file includes only what stands below it.

The layers, bottom first (docs/layout.md draws the same picture). A file may include a
file of its own layer or of a lower one, never of a higher one:

  numeric/                      the bf16 type and its codec, shared by comm/ and nn/
  comm/ basics                  types, errors, the command-line checks, which ranks share a host
  comm/watchdog/                deadlines, the status board and its exchange, termination, abort hooks
  comm/ transport and kernels   MPI handles, point-to-point under the watchdog, reduce kernels, device
                                memory, staging, the Backend interface
  comm/algorithms/, comm/shm/   the hand-written schedules and the shared-memory segment
  comm/backends/                mpi, ring, naive, shm, nccl, and the registry that makes them by name
  comm/ progress thread         the communication thread: runs the calls handed to it
  comm/ communicator            the collectives every program calls
  comm/ runtime                 MPI's start and end, the flags, the world
  torch_backend/                the PyTorch backend: over comm/ only; nothing includes it
  nn/                           autograd, layers, GPT (beside comm/: neither includes the other)
  parallel/                     DP/PP/TP parts over comm/ and nn/
  planning/                     nanodist plan: memory and time of layouts, from nn/'s and parallel/'s formulas
  trainers/, benchmarks/, examples/   the programs

Every source file of those rooms must stand in a layer: one in none is reported too (a new
file is placed here when it is made, not waved through).

Usage: check_layers.py [ROOT]   (exit 1 listing every upward include and every file in no layer)
"""
import pathlib
import re
import sys

# (name, files it holds as path prefixes or exact paths), bottom first.
LAYERS = [
    ("numeric", ["numeric/"]),
    ("comm basics", ["comm/types.hpp", "comm/error.hpp", "comm/cli_forward.hpp", "comm/cli_checks.", "comm/host_split."]),
    ("comm watchdog wing", ["comm/watchdog/"]),
    ("comm transport and kernels", ["comm/mpi_comm.hpp", "comm/transport.", "comm/reduce_kernels.",
                                    "comm/device_memory.", "comm/staging.", "comm/backend."]),
    ("comm algorithms and shm", ["comm/algorithms/", "comm/shm/"]),
    ("comm backends", ["comm/backends/"]),
    ("comm progress thread", ["comm/progress_thread."]),
    ("comm communicator", ["comm/communicator", "comm/traffic.", "comm/work."]),
    ("comm runtime", ["comm/runtime."]),
    ("torch backend", ["torch_backend/"]),
    ("parallel", ["parallel/"]),
    ("planning", ["planning/"]),
    ("programs", ["trainers/", "benchmarks/", "examples/"]),
]
# nn/ stands beside comm/: neither may include the other; it may include numeric/.
NN = ("nn", ["nn/"])


def layer_of(path):
    if path.startswith("nn/"):
        return NN[0], None
    for index, (name, prefixes) in enumerate(LAYERS):
        if any(path == p or path.startswith(p) for p in prefixes):
            return name, index
    return None, None


def allowed(source, target):
    """True when `source` may include `target` (both repository-relative paths)."""
    s_name, s_index = layer_of(source)
    t_name, t_index = layer_of(target)
    if s_name is None or t_name is None:
        return True  # a file outside the layered rooms (tests, third parties)
    if s_name == "nn":
        return t_name in ("nn", "numeric")
    if t_name == "nn":
        return s_index >= LAYERS.index(("parallel", ["parallel/"])) and s_name != "torch backend"
    if t_name == "torch backend":
        return s_name == "torch backend"  # a room of its own: nothing else uses it
    return t_index <= s_index


SOURCE_SUFFIXES = (".hpp", ".cpp", ".h", ".cu", ".cuh", ".inl", ".ipp")


def rooms():
    """The top-level folders the layers name (nn/ included), in a stable order."""
    names = [NN[1][0]] + [prefix for _, prefixes in LAYERS for prefix in prefixes]
    return sorted({name.split("/")[0] for name in names})


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    wrong = []
    checked = 0
    for room in rooms():
        for file in sorted((root / room).rglob("*")):
            if file.suffix not in SOURCE_SUFFIXES or "standalone" in file.parts:
                continue
            source = file.relative_to(root).as_posix()
            if layer_of(source)[0] is None:
                wrong.append(f"{source} stands in no layer: add it to LAYERS in scripts/check_layers.py")
            for target in include.findall(file.read_text(errors="replace")):
                checked += 1
                if layer_of(target)[0] is None and (root / target).is_file():
                    wrong.append(f"{source} includes {target}, which stands in no layer")
                elif not allowed(source, target):
                    wrong.append(f"{source} includes {target}: {layer_of(source)[0]} may not include "
                                 f"{layer_of(target)[0]}, which stands above it")
    for line in wrong:
        print(line)
    print(f"check_layers: {checked} includes; {len(wrong)} pointing up or in no layer")
    return 1 if wrong or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
