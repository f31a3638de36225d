// A caching allocator for tensor memory, like PyTorch's: a freed buffer is kept in a list
// by size and handed out again to the next tensor of that size. A training step allocates
// the same tensors every time, so from the second step on no memory comes from the system.
#pragma once
#include <cstddef>

namespace nn {

struct BufferPool {
  // A 64-byte aligned block of `count` floats, uninitialised.
  static float* acquire(std::size_t count);
  static void release(float* buffer, std::size_t count);
  // How many blocks came from the system (not from the cache) so far: flat across steps
  // once the cache is warm.
  static std::size_t system_allocations();
  // Tensor memory in use now (handed out, not yet released), and the most since reset_peak():
  // what a pipeline stage's activations take, measured rather than estimated.
  static std::size_t bytes_in_use();
  static std::size_t peak_bytes_in_use();
  static void reset_peak();
};

}  // namespace nn
