#include "parallel/cp/context_shard.hpp"

#include "comm/error.hpp"

namespace parallel {

ContextShard ContextShard::of(int64_t T, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks) comm::fail("context parallelism: rank {} of {}", rank, ranks);
  if (T % (2 * ranks) != 0)
    comm::fail("context parallelism: the sequence length {} does not split into 2·cp = {} equal chunks", T,
               2 * ranks);
  return {T, ranks, rank};
}

std::vector<int64_t> ContextShard::positions() const {
  std::vector<int64_t> all(static_cast<std::size_t>(length()));
  for (int64_t s = 0; s < length(); ++s) all[static_cast<std::size_t>(s)] = position(s);
  return all;
}

}  // namespace parallel
