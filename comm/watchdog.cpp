#include "comm/watchdog.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "comm/error.hpp"

namespace comm {
namespace {

Watchdog* g_watchdog = nullptr;
volatile std::sig_atomic_t g_terminated = 0;  // set by SIGTERM while waiting
volatile std::sig_atomic_t g_waiting = 0;     // inside wait_all

void on_sigterm(int) {
    if (!g_waiting) {  // not in a collective: nothing to report, die as usual
        std::signal(SIGTERM, SIG_DFL);
        std::raise(SIGTERM);
        return;
    }
    g_terminated = 1;
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

// How the check mode describes one call: the fields every rank must agree on.
using CallKey = std::array<std::int64_t, 6>;  // kind, seq, count, type, op, root

}  // namespace

std::string describe(const OpRecord& r) {
    auto kind = static_cast<OpKind>(r.kind.load());
    return fmt::format("{} #{} on '{}' ({})", name_of(kind), r.seq.load(), r.name(),
                       arguments(kind, r.count, static_cast<DataType>(r.type.load()),
                                 static_cast<int>(r.op), static_cast<int>(r.root)));
}

Watchdog& watchdog() {
    if (!g_watchdog) fail("comm is not initialised: create a comm::Runtime first");
    return *g_watchdog;
}
void set_watchdog(Watchdog* w) { g_watchdog = w; }
bool has_watchdog() { return g_watchdog != nullptr; }

void install_termination_report() { std::signal(SIGTERM, on_sigterm); }

Watchdog::Watchdog(StatusBoard& board, double timeout_s, bool check_mode)
    : board_(board), timeout_ns_(static_cast<std::int64_t>(timeout_s * 1e9)), check_mode_(check_mode) {}

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

void Watchdog::mark_finalizing() {
    board_.mine().state = static_cast<std::int64_t>(RankState::finalizing);
}

void Watchdog::wait_all(int n, MPI_Request* requests) {
    if (!inside_) fail("internal error: a wait outside any operation");
    const std::int64_t deadline = start_ns_ + timeout_ns_;
    g_waiting = 1;
    for (unsigned spin = 0;; ++spin) {
        int done = 0;
        int code = MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS) {
            g_waiting = 0;
            check_mpi(code, "MPI_Testall");
        }
        if (done) break;
        if (spin % 64 == 0) {  // look at the clock and the board now and then, not every poll
            const std::int64_t now = now_ns();
            const std::int64_t aborting = board_.header().aborting_rank.load();
            const char* why = nullptr;
            bool first = false;
            if (g_terminated) {
                why = "interrupted (the launcher is ending the job: a process failed)";
            } else if (aborting >= 0 && aborting != board_.world_rank()) {
                why = "stopped (another rank's watchdog fired)";
            } else if (now > deadline) {
                std::int64_t none = -1;
                first = board_.header().aborting_rank.compare_exchange_strong(none, board_.world_rank());
                why = "timed out";
            }
            if (why) {
                std::string text = fmt::format(
                    "[watchdog] rank {}: {} {} after waiting {} (deadline {}); {}", call_.comm_rank,
                    describe(board_.mine().current), why, seconds(now - start_ns_),
                    seconds(timeout_ns_), describe_missing(now));
                if (g_terminated) {  // the launcher sends SIGKILL soon: say it and go
                    text += "\n";
                    [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
                    _exit(kWatchdogExitCode);
                }
                end_job(text, first);
            }
        }
        if (spin > 16) std::this_thread::yield();  // let an oversubscribed peer run
    }
    g_waiting = 0;
}

std::string Watchdog::describe_missing(std::int64_t now) {
    // A rank has arrived once it has entered this collective (seq) on this communicator.
    std::string lines;
    std::vector<int> missing;
    const bool point_to_point = call_.kind == OpKind::send || call_.kind == OpKind::recv || call_.kind == OpKind::sendrecv;
    for (int r = 0; r < static_cast<int>(call_.members->size()); ++r) {
        if (r == call_.comm_rank) continue;
        if (point_to_point && r != call_.root) continue;
        const int w = (*call_.members)[r];
        RankSlot& slot = board_.slot(w);
        // Its latest call, when it is this very call (same communicator and number), must
        // also be the same collective with the same arguments.
        const bool same_number = slot.last.comm_id.load() == call_.comm_id && slot.last.seq.load() == call_.seq;
        const bool same_call = slot.last.kind.load() == static_cast<std::int64_t>(call_.kind) &&
                               slot.last.count.load() == call_.count &&
                               slot.last.type.load() == static_cast<std::int64_t>(call_.type) &&
                               slot.last.op.load() == call_.op && slot.last.root.load() == call_.root;
        if (!point_to_point && board_.entered(w, call_.comm_id) > call_.seq && (!same_number || same_call)) continue;
        missing.push_back(r);
        std::string who = w == r ? fmt::format("rank {}", r) : fmt::format("rank {} (world rank {})", r, w);
        std::string doing;
        const auto state = static_cast<RankState>(slot.state.load());
        if (slot.pid.load() == 0) {
            doing = "runs on another node; its state is not visible from here";
        } else if (!process_alive(slot.pid)) {
            doing = fmt::format("is dead: process {} is gone (crashed or killed)", slot.pid.load());
        } else if (state == RankState::finalizing ||
                   (state == RankState::in_collective && slot.current.kind.load() == static_cast<std::int64_t>(OpKind::finalize))) {
            doing = "has finished its work and is shutting down (it skipped this collective)";
        } else if (state == RankState::in_collective || state == RankState::reported) {
            doing = fmt::format("is waiting in a different call, {}, for {}", describe(slot.current),
                                seconds(now - slot.current.start_ns));
            lines += fmt::format("\n[watchdog]   {} {}", who, doing);
            continue;
        } else {
            doing = "is not in any collective (computing, or stuck outside comm)";
        }
        std::string last = "it has made no collective call yet";
        if (slot.pid.load() != 0 && slot.last.kind.load() != 0) {
            const std::int64_t end = slot.last.end_ns.load();
            last = end ? fmt::format("its last call, {}, returned {} ago", describe(slot.last),
                                     seconds(now - end))
                       : fmt::format("its last call is {}, entered {} ago", describe(slot.last),
                                     seconds(now - slot.last.start_ns));
        }
        lines += fmt::format("\n[watchdog]   {} {}; {}", who, doing, last);
    }
    if (missing.empty()) return "every rank has arrived (the wait is inside the transport)" + lines;
    return fmt::format("not arrived: rank{} {}", missing.size() > 1 ? "s" : "",
                       fmt::join(missing, ", ")) +
           lines;
}

void Watchdog::verify_same_call(MPI_Comm check_comm) {
    const CallKey mine = {static_cast<std::int64_t>(call_.kind), call_.seq, call_.count,
                          static_cast<std::int64_t>(call_.type), call_.op, call_.root};
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
    std::string text = fmt::format("[watchdog] rank {}: check mode: the ranks of '{}' disagree on collective #{}:",
                                   call_.comm_rank, call_.comm_name, call_.seq);
    for (const auto& [key, ranks] : groups) {
        auto kind = static_cast<OpKind>(key[0]);
        text += fmt::format("\n[watchdog]   rank{} {} called {} #{} ({})", ranks.size() > 1 ? "s" : "",
                            fmt::join(ranks, ", "), name_of(kind), key[1],
                            arguments(kind, key[2], static_cast<DataType>(key[3]),
                                      static_cast<int>(key[4]), static_cast<int>(key[5])));
    }
    // Every rank found the same disagreement; the communicator's rank 0 says it.
    end_job(call_.comm_rank == 0 ? text : std::string(), call_.comm_rank == 0);
}

void Watchdog::end_job(const std::string& report, bool first) {
    if (!report.empty()) {
        std::string text = report + fmt::format("\n[watchdog] ending the job (exit status {})\n", kWatchdogExitCode);
        [[maybe_unused]] auto written = write(STDERR_FILENO, text.data(), text.size());
    }
    board_.mine().state = static_cast<std::int64_t>(RankState::reported);
    // The first rank gives the others on this node a moment to print their own view.
    std::this_thread::sleep_for(std::chrono::milliseconds(first ? 1000 : 1500));
    MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode);
    _exit(kWatchdogExitCode);
}

}  // namespace comm
