#include "comm/staging.hpp"

#include <fmt/format.h>

namespace comm {

Staging::Staging(bool device_backend, std::function<void(const std::string&)> refuse)
    : device_backend_(device_backend), refuse_(std::move(refuse)) {}

bool Staging::needs_copy(const void* p, const char* what) const {
  const bool on_device = memory_kind(p) == MemoryKind::device;
  if (device_backend_ && !on_device)
    refuse_(
        fmt::format("the nccl backend takes device memory, but {} is host memory (allocate it with "
                    "cudaMalloc, or use the mpi, ring, naive or shm backend)",
                    what));
  return on_device && !device_backend_;
}

const void* Staging::input(const void* p, std::size_t bytes, const char* what) {
  if (!device_memory_in_use() || p == nullptr || bytes == 0) return p;
  const auto* c = static_cast<const char*>(p);
  for (const Staged& s : staged_)
    if (c >= s.device && c + bytes <= s.device + s.bytes) return static_cast<char*>(s.host.data()) + (c - s.device);
  if (!needs_copy(p, what)) return p;
  staged_.push_back({const_cast<char*>(c), bytes, PinnedBuffer(bytes), false});
  copy_memory(staged_.back().host.data(), p, bytes);
  return staged_.back().host.data();
}

void* Staging::output(void* p, std::size_t bytes, bool read_too, const char* what) {
  if (!device_memory_in_use() || p == nullptr || bytes == 0 || !needs_copy(p, what)) return p;
  staged_.push_back({static_cast<char*>(p), bytes, PinnedBuffer(bytes), true});
  if (read_too) copy_memory(staged_.back().host.data(), p, bytes);
  return staged_.back().host.data();
}

void Staging::finish() {
  for (Staged& s : staged_)
    if (s.copy_back) copy_memory(s.device, s.host.data(), s.bytes);
  staged_.clear();
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
  return a != nullptr && b != nullptr && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace comm
