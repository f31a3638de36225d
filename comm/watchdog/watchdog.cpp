#include "comm/watchdog/watchdog.hpp"

#include "comm/watchdog/abort_hooks.hpp"
#include "comm/watchdog/exit_record.hpp"
#include "comm/watchdog/failure_save.hpp"

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
#include "comm/watchdog/termination.hpp"

namespace comm {

// The wait loop's pace (Watchdog::wait_until):
// polls between looks at the clock and the status board: a poll is a few nanoseconds, a look
// a system call and cache misses on the shared board;
constexpr unsigned kPollsPerLook = 64;
// polls before each further one yields the core: a quick collective finishes while spinning,
// and a rank oversubscribed on a core lets its peer run (4 ranks on 2 cores);
constexpr unsigned kSpinsBeforeYield = 16;
// how long a wait spins and yields before it sleeps between polls instead: a yield returns at
// once when nothing else wants the core, so a rank that waits long for a late peer would burn
// it (and slow the ranks, or the checkpoint writer, that share it). Asleep, each pause is an
// eighth of the time waited so far, within these bounds: a wait overshoots its end by at most
// about an eighth, and a collective that ends within the first 2 ms never sleeps.
constexpr std::int64_t kSleepAfterNs = 2'000'000;   // 2 ms
constexpr std::int64_t kShortestSleepNs = 20'000;   // 20 µs
constexpr std::int64_t kLongestSleepNs = 1'000'000;  // 1 ms
// how long a wait lasts before it answers other nodes' questions about this node's board: a
// collective that finishes sooner pays nothing for listening.
constexpr std::int64_t kListenAfterNs = 10'000'000;  // 10 ms
// How often a wait looks whether a rank it waits for has left the program, and how long that
// must have lasted before the wait gives up on it (a message sent just before leaving may
// still be on its way).
constexpr std::int64_t kLeftCheckEveryNs = 100'000'000;  // 100 ms
constexpr std::int64_t kLeftForNs = 1'000'000'000;       // 1 s
// How long a rank that did not report first waits for its launcher to end it, before it ends
// itself (processes started apart have no launcher that would).
constexpr double kLaterRankLingerSeconds = 3.0;
// How long the first rank to report lingers before it exits (the others stop and say their
// line meanwhile); how long a later rank waits before its one line (after the full report);
// how long an interrupted rank answers other nodes' reporters until the launcher ends it.
constexpr double kFirstRankLingerSeconds = 1.0;
constexpr double kAlsoStoppedAfterSeconds = 0.3;
constexpr double kInterruptedLingerSeconds = 2.0;
// A rank that has finished (waiting in finalize) waits this much longer than the others, so the
// ranks stuck in the real collective report first: they see more of what went wrong.
constexpr std::int64_t kFinalizeGraceNs = 1'000'000'000;  // 1 s
namespace {

Watchdog* g_watchdog = nullptr;
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

Watchdog::Watchdog(StatusBoard& board, StatusExchange* exchange, double timeout_s, bool check_mode)
    : board_(board), exchange_(exchange), check_mode_(check_mode) {
  if (!(timeout_s > 0 && timeout_s <= kMaxTimeoutSeconds))
    fail("the collective timeout must be > 0 and ≤ {} s, got {}", kMaxTimeoutSeconds, timeout_s);
  timeout_ns_ = static_cast<std::int64_t>(timeout_s * 1e9);
}

thread_local OpCall Watchdog::call_;

std::string Watchdog::describe_my_call(std::int64_t now) const {
  OpRecord mine;
  store(mine, call_, start_ns_);
  return describe(mine.view(now)) + (call_.on_communication_thread ? " on the communication thread" : "");
}

thread_local std::int64_t Watchdog::start_ns_ = 0;
thread_local bool Watchdog::inside_ = false;

void Watchdog::enter(const OpCall& call, std::int64_t start_ns) {
  call_ = call;
  start_ns_ = start_ns;
  inside_ = true;
  std::lock_guard lock(inside_mutex_);
  calls_inside_.emplace_back(call, start_ns);
  RankSlot& me = board_.mine();
  store(me.current, call, start_ns);
  store(me.last, call, start_ns);
  me.state = static_cast<std::int64_t>(RankState::in_collective);
}

void Watchdog::leave() {
  inside_ = false;
  std::lock_guard lock(inside_mutex_);
  const auto mine = std::find_if(calls_inside_.begin(), calls_inside_.end(), [](const auto& entry) {
    return entry.first.comm_id == call_.comm_id && entry.first.seq == call_.seq && entry.first.kind == call_.kind;
  });
  if (mine != calls_inside_.end()) calls_inside_.erase(mine);
  RankSlot& me = board_.mine();
  if (me.last.comm_id == call_.comm_id && me.last.seq == call_.seq) me.last.end_ns = now_ns();
  if (calls_inside_.empty()) {
    me.state = static_cast<std::int64_t>(RankState::running);
  } else {
    // The other thread is still inside its call: the board shows that one again.
    const auto& [other, other_start] = calls_inside_.back();
    store(me.current, other, other_start);
  }
}

void Watchdog::mark_finalizing() { board_.mine().state = static_cast<std::int64_t>(RankState::finalizing); }

void Watchdog::note_leaving(std::string_view why) { pack_text(board_.mine().leaving, why); }

namespace {
bool is_point_to_point(OpKind kind) { return kind == OpKind::send || kind == OpKind::recv || kind == OpKind::sendrecv; }
}  // namespace

LeftRankWatch::LeftRankWatch(std::int64_t start_ns) : next_look_ns_(start_ns + kLeftCheckEveryNs) {}

bool LeftRankWatch::gone_long_enough(Watchdog& watchdog, const OpCall& call, std::int64_t now) {
  if (now < next_look_ns_) return gone_since_ns_ >= 0 && now - gone_since_ns_ >= kLeftForNs;
  next_look_ns_ = now + kLeftCheckEveryNs;
  if (!watchdog.awaited_rank_left(call))
    gone_since_ns_ = -1;
  else if (gone_since_ns_ < 0)
    gone_since_ns_ = now;
  return gone_since_ns_ >= 0 && now - gone_since_ns_ >= kLeftForNs;
}

bool Watchdog::awaited_rank_left(const OpCall& call) {
  if (!call.members) return false;
  const bool point_to_point = is_point_to_point(call.kind);
  // A receive from any rank waits for all the others, and any one of them may still send: it
  // has lost its peers only when every one of them has left.
  const bool any_source = point_to_point && call.root < 0;
  int others = 0, left = 0;
  for (int r = 0; r < static_cast<int>(call.members->size()); ++r) {
    if (r == call.comm_rank || (point_to_point && call.root >= 0 && r != call.root)) continue;
    ++others;
    const int w = (*call.members)[static_cast<std::size_t>(r)];
    if (exchange_ && !exchange_->same_node(w)) continue;  // (its launcher, or the deadline, tells)
    const RankView v = board_.view(w, call.comm_id);
    if (v.pid == 0 || v.state == RankState::interrupted) continue;  // (a Ctrl-C has its own ending)
    bool gone = v.process == ProcessState::gone;
    if (!gone && call.kind != OpKind::finalize) {  // (in the last meeting, the others finishing are arriving)
      // Arrived: it entered this call — or its count is unknown (a communicator it has freed,
      // or more than the board tracks), which must never end a wait that may be correct.
      const bool arrived = !point_to_point && (v.entered > call.seq || v.entered < 0);
      const bool finishing = v.leaving[0] != '\0' || v.state == RankState::finalizing ||
                             (v.state == RankState::in_collective &&
                              v.current.kind == static_cast<std::int64_t>(OpKind::finalize));
      gone = finishing && !arrived;
    }
    if (gone && !any_source) return true;
    left += gone;
  }
  return any_source && others > 0 && left == others;
}

void Watchdog::wait_all(int n, MPI_Request* requests) {
  wait_until([&] {
    int done = 0;
    check_mpi(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return done != 0;
  });
}

void Watchdog::wait_until(const std::function<bool()>& done_now, const std::function<void()>& on_timeout) {
  if (!inside_) fail("internal error: a wait outside any operation");
  const std::int64_t grace = call_.kind == OpKind::finalize ? kFinalizeGraceNs : 0;
  const std::int64_t deadline = start_ns_ + timeout_ns_ + grace;
  const std::int64_t wait_start = now_ns();
  LeftRankWatch left(wait_start);
  set_waiting(true);
  std::int64_t waited = 0;  // at the last look
  for (unsigned spin = 0;; ++spin) {
    bool done = false;
    try {
      done = done_now();
    } catch (...) {
      set_waiting(false);
      throw;
    }
    if (termination_signal()) on_termination_signal(now_ns());  // even when the wait has just completed
    if (done) break;
    const bool asleep = waited > kSleepAfterNs;  // (then each poll is a look: they are rare)
    if (asleep || spin % kPollsPerLook == 0) {
      const std::int64_t now = now_ns();
      waited = now - wait_start;
      const std::int64_t aborting = board_.header().aborting_rank.load();
      // Another node's watchdog may be asking what this node's board says.
      if (exchange_ && now - start_ns_ > kListenAfterNs) {
        std::unique_lock serving(exchange_mutex_, std::try_to_lock);  // the other thread serves already
        if (serving) exchange_->serve();
      }
      if ((aborting >= 0 && aborting != board_.world_rank()) || now > deadline)
        end_failed_wait(now, "timed out", on_timeout);
      if (left.gone_long_enough(*this, call_, now))
        end_failed_wait(now, "stopped: a rank it waits for has left the program", on_timeout);
      // MPI moves the messages of nonblocking sends and receives posted earlier only while it is
      // called: a wait that spins on shared memory gives it a turn, so a peer that waits for
      // such a message is not held up by this one (the PyTorch backend's isend, then all_reduce).
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    }
    if (asleep)
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::clamp(waited / 8, kShortestSleepNs, kLongestSleepNs)));
    else if (spin > kSpinsBeforeYield)
      std::this_thread::yield();
  }
  set_waiting(false);
  if (termination_signal()) on_termination_signal(now_ns());  // the signal came after the last look
}

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

// Where one awaited rank is, as the report sorts them.
enum class Whereabouts { arrived, unknown, interrupted, left, dead, stopped, finished, elsewhere, outside };

struct Awaited {
  int rank = 0;  // in the communicator
  Whereabouts where = Whereabouts::unknown;
  std::string line;        // its report line ("rank 2 is dead: …"); empty when arrived
  std::string other_call;  // elsewhere: the call it waits in ("barrier #1"); left: why it left ("exception: E")
  bool reported = false;   // elsewhere: its own watchdog has fired
};

namespace {

std::vector<int> ranks_where(const std::vector<Awaited>& awaited, Whereabouts where) {
  std::vector<int> ranks;
  for (const Awaited& a : awaited)
    if (a.where == where) ranks.push_back(a.rank);
  return ranks;
}

std::vector<int> missing_ranks(const std::vector<Awaited>& awaited) {
  std::vector<int> ranks;
  for (const Awaited& a : awaited)
    if (a.where != Whereabouts::arrived) ranks.push_back(a.rank);
  return ranks;
}

// Ranks in a different collective, a group per call; this call's group holds the ranks that
// arrived (me included).
std::map<std::string, std::vector<int>> groups_by_call(const std::vector<Awaited>& awaited, int my_rank,
                                                       const std::string& my_call) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<int> arrived = ranks_where(awaited, Whereabouts::arrived);
  arrived.push_back(my_rank);
  std::sort(arrived.begin(), arrived.end());
  for (const Awaited& a : awaited)
    if (a.where == Whereabouts::elsewhere) groups[a.other_call].push_back(a.rank);
  groups[my_call] = arrived;
  return groups;
}

// The diagnosis of a collective: the ranks that diverged first, then where the others are.
// The largest group (on a tie, the one with the lowest rank) is taken as the program's
// intended path, so every rank would say the same.
std::string collective_diagnosis(const std::vector<Awaited>& awaited, int my_rank, const std::string& my_call) {
  const auto groups = groups_by_call(awaited, my_rank, my_call);
  auto majority = groups.begin();
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it->second.size() > majority->second.size() ||
        (it->second.size() == majority->second.size() && it->second.front() < majority->second.front()))
      majority = it;
  std::vector<std::string> parts;
  auto add = [&](const std::string& phrase, const std::vector<int>& ranks) {
    if (!ranks.empty()) parts.push_back(fmt::format("{} {}", ranks_phrase(ranks), phrase));
  };
  auto are = [&](Whereabouts w, const char* one, const char* many, const std::string& rest) {
    const std::vector<int> ranks = ranks_where(awaited, w);
    add(fmt::format("{} {}", ranks.size() > 1 ? many : one, rest), ranks);
  };
  std::map<std::string, std::vector<int>> left_by_reason;
  for (const Awaited& a : awaited)
    if (a.where == Whereabouts::left) left_by_reason[a.other_call].push_back(a.rank);
  for (const auto& [reason, ranks] : left_by_reason) add(fmt::format("left the program ({})", reason), ranks);
  are(Whereabouts::dead, "is", "are", "dead");
  are(Whereabouts::stopped, "is", "are", "stopped (suspended)");
  add(fmt::format("finished without calling {}", my_call), ranks_where(awaited, Whereabouts::finished));
  are(Whereabouts::interrupted, "was", "were", "interrupted");
  add(fmt::format("never called {}: not in any collective", my_call), ranks_where(awaited, Whereabouts::outside));
  add(fmt::format("did not arrive in {} and their node gave no answer (state unknown)", my_call),
      ranks_where(awaited, Whereabouts::unknown));
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it != majority) add("called " + it->first, it->second);
  // Never "every rank has arrived" beside a rank that has not.
  if (parts.empty()) add(fmt::format("did not arrive in {}", my_call), missing_ranks(awaited));
  if (parts.empty()) return "every rank has arrived (the wait is inside the transport)";
  return fmt::format("{} where {} called {}", fmt::join(parts, "; "), ranks_phrase(majority->second), majority->first);
}

// A send or receive waits for one peer: who waits for whom, and what the peer does.
std::string point_to_point_diagnosis(const std::vector<Awaited>& awaited, const OpCall& call,
                                     const std::string& my_call) {
  if (call.root < 0)  // a receive from any rank: each awaited rank has its line below
    return fmt::format("rank {} waits to receive from any rank ({}), and no rank sends to it", call.comm_rank,
                       my_call);
  const Awaited& peer = awaited.front();  // the only rank a send or receive waits for
  std::string doing = "is not in any collective or send/receive";
  switch (peer.where) {
    case Whereabouts::dead:
      doing = "is dead";
      break;
    case Whereabouts::left:
      doing = fmt::format("left the program ({})", peer.other_call);
      break;
    case Whereabouts::stopped:
      doing = "is stopped (suspended)";
      break;
    case Whereabouts::finished:
      doing = "has finished";
      break;
    case Whereabouts::unknown:
      doing = "runs on a node that gave no answer (state unknown)";
      break;
    case Whereabouts::elsewhere:
      if (peer.other_call == my_call) break;
      doing = fmt::format("is waiting in {} instead (a send that never came, or a cycle of waits)", peer.other_call);
      break;
    default:
      break;
  }
  return fmt::format("rank {} waits {} rank {} ({}), and rank {} {}", call.comm_rank,
                     call.kind == OpKind::send ? "to send to" : "to receive from", peer.rank, my_call, peer.rank,
                     doing);
}

}  // namespace

// Where each rank this call waits for is, wherever it runs: this node's board for the ranks
// here, the answer of their own node for the others.
std::vector<Awaited> Watchdog::awaited_ranks(double ask_budget_s) {
  const bool point_to_point =
      call_.kind == OpKind::send || call_.kind == OpKind::recv || call_.kind == OpKind::sendrecv;
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
    awaited.push_back(where_is(r, w, v, point_to_point, ask_budget_s));
  }
  return awaited;
}

Awaited Watchdog::where_is(int r, int w, const RankView& v, bool point_to_point, double ask_budget_s) const {
  const std::string rank = who(r, w);
  using W = Whereabouts;
  if (v.pid == 0)  // no board that could be read says anything about it
    return {r, W::unknown,
            fmt::format("{}: no answer from its node within {:.1f} s (no rank there is waiting in a collective to "
                        "answer: all computing, stopped or dead, or the node is unreachable); its state is unknown",
                        rank, ask_budget_s)};
  std::string last = "it has made no collective call yet";
  if (v.last.kind != 0)
    last = v.last.returned_ago_ns >= 0
               ? fmt::format("its last call, {}, returned {} ago", describe(v.last), seconds(v.last.returned_ago_ns))
               : fmt::format("its last call is {}, entered {} ago", describe(v.last), seconds(v.last.started_ago_ns));
  if (v.state == RankState::interrupted)  // gone, or going, because of a Ctrl-C: no failure
    return {r, W::interrupted, fmt::format("{} was interrupted (Ctrl-C or SIGTERM) and is ending", rank)};
  // It said why it leaves (the PyTorch backend does, at the program's exit).
  const bool said_why = v.leaving[0] != '\0';
  if (said_why && v.process == ProcessState::gone)
    return {r, W::left, fmt::format("{} left the program ({}): process {} is gone; {}", rank, v.leaving, v.pid, last),
            v.leaving};
  if (v.process == ProcessState::gone)
    return {r, W::dead, fmt::format("{} is dead: process {} is gone (crashed or killed); {}", rank, v.pid, last)};
  if (v.process == ProcessState::stopped)
    return {
        r, W::stopped,
        fmt::format("{} is stopped: process {} is suspended (SIGSTOP, Ctrl-Z or a debugger); {}", rank, v.pid, last)};
  // It has arrived once it entered this collective (seq) on this communicator — and, when its
  // latest call is this very one, with the same arguments.
  const bool same_number = v.last.comm_id == call_.comm_id && v.last.seq == call_.seq;
  const bool same_call = v.last.kind == static_cast<std::int64_t>(call_.kind) && v.last.count == call_.count &&
                         v.last.type == static_cast<std::int64_t>(call_.type) && v.last.op == call_.op &&
                         v.last.root == call_.root;
  if (!point_to_point && v.entered > call_.seq && (!same_number || same_call)) return {r, W::arrived, ""};
  if (said_why) return {r, W::left, fmt::format("{} left the program ({}) and is ending; {}", rank, v.leaving, last), v.leaving};
  // (In the last meeting, or stopped there by another rank's report: it finished all the same.)
  if (v.state == RankState::finalizing ||
      ((v.state == RankState::in_collective || v.state == RankState::reported) &&
       v.current.kind == static_cast<std::int64_t>(OpKind::finalize)))
    return {r, W::finished,
            fmt::format("{} has finished its work and is shutting down (it skipped this collective)", rank)};
  if (v.state == RankState::in_collective || v.state == RankState::reported)
    return {r, W::elsewhere,
            fmt::format("{} is waiting in a different call, {}, for {}", rank, describe(v.current),
                        seconds(v.current.started_ago_ns)),
            short_call(v.current), v.state == RankState::reported};
  return {r, W::outside, fmt::format("{} is not in any collective (computing, or stuck outside comm); {}", rank, last)};
}

// The full report: a one-line diagnosis (who diverged), this rank's line, then a line per
// missing rank.
std::string Watchdog::report(std::int64_t now, const char* what_happened, double ask_budget_s) {
  const std::string my_call = fmt::format("{} #{}", name_of(call_.kind), call_.seq);
  const std::vector<Awaited> awaited = awaited_ranks(ask_budget_s);
  const std::vector<int> missing = missing_ranks(awaited);
  const bool point_to_point =
      call_.kind == OpKind::send || call_.kind == OpKind::recv || call_.kind == OpKind::sendrecv;
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
  // Trouble: a rank dead, stopped or reporting — or silent, unless its node announced a Ctrl-C.
  const bool interrupted_elsewhere = exchange_ && exchange_->interrupt_seen();
  report_found_trouble_ = false;
  for (const Awaited& a : awaited)
    report_found_trouble_ = report_found_trouble_ || a.where == Whereabouts::dead || a.where == Whereabouts::left ||
                            a.where == Whereabouts::stopped ||
                            a.reported || (a.where == Whereabouts::unknown && !interrupted_elsewhere);
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

void Watchdog::end_failed_wait(std::int64_t now, const char* what_happened, const std::function<void()>& on_timeout) {
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
