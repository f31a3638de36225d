#include "comm/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <chrono>
#include <csignal>
#include <ctime>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "comm/error.hpp"

namespace comm {
namespace {

Watchdog* g_watchdog = nullptr;
std::atomic<StatusBoard*> g_board{nullptr};        // read by the signal handler
volatile std::sig_atomic_t g_terminated = 0;       // the signal (SIGTERM, SIGINT) received while waiting
volatile std::sig_atomic_t g_waiting = 0;          // inside wait_all
std::atomic<StatusExchange*> g_exchange{nullptr};  // set when the job runs on several nodes

// The note rank 0 prints when the user interrupts the job, double-buffered so the signal
// handler always reads a complete one.
constexpr std::size_t kNoteSize = 1024;
char g_notes[2][kNoteSize] = {{0}, {0}};
std::atomic<int> g_note_index{0};

// rank 0's line when the job is interrupted (Ctrl-C): the note the program left, or a
// default. Once.
volatile std::sig_atomic_t g_note_written = 0;
void write_interrupt_note(int signal) {
  if (g_note_written) return;
  g_note_written = 1;
  const char* note = g_notes[g_note_index.load()];
  char line[kNoteSize + 64];
  std::size_t n = 0;
  auto put = [&](const char* text) {
    while (*text && n < sizeof line - 1) line[n++] = *text++;
  };
  put(note[0] ? note : (signal == SIGINT ? "interrupted (SIGINT)" : "interrupted (SIGTERM)"));
  put("\n");
  // On stderr: once mpiexec is ending the job it no longer forwards the ranks' stdout (a note
  // written there is lost, tried). It forwards each stream on its own, so a step line printed
  // just before the signal can still show after the note.
  [[maybe_unused]] auto written = write(STDERR_FILENO, line, n);
}

// A signal from a process other than the launcher (mpiexec or its daemon, this rank's
// parent) or the terminal: someone signalled this rank alone. Named in one line, so that
// the interrupt is not taken for a Ctrl-C of the whole job. Async-signal-safe.
void say_outside_signal(int signal, pid_t sender) {
  char line[160];
  std::size_t n = 0;
  auto put = [&](const char* text) {
    while (*text && n < sizeof line - 1) line[n++] = *text++;
  };
  auto put_number = [&](long value) {
    char digits[24];
    int k = 0;
    do digits[k++] = static_cast<char>('0' + value % 10);
    while ((value /= 10) > 0 && k < 23);
    while (k > 0 && n < sizeof line - 1) line[n++] = digits[--k];
  };
  StatusBoard* board = g_board.load();
  if (board) {
    put("rank ");
    put_number(board->world_rank());
  } else {
    put("a rank");  // the board is already gone (the rank is ending)
  }
  put(signal == SIGINT ? " received SIGINT" : " received SIGTERM");
  put(" from process ");
  put_number(sender);
  put(", not from the launcher: this rank ends, and with it the job\n");
  [[maybe_unused]] auto written = write(STDERR_FILENO, line, n);
}

// Did the job fail (a rank on this node dead, or a watchdog fired), or is this a plain
// Ctrl-C? Only async-signal-safe calls: atomics, kill(), open()/read().
bool job_failed(StatusBoard* board) {
  if (!board) return false;
  if (board->header().aborting_rank.load() >= 0) return true;
  for (int r = 0; r < board->world_size(); ++r) {
    const std::int64_t pid = board->slot(r).pid.load();
    const bool interrupted = board->slot(r).state.load() == static_cast<std::int64_t>(RankState::interrupted);
    if (pid != 0 && !interrupted && !process_alive(pid)) return true;
  }
  return false;
}

// Ends this rank because of a plain interrupt: rank 0 prints the note; the board and the
// other nodes learn that this exit is no failure. Async-signal-safe.
[[noreturn]] void end_interrupted(StatusBoard* board, StatusExchange* exchange, int signal) {
  constexpr auto kInterrupted = static_cast<std::int64_t>(RankState::interrupted);
  if (board) {
    if (board->world_rank() == 0) write_interrupt_note(signal);  // then marked: the others wait for it
    board->mine().state = kInterrupted;
    // The first rank to exit makes Open MPI end the rest at once (SIGKILL): a rank 0 still
    // waiting for a core would lose its note. So the others, beside rank 0 on this node,
    // leave after it has written the note — at most half a second after.
    if (board->world_rank() != 0 && board->slot(0).pid.load() != 0)
      for (int i = 0; i < 50 && board->slot(0).state.load() != kInterrupted; ++i) {
        const timespec pause{0, 10'000'000};
        nanosleep(&pause, nullptr);
      }
  }
  if (exchange) exchange->announce_interrupt();
  _exit(128 + signal);
}

// SIGINT / SIGTERM. mpiexec passes a Ctrl-C on to every rank as SIGTERM, and also sends
// SIGTERM when it tears the job down because a rank died. The first gets one line from
// rank 0 (the note), the second the watchdog's report from the ranks that were waiting.
void on_termination_signal(int signal, siginfo_t* info, void*) {
  StatusBoard* board = g_board.load();
  if (info && info->si_code == SI_USER && info->si_pid != 0 && info->si_pid != getppid())
    say_outside_signal(signal, info->si_pid);
  const bool failed_here = job_failed(board);
  if (!failed_here && g_waiting && g_exchange.load()) {
    // Nothing failed on this node, but this board cannot see the others: the wait loop asks
    // them before deciding between a report and a quiet exit. Rank 0's note goes out now —
    // the launcher may kill this process before the answers come (its last checkpoint and how
    // to resume are worth saying either way).
    if (board && board->world_rank() == 0) write_interrupt_note(signal);
    g_terminated = signal;
    return;
  }
  if (!failed_here) {
    end_interrupted(board, g_exchange.load(), signal);
  }
  if (!g_waiting) {  // not in a collective: nothing to report, die as usual
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_terminated = signal;
}

void store(OpRecord& r, const OpCall& c, std::int64_t start_ns) {
  r.kind = static_cast<std::int64_t>(c.kind);
  r.comm_id = c.comm_id;
  r.seq = c.seq;
  r.count = c.count;
  r.type = static_cast<std::int64_t>(c.type);
  r.op = c.op;
  r.root = c.root;
  r.start_ns = start_ns;
  r.end_ns = 0;
  r.set_name(c.comm_name);
}

std::string seconds(std::int64_t ns) { return fmt::format("{:.1f} s", static_cast<double>(ns) * 1e-9); }

std::string arguments(OpKind kind, std::int64_t count, DataType type, int op, int root) {
  std::string text = fmt::format("count {} {}", count, name_of(type));
  if (has_reduce_op(kind) && op >= 0) text += fmt::format(", op {}", name_of(static_cast<ReduceOp>(op)));
  if (has_root(kind)) text += fmt::format(", root {}", root);
  if ((kind == OpKind::send || kind == OpKind::recv || kind == OpKind::sendrecv) && root >= 0)
    text += fmt::format(", {} rank {}", kind == OpKind::send ? "to" : "from", root);
  return text;
}

// How long a report waits for other nodes' answers: after the deadline, and when the
// launcher is ending the job (it sends SIGKILL one second after SIGTERM).
constexpr double kAskBudget = 1.0;
constexpr double kAskBudgetWhenEnding = 0.4;

// How the check mode describes one call: the fields every rank must agree on.
using CallKey = std::array<std::int64_t, 6>;  // kind, seq, count, type, op, root

}  // namespace

std::string describe(const OpView& r) {
  auto kind = static_cast<OpKind>(r.kind);
  return fmt::format(
      "{} #{} on '{}' ({})", name_of(kind), r.seq, r.comm_name,
      arguments(kind, r.count, static_cast<DataType>(r.type), static_cast<int>(r.op), static_cast<int>(r.root)));
}

Watchdog& watchdog() {
  if (!g_watchdog) fail("comm is not initialised: create a comm::Runtime first");
  return *g_watchdog;
}
void set_watchdog(Watchdog* w) { g_watchdog = w; }
bool has_watchdog() { return g_watchdog != nullptr; }

void install_termination_report() {
  g_board = g_watchdog ? &g_watchdog->board() : nullptr;
  g_exchange = g_watchdog && g_watchdog->spans_nodes() ? g_watchdog->exchange() : nullptr;
  struct sigaction action {};
  action.sa_sigaction = on_termination_signal;
  // SA_SIGINFO: the sender's pid (the launcher, or someone signalling one rank); SA_RESTART:
  // a system call the handler interrupts resumes, as with std::signal.
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

void uninstall_termination_report() {
  g_exchange = nullptr;
  g_board = nullptr;  // what the handler reads is about to go away; a late signal just ends the process
}

void set_interrupt_note(std::string_view note) {
  const int next = 1 - g_note_index.load();
  const std::size_t n = std::min(note.size(), kNoteSize - 1);
  std::memcpy(g_notes[next], note.data(), n);
  g_notes[next][n] = '\0';
  g_note_index.store(next);
}

Watchdog::Watchdog(StatusBoard& board, StatusExchange* exchange, double timeout_s, bool check_mode)
    : board_(board), exchange_(exchange), check_mode_(check_mode) {
  if (!(timeout_s > 0 && timeout_s <= kMaxTimeoutSeconds))
    fail("the collective timeout must be > 0 and ≤ {} s, got {}", kMaxTimeoutSeconds, timeout_s);
  timeout_ns_ = static_cast<std::int64_t>(timeout_s * 1e9);
}

void Watchdog::enter(const OpCall& call, std::int64_t start_ns) {
  call_ = call;
  start_ns_ = start_ns;
  inside_ = true;
  RankSlot& me = board_.mine();
  store(me.current, call, start_ns);
  store(me.last, call, start_ns);
  me.state = static_cast<std::int64_t>(RankState::in_collective);
}

void Watchdog::leave() {
  RankSlot& me = board_.mine();
  me.last.end_ns = now_ns();
  me.state = static_cast<std::int64_t>(RankState::running);
  inside_ = false;
}

void Watchdog::mark_finalizing() { board_.mine().state = static_cast<std::int64_t>(RankState::finalizing); }

void Watchdog::wait_all(int n, MPI_Request* requests) {
  wait_until([&] {
    int done = 0;
    check_mpi(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return done != 0;
  });
}

void Watchdog::wait_until(const std::function<bool()>& done_now, const std::function<void()>& on_timeout) {
  if (!inside_) fail("internal error: a wait outside any operation");
  // A rank that has finished (waiting in finalize) lets the ranks stuck in the real
  // collective report first: they see more of what went wrong.
  const std::int64_t grace = call_.kind == OpKind::finalize ? 1'000'000'000 : 0;
  const std::int64_t deadline = start_ns_ + timeout_ns_ + grace;
  g_waiting = 1;
  for (unsigned spin = 0;; ++spin) {
    bool done = false;
    try {
      done = done_now();
    } catch (...) {
      g_waiting = 0;
      throw;
    }
    if (g_terminated) end_terminated(now_ns());  // even when the wait has just completed
    if (done) break;
    if (spin % 64 == 0) {  // look at the clock and the board now and then, not every poll
      const std::int64_t now = now_ns();
      const std::int64_t aborting = board_.header().aborting_rank.load();
      // Another node's watchdog may be asking what this node's board says. Only a wait that
      // has lasted 10 ms listens: a collective that finishes sooner pays nothing for it.
      if (exchange_ && now - start_ns_ > 10'000'000) exchange_->serve();
      if (aborting >= 0 && aborting != board_.world_rank()) {
        // Another rank fired first and prints the full report: one line from here, after it.
        linger(0.3);
        if (on_timeout) on_timeout();
        end_job(fmt::format("[watchdog] {} also stopped, in {}, after {}", who(call_.comm_rank, board_.world_rank()),
                            describe(board_.mine().current.view(now)), seconds(now - start_ns_)),
                false);
      }
      if (now > deadline) {
        std::int64_t none = -1;
        const bool first = board_.header().aborting_rank.compare_exchange_strong(none, board_.world_rank());
        if (!first) continue;  // another rank won the race: the branch above handles it
        if (on_timeout) on_timeout();
        end_job(report(now, "timed out", kAskBudget), true);
      }
    }
    if (spin > 16) std::this_thread::yield();  // let an oversubscribed peer run
  }
  g_waiting = 0;
  if (g_terminated) end_terminated(now_ns());  // the signal came after the last look
}

// The launcher is ending the job (SIGTERM while this rank waited) and sends SIGKILL in a
// second: say why and go — or, when no node saw anything wrong, it was a plain Ctrl-C.
void Watchdog::end_terminated(std::int64_t now) {
  const int signal = g_terminated;
  const bool failed_here = job_failed(&board_);
  const std::string text =
      report(now, "interrupted (the launcher is ending the job: a process failed)", kAskBudgetWhenEnding) + "\n";
  if (!failed_here && !report_found_trouble_) end_interrupted(&board_, exchange_, signal);
  [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
  linger(2.0);  // answer the other nodes' reporters until the launcher's SIGKILL
  _exit(kWatchdogExitCode);
}

namespace {

// "0-2, 5" for 0, 1, 2, 5.
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return text;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", rank_list(ranks));
}

std::string short_call(const OpView& r) {  // "allreduce #3"
  return fmt::format("{} #{}", name_of(static_cast<OpKind>(r.kind)), r.seq);
}

}  // namespace

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

// What every member of the stuck call is doing, wherever it runs: this node's board for
// the ranks here, the answer of their own node for the others. The full report opens with
// a one-line diagnosis (who diverged), then a line per missing rank.
std::string Watchdog::report(std::int64_t now, const char* what_happened, double ask_budget_s) {
  const std::string my_call = fmt::format("{} #{}", name_of(call_.kind), call_.seq);
  const bool point_to_point =
      call_.kind == OpKind::send || call_.kind == OpKind::recv || call_.kind == OpKind::sendrecv;
  std::vector<int> others;  // the communicator ranks this call waits for
  for (int r = 0; r < static_cast<int>(call_.members->size()); ++r)
    if (r != call_.comm_rank && (!point_to_point || r == call_.root)) others.push_back(r);

  // Ranks on other nodes: ask their nodes (those of them that are listening answer at once).
  std::map<int, RankView> remote;
  if (exchange_ && exchange_->spans_nodes()) {
    std::vector<int> world_ranks;
    for (int r : others) world_ranks.push_back((*call_.members)[r]);
    remote = exchange_->ask(world_ranks, call_.comm_id, ask_budget_s);
  }

  std::vector<int> arrived = {call_.comm_rank};  // in this very call (me included)
  std::vector<int> missing;
  std::map<std::string, std::vector<int>> elsewhere;  // "barrier #1" → ranks in it
  std::vector<std::string> diagnosis, lines;
  auto add = [&](std::string phrase, std::vector<int>& ranks) {
    if (!ranks.empty()) diagnosis.push_back(fmt::format("{} {}", ranks_phrase(ranks), phrase));
  };
  std::vector<int> dead, stopped, finished, outside, unknown, interrupted;
  bool reported_elsewhere = false;  // a rank whose watchdog has fired
  for (int r : others) {
    const int w = (*call_.members)[r];
    const std::string rank = who(r, w);
    RankView v;
    if (!exchange_ || exchange_->same_node(w)) {
      v = board_.view(w, call_.comm_id);
    } else if (auto answer = remote.find(w); answer != remote.end()) {
      v = answer->second;
    }
    if (v.pid == 0) {  // no board that could be read says anything about it
      missing.push_back(r);
      unknown.push_back(r);
      lines.push_back(fmt::format(
          "{}: no answer from its node within {:.1f} s (no rank there is waiting in a collective to answer: "
          "all computing, stopped or dead, or the node is unreachable); its state is unknown",
          rank, ask_budget_s));
      continue;
    }
    std::string last = "it has made no collective call yet";
    if (v.last.kind != 0)
      last = v.last.returned_ago_ns >= 0
                 ? fmt::format("its last call, {}, returned {} ago", describe(v.last), seconds(v.last.returned_ago_ns))
                 : fmt::format("its last call is {}, entered {} ago", describe(v.last), seconds(v.last.started_ago_ns));
    if (v.state == RankState::interrupted) {  // gone, or going, because of a Ctrl-C: no failure
      missing.push_back(r);
      interrupted.push_back(r);
      lines.push_back(fmt::format("{} was interrupted (Ctrl-C or SIGTERM) and is ending", rank));
      continue;
    }
    if (v.process == ProcessState::gone) {
      missing.push_back(r);
      dead.push_back(r);
      lines.push_back(fmt::format("{} is dead: process {} is gone (crashed or killed); {}", rank, v.pid, last));
      continue;
    }
    if (v.process == ProcessState::stopped) {
      missing.push_back(r);
      stopped.push_back(r);
      lines.push_back(
          fmt::format("{} is stopped: process {} is suspended (SIGSTOP, Ctrl-Z or a debugger); {}", rank, v.pid, last));
      continue;
    }
    // It has arrived once it entered this collective (seq) on this communicator — and,
    // when its latest call is this very one, with the same arguments.
    const bool same_number = v.last.comm_id == call_.comm_id && v.last.seq == call_.seq;
    const bool same_call = v.last.kind == static_cast<std::int64_t>(call_.kind) && v.last.count == call_.count &&
                           v.last.type == static_cast<std::int64_t>(call_.type) && v.last.op == call_.op &&
                           v.last.root == call_.root;
    if (!point_to_point && v.entered > call_.seq && (!same_number || same_call)) {
      arrived.push_back(r);
      continue;
    }
    missing.push_back(r);
    if (v.state == RankState::finalizing ||
        (v.state == RankState::in_collective && v.current.kind == static_cast<std::int64_t>(OpKind::finalize))) {
      finished.push_back(r);
      lines.push_back(fmt::format("{} has finished its work and is shutting down (it skipped this collective)", rank));
    } else if (v.state == RankState::in_collective || v.state == RankState::reported) {
      reported_elsewhere = reported_elsewhere || v.state == RankState::reported;
      elsewhere[short_call(v.current)].push_back(r);
      lines.push_back(fmt::format("{} is waiting in a different call, {}, for {}", rank, describe(v.current),
                                  seconds(v.current.started_ago_ns)));
    } else {
      outside.push_back(r);
      lines.push_back(fmt::format("{} is not in any collective (computing, or stuck outside comm); {}", rank, last));
    }
  }

  // The diagnosis: the ranks that diverged first, then where the others are. Ranks in a
  // different collective are a group each; the largest group (on a tie, the one with the
  // lowest rank) is taken as the program's intended path, so every rank would say the same.
  std::sort(arrived.begin(), arrived.end());
  elsewhere[my_call] = arrived;
  auto majority = elsewhere.begin();
  for (auto it = elsewhere.begin(); it != elsewhere.end(); ++it)
    if (it->second.size() > majority->second.size() ||
        (it->second.size() == majority->second.size() && it->second.front() < majority->second.front()))
      majority = it;
  add(fmt::format("{} dead", dead.size() > 1 ? "are" : "is"), dead);
  add(fmt::format("{} stopped (suspended)", stopped.size() > 1 ? "are" : "is"), stopped);
  add(fmt::format("finished without calling {}", my_call), finished);
  add(fmt::format("{} interrupted", interrupted.size() > 1 ? "were" : "was"), interrupted);
  add(fmt::format("never called {}: not in any collective", my_call), outside);
  add(fmt::format("did not arrive in {} and their node gave no answer (state unknown)", my_call), unknown);
  for (auto it = elsewhere.begin(); it != elsewhere.end(); ++it)
    if (it != majority) add("called " + it->first, it->second);
  // Never "every rank has arrived" beside a rank that has not.
  if (diagnosis.empty() && !missing.empty()) add(fmt::format("did not arrive in {}", my_call), missing);
  std::string line = diagnosis.empty() ? std::string("every rank has arrived (the wait is inside the transport)")
                                       : fmt::format("{} where {} called {}", fmt::join(diagnosis, "; "),
                                                     ranks_phrase(majority->second), majority->first);
  if (point_to_point && !missing.empty()) {
    // A send or receive waits for one peer: say who waits for whom, and what the peer does.
    const char* direction = call_.kind == OpKind::send ? "to send to" : "to receive from";
    const std::string peer = fmt::format("rank {}", missing.front());
    std::string doing = "is not in any collective or send/receive";
    if (!dead.empty())
      doing = "is dead";
    else if (!stopped.empty())
      doing = "is stopped (suspended)";
    else if (!finished.empty())
      doing = "has finished";
    else if (!unknown.empty())
      doing = "runs on a node that gave no answer (state unknown)";
    else if (elsewhere.size() > 1)
      for (const auto& [c, ranks] : elsewhere)
        if (c != my_call)
          doing = fmt::format("is waiting in {} instead (a send that never came, or a cycle of waits)", c);
    line = fmt::format("rank {} waits {} {} ({}), and {} {}", call_.comm_rank, direction, peer, my_call, peer, doing);
  }
  std::string text = fmt::format("[watchdog] diagnosis: {} (on '{}')", line, call_.comm_name);
  text += fmt::format("\n[watchdog] {}: {} {} after waiting {} (deadline {})",
                      who(call_.comm_rank, board_.world_rank()), describe(board_.mine().current.view(now)),
                      what_happened, seconds(now - start_ns_), seconds(timeout_ns_));
  if (!missing.empty()) text += fmt::format("; not arrived: {}", ranks_phrase(missing));
  // Trouble: a rank dead, stopped or reporting — or silent, unless its node announced a Ctrl-C.
  const bool interrupted_elsewhere = exchange_ && exchange_->interrupt_seen();
  report_found_trouble_ =
      !dead.empty() || !stopped.empty() || reported_elsewhere || (!unknown.empty() && !interrupted_elsewhere);
  for (const std::string& l : lines) text += "\n[watchdog]   " + l;
  return text;
}

void Watchdog::verify_same_call(MPI_Comm check_comm) {
  const CallKey mine = {static_cast<std::int64_t>(call_.kind), call_.seq, call_.count,
                        static_cast<std::int64_t>(call_.type), call_.op,  call_.root};
  const int n = static_cast<int>(call_.members->size());
  std::vector<CallKey> all(static_cast<std::size_t>(n));
  MPI_Request request;
  check_mpi(MPI_Iallgather(mine.data(), 6, MPI_INT64_T, all.data(), 6, MPI_INT64_T, check_comm, &request),
            "MPI_Iallgather");
  wait_all(1, &request);

  // Group ranks by the call they made; one group means everyone agrees.
  std::map<CallKey, std::vector<int>> groups;
  for (int r = 0; r < n; ++r) groups[all[static_cast<std::size_t>(r)]].push_back(r);
  if (groups.size() == 1) return;
  std::string text =
      fmt::format("[watchdog] rank {}: check mode: the ranks of '{}' disagree on collective #{}:", call_.comm_rank,
                  call_.comm_name, call_.seq);
  for (const auto& [key, ranks] : groups) {
    auto kind = static_cast<OpKind>(key[0]);
    text += fmt::format(
        "\n[watchdog]   rank{} {} called {} #{} ({})", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "),
        name_of(kind), key[1],
        arguments(kind, key[2], static_cast<DataType>(key[3]), static_cast<int>(key[4]), static_cast<int>(key[5])));
  }
  // Every rank found the same disagreement; the communicator's rank 0 says it.
  end_job(call_.comm_rank == 0 ? text : std::string(), call_.comm_rank == 0);
}

void Watchdog::end_job(const std::string& report, bool first) {
  std::string text = report.empty() ? report : report + "\n";
  if (first) text += fmt::format("[watchdog] ending the job (exit status {})\n", kWatchdogExitCode);
  [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
  board_.mine().state = static_cast<std::int64_t>(RankState::reported);
  if (first) {
    // Give the other ranks a moment to stop and say their line, then end this process
    // with the watchdog's status: the launcher ends the others when one exits non-zero.
    // (Not MPI_Abort: its banner message to the launcher, cut short by the teardown,
    // makes OpenMPI print a stray "ORTE_ERROR_LOG: Data unpack would read past end of
    // buffer" after the report.)
    linger(1.0);
    _exit(kWatchdogExitCode);
  }
  // Wait for the launcher to end this process once the first rank has exited; end it
  // ourselves if that never comes (the first rank died, or runs on a node that lost its launcher).
  linger(10.0);
  _exit(kWatchdogExitCode);
}

}  // namespace comm
