#include "nn/buffer_pool.hpp"
#include "nn/profile.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <unordered_map>
#include <vector>

namespace nn {
namespace {

// The pool belongs to the thread that builds graphs; compute threads never allocate.
struct Cache {
  std::unordered_map<std::size_t, std::vector<void*>> free_by_bytes;
  std::size_t system_allocations = 0;
  std::size_t bytes_in_use = 0, peak_bytes_in_use = 0;  // tensor memory handed out and not yet given back
  ~Cache() {
    for (auto& [bytes, buffers] : free_by_bytes)
      for (void* b : buffers) std::free(b);
  }
};

Cache& cache() {
  static Cache instance;
  return instance;
}

}  // namespace

void* BufferPool::acquire_bytes(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  Cache& c = cache();
  c.bytes_in_use += bytes;
  c.peak_bytes_in_use = std::max(c.peak_bytes_in_use, c.bytes_in_use);
  auto& list = c.free_by_bytes[bytes];
  if (!list.empty()) {
    void* b = list.back();
    list.pop_back();
    return b;
  }
  ++c.system_allocations;
  profile::Scope scope("allocation (system)");
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void BufferPool::release_bytes(void* buffer, std::size_t bytes) {
  if (!buffer) return;
  if (bytes == 0) bytes = 1;
  cache().bytes_in_use -= bytes;
  cache().free_by_bytes[bytes].push_back(buffer);
}

std::size_t BufferPool::bytes_in_use() { return cache().bytes_in_use; }
std::size_t BufferPool::peak_bytes_in_use() { return cache().peak_bytes_in_use; }
void BufferPool::reset_peak() { cache().peak_bytes_in_use = cache().bytes_in_use; }

std::size_t BufferPool::system_allocations() { return cache().system_allocations; }

}  // namespace nn
