// Host or device memory. Every Communicator call takes host pointers; with a CUDA build it also
// takes device (cudaMalloc) pointers: the nccl backend works on them directly, the mpi, ring
// and naive backends stage them through pinned host memory (copy in, run, copy out), so the
// hand-written algorithms and the demos run on GPU data too.
//
// Nothing here touches CUDA until device memory is asked for (a DeviceBuffer, --device cuda,
// --backend nccl, or use_device_memory()): a CPU program pays nothing, and runs where CUDA's
// libraries are present but no GPU or driver is.
#pragma once
#include <cstddef>
#include <string>

namespace comm {

enum class MemoryKind { host, device };

// True when this build has the CUDA runtime.
bool cuda_built();
// Visible CUDA devices (0 without a GPU, a driver, or a CUDA build); asked once.
int cuda_device_count();
// Why there is no device, in words ("this build has no CUDA", "no CUDA device: CUDA driver
// version is insufficient …"); empty when there is one.
std::string why_no_device();
// Declares that device pointers may come: from now on each call checks where its buffers are.
// Throws comm::UsageError "<who>: <why_no_device()>" when there is no device.
void use_device_memory(const char* who = "device memory");
bool device_memory_in_use();
// Where p points (host unless device memory is in use and p is a cudaMalloc pointer).
MemoryKind memory_kind(const void* p);

// Selects this process's GPU: node-local rank % devices (one device per rank where there are
// enough; several ranks share one otherwise).
void select_device(int local_rank, const char* who);
// This process's rank among those on its node, recorded once by comm::Runtime at start (for
// the parts below the runtime that choose a GPU: the nccl backend).
void set_node_local_rank(int local_rank);
int node_local_rank();

// RAII device memory (cudaMalloc / cudaFree).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer();
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// RAII pinned (page-locked) host memory, for fast copies to and from the device.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes);
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; }
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  ~PinnedBuffer();
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Synchronous copies (cudaMemcpy, kind inferred from the pointers): done when it returns.
void copy_memory(void* to, const void* from, std::size_t bytes);

}  // namespace comm
