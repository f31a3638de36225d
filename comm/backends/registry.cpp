#include "comm/backends/registry.hpp"

#include <algorithm>

#include <fmt/ranges.h>

#include "comm/error.hpp"

namespace comm {

std::vector<std::string> backend_names() {
#ifdef NANODIST_HAVE_NCCL
  return {"mpi", "ring", "naive", "shm", "nccl"};
#else
  return {"mpi", "ring", "naive", "shm"};
#endif
}

std::string why_not_a_backend(std::string_view name) {
  const auto built = backend_names();
  if (std::find(built.begin(), built.end(), name) != built.end()) return "";
  if (name == "nccl")
    return fmt::format(
        "backend 'nccl' is not in this build (it has {}): configure with NANODIST_WITH_CUDA=ON where "
        "the CUDA toolkit and NCCL are installed",
        fmt::join(built, ", "));
  return fmt::format("unknown backend '{}' (this build has {})", name, fmt::join(built, ", "));
}

BackendKind parse_backend(std::string_view name) {
  if (const std::string why = why_not_a_backend(name); !why.empty()) throw UsageError(why);
  return static_cast<BackendKind>(std::find(kBackendNames.begin(), kBackendNames.end(), name) - kBackendNames.begin());
}

std::shared_ptr<Backend> make_backend(BackendKind kind, const BackendSettings& settings) {
  switch (kind) {
    case BackendKind::mpi:
      return make_mpi_backend();
    case BackendKind::ring:
      return make_ring_backend();
    case BackendKind::naive:
      return make_naive_backend();
    case BackendKind::shm:
      return make_shm_backend(settings.shm);
    case BackendKind::nccl:
      break;
  }
#ifdef NANODIST_HAVE_NCCL
  return make_nccl_backend(settings.nccl_stall);
#else
  throw UsageError(why_not_a_backend("nccl"));
#endif
}

}  // namespace comm
