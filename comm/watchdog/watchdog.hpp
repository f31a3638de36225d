// Deadlines for every collective, and the report that says who is missing when one passes.
//
// A collective must be entered by every rank of its communicator; a rank that does not
// leaves the others waiting forever. Here no wait is blocking: every MPI request is polled
// (wait_all) against the deadline of the collective in progress (OpScope). When it passes,
// the rank prints which ranks never arrived and what each of them was doing instead (read
// from the StatusBoard, so a dead or stuck rank need not answer), then ends the whole job —
// or, under TimeoutAction::raise, throws TimeoutError for the program to catch.
//
// Check mode (optional) exchanges a short description of the call before any data moves
// and ends the job, naming the ranks, when they disagree on collective, count, type, op
// or root. Ctrl-C and the launcher's SIGTERM: comm/watchdog/termination.hpp.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "comm/watchdog/op_call.hpp"
#include "comm/watchdog/status_board.hpp"
#include "comm/watchdog/status_exchange.hpp"
#include "comm/types.hpp"

namespace comm {

// Exit status of a job ended by the watchdog (timeout, mismatch, lost rank).
inline constexpr int kWatchdogExitCode = 3;

// What a wait past its deadline (or on a lost rank) does after the report: end the whole job
// (the default: exit 3 on every rank, nothing left waiting), or throw comm::TimeoutError for a
// program that catches it and recovers (gloo's way: PyTorch raises; --on-timeout raise).
enum class TimeoutAction { end_job, raise };

struct Awaited;  // a rank the call waits for, and where it is (diagnosis.hpp)

class Watchdog {
 public:
  // The longest deadline (about 31 years): deadlines are counted in nanoseconds in an int64,
  // which overflows past 9.2e9 s, and a deadline that overflowed would fire at once.
  static constexpr double kMaxTimeoutSeconds = 1e9;

  // `exchange` asks other nodes for their boards when a report needs them (null: one node).
  Watchdog(StatusBoard& board, StatusExchange* exchange, double timeout_s, bool check_mode,
           TimeoutAction on_timeout = TimeoutAction::end_job);

  double timeout_s() const { return timeout_ns_ * 1e-9; }
  StatusBoard& board() { return board_; }
  bool check_mode() const { return check_mode_; }
  bool spans_nodes() const { return exchange_ && exchange_->spans_nodes(); }
  StatusExchange* exchange() { return exchange_; }

  // Marks this rank as inside `call` from `start_ns` on (its deadline counts from there).
  void enter(const OpCall& call, std::int64_t start_ns);
  // Marks this rank as out of it again.
  void leave();
  // Polls until every request completes; past the deadline, reports and ends the job (or raises).
  // `statuses` (n of them, or MPI_STATUSES_IGNORE) are the completed requests' statuses. In a
  // collective, a message longer than its receive (MPI_ERR_TRUNCATE) means the ranks passed
  // different sizes: the report at once (sizes_disagree), not at the deadline.
  void wait_all(int n, MPI_Request* requests, MPI_Status* statuses = MPI_STATUSES_IGNORE);
  // In a collective, a receive that expects `expected_bytes` got `received` ("16 bytes", "more
  // than 32 bytes") from the rank of world rank `peer_world_rank`: the ranks called it with
  // different sizes (or types). Ends the job now, as give_up, with the report whose diagnosis
  // names each rank's count and type. (expected 0 and received empty: MPI said only that some
  // message was longer than its receive.) In a send or recv the program posts, whose sizes are
  // its own to choose, it returns; outside any operation (a poll by Work::test) it throws.
  void sizes_disagree(int peer_world_rank, std::string_view received, std::size_t expected_bytes);
  // After MPI_Test/MPI_Testall of n requests returned `code`: a truncated message is
  // sizes_disagree; any other error in a collective is the report now (give_up), in a send or
  // receive it throws (naming `call`).
  void check_completion(int code, int n, const MPI_Status* statuses, const char* call);
  // The same for anything that can be polled (an NCCL kernel's event, a pending ring):
  // calls done() until it returns true. Past the deadline, before the report, on_timeout()
  // runs (nccl: ncclCommAbort, so nothing is left spinning on the GPU).
  void wait_until(const std::function<bool()>& done, const std::function<void()>& on_timeout = {});
  // A wait that cannot end well (a peer's process is gone: a single-copy read found no such
  // process): the report now, as at the deadline, and the job ends (or raises) — no use waiting it out.
  [[noreturn]] void give_up(const char* what_happened);
  // Check mode: all ranks of `call`'s communicator compare their calls over `check_comm`.
  void verify_same_call(MPI_Comm check_comm);
  // Records on the status board that this rank entered one more collective on `comm_id`.
  void count_entry(std::int64_t comm_id) { board_.count_entry(comm_id); }
  void forget(std::int64_t comm_id) { board_.forget(comm_id); }
  // Called before MPI_Finalize so peers can tell "finished" from "stuck".
  void mark_finalizing();
  // Says, on the status board, why this rank is leaving the program ("exception: ValueError",
  // "exit"): a rank that waits for it names the reason in its report.
  void note_leaving(std::string_view why);
  // True when a rank that `call` waits for, on this node, has left for good: its process is
  // gone, or it is finishing the program (or said it leaves) without having entered this call. A wait that sees
  // it for a second (a message sent just before leaving may still be on its way) ends the job
  // with the report at once, whatever the deadline. Ranks on other nodes: their launcher or
  // the deadline tells.
  bool awaited_rank_left(const OpCall& call);
  // True when a rank `call` waits for, on this node, has not come to it yet: a collective it has
  // not entered, or a send/receive whose peer is in no call. Such a wait may sleep between polls
  // (wait_until); one whose peers are all in the call may not (MPI moves data only while called).
  bool awaited_rank_late(const OpCall& call);

 private:
  // The full report of the call in progress: a one-line diagnosis, then each missing rank.
  // Ranks on other nodes are asked (for at most `ask_budget_s`) what their node's board says.
  std::string report(std::int64_t now, const char* what_happened, double ask_budget_s);
  // This thread's call in progress, as the report names it.
  std::string describe_my_call(std::int64_t now) const;
  // "rank 2", "rank 2 (world rank 5)", and " on nanodist-b" when the job spans nodes.
  std::string who(int comm_rank, int world_rank) const;
  // The ranks the call in progress waits for, and where each of them is (report's lines).
  std::vector<Awaited> awaited_ranks(double ask_budget_s);
  // SIGTERM came while this rank waited: the report, or the interrupt note, or (a stop asked
  // for, nothing failed) back to the wait (see the .cpp).
  void on_termination_signal(std::int64_t now);
  // Waits, answering other nodes' questions meanwhile.
  void linger(double seconds);
  [[noreturn]] void end_job(const std::string& report, bool first);
  // The end of a wait that failed (`what_happened`: "timed out"): the first rank to get here
  // reports, a later one adds a line after it.
  [[noreturn]] void end_failed_wait(std::int64_t now, const char* what_happened,
                                    const std::function<void()>& on_timeout);
  // The same under TimeoutAction::raise: the report (or this rank's line), then TimeoutError.
  [[noreturn]] void raise_failed_wait(std::int64_t now, const char* what_happened,
                                      const std::function<void()>& on_timeout);

  StatusBoard& board_;
  StatusExchange* exchange_;
  std::int64_t timeout_ns_ = 0;
  bool check_mode_;
  TimeoutAction timeout_action_;
  std::atomic<bool> raised_{false};  // a TimeoutError was raised: only the last meeting may run
  // The call in progress, per thread: the communication thread (comm/progress_thread.hpp) runs
  // queued collectives while the program's own thread may be in another one.
  static thread_local OpCall call_;
  static thread_local std::int64_t start_ns_;
  static thread_local bool inside_;
  // Every call in progress on this rank (at most one per thread), for the status board, which
  // shows one: the latest entered.
  std::mutex inside_mutex_;
  std::vector<std::pair<OpCall, std::int64_t>> calls_inside_;
  // One thread at a time answers other nodes, handles a signal, or reports: the exchange's
  // buffers and report_found_trouble_ are shared, and a report ends the process (the other
  // thread then waits here until it has).
  std::recursive_mutex exchange_mutex_;  // recursive: on_timeout may wait (and serve) inside a report
  std::recursive_mutex ending_mutex_;
  bool report_found_trouble_ = false;  // the last report saw a rank dead, stopped, reported or unknown
};

// Watches, for one wait, whether a rank it waits for has left (Watchdog::awaited_rank_left):
// it looks at most every 100 ms, and says so once the rank has been gone for a second (a
// message sent just before leaving may still be on its way). Used by the watchdog's own waits
// and by the PyTorch backend's sends and receives in flight.
class LeftRankWatch {
 public:
  // The first look is 100 ms after `start_ns`: a wait that ends sooner pays nothing.
  explicit LeftRankWatch(std::int64_t start_ns);
  // True once a rank `call` waits for has been seen gone for a second, as of `now`.
  bool gone_long_enough(Watchdog& watchdog, const OpCall& call, std::int64_t now);

 private:
  std::int64_t next_look_ns_ = 0;
  std::int64_t gone_since_ns_ = -1;  // since when a rank this wait waits for has been seen gone
};

// The process's watchdog, set up by Runtime.
Watchdog& watchdog();
bool has_watchdog();
void set_watchdog(Watchdog* w);

// RAII form of enter/leave.
class OpScope {
 public:
  OpScope(const OpCall& call, std::int64_t start_ns = now_ns()) { watchdog().enter(call, start_ns); }
  ~OpScope() { watchdog().leave(); }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
};

}  // namespace comm
