// The MPI process around a program: start-up, options, printing, errors, shutdown.
//
//   #include <CLI/CLI.hpp>      // this header only names CLI::App (comm/cli_forward.hpp)
//
//   int main(int argc, char** argv) {
//       comm::Runtime runtime(argc, argv);
//       return runtime.run([&] {
//           CLI::App app{"what this program does"};
//           comm::Options options;
//           comm::add_options(app, options);          // --backend, --timeout, ...
//           comm::parse(app, argc, argv);
//           comm::Communicator& world = runtime.start(options);
//           ...
//       });
//   }
//
// run() turns every error into one line and a non-zero exit: bad flags end every rank
// with status 2 (they fail the same way on all ranks); any other error is printed by the
// rank that hit it and ends the whole job (MPI_Abort), so no rank is left waiting.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/cli_forward.hpp"
#include <fmt/format.h>

#include "comm/communicator.hpp"
#include "comm/error.hpp"
#include "comm/watchdog/status_board.hpp"
#include "comm/watchdog/termination.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {

// Options every program takes; each also reads an environment variable.
struct Options {
  BackendKind backend = BackendKind::mpi;  // --backend, NANODIST_BACKEND
  double timeout_s = 300;        // --timeout, NANODIST_TIMEOUT: deadline of every collective
  bool check = false;            // --check-collectives, NANODIST_CHECK
  bool all_ranks_print = false;  // --all-ranks, NANODIST_ALL_RANKS
  // --progress, NANODIST_PROGRESS: who moves the asynchronous collectives (communicator.hpp):
  // the caller when it tests or waits, or the communication thread while the caller computes.
  Progress progress = Progress::caller;
  // Ctrl-C, SIGTERM and SIGUSR1 handled here (the note, the report, a clean exit); off in a
  // PyTorch process (torch_backend/), where Python keeps its own (KeyboardInterrupt).
  bool handle_signals = true;
  // --on-timeout, NANODIST_ON_TIMEOUT: after the watchdog's report, end the job (exit 3 on
  // every rank) or throw comm::TimeoutError for a program that recovers.
  TimeoutAction on_timeout = TimeoutAction::end_job;
};

void add_options(CLI::App& app, Options& options);
// Accepts a backend this build has; otherwise says why not (the --backend and --compare check).
CLI::Validator backend_check();

// NANODIST_SHM_SPIN, NANODIST_SHM_SINGLE_COPY, NANODIST_SHM_RANKS_PER_NODE and
// NANODIST_NCCL_STALL, read once (Runtime::start) and handed down through the communicators;
// a bad value throws UsageError naming the variable.
BackendSettings backend_settings_from_environment();

// NANODIST_CHECK and NANODIST_ALL_RANKS hold a switch (1/0, true/false, on/off, yes/no);
// anything else throws UsageError naming the variable (parse() checks them first).
void check_environment_switches();

// Parses the command line; help and bad flags end the program through run().
void parse(CLI::App& app, int argc, char** argv);

// Leaves run() with this exit status, without its last meeting: for a point every rank
// reaches together (a stop the ranks agreed on, comm/watchdog/termination.hpp).
[[noreturn]] void end_program(int status);

class Runtime {
 public:
  Runtime(int& argc, char**& argv);
  // MPI already started by the caller, who ends it too: `world` is the job's world (the
  // PyTorch backend's, which may join processes that mpiexec did not start together).
  explicit Runtime(MPI_Comm world);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Creates the status board, the watchdog and the world communicator.
  Communicator& start(const Options& options);
  Communicator& world();
  const Options& options() const { return options_; }
  // The environment's backend settings, read by start() (the world's, and every communicator's
  // made from it).
  const BackendSettings& backend_settings() const { return backend_settings_; }

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Ranks of this job on this machine, and this rank's index among them.
  int local_size() const { return local_size_; }
  int local_rank() const { return local_rank_; }

  // Runs the program body; returns the exit status (0, or 2 for bad usage).
  int run(const std::function<void()>& body);
  // The last, watched, meeting of all ranks (run() holds it after the body): a rank that
  // ends while others still wait for it in a collective is reported as "waiting in finalize".
  void shut_down();

  // Should this rank print? Rank 0 always; every rank with --all-ranks.
  bool prints() const { return world_rank_ == 0 || options_.all_ranks_print; }

 private:
  int run_body(const std::function<void()>& body);  // run() without the exit record
  void find_local_ranks();

  Options options_;
  BackendSettings backend_settings_;
  int thread_level_ = MPI_THREAD_SINGLE;  // what MPI_Init_thread gave
  MPI_Comm world_comm_ = MPI_COMM_WORLD;
  bool owns_mpi_ = true;  // started MPI, so ends it
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::unique_ptr<StatusBoard> board_;
  std::unique_ptr<StatusExchange> exchange_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<Communicator> world_;
};

// The running Runtime (there is one per process).
Runtime& runtime();

// Memory this machine can still give, in bytes (MemAvailable in /proc/meminfo); 0 if unknown.
double available_memory_bytes();

// Prints a line on the ranks that print (see Runtime::prints), prefixed "[rank r] " when
// every rank prints. Not once a stop is under way (stop_on_signals): mpiexec, ending the job
// after a Ctrl-C, stops reading the ranks' stdout, and a rank that fills the pipe would block
// there until its SIGKILL instead of saving (seen with a line per step).
template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  Runtime& rt = runtime();
  if (!rt.prints() || stop_signal() != 0) return;
  std::string line = fmt::format(format, std::forward<Args>(args)...);
  if (rt.options().all_ranks_print) line = fmt::format("[rank {}] {}", rt.world_rank(), line);
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

}  // namespace comm
