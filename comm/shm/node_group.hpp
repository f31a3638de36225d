// The ranks of one communicator that share a node, and what they share: one Segment holding
//
//   [ Header | a Flags line per rank | two staging areas per rank ]
//
// Ranks meet at sync points through flags, never locks: each rank counts the sync points it
// has reached in its own `epoch` (a release store) and waits until every peer's count has
// caught up (acquire loads), so whatever a rank wrote before a sync point is visible to all
// after it. Every collective makes the same sync points on every rank, so the counts agree.
//
// Two ways to move data between ranks:
//  - copy-in: a rank copies its part into its own staging area, syncs, and the others read it
//    there. Areas alternate by round (`next_area`), so a round's writes never meet the reads of
//    the round before: a sync separates every round from the one after.
//  - single copy (`single_copy()`): a rank publishes the addresses of its own buffers, and the
//    others read them in place with process_vm_readv (Linux cross-memory attach, as Open MPI's
//    shared-memory transport does), one copy from a peer's buffer to our own, or write into them
//    with process_vm_writev. It needs ptrace permission over the peer; a probe at start decides,
//    and every rank uses copy-in if one cannot.
//
// Waiting is the watchdog's wait on the flags: it polls them, and after 16 polls yields the core
// between polls (the rank being waited for may need it: 4 ranks on 2 cores), watching the
// deadline. NANODIST_SHM_SPIN=N polls N times more before it (pure spinning; measured worse).
//
// Every collective says what it is (begin_call) before its first sync and compares with its
// peers after it: ranks that called different collectives, or the same with other counts,
// would otherwise meet at the same sync points and read each other's unrelated bytes. Instead
// they wait, and the watchdog's report says who called what.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/shm/segment.hpp"
#include "comm/shm/settings.hpp"
#include "comm/transport.hpp"
#include "comm/types.hpp"

namespace comm::shm {

// One rank's line in the segment: what it says to the others.
struct alignas(128) Flags {
  alignas(64) std::atomic<std::uint64_t> epoch;   // sync points reached; alone on its cache line (polled)
  alignas(64) std::atomic<std::uint64_t> source;  // published addresses (single copy), for the op in progress
  std::atomic<std::uint64_t> result;              //
  std::atomic<std::int64_t> pid;                  // for process_vm_readv
  std::atomic<std::int64_t> can_read;             // the probe: 1 = this rank read and wrote every peer in place
  std::atomic<std::uint64_t> probe;               // address of a word the others try to read
  std::atomic<std::uint64_t> probe_inbox;         // and of one they try to write
  // The call in progress and the one before (by call number's parity: a peer can be one call
  // ahead): what it is, so that ranks in different collectives find out at their first sync.
  std::atomic<std::uint64_t> call_number[2];
  std::atomic<std::uint64_t> call_signature[2];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::int64_t>::is_always_lock_free,
              "the flags are shared between processes: their atomics must not hide a lock");

class NodeGroup {
 public:
  // Collective over `node` (all on one machine), inside the watchdog's scope.
  NodeGroup(const Transport& node, const Settings& settings);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Every rank reaches this point (see above); watched.
  void sync();
  // What the collective starting now is (its kind, count, type, op and root).
  void begin_call(OpKind kind, std::size_t count, DataType type, int op, int root);

  // Staging (copy-in): this round's area of `rank` (kAreaBytes), alternating by call.
  static constexpr std::size_t kAreaBytes = 1 << 20;
  int next_area() { return static_cast<int>(rounds_++ % 2); }
  char* area(int rank, int which) const;

  // Single copy: whether every rank can read and write every other in place.
  bool single_copy() const { return single_copy_; }
  // Publishes this rank's buffers for the op in progress (then sync before anyone reads).
  void publish(const void* source, const void* result);
  std::uint64_t source_of(int rank) const { return flags(rank).source.load(std::memory_order_relaxed); }
  std::uint64_t result_of(int rank) const { return flags(rank).result.load(std::memory_order_relaxed); }
  // Copies `bytes` at `address` in rank `peer`'s memory into `into` (process_vm_readv), or
  // `bytes` from `from` to `address` in the peer's memory (process_vm_writev).
  // A peer that is gone is waited for under the watchdog, which names it.
  void read(int peer, std::uint64_t address, void* into, std::size_t bytes) const;
  void write(int peer, std::uint64_t address, const void* from, std::size_t bytes) const;

 private:
  enum class Direction { from_peer, to_peer };
  void move_in_place(int peer, std::uint64_t address, void* local_bytes, std::size_t bytes, Direction direction) const;
  Flags& flags(int rank) const;
  bool probe_single_copy(bool allowed);  // allowed: Settings::single_copy
  void verify_same_call();

  std::unique_ptr<Segment> segment_;
  int rank_ = 0;
  int size_ = 1;
  std::uint64_t epoch_ = 0;
  std::uint64_t rounds_ = 0;
  bool single_copy_ = false;
  std::uint64_t spin_polls_ = 0;  // polls before the watched, yielding wait (NANODIST_SHM_SPIN)
  std::uint64_t calls_ = 0;       // collectives begun
  bool call_unverified_ = false;  // the next sync compares the calls
};

}  // namespace comm::shm
