#include "comm/runtime.hpp"
#include "comm/backends/registry.hpp"
#include "comm/host_split.hpp"

#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/exit_record.hpp"
#include "comm/watchdog/failure_save.hpp"

#include <cerrno>
#include <cstdio>
#include <optional>
#include <fstream>
#include <cstdlib>
#include <unistd.h>
#include <new>
#include <set>
#include <string_view>
#include <cctype>

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>

#include "comm/backend.hpp"
#include "comm/cli_checks.hpp"
#include "comm/device_memory.hpp"
#include "comm/watchdog/termination.hpp"

namespace comm {
namespace {

Runtime* g_runtime = nullptr;
constexpr std::int64_t kFinalizeId = 2;  // the finalize meeting's own id (communicator ids are odd)

// Help was asked for, the flags were wrong, or the program stops: leave run() with this status.
struct ExitRequest {
  int status;
};

}  // namespace

void end_program(int status) { throw ExitRequest{status}; }

Runtime& runtime() {
  if (!g_runtime) fail("no comm::Runtime exists");
  return *g_runtime;
}

double available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

CLI::Validator backend_check() {
  return CLI::Validator([](std::string& name) { return why_not_a_backend(name); },
                        fmt::format("{{{}}}", fmt::join(backend_names(), ",")), "backend");
}

void add_options(CLI::App& app, Options& options) {
  app.option_defaults()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides an earlier one
  app.add_option_function<std::string>(
         "--backend", [&options](const std::string& name) { options.backend = parse_backend(name); },
         fmt::format("collective backend: {}", fmt::join(backend_names(), ", ")))
      ->envname("NANODIST_BACKEND")
      ->check(backend_check())
      ->default_str(std::string(name_of(options.backend)));
  app.add_option("--timeout", options.timeout_s, "deadline of every collective, in seconds (at most 1e9)")
      ->envname("NANODIST_TIMEOUT")
      ->check(cli::positive_real(Watchdog::kMaxTimeoutSeconds))
      ->capture_default_str();
  app.add_flag("--check-collectives", options.check,
               "before each collective, verify that all ranks called it with the same arguments")
      ->envname("NANODIST_CHECK");
  app.add_flag("--all-ranks", options.all_ranks_print, "every rank prints, prefixed with its rank")
      ->envname("NANODIST_ALL_RANKS");
  app.add_option_function<std::string>(
         "--progress",
         [&options](const std::string& name) {
           options.progress = name == "thread" ? Progress::thread : Progress::caller;
         },
         "who moves asynchronous collectives: caller (when tested or waited for) or thread (a "
         "communication thread, while the caller computes)")
      ->envname("NANODIST_PROGRESS")
      ->check(CLI::IsMember({"caller", "thread"}))
      ->default_str("caller");
  app.add_option_function<std::string>(
         "--on-timeout",
         [&options](const std::string& name) {
           options.on_timeout = name == "raise" ? TimeoutAction::raise : TimeoutAction::end_job;
         },
         "after the watchdog's report: end the job (exit 3 on every rank), or raise an error the program can "
         "catch (its communicators are not usable after it)")
      ->envname("NANODIST_ON_TIMEOUT")
      ->check(CLI::IsMember({"end", "raise"}))
      ->default_str("end");
}

namespace {
// The variable's whole text as a number from `low` to `high`; nullopt when unset or empty.
std::optional<long long> whole_number_from(const char* name, long long low, long long high, const char* what) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != 0 || errno != 0 || value < low || value > high)
    throw UsageError(fmt::format("{}='{}' is not {}", name, text, what));
  return value;
}
}  // namespace

BackendSettings backend_settings_from_environment() {
  BackendSettings s;
  constexpr auto kMaxPolls = static_cast<long long>(shm::Settings::kMaxSpinPolls);
  s.shm.spin_polls = static_cast<std::uint64_t>(
      whole_number_from("NANODIST_SHM_SPIN", 0, kMaxPolls, "a count of polls from 0 to 10000000 (try 2000, or 0)")
          .value_or(0));
  if (const char* text = std::getenv("NANODIST_SHM_SINGLE_COPY"); text && *text) {
    if (std::string_view(text) != "0" && std::string_view(text) != "1")
      throw UsageError(fmt::format("NANODIST_SHM_SINGLE_COPY='{}' is not 0 or 1", text));
    s.shm.single_copy = std::string_view(text) == "1";
  }
  s.shm.ranks_per_node = static_cast<int>(
      whole_number_from("NANODIST_SHM_RANKS_PER_NODE", 1, 1'000'000, "a number of ranks (1 or more)").value_or(0));
  s.nccl_stall = std::getenv("NANODIST_NCCL_STALL") != nullptr;
  return s;
}

void check_environment_switches() {
  for (const char* name : {"NANODIST_CHECK", "NANODIST_ALL_RANKS"}) {
    const char* text = std::getenv(name);
    if (!text) continue;
    std::string value(text);
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    static const std::set<std::string> words = {"", "0", "1", "true", "false", "on", "off", "yes", "no"};
    if (!words.count(value))
      throw UsageError(fmt::format("{}='{}' is not a switch: use 1 or 0 (true/false, on/off, yes/no)", name, text));
  }
}

namespace {
// "--timeout must be …" when the value came from NANODIST_TIMEOUT, not from the command line:
// the variable is named too, or the user looks for a flag they never typed.
std::string with_variable(const CLI::App& app, std::string why, int argc, char** argv) {
  for (const CLI::Option* option : app.get_options()) {
    const std::string& variable = option->get_envname();
    if (variable.empty() || option->get_lnames().empty() || !std::getenv(variable.c_str())) continue;
    const std::string flag = "--" + option->get_lnames()[0];
    bool typed = false;
    for (int i = 1; i < argc; ++i) typed |= std::string_view(argv[i]).starts_with(flag);
    if (!typed && (why.starts_with(flag + " ") || why.starts_with(flag + ":"))) return fmt::format("{} (from {}={})", why, variable, std::getenv(variable.c_str()));
  }
  return why;
}
}  // namespace

void parse(CLI::App& app, int argc, char** argv) {
  const bool me = g_runtime == nullptr || g_runtime->world_rank() == 0;
  try {
    check_environment_switches();
  } catch (const UsageError& e) {
    if (me) fmt::print(stderr, "error: {}\n", e.what());
    throw ExitRequest{2};
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      if (me) app.exit(e);
      throw ExitRequest{0};
    }
    if (me) fmt::print(stderr, "error: {}\n", with_variable(app, cli::readable(e), argc, argv));
    throw ExitRequest{2};
  }
}

Runtime::Runtime(int& argc, char**& argv) {
  // Several threads may call MPI: the program's and the communication thread (--progress thread).
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level_);
  find_local_ranks();
  open_exit_record(std::getenv("NANODIST_EXIT_RECORDS"), world_rank_);  // nanodist-run's record of this rank: started, then how it ended
}

Runtime::Runtime(MPI_Comm world) : world_comm_(world), owns_mpi_(false) {
  if (g_runtime) fail("a comm::Runtime exists already");
  job_world() = world;
  find_local_ranks();
}

void Runtime::find_local_ranks() {
  MPI_Comm_set_errhandler(world_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(world_comm_, &world_rank_);
  MPI_Comm_size(world_comm_, &world_size_);
  MPI_Comm local;
  local = split_by_host(world_comm_, world_rank_);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  set_node_local_rank(local_rank_);
  g_runtime = this;
}

Communicator& Runtime::start(const Options& options) {
  if (world_) fail("comm::Runtime::start called twice");
  options_ = options;
  backend_settings_ = backend_settings_from_environment();  // before anything is built: a bad value is one line
  if (options.progress == Progress::thread && owns_mpi_ && thread_level_ < MPI_THREAD_MULTIPLE)
    throw UsageError(fmt::format("--progress thread: this MPI gives thread level {}, and the communication "
                                 "thread needs MPI_THREAD_MULTIPLE ({}); use --progress caller",
                                 thread_level_, MPI_THREAD_MULTIPLE));
  board_ = std::make_unique<StatusBoard>(world_comm_);
  exchange_ = std::make_unique<StatusExchange>(world_comm_, *board_);
  watchdog_ = std::make_unique<Watchdog>(*board_, exchange_.get(), options.timeout_s, options.check,
                                         options.on_timeout);
  set_watchdog(watchdog_.get());
  if (options.handle_signals) install_termination_report(board_.get(), exchange_.get());
  MPI_Comm world;
  check_mpi(MPI_Comm_dup(world_comm_, &world), "MPI_Comm_dup");
  world_ = std::make_unique<Communicator>(world, "world", 1, make_backend(options.backend, backend_settings_),
                                         backend_settings_, options.progress);
  return *world_;
}

Communicator& Runtime::world() {
  if (!world_) fail("comm::Runtime::world called before start");
  return *world_;
}

void Runtime::shut_down() {
  if (world_) {
    // A last, watched, meeting: a rank that finishes while others still wait for it in a
    // collective shows up in their report as "waiting in finalize", and times out itself.
    OpCall call;
    call.kind = OpKind::finalize;
    call.comm_name = "world";
    call.comm_id = kFinalizeId;
    std::vector<int> everyone(static_cast<std::size_t>(world_size_));
    for (int r = 0; r < world_size_; ++r) everyone[static_cast<std::size_t>(r)] = r;
    call.members = &everyone;
    call.comm_rank = world_rank_;
    call.seq = 0;
    OpScope scope(call);
    watchdog_->count_entry(kFinalizeId);
    MPI_Request done;
    check_mpi(MPI_Ibarrier(world_comm_, &done), "MPI_Ibarrier");
    watchdog_->wait_all(1, &done);
  }
}

Runtime::~Runtime() {
  if (watchdog_) watchdog_->mark_finalizing();
  uninstall_termination_report();
  world_.reset();
  set_watchdog(nullptr);
  watchdog_.reset();
  exchange_.reset();
  board_.reset();
  g_runtime = nullptr;
  if (owns_mpi_) {
    MPI_Finalize();
    record_finalized();  // this rank's own word that MPI ended (exit_record.hpp: why mpiexec's is not enough)
  }
}

int Runtime::run(const std::function<void()>& body) {
  const int status = run_body(body);
  record_exit(status);
  return status;
}

int Runtime::run_body(const std::function<void()>& body) {
  try {
    body();
    shut_down();
    return 0;
  } catch (const ExitRequest& request) {
    return request.status;  // every rank parsed the same flags: they all get here
  } catch (const UsageError& e) {
    if (world_rank_ == 0) fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const TimeoutError& e) {
    // --on-timeout raise, and the program did not catch it: the job ends as the watchdog would
    // have ended it (its report is above) — the failure save, then exit status 3, which
    // nanodist-run restarts from.
    fmt::print(stderr, "error (rank {}): {}\n", world_rank_, e.what());
    std::fflush(stderr);
    run_abort_hooks();
    run_failure_save();
    record_exit(kWatchdogExitCode);
    _exit(kWatchdogExitCode);
  } catch (const std::exception& e) {
    // Not the same on every rank (an I/O error, memory that ran out on this rank):
    // this rank says it and ends the job, so no other rank waits for it forever.
    const std::string what = dynamic_cast<const std::bad_alloc*>(&e)
                                 ? std::string("out of memory (an allocation failed: std::bad_alloc)")
                                 : std::string(e.what());
    if (world_size_ > 1)
      fmt::print(stderr, "error (rank {}): {}\n", world_rank_, what);
    else
      fmt::print(stderr, "error: {}\n", what);
    std::fflush(stderr);
    run_abort_hooks();
    record_exit(1);
    if (world_size_ > 1) MPI_Abort(world_comm_, 1);
    return 1;
  }
}

}  // namespace comm
