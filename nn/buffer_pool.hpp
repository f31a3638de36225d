// A caching allocator for tensor memory, like PyTorch's: a freed buffer is kept in a list
// by size and handed out again to the next tensor of that size. A training step allocates
// the same tensors every time, so from the second step on no memory comes from the system.
#pragma once
#include <cstddef>

namespace nn {

struct BufferPool {
  // A 64-byte aligned block of `count` values of T (float: tensors; numeric::bfloat16: the
  // casts of --precision bf16), uninitialised. Blocks are kept by their size in bytes.
  template <class T = float>
  static T* acquire(std::size_t count) {
    return static_cast<T*>(acquire_bytes(count * sizeof(T)));
  }
  template <class T>
  static void release(T* buffer, std::size_t count) {
    release_bytes(buffer, count * sizeof(T));
  }
  static void* acquire_bytes(std::size_t bytes);
  static void release_bytes(void* buffer, std::size_t bytes);
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
