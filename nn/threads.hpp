// How many threads the compute kernels (GEMM, the OpenMP loops in nn/ops) use in this
// process. Several ranks on one machine must share its cores: the default is
// cores / ranks-on-this-node (at least 1), or ranks fight over cores and all run slower.
#pragma once

namespace nn {

int machine_cores();
int default_compute_threads(int ranks_on_node);  // max(1, cores / ranks_on_node)
void set_compute_threads(int threads);           // OpenMP and (when linked) OpenBLAS
int compute_threads();

}  // namespace nn
