// How the shm backend behaves where a program may tune it. Read from the environment once,
// where the job starts (comm::Runtime::start), and handed down: the communicators keep it and
// give it to every backend they make (comm/backends/registry.hpp).
#pragma once
#include <cstdint>

namespace comm::shm {

struct Settings {
  // NANODIST_SHM_SPIN: how many times to poll the flags before the watchdog's wait, which
  // polls 16 times between yields. Measured (8-byte allreduce, docs/backends.md): on 2 ranks
  // 0.25 µs either way (a yield with nobody else to run returns at once); on 4 ranks on 2
  // cores 3.5 µs with 0 and 104 µs with 2000, the spinning rank holding the core its peer needs.
  std::uint64_t spin_polls = 0;
  static constexpr std::uint64_t kMaxSpinPolls = 10'000'000;  // these polls do not look at the deadline
  // NANODIST_SHM_SINGLE_COPY=0: single copy off (to measure copy-in, or test it).
  bool single_copy = true;
  // NANODIST_SHM_RANKS_PER_NODE=K: every K consecutive ranks a node (each group its own
  // segment, the network between them): the hierarchical collectives on one machine, to try
  // and to test them. 0: the real nodes (MPI_COMM_TYPE_SHARED).
  int ranks_per_node = 0;
};

}  // namespace comm::shm
