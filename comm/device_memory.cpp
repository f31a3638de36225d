#include "comm/device_memory.hpp"

#include <fmt/format.h>

#include "comm/error.hpp"

#ifdef NANODIST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace comm {
namespace {

bool g_device_memory = false;

#ifdef NANODIST_HAVE_CUDA
void check_cuda(cudaError_t code, const char* what) {
  if (code != cudaSuccess) fail("{} failed: {}", what, cudaGetErrorString(code));
}

// (count, why) of the first question; CUDA is only loaded when somebody asks.
const std::pair<int, std::string>& devices() {
  static const std::pair<int, std::string> answer = [] {
    int n = 0;
    const cudaError_t code = cudaGetDeviceCount(&n);
    if (code != cudaSuccess)
      return std::pair<int, std::string>{0, fmt::format("no CUDA device: {}", cudaGetErrorString(code))};
    if (n == 0) return std::pair<int, std::string>{0, std::string("no CUDA device on this machine")};
    return std::pair<int, std::string>{n, std::string()};
  }();
  return answer;
}
#endif

}  // namespace

#ifdef NANODIST_HAVE_CUDA
bool cuda_built() { return true; }
int cuda_device_count() { return devices().first; }
std::string why_no_device() { return devices().second; }

MemoryKind memory_kind(const void* p) {
  if (!g_device_memory || p == nullptr) return MemoryKind::host;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // an unregistered host pointer on old runtimes: clear the sticky error
    return MemoryKind::host;
  }
  return attributes.type == cudaMemoryTypeDevice ? MemoryKind::device : MemoryKind::host;
}

void select_device(int local_rank, const char* who) {
  use_device_memory(who);
  check_cuda(cudaSetDevice(local_rank % cuda_device_count()), "cudaSetDevice");
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  use_device_memory();
  if (bytes > 0) check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check_cuda(cudaMallocHost(&data_, bytes), "cudaMallocHost");
}
PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

void copy_memory(void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpy(to, from, bytes, cudaMemcpyDefault), "cudaMemcpy");
  // cudaMemcpy may return before a device-to-device (or pageable-to-device) copy has landed;
  // nccl's stream does not wait for the default stream (it is non-blocking), so wait here.
  check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
}
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string why_no_device() {
  return "this build has no CUDA (configure with NANODIST_WITH_CUDA=ON where the CUDA toolkit and NCCL are installed)";
}
MemoryKind memory_kind(const void*) { return MemoryKind::host; }
void select_device(int, const char* who) { use_device_memory(who); }
DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) { use_device_memory(); }
DeviceBuffer::~DeviceBuffer() = default;
PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) { fail("pinned memory needs a CUDA build"); }
PinnedBuffer::~PinnedBuffer() = default;
void copy_memory(void*, const void*, std::size_t) { fail("device copies need a CUDA build"); }
#endif

void use_device_memory(const char* who) {
  if (g_device_memory) return;
  if (cuda_device_count() == 0) throw UsageError(fmt::format("{}: {}", who, why_no_device()));
  g_device_memory = true;
}

bool device_memory_in_use() { return g_device_memory; }

namespace {
int g_node_local_rank = 0;
}  // namespace
void set_node_local_rank(int local_rank) { g_node_local_rank = local_rank; }
int node_local_rank() { return g_node_local_rank; }

}  // namespace comm
