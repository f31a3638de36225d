// A table in shared memory where every rank on this machine writes what it is doing.
//
// It is how the watchdog can say, when a collective times out, which ranks never arrived
// and what each of them was doing instead — without asking them (they may be dead or
// stuck). One board per node: slot r belongs to world rank r; a rank writes only its own
// slot and reads the others. Ranks on other nodes leave their slots empty (pid 0).
//
//   node memory:  [ header | slot 0 | slot 1 | ... | slot world_size-1 ]
//
// Fields are atomics so that readers never see torn values; they are reports, not locks.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "comm/types.hpp"

namespace comm {

// Monotonic nanoseconds, comparable between processes on one machine.
std::int64_t now_ns();

// One collective call read from a board at one moment: plain values, times as ages, so that
// a node can send what its board says to another node (whose clock may differ).
struct OpView {
  std::int64_t kind = 0, comm_id = 0, seq = 0, count = 0, type = 0, op = -1, root = -1;
  std::int64_t started_ago_ns = 0;    // how long ago it was entered
  std::int64_t returned_ago_ns = -1;  // how long ago it returned; -1 while in it
  char comm_name[48] = {};
};

// Up to 47 characters packed into atomics, so a reader in another process never sees them torn.
using PackedText = std::array<std::atomic<std::uint64_t>, 6>;
void pack_text(PackedText& into, std::string_view text);
std::string unpack_text(const PackedText& from);

// One collective call as the watchdog describes it.
struct OpRecord {
  std::atomic<std::int64_t> kind{0};                      // OpKind
  std::atomic<std::int64_t> comm_id{0};                   // identifies the communicator on every member
  std::atomic<std::int64_t> seq{0};                       // n-th collective on that communicator, from 0
  std::atomic<std::int64_t> count{0};                     // elements per rank
  std::atomic<std::int64_t> type{0};                      // DataType
  std::atomic<std::int64_t> op{-1};                       // ReduceOp, or -1
  std::atomic<std::int64_t> root{-1};                     // root or peer rank, or -1
  std::atomic<std::int64_t> start_ns{0};                  // when it was entered
  std::atomic<std::int64_t> end_ns{0};                    // when it returned, 0 while in it
  PackedText comm_name{};                                 // up to 47 chars

  void set_name(std::string_view name);
  std::string name() const;
  OpView view(std::int64_t now) const;
};

// interrupted: the rank is ending because of a Ctrl-C (SIGINT/SIGTERM with nothing wrong),
// so its process being gone soon after is no failure.
enum class RankState : std::int64_t { absent, running, in_collective, finalizing, reported, interrupted };

// How many collectives this rank has entered on one communicator.
struct CommProgress {
  std::atomic<std::int64_t> comm_id{0};
  std::atomic<std::int64_t> entered{0};
};

struct RankSlot {
  static constexpr int kTrackedComms = 32;

  std::atomic<std::int64_t> pid{0};
  std::atomic<std::int64_t> started{0};  // its start time (/proc/<pid>/stat, clock ticks): a reused pid is another process
  std::atomic<std::int64_t> state{0};    // RankState
  OpRecord current;                    // valid while state == in_collective
  OpRecord last;                       // the latest collective entered
  std::array<CommProgress, kTrackedComms> progress;
  PackedText leaving{};  // why it is leaving the program, once it is ("exception: ValueError"); empty before
};

// What /proc says of a rank's process.
enum class ProcessState : std::int64_t { unknown, running, stopped, gone };

// One rank's slot read at one moment (see OpView): what the watchdog's report is made of,
// whether the slot is on this node's board or was sent by the rank's own node.
struct RankView {
  std::int64_t world_rank = -1;
  std::int64_t pid = 0;  // 0: the board read has no such rank (it runs on another node)
  ProcessState process = ProcessState::unknown;
  RankState state = RankState::absent;
  std::int64_t entered = -1;  // collectives entered on the communicator asked about; -1 unknown
  OpView current;             // valid while state is in_collective or reported
  OpView last;                // kind 0: no collective call yet
  char leaving[48] = {};      // why it is leaving the program (RankSlot::leaving); empty: it is not
};

struct BoardHeader {
  std::atomic<std::int64_t> world_size{0};
  std::atomic<std::int64_t> aborting_rank{-1};  // first rank whose watchdog fired, or -1
};

// Owns this process's mapping of the node's board. Created collectively by Runtime.
class StatusBoard {
 public:
  explicit StatusBoard(MPI_Comm world);
  ~StatusBoard();
  StatusBoard(const StatusBoard&) = delete;
  StatusBoard& operator=(const StatusBoard&) = delete;

  BoardHeader& header() { return *header_; }
  RankSlot& slot(int world_rank) { return slots_[world_rank]; }
  RankSlot& mine() { return slots_[world_rank_]; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

  // How many collectives `world_rank` has entered on communicator `comm_id`; -1 if its table
  // does not say (it has entered none yet, has freed that communicator, or tracks too many).
  std::int64_t entered(int world_rank, std::int64_t comm_id);
  // Slot `world_rank` as it stands now, with its progress on communicator `comm_id`.
  RankView view(int world_rank, std::int64_t comm_id);
  // Records that this rank entered one more collective on `comm_id`.
  void count_entry(std::int64_t comm_id);
  // Frees this rank's table entry of a communicator that no longer exists.
  void forget(std::int64_t comm_id);

 private:
  std::mutex progress_mutex_;  // count_entry/forget: the program's thread and the communication thread
  void* memory_ = nullptr;
  std::size_t bytes_ = 0;
  BoardHeader* header_ = nullptr;
  RankSlot* slots_ = nullptr;
  int world_rank_ = 0;
  int world_size_ = 0;
};

// Is the process with this pid (on this machine), started at `started` (0: any start), still
// running? Zombies count as dead, stopped ones (SIGSTOP, a debugger) as alive, and a process
// with the pid but another start time as dead: the rank's pid was reused. Async-signal-safe.
bool process_alive(std::int64_t pid, std::int64_t started = 0);
ProcessState process_state(std::int64_t pid, std::int64_t started = 0);
// When the process `pid` started (clock ticks since boot, /proc/<pid>/stat's 22nd field); 0 if
// it is gone.
std::int64_t process_start_time(std::int64_t pid);

}  // namespace comm
