// The Python module `nanodist_torch`: importing it registers the backend "nanodist" with
// torch.distributed, so that a PyTorch program changes only its backend's name:
//
//   import torch.distributed as dist, nanodist_torch
//   dist.init_process_group("nanodist", rank=rank, world_size=world_size)
//
// Underneath: NANODIST_BACKEND (mpi, ring, naive, shm), NANODIST_TIMEOUT (else
// init_process_group's timeout), NANODIST_CHECK — read as every nanodist program reads them.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "torch_backend/job.hpp"
#include "torch_backend/process_group.hpp"
#include "comm/progress_thread.hpp"

namespace py = pybind11;

namespace nanodist_torch {
namespace {

using comm::ProgressThread;

// torch.distributed's creator (extended API): called by the ranks of each new group, the
// default one first. MPI and the runtime start with the default group, on the communication
// thread; each group gets a communicator of its own.
c10::intrusive_ptr<c10d::ProcessGroup> create(const py::object& options, const py::object& /*pg_options*/) {
  auto store = options.attr("store").cast<c10::intrusive_ptr<c10d::Store>>();
  const int rank = options.attr("group_rank").cast<int>();
  const int size = options.attr("group_size").cast<int>();
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      options.attr("timeout").cast<std::chrono::duration<double>>());
  const std::string group_id = options.attr("group_id").cast<std::string>();
  const auto world_ranks = options.attr("global_ranks_in_group").cast<std::vector<std::int64_t>>();

  py::gil_scoped_release release;  // joining waits for the other processes
  std::unique_ptr<comm::Communicator> communicator;
  try {
    ProgressThread::get().run([&] {
      const bool first = !job_started();  // the default group: torch.distributed's world
      // (nanodist for a subgroup only, the default group on another backend: the first group
      // must still hold every rank, in order, for its ranks to be the world's)
      if (first && !world_ranks.empty())
        for (std::size_t r = 0; r < world_ranks.size(); ++r)
          if (world_ranks[r] != static_cast<std::int64_t>(r))
            throw comm::UsageError("nanodist: the first nanodist group must hold every rank of the job, in order "
                                   "(make the default group nanodist, or a new_group of all ranks)");
      start_job(*store, rank, size, timeout);
      communicator = make_group(world_ranks, first ? "default_pg" : "group " + group_id);
    });
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());  // one line in Python: the message alone
  }
  return c10::make_intrusive<ProcessGroupNanodist>(rank, size, std::move(communicator));
}

// At the program's exit: the last meeting of all ranks (under the watchdog), then MPI's end.
void end() {
  py::gil_scoped_release release;
  if (ProgressThread::get().running()) {
    try {
      ProgressThread::get().run([] {
        ProgressThread::get().finish_polls();  // sends still in flight go (or are reported) first
        end_job();
      });
    } catch (...) {
    }
    ProgressThread::get().stop();
  }
}

}  // namespace
}  // namespace nanodist_torch

PYBIND11_MODULE(nanodist_torch, m) {
  m.doc() = "torch.distributed backend 'nanodist': PyTorch's collectives on nanodist's, under its watchdog";
  py::module_ dist = py::module_::import("torch.distributed");
  m.def("_create", &nanodist_torch::create, py::arg("options"), py::arg("pg_options") = py::none());
  m.def(
      "communication_seconds", [] { return comm::ProgressThread::get().busy_seconds(); },
      "seconds the communication thread has spent running collectives so far (this process)");
  m.def("_end", &nanodist_torch::end, "the last meeting of all ranks and MPI's end (run at exit)");
  py::object backend = dist.attr("Backend");
  if (!py::hasattr(backend, "NANODIST"))
    backend.attr("register_backend")("nanodist", m.attr("_create"), py::arg("extended_api") = true);
  py::module_::import("atexit").attr("register")(m.attr("_end"));
}
