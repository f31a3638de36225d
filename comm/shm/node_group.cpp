#include "comm/shm/node_group.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>

#include "comm/error.hpp"
#include "comm/watchdog/watchdog.hpp"
#include "numeric/hash.hpp"

namespace comm::shm {
namespace {

constexpr std::size_t kHeaderBytes = 128;

std::size_t segment_bytes(int ranks) {
  return kHeaderBytes + static_cast<std::size_t>(ranks) * (sizeof(Flags) + 2 * NodeGroup::kAreaBytes);
}

// An area holds one piece per rank of the node, of at least one 8-byte element.
int checked_ranks(int ranks) {
  if (static_cast<std::size_t>(ranks) * 8 > NodeGroup::kAreaBytes)
    fail("shm: {} ranks on one node, at most {}", ranks, NodeGroup::kAreaBytes / 8);
  return ranks;
}

// A word the peers read in the probe (its value says the read really happened), and one they
// write into (the allreduce writes its result into its peers' buffers).
constexpr std::uint64_t kProbeValue = 0x6e616e6f64697374ull;  // "nanodist"
const volatile std::uint64_t probe_word = kProbeValue;
volatile std::uint64_t probe_inbox = 0;

}  // namespace

NodeGroup::NodeGroup(const Transport& node, const Settings& settings)
    : segment_(std::make_unique<Segment>(node, segment_bytes(checked_ranks(node.size())))),
      rank_(node.rank()),
      size_(node.size()),
      spin_polls_(settings.spin_polls) {
  Flags& mine = flags(rank_);
  mine.pid.store(getpid(), std::memory_order_relaxed);
  single_copy_ = probe_single_copy(settings.single_copy);
}

Flags& NodeGroup::flags(int rank) const {
  return *reinterpret_cast<Flags*>(segment_->data() + kHeaderBytes + static_cast<std::size_t>(rank) * sizeof(Flags));
}

char* NodeGroup::area(int rank, int which) const {
  return segment_->data() + kHeaderBytes + static_cast<std::size_t>(size_) * sizeof(Flags) +
         (static_cast<std::size_t>(rank) * 2 + static_cast<std::size_t>(which)) * kAreaBytes;
}

void NodeGroup::sync() {
  ++epoch_;
  flags(rank_).epoch.store(epoch_, std::memory_order_release);
  auto everyone_here = [this] {
    for (int r = 0; r < size_; ++r)
      if (flags(r).epoch.load(std::memory_order_acquire) < epoch_) return false;
    return true;
  };
  bool here = false;
  for (std::uint64_t poll = 0; poll < spin_polls_ && !here; ++poll) {
    here = everyone_here();
#if defined(__x86_64__)
    __builtin_ia32_pause();  // tells the core it is a spin: the sibling hyperthread gets the cycles
#endif
  }
  if (!here) watchdog().wait_until(everyone_here);
  if (call_unverified_) verify_same_call();
}

void NodeGroup::begin_call(OpKind kind, std::size_t count, DataType type, int op, int root) {
  const std::uint64_t signature = numeric::hash_values(
      {static_cast<std::uint64_t>(kind), static_cast<std::uint64_t>(count), static_cast<std::uint64_t>(type),
       static_cast<std::uint64_t>(op + 1), static_cast<std::uint64_t>(root + 1)});
  ++calls_;
  // A seqlock: the number is 0 while the signature changes. A peer two calls behind (after a
  // call with no sync: count 0) may be reading this slot right now, and must not pair the old
  // number with the new signature (Boehm's seqlock orderings: plain moves on x86).
  Flags& mine = flags(rank_);
  mine.call_number[calls_ % 2].store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  mine.call_signature[calls_ % 2].store(signature, std::memory_order_relaxed);
  mine.call_number[calls_ % 2].store(calls_, std::memory_order_release);
  call_unverified_ = true;
}

// After the first sync of a call: every peer that is at this call (not already one further)
// must be in the same one. If not, the watchdog's report now names the ranks and their calls.
void NodeGroup::verify_same_call() {
  call_unverified_ = false;
  const int slot = static_cast<int>(calls_ % 2);
  const std::uint64_t mine = flags(rank_).call_signature[slot].load(std::memory_order_relaxed);
  for (int r = 0; r < size_; ++r) {
    const Flags& theirs = flags(r);
    const std::uint64_t before = theirs.call_number[slot].load(std::memory_order_acquire);
    const std::uint64_t signature = theirs.call_signature[slot].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t after = theirs.call_number[slot].load(std::memory_order_relaxed);
    const bool at_this_call = before == calls_ && after == calls_;  // else it has moved on: no verdict
    // A peer in this very call with another signature: its kind or its arguments differ. No
    // use waiting for the deadline (and no data has moved yet): the report now.
    if (at_this_call && signature != mine) watchdog().give_up("found a rank in this collective with other arguments");
  }
}

void NodeGroup::publish(const void* source, const void* result) {
  Flags& mine = flags(rank_);
  mine.source.store(reinterpret_cast<std::uint64_t>(source), std::memory_order_relaxed);
  mine.result.store(reinterpret_cast<std::uint64_t>(result), std::memory_order_relaxed);
  // (the sync after it orders these stores before any peer's loads)
}

void NodeGroup::read(int peer, std::uint64_t address, void* into, std::size_t bytes) const {
  move_in_place(peer, address, into, bytes, Direction::from_peer);
}

void NodeGroup::write(int peer, std::uint64_t address, const void* from, std::size_t bytes) const {
  move_in_place(peer, address, const_cast<void*>(from), bytes, Direction::to_peer);
}

void NodeGroup::move_in_place(int peer, std::uint64_t address, void* local_bytes, std::size_t bytes,
                              Direction direction) const {
  const auto pid = static_cast<pid_t>(flags(peer).pid.load(std::memory_order_relaxed));
  const char* verb = direction == Direction::from_peer ? "reading" : "writing";
  auto* local_at = static_cast<char*>(local_bytes);
  while (bytes > 0) {
    iovec local{local_at, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    const ssize_t moved = direction == Direction::from_peer ? process_vm_readv(pid, &local, 1, &remote, 1, 0)
                                                            : process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (moved < 0 && errno == ESRCH) {
      // The peer's memory is gone: it is exiting. Once /proc says so too (it can lag the
      // call by a moment), the report names it as dead — now, not at the deadline.
      watchdog().wait_until([pid] { return !process_alive(pid); });
      watchdog().give_up("found a peer's process gone");
    }
    if (moved < 0 || moved == 0) {
      const int error = errno;
      const std::string what = fmt::format(
          "shm: {} {} bytes {} rank {} (pid {}) at {:#x} failed: {}{}", verb, bytes,
          direction == Direction::from_peer ? "of" : "into", peer, pid, address,
          moved == 0 ? "nothing moved" : std::strerror(error),
          error == EFAULT ? " (the peer's buffer is not mapped, or not writable, there)"
          : error == EPERM ? " (no ptrace permission over the peer: NANODIST_SHM_SINGLE_COPY=0 avoids in-place moves)"
                           : "");
      // A failed write leaves the peers still writing into our buffers: the job cannot go on
      // (a caller that caught an error here could free memory they write into).
      if (direction == Direction::to_peer) {
        std::fprintf(stderr, "%s\n", what.c_str());
        watchdog().give_up("could not write into a peer's buffer");
      }
      throw Error(what);
    }
    local_at += moved;
    address += static_cast<std::uint64_t>(moved);
    bytes -= static_cast<std::size_t>(moved);
  }
}

// Can this rank read and write every peer in place? Yama (ptrace_scope 1) allows a process to ptrace only
// its descendants unless it names a tracer: PR_SET_PTRACER_ANY lets the job's other ranks in
// (what Open MPI does for the same reads). Containers may forbid process_vm_readv altogether.
bool NodeGroup::probe_single_copy(bool allowed) {
  if (size_ == 1) return allowed;
#ifdef PR_SET_PTRACER
  if (allowed) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // only when the reads are wanted
#endif
  Flags& mine = flags(rank_);
  mine.probe.store(reinterpret_cast<std::uint64_t>(&probe_word), std::memory_order_relaxed);
  mine.probe_inbox.store(reinterpret_cast<std::uint64_t>(&probe_inbox), std::memory_order_relaxed);
  sync();
  bool all_read = allowed;
  for (int peer = 0; peer < size_ && all_read; ++peer) {
    if (peer == rank_) continue;
    std::uint64_t value = 0;
    iovec local{&value, sizeof value};
    iovec remote{reinterpret_cast<void*>(flags(peer).probe.load(std::memory_order_relaxed)), sizeof value};
    const auto pid = static_cast<pid_t>(flags(peer).pid.load(std::memory_order_relaxed));
    all_read =
        process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof value) && value == kProbeValue;
    iovec inbox{reinterpret_cast<void*>(flags(peer).probe_inbox.load(std::memory_order_relaxed)), sizeof value};
    all_read = all_read && process_vm_writev(pid, &local, 1, &inbox, 1, 0) == static_cast<ssize_t>(sizeof value);
  }
  mine.can_read.store(all_read ? 1 : 0, std::memory_order_relaxed);
  sync();
  for (int r = 0; r < size_; ++r)
    if (flags(r).can_read.load(std::memory_order_relaxed) == 0) return false;
  return true;
}

}  // namespace comm::shm
