// The watchdog's waiting: every call's deadline, the wait loop (spin, yield, sleep), the look
// for ranks that left, and check mode. What a report says: diagnosis.cpp; how a failed wait
// ends the job: ending.cpp.
#include "comm/watchdog/watchdog.hpp"

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
#include "comm/watchdog/diagnosis.hpp"
#include "comm/watchdog/termination.hpp"

namespace comm {

// The wait loop's pace (Watchdog::wait_until):
// polls between looks at the clock and the status board: a poll is a few nanoseconds, a look
// a system call and cache misses on the shared board;
constexpr unsigned kPollsPerLook = 64;
// polls before each further one yields the core: a quick collective finishes while spinning,
// and a rank oversubscribed on a core lets its peer run (4 ranks on 2 cores);
constexpr unsigned kSpinsBeforeYield = 16;
// how long a wait spins and yields before it may sleep between polls instead — only while a
// rank it waits for has not come to the call yet (Watchdog::awaited_rank_late): a yield returns
// at once when nothing else wants the core, so a rank that waits long for a late peer would
// burn it (and slow the ranks, or the checkpoint writer, that share it). Once every peer is in
// the call the data is on its way, which MPI moves only while it is called: that wait never
// sleeps. Asleep, each pause is an eighth of the time waited so far, within these bounds: the
// late peer's arrival is seen at most about an eighth late, and a wait that ends within the
// first 2 ms never sleeps. Awake past 2 ms, it looks again whether a peer is late every 1 ms.
constexpr std::int64_t kSleepAfterNs = 2'000'000;   // 2 ms
constexpr std::int64_t kLateLookEveryNs = 1'000'000;  // 1 ms
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

// How the check mode describes one call: the fields every rank must agree on.
using CallKey = std::array<std::int64_t, 6>;  // kind, seq, count, type, op, root

}  // namespace

Watchdog& watchdog() {
  if (!g_watchdog) fail("comm is not initialised: create a comm::Runtime first");
  return *g_watchdog;
}
void set_watchdog(Watchdog* w) { g_watchdog = w; }
bool has_watchdog() { return g_watchdog != nullptr; }

Watchdog::Watchdog(StatusBoard& board, StatusExchange* exchange, double timeout_s, bool check_mode,
                   TimeoutAction on_timeout)
    : board_(board), exchange_(exchange), check_mode_(check_mode), timeout_action_(on_timeout) {
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
  // After a raised timeout the collectives of this job are out of step (each rank abandoned its
  // own call): nothing more may run but the last meeting, which lets the program end cleanly.
  if (raised_.load() && call.kind != OpKind::finalize) {
    OpRecord record;
    store(record, call, start_ns);
    throw TimeoutError(fmt::format("rank {}: {}: a collective of this job timed out before (--on-timeout raise), and "
                                   "its communicators are not usable any more: save what you can and exit",
                                   board_.world_rank(), describe(record.view(start_ns))));
  }
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

bool Watchdog::awaited_rank_late(const OpCall& call) {
  if (!call.members) return false;
  const bool point_to_point = is_point_to_point(call.kind);
  if (point_to_point && call.root < 0) return false;  // from any rank: any one may be sending
  for (int r = 0; r < static_cast<int>(call.members->size()); ++r) {
    if (r == call.comm_rank || (point_to_point && r != call.root)) continue;
    const int w = (*call.members)[static_cast<std::size_t>(r)];
    if (exchange_ && !exchange_->same_node(w)) continue;  // (not known here: counts as come)
    if (!point_to_point) {
      const std::int64_t entered = board_.entered(w, call.comm_id);
      if (entered >= 0 && entered <= call.seq) return true;  // it has not entered this collective
    } else if (board_.view(w, call.comm_id).state == RankState::running) {
      return true;  // the peer is in no call: computing (a pipeline's bubble)
    }
  }
  return false;
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

void Watchdog::wait_all(int n, MPI_Request* requests, MPI_Status* statuses) {
  std::vector<MPI_Status> own;  // (an error's class is in the statuses: kept even when the caller ignores them)
  if (statuses == MPI_STATUSES_IGNORE) {
    own.resize(static_cast<std::size_t>(n));
    statuses = own.data();
  }
  wait_until([&] {
    int done = 0;
    check_completion(MPI_Testall(n, requests, &done, statuses), n, statuses, "MPI_Testall");
    return done != 0;
  });
}

void Watchdog::check_completion(int code, int n, const MPI_Status* statuses, const char* call) {
  if (code == MPI_SUCCESS) return;
  int error = code;  // under MPI_ERR_IN_STATUS, the first failed request's own error
  for (int i = 0; i < n && statuses != MPI_STATUSES_IGNORE; ++i) {
    const int own = code == MPI_ERR_IN_STATUS ? statuses[i].MPI_ERROR : code;
    int error_class = MPI_SUCCESS;
    MPI_Error_class(own, &error_class);
    if (error_class == MPI_ERR_TRUNCATE) sizes_disagree(-1, {}, 0);
    if (error == MPI_ERR_IN_STATUS && own != MPI_SUCCESS && own != MPI_ERR_PENDING) error = own;
  }
  // Any other error inside a collective: the report, whose diagnosis says what the other ranks
  // called (Open MPI's nonblocking collectives can fail a schedule after a truncation elsewhere
  // in it without saying so). A send or receive the program posts: its error, thrown.
  if (inside_ && !is_point_to_point(call_.kind)) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(error, text, &length) != MPI_SUCCESS) length = 0;
    give_up((length > 0 ? fmt::format("{} failed: {}", call, std::string_view(text, static_cast<std::size_t>(length)))
                        : fmt::format("{} failed (MPI error code {})", call, error))
                .c_str());
  }
  check_mpi(error, call);
}

void Watchdog::sizes_disagree(int peer_world_rank, std::string_view received, std::size_t expected_bytes) {
  std::string from = "a rank";
  if (inside_ && call_.members) {
    const auto& members = *call_.members;
    const auto at = std::find(members.begin(), members.end(), peer_world_rank);
    if (at != members.end()) from = fmt::format("rank {}", at - members.begin());
  }
  const std::string what =
      expected_bytes > 0 || !received.empty()
          ? fmt::format("received {} from {} where this rank's call expects {} bytes (the sizes disagree)", received,
                        from, expected_bytes)
          : std::string("received a message longer than this rank's call expects (the sizes disagree)");
  // Outside any operation (an asynchronous collective polled by Work::test): an error, thrown.
  if (!inside_) fail("{}", what);
  if (is_point_to_point(call_.kind)) return;  // a send or recv: its sizes are the program's to choose
  give_up(what.c_str());
}

void Watchdog::wait_until(const std::function<bool()>& done_now, const std::function<void()>& on_timeout) {
  if (!inside_) fail("internal error: a wait outside any operation");
  const std::int64_t grace = call_.kind == OpKind::finalize ? kFinalizeGraceNs : 0;
  const std::int64_t deadline = start_ns_ + timeout_ns_ + grace;
  const std::int64_t wait_start = now_ns();
  LeftRankWatch left(wait_start);
  set_waiting(true);
  std::int64_t waited = 0;  // at the last look
  bool asleep = false;       // a peer is late: sleep between polls (then each poll is a look)
  std::int64_t next_late_look = wait_start + kSleepAfterNs;
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
      if (now >= next_late_look) {
        asleep = awaited_rank_late(call_);
        next_late_look = asleep ? now : now + kLateLookEveryNs;
      }
    }
    if (asleep)
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::clamp(waited / 8, kShortestSleepNs, kLongestSleepNs)));
    else if (spin > kSpinsBeforeYield)
      std::this_thread::yield();
  }
  set_waiting(false);
  if (termination_signal()) on_termination_signal(now_ns());  // the signal came after the last look
}

void Watchdog::verify_same_call(MPI_Comm check_comm) {
  // A ring step (send_recv_async) names each rank's own neighbour: only its kind, number and type agree.
  const bool ring_step = call_.kind == OpKind::sendrecv;
  const CallKey mine = {static_cast<std::int64_t>(call_.kind), call_.seq, call_.count,
                        static_cast<std::int64_t>(call_.type), call_.op,  ring_step ? -1 : call_.root};
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

}  // namespace comm
