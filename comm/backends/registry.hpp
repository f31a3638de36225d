// The backends this build has, by name and by kind: the one place that knows every backend
// (comm/backend.hpp is only the interface they implement, so it calls none of them).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/backend.hpp"
#include "comm/shm/settings.hpp"

namespace comm {

// What the environment says about the backends, read once where the job starts
// (comm::backend_settings_from_environment, comm/runtime.hpp) and handed down through the
// communicators to every backend they make.
struct BackendSettings {
  shm::Settings shm;
  bool nccl_stall = false;  // NANODIST_NCCL_STALL: a test's stuck GPU
};

// The names of this build's backends.
std::vector<std::string> backend_names();
// Empty for a backend of this build; otherwise why not, in one line (nccl: how to get it).
std::string why_not_a_backend(std::string_view name);
// The backend `name` names; throws comm::UsageError with why_not_a_backend's line otherwise.
// Names become kinds here, at the edge (a flag, a list to compare), and travel as kinds.
BackendKind parse_backend(std::string_view name);
std::shared_ptr<Backend> make_backend(BackendKind kind, const BackendSettings& settings);

// Each backend's maker, in its own file beside this one.
std::unique_ptr<Backend> make_mpi_backend();
std::unique_ptr<Backend> make_ring_backend();
std::unique_ptr<Backend> make_naive_backend();
std::unique_ptr<Backend> make_shm_backend(const shm::Settings& settings);
std::unique_ptr<Backend> make_nccl_backend(bool stall);  // only in builds with NCCL

}  // namespace comm
