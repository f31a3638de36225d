// Device buffers on their way to a backend: the mpi, ring and naive backends take host memory,
// so a device buffer is copied into pinned host memory before the call (when the call reads
// it) and back after it (when the call writes it) — a GPU's data through the hand-written
// algorithms, at the price of two copies over PCIe (docs/backends.md measures it). The nccl
// backend takes device memory only: there a host buffer is refused in one line.
//
// While no device memory is in use (comm/device_memory.hpp) every buffer is handed on as is,
// without a single CUDA call.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_memory.hpp"

namespace comm {

class Staging {
 public:
  // `device_backend`: the backend takes device memory (check, never copy). `refuse` throws
  // the one-line error naming the call.
  Staging(bool device_backend, std::function<void(const std::string&)> refuse);
  // A buffer the call only reads (send): what to hand the backend instead. A pointer inside a
  // buffer already staged by output() is mapped into its copy (in-place allgather).
  const void* input(const void* p, std::size_t bytes, const char* what);
  // A buffer the call writes; `read_too`: it reads it first (in place, broadcast's root).
  void* output(void* p, std::size_t bytes, bool read_too, const char* what);
  // Copies what the call wrote back to the device.
  void finish();

 private:
  // True when p is device memory and the backend needs a host copy; refuses host memory to nccl.
  bool needs_copy(const void* p, const char* what) const;
  struct Staged {
    char* device;
    std::size_t bytes;
    PinnedBuffer host;
    bool copy_back;
  };
  bool device_backend_;
  std::function<void(const std::string&)> refuse_;
  std::vector<Staged> staged_;
};

// True when [a, a + a_bytes) and [b, b + b_bytes) share memory (in-place forms).
bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes);

}  // namespace comm
