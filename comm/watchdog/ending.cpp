// How the watchdog ends a job: a failed wait's report (the diagnosis of diagnosis.cpp, with
// what this node's board and the other nodes' answers say), the first rank's full report and
// the others' one line each, the failure save, and a SIGTERM that arrived while waiting.
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/diagnosis.hpp"
#include "comm/watchdog/exit_record.hpp"
#include "comm/watchdog/failure_save.hpp"
#include "comm/watchdog/termination.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {
namespace {

// How long a rank that did not report first waits for its launcher to end it, before it ends
// itself (processes started apart have no launcher that would).
constexpr double kLaterRankLingerSeconds = 3.0;
// How long the first rank to report lingers before it exits (the others stop and say their
// line meanwhile); how long a later rank waits before its one line (after the full report);
// how long an interrupted rank answers other nodes' reporters until the launcher ends it.
constexpr double kFirstRankLingerSeconds = 1.0;
constexpr double kAlsoStoppedAfterSeconds = 0.3;
constexpr double kInterruptedLingerSeconds = 2.0;
// Under --on-timeout raise, how long (in tenths of a second) a rank that did not fire first
// waits for the first one's report before it raises.
constexpr int kRaiseWaitPolls = 50;
// How long a report waits for other nodes' answers: after the deadline, and when the
// launcher is ending the job (it sends SIGKILL one second after SIGTERM).
constexpr double kAskBudget = 1.0;
constexpr double kAskBudgetWhenEnding = 0.4;

}  // namespace

// The launcher is ending the job (SIGTERM while this rank waited) and sends SIGKILL in a
// second: say why and go — or, when no node saw anything wrong, it was a plain Ctrl-C. Returns
// only when the signal asked a program that stops when asked to stop, and nothing failed: the
// wait goes on, and the program stops at its next boundary.
void Watchdog::on_termination_signal(std::int64_t now) {
  const std::lock_guard one_at_a_time(ending_mutex_);
  const std::lock_guard exchange_is_mine(exchange_mutex_);  // the report asks other nodes
  const int signal = termination_signal();
  if (signal == 0) return;  // the other thread has handled it (a stop asked for)
  const bool failed_here = job_failed(&board_);
  const std::string text =
      report(now, "interrupted (the launcher is ending the job: a process failed)", kAskBudgetWhenEnding) + "\n";
  if (!failed_here && !report_found_trouble_ && stops_when_asked() && stop_signal() == signal) {
    clear_termination_signal();
    return;
  }
  run_abort_hooks();
  if (!failed_here && !report_found_trouble_) end_interrupted(&board_, exchange_, signal);
  [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
  run_failure_save();  // before the launcher's SIGKILL (a second away) if it can: an atomic write or none
  linger(kInterruptedLingerSeconds);  // answer the other nodes' reporters until the launcher's SIGKILL
  record_exit(kWatchdogExitCode);
  _exit(kWatchdogExitCode);
}

std::string Watchdog::who(int comm_rank, int world_rank) const {
  std::string text = comm_rank == world_rank ? fmt::format("rank {}", comm_rank)
                                             : fmt::format("rank {} (world rank {})", comm_rank, world_rank);
  if (exchange_ && exchange_->spans_nodes()) text += " on " + exchange_->host_of(world_rank);
  return text;
}

void Watchdog::linger(double seconds) {
  if (exchange_)
    exchange_->serve_for(seconds);
  else
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// Where each rank this call waits for is, wherever it runs: this node's board for the ranks
// here, the answer of their own node for the others.
std::vector<Awaited> Watchdog::awaited_ranks(double ask_budget_s) {
  const bool point_to_point = is_point_to_point(call_.kind);
  std::vector<int> others;  // the communicator ranks this call waits for
  for (int r = 0; r < static_cast<int>(call_.members->size()); ++r)
    // A receive from any rank (root -1) waits for all the others.
    if (r != call_.comm_rank && (!point_to_point || call_.root < 0 || r == call_.root)) others.push_back(r);
  // Ranks on other nodes: ask their nodes (those of them that are listening answer at once).
  std::map<int, RankView> remote;
  if (exchange_ && exchange_->spans_nodes()) {
    std::vector<int> world_ranks;
    for (int r : others) world_ranks.push_back((*call_.members)[r]);
    remote = exchange_->ask(world_ranks, call_.comm_id, ask_budget_s);
  }
  std::vector<Awaited> awaited;
  for (int r : others) {
    const int w = (*call_.members)[r];
    RankView v;
    if (!exchange_ || exchange_->same_node(w)) {
      v = board_.view(w, call_.comm_id);
    } else if (auto answer = remote.find(w); answer != remote.end()) {
      v = answer->second;
    }
    awaited.push_back(where_is(r, who(r, w), v, call_, ask_budget_s));
  }
  return awaited;
}

// The full report: a one-line diagnosis (who diverged), this rank's line, then a line per
// missing rank.
std::string Watchdog::report(std::int64_t now, const char* what_happened, double ask_budget_s) {
  const std::string my_call = fmt::format("{} #{}", name_of(call_.kind), call_.seq);
  const std::vector<Awaited> awaited = awaited_ranks(ask_budget_s);
  const std::vector<int> missing = missing_ranks(awaited);
  const bool point_to_point = is_point_to_point(call_.kind);
  const std::string diagnosis = point_to_point && !missing.empty()
                                    ? point_to_point_diagnosis(awaited, call_, my_call)
                                    : collective_diagnosis(awaited, call_.comm_rank, my_call);
  std::string text = fmt::format("[watchdog] diagnosis: {} (on '{}')", diagnosis, call_.comm_name);
  text += fmt::format("\n[watchdog] {}: {} {} after waiting {} (deadline {})",
                      who(call_.comm_rank, board_.world_rank()), describe_my_call(now), what_happened,
                      seconds(now - start_ns_), seconds(timeout_ns_));
  if (!missing.empty()) text += fmt::format("; not arrived: {}", ranks_phrase(missing));
  for (const Awaited& a : awaited)
    if (!a.line.empty()) text += "\n[watchdog]   " + a.line;
  report_found_trouble_ = found_trouble(awaited, exchange_ && exchange_->interrupt_seen());
  return text;
}

void Watchdog::end_failed_wait(std::int64_t now, const char* what_happened, const std::function<void()>& on_timeout) {
  if (timeout_action_ == TimeoutAction::raise) raise_failed_wait(now, what_happened, on_timeout);
  ending_mutex_.lock();    // never unlocked: this ends the process (another thread of it waits here)
  exchange_mutex_.lock();  // the report asks other nodes and lingers answering them: this thread alone
  std::int64_t none = -1;
  const bool first = board_.header().aborting_rank.compare_exchange_strong(none, board_.world_rank()) ||
                     none == board_.world_rank();
  if (!first) {
    // Another rank fired first and prints the full report: one line from here, after it.
    linger(kAlsoStoppedAfterSeconds);
    if (on_timeout) on_timeout();
    end_job(fmt::format("[watchdog] {} also stopped, in {}, after {}", who(call_.comm_rank, board_.world_rank()),
                        describe_my_call(now), seconds(now - start_ns_)),
            false);
  }
  if (on_timeout) on_timeout();
  end_job(report(now, what_happened, kAskBudget), true);
}

// The first rank to fail prints the full report, as when the job ends; the others their line.
// The board keeps this rank as the one that fired: every later wait of the job, on any rank,
// fails at once — the communicators are not usable any more (gloo's are not either).
void Watchdog::raise_failed_wait(std::int64_t now, const char* what_happened, const std::function<void()>& on_timeout) {
  std::string text;
  {
    const std::lock_guard exchange_is_mine(exchange_mutex_);  // the report asks other nodes
    std::int64_t none = -1;
    const bool first = board_.header().aborting_rank.compare_exchange_strong(none, board_.world_rank()) ||
                       none == board_.world_rank();
    // The others stay in their calls until the first has read the board for its report (as
    // when the job ends); then the board is clear again, so that the ranks' last meeting (the
    // program's end) can still take place.
    if (!first)
      for (int i = 0; i < kRaiseWaitPolls && board_.header().aborting_rank.load() >= 0; ++i) linger(0.1);
    text = first ? report(now, what_happened, kAskBudget)
                 : fmt::format("[watchdog] {} also stopped, in {}, after {}", who(call_.comm_rank, board_.world_rank()),
                               describe_my_call(now), seconds(now - start_ns_));
    text += "\n[watchdog] raising comm::TimeoutError (--on-timeout raise): this job's communicators are not usable "
            "any more\n";
    [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
    if (first) {
      linger(kAlsoStoppedAfterSeconds);  // the others' waits see that this one fired
      board_.header().aborting_rank.store(-1);
    }
  }
  raised_.store(true);
  set_waiting(false);  // first: on_timeout may throw too
  if (on_timeout) on_timeout();
  throw TimeoutError(fmt::format("rank {}: {} {} after {} (the watchdog's report is above)", board_.world_rank(),
                                 describe_my_call(now), what_happened, seconds(now - start_ns_)));
}

void Watchdog::give_up(const char* what_happened) {
  set_waiting(true);  // as in a wait: a Ctrl-C now is part of this ending
  end_failed_wait(now_ns(), what_happened, {});
}

void Watchdog::end_job(const std::string& report, bool first) {
  run_abort_hooks();  // e.g. a shm segment not yet unlinked must not outlive the job
  std::string text = report.empty() ? report : report + "\n";
  if (first) text += fmt::format("[watchdog] ending the job (exit status {})\n", kWatchdogExitCode);
  [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
  board_.mine().state = static_cast<std::int64_t>(RankState::reported);
  if (first) run_failure_save();  // e.g. a trainer's replica saves the last completed step
  if (first) {
    // Give the other ranks a moment to stop and say their line, then end this process
    // with the watchdog's status: the launcher ends the others when one exits non-zero.
    // (Not MPI_Abort: its banner message to the launcher, cut short by the teardown,
    // makes OpenMPI print a stray "ORTE_ERROR_LOG: Data unpack would read past end of
    // buffer" after the report.)
    linger(kFirstRankLingerSeconds);
    record_exit(kWatchdogExitCode);
    _exit(kWatchdogExitCode);
  }
  // Wait for the launcher to end this process once the first rank has exited; end it
  // ourselves if that never comes (the first rank died, or runs on a node that lost its
  // launcher, or the job was started apart and has none).
  linger(kLaterRankLingerSeconds);
  record_exit(kWatchdogExitCode);
  _exit(kWatchdogExitCode);
}

}  // namespace comm
