#!/usr/bin/env bash
# Installs the Debian 12 packages nanodist needs, only those missing. Safe to run again.
set -euo pipefail

packages=(build-essential cmake pkg-config openmpi-bin libopenmpi-dev libeigen3-dev libopenblas-openmp-dev
          catch2 libfmt-dev libcli11-dev nlohmann-json3-dev libdnnl-dev libxxhash-dev iproute2 util-linux)

# --plots: also what the plotting scripts need; --pytorch: Debian's PyTorch and its C++
# headers, for the torch.distributed backend (torch_backend/, docs/pytorch.md), the
# side-by-side benchmarks (benchmarks/gpt_bench_vs_pytorch.py) and to regenerate the test
# fixtures (scripts/make_gpt_fixture.py); --slurm: Slurm and munge, for the test that runs
# hostfiles/train_dp.sbatch on a one-node cluster it makes (their services do not start by
# themselves: Debian starts slurmd/slurmctld only with an /etc/slurm/slurm.conf).
for flag in "$@"; do
  case "$flag" in
    --plots) packages+=(python3-matplotlib) ;;
    --pytorch) packages+=(python3-torch libtorch-dev pybind11-dev python3-dev) ;;
    --slurm) packages+=(slurmctld slurmd slurm-client munge) ;;
    *) echo "install_deps: unknown option $flag (known: --plots, --pytorch, --slurm)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
