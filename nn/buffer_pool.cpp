#include "nn/buffer_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <unordered_map>
#include <vector>

namespace nn {
namespace {

// The pool belongs to the thread that builds graphs; compute threads never allocate.
struct Cache {
  std::unordered_map<std::size_t, std::vector<float*>> free_by_size;
  std::size_t system_allocations = 0;
  std::size_t bytes_in_use = 0, peak_bytes_in_use = 0;  // tensor memory handed out and not yet given back
  ~Cache() {
    for (auto& [size, buffers] : free_by_size)
      for (float* b : buffers) std::free(b);
  }
};

Cache& cache() {
  static Cache instance;
  return instance;
}

}  // namespace

float* BufferPool::acquire(std::size_t count) {
  if (count == 0) count = 1;
  Cache& c = cache();
  c.bytes_in_use += count * sizeof(float);
  c.peak_bytes_in_use = std::max(c.peak_bytes_in_use, c.bytes_in_use);
  auto& list = cache().free_by_size[count];
  if (!list.empty()) {
    float* b = list.back();
    list.pop_back();
    return b;
  }
  ++cache().system_allocations;
  std::size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  return static_cast<float*>(p);
}

void BufferPool::release(float* buffer, std::size_t count) {
  if (!buffer) return;
  if (count == 0) count = 1;
  cache().bytes_in_use -= count * sizeof(float);
  cache().free_by_size[count].push_back(buffer);
}

std::size_t BufferPool::bytes_in_use() { return cache().bytes_in_use; }
std::size_t BufferPool::peak_bytes_in_use() { return cache().peak_bytes_in_use; }
void BufferPool::reset_peak() { cache().peak_bytes_in_use = cache().bytes_in_use; }

std::size_t BufferPool::system_allocations() { return cache().system_allocations; }

}  // namespace nn
