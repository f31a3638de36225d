"""What every side-by-side benchmark here does to be fair to both sides.

1. OPENBLAS_CORETYPE is removed from the environment of both sides. These machines set it
   to Haswell, which holds OpenBLAS (Debian's torch uses it, and so does nanodist's GEMM) to
   AVX2 kernels on a CPU with AVX-512; users don't set it.
2. PyTorch gets each thread setting a user tuning it would try — its OpenMP threads
   (torch.set_num_threads) and OpenBLAS's own threads (OPENBLAS_NUM_THREADS) separately,
   each 1 or all cores — and the fastest one counts as its result; every one is reported.
"""
import os

CORES = os.cpu_count() or 1


def clean_env(**extra):
    """The environment without OPENBLAS_CORETYPE, plus `extra`, plus what mpiexec needs here."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torch_thread_settings(cores=CORES, processes=1):
    """[(label, torch_threads, env)] for PyTorch: OpenMP threads × OpenBLAS threads, each 1 or
    cores / processes (several processes on one machine share its cores)."""
    share = max(1, cores // processes)
    options = sorted({1, share})
    settings = []
    for omp in options:
        for blas in options:
            settings.append((f"omp {omp}, openblas {blas}", omp,
                             clean_env(OMP_NUM_THREADS=omp, OPENBLAS_NUM_THREADS=blas)))
    return settings
