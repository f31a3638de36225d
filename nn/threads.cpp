#include "nn/threads.hpp"

#include <algorithm>
#include <thread>

#include <omp.h>

#include "nn/error.hpp"

extern "C" void openblas_set_num_threads(int);

namespace nn {

int machine_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int default_compute_threads(int ranks_on_node) { return std::max(1, machine_cores() / std::max(1, ranks_on_node)); }

void set_compute_threads(int threads) {
  if (threads < 1) fail("compute threads must be at least 1, got {}", threads);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int compute_threads() { return omp_get_max_threads(); }

}  // namespace nn
