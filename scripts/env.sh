# Sourced by the scripts: the environment every mpiexec run here needs.
# OpenMPI refuses to run as root unless told it is fine (containers, CI machines).
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# More ranks than cores is fine for learning (they take turns).
export OMPI_MCA_rmaps_base_oversubscribe=1
# Where tiny Shakespeare is found when it is not in data/ and cannot be downloaded: a mirror
# folder holding tinyshakespeare/input.txt. Keeps yours; else ../shared/data when it exists
# (these machines and CI).
if [ -z "${NANODIST_DATA_MIRROR:-}" ] && [ -f "$(dirname "${BASH_SOURCE[0]}")/../../shared/data/tinyshakespeare/input.txt" ]; then
  NANODIST_DATA_MIRROR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../shared/data" && pwd)"
  export NANODIST_DATA_MIRROR
fi
