// The Python module `nanodist_torch`: importing it registers the backend "nanodist" with
// torch.distributed, so that a PyTorch program changes only its backend's name:
//
//   import torch.distributed as dist, nanodist_torch
//   dist.init_process_group("nanodist", rank=rank, world_size=world_size)
//
// Underneath: NANODIST_BACKEND (mpi, ring, naive, shm; unset: shm, the fastest where ranks
// share a host), NANODIST_TIMEOUT (else init_process_group's timeout), NANODIST_CHECK — read as
// every nanodist program reads them. Rank 0 says at init which backend runs, and how.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "comm/progress_thread.hpp"
#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/watchdog.hpp"
#include "torch_backend/deadline.hpp"
#include "torch_backend/job.hpp"
#include "torch_backend/process_group.hpp"

namespace py = pybind11;

namespace nanodist_torch {
namespace {

using comm::ProgressThread;

// What each group runs on (backend_description()), by its name; the default group's first.
std::mutex g_descriptions_mutex;
std::map<std::string, std::string> g_descriptions;
std::string g_default_description;

// NANODIST_TORCH_OVERLAP=0 makes every call wait for its collective before returning, as a
// blocking backend would: nothing overlaps. For measuring what the communication thread hides.
// Read once, when the module is imported (the environment is read only here).
bool overlap_from_environment() {
  const char* text = std::getenv("NANODIST_TORCH_OVERLAP");
  if (!text || std::string_view(text) == "1" || std::string_view(text).empty()) return true;
  if (std::string_view(text) != "0")
    throw std::runtime_error(fmt::format("nanodist: NANODIST_TORCH_OVERLAP='{}' is not 0 or 1", text));
  return false;
}
bool g_overlap = true;

// Why this process is leaving, for the ranks still waiting for it: set by the exception hook.
std::mutex g_leaving_mutex;
std::string g_leaving = "exit";

// How often the monitor looks at the communication thread, and how far past the job's
// deadline the thread may go without a collective before the monitor ends the job.
constexpr auto kMonitorEvery = std::chrono::seconds(1);
constexpr double kStallMarginSeconds = 5.0;

// The communication thread runs calls under the watchdog, whose waits have deadlines; what
// else runs there — a future's callback — has none. A callback that waits for something
// queued behind it (future.wait() on a later call) would hold the thread forever: once the
// thread has been in one task, outside any collective, for longer than the deadline (counted
// from the task's start or the end of its last collective, whichever is later: a task of many
// collectives is not stuck), this monitor says so in one line and ends the job.
class Monitor {
 public:
  void start() {
    std::lock_guard lock(mutex_);
    if (thread_.joinable()) return;
    thread_ = std::thread([this] { watch(); });
  }
  // Before the runtime (the status board it reads) goes away.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, kMonitorEvery, [&] { return stopping_; })) {
      const std::int64_t task_started = ProgressThread::get().task_started_ns();
      if (task_started == 0) continue;
      comm::Watchdog& watchdog = comm::watchdog();  // (alive: stop() comes before the runtime's end)
      const comm::RankSlot& me = watchdog.board().mine();
      if (me.state.load() == static_cast<std::int64_t>(comm::RankState::in_collective)) continue;
      const std::int64_t since = std::max(task_started, me.last.end_ns.load());
      const double idle_s = static_cast<double>(comm::now_ns() - since) * 1e-9;
      if (idle_s < job_timeout_s() + kStallMarginSeconds) continue;
      const std::string line = fmt::format(
          "[watchdog] rank {}: the communication thread has run one task for {:.1f} s without a collective (a "
          "future's callback that waits for a call queued behind it waits forever); ending the job (exit status {})\n",
          watchdog.board().world_rank(), idle_s, comm::kWatchdogExitCode);
      [[maybe_unused]] auto written = write(STDERR_FILENO, line.data(), line.size());
      comm::run_abort_hooks();
      _exit(comm::kWatchdogExitCode);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};
Monitor g_monitor;

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
  int max_tag = 0;
  bool first = false;
  try {
    ProgressThread::get().run([&] {
      first = !job_started();  // the default group: torch.distributed's world
      // (nanodist for a subgroup only, the default group on another backend: the first group
      // must still hold every rank, in order, for its ranks to be the world's)
      if (first && !world_ranks.empty())
        for (std::size_t r = 0; r < world_ranks.size(); ++r)
          if (world_ranks[r] != static_cast<std::int64_t>(r))
            throw comm::UsageError("nanodist: the first nanodist group must hold every rank of the job, in order "
                                   "(make the default group nanodist, or a new_group of all ranks)");
      start_job(*store, rank, size, timeout);
      communicator = make_group(world_ranks, first ? "default_pg" : "group " + group_id);
      max_tag = communicator->max_tag();
    });
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());  // one line in Python: the message alone
  }
  const std::string description = communicator->backend_description();
  {
    std::lock_guard lock(g_descriptions_mutex);
    g_descriptions[communicator->name()] = description;
    if (first) g_default_description = description;
  }
  if (first) {
    if (rank == 0) std::fprintf(stderr, "nanodist: %d ranks, backend %s\n", size, description.c_str());
    g_monitor.start();
  }
  return c10::make_intrusive<ProcessGroupNanodist>(rank, size, std::move(communicator), max_tag, g_overlap);
}

// The exception that ends the program is noted before Python prints it (then atexit runs end()).
void note_exception(const std::string& kind) {
  std::lock_guard lock(g_leaving_mutex);
  g_leaving = "exception: " + kind;
}

// At the program's exit: the last meeting of all ranks (under the watchdog), then MPI's end.
void end() {
  py::gil_scoped_release release;
  if (ProgressThread::get().running()) {
    std::string why;
    {
      std::lock_guard lock(g_leaving_mutex);
      why = g_leaving;
    }
    // The thread may be held by a task that never ends (a stuck callback): the exit has a
    // deadline too (the meeting's own, and a margin for the thread to come to it).
    Deadline deadline(job_timeout_s() + 2 * kStallMarginSeconds, "the program's exit (the last meeting of all ranks)");
    g_monitor.stop();  // (the exit's own deadline watches from here)
    try {
      ProgressThread::get().run([&why] { end_job(why); });
    } catch (...) {
      // end_job's waits report and end the job themselves; what else throws here (MPI already
      // ended by the program) leaves nothing to do but go
    }
    ProgressThread::get().stop();
  }
}

}  // namespace
}  // namespace nanodist_torch

PYBIND11_MODULE(nanodist_torch, m) {
  m.doc() = "torch.distributed backend 'nanodist': PyTorch's collectives on nanodist's, under its watchdog";
  nanodist_torch::g_overlap = nanodist_torch::overlap_from_environment();
  py::module_ dist = py::module_::import("torch.distributed");
  m.def("_create", &nanodist_torch::create, py::arg("options"), py::arg("pg_options") = py::none());
  m.def(
      "communication_seconds", [] { return comm::ProgressThread::get().busy_seconds(); },
      "seconds the communication thread has spent running collectives so far (this process)");
  m.def("_end", &nanodist_torch::end, "the last meeting of all ranks and MPI's end (run at exit)");
  m.def(
      "backend_description",
      [](const std::string& group) {
        std::lock_guard lock(nanodist_torch::g_descriptions_mutex);
        if (group.empty()) return nanodist_torch::g_default_description;
        const auto found = nanodist_torch::g_descriptions.find(group);
        return found == nanodist_torch::g_descriptions.end() ? std::string() : found->second;
      },
      py::arg("group") = "",
      "what runs the collectives underneath (\"shm: 2 ranks on one node, single copy …\"): the default group's, "
      "or a group's by its nanodist name ('group 1')");
  // An uncaught exception goes through sys.excepthook before atexit: noted first, so the ranks
  // still waiting for this one say "rank 1 left the program (exception: ValueError)".
  py::module_ sys = py::module_::import("sys");
  py::object previous_hook = sys.attr("excepthook");
  sys.attr("excepthook") = py::cpp_function([previous_hook](py::object kind, py::object value, py::object trace) {
    nanodist_torch::note_exception(py::str(kind.attr("__name__")));
    previous_hook(kind, value, trace);
  });
  py::object backend = dist.attr("Backend");
  if (!py::hasattr(backend, "NANODIST"))
    backend.attr("register_backend")("nanodist", m.attr("_create"), py::arg("extended_api") = true);
  py::module_::import("atexit").attr("register")(m.attr("_end"));
}
