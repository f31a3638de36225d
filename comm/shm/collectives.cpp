#include "comm/shm/collectives.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/reduce_kernels.hpp"

namespace comm::shm {
namespace {

using algorithms::BlockLayout;

// memcpy that allows nothing to copy (null buffers of empty spans) and a copy onto itself.
void copy_bytes(void* to, const void* from, std::size_t bytes) {
  if (bytes > 0 && to != from) std::memmove(to, from, bytes);
}

// Elements of `type` that fit an area cut into `pieces` equal pieces.
std::size_t per_area(DataType type, int pieces) {
  return NodeGroup::kAreaBytes / (size_of(type) * static_cast<std::size_t>(pieces));
}
// Elements of block `b` from element `offset` on, at most `most`.
std::size_t piece(BlockLayout layout, int b, std::size_t offset, std::size_t most) {
  const std::size_t size = layout.size(b);
  return size > offset ? std::min(most, size - offset) : 0;
}
std::size_t longest_block(BlockLayout layout) {
  std::size_t longest = 0;
  for (int b = 0; b < layout.blocks; ++b) longest = std::max(longest, layout.size(b));
  return longest;
}
// Single copy pays (a syscall per chunk, two or three syncs) only past `from` bytes: by default
// past what one area holds in one shot.
bool use_single_copy(const NodeGroup& g, std::size_t bytes, std::size_t from = NodeGroup::kAreaBytes) {
  return g.single_copy() && bytes > from;
}
// Gather and scatter have no reduction to do in cache: past 64 KiB, reading in place wins
// (measured: 256 KiB scatter on 2 ranks 2.2 GB/s by rounds, see docs/benchmarks.md).
constexpr std::size_t kCopyOnlyFrom = 64 << 10;
// The allreduce and the allgather in place past 48 KiB (2 ranks, docs/benchmarks.md): allreduce
// of 64 KB 10–14 µs against 14.5 µs in one shot, of 1 MB 122–133 µs against 160–180 µs (level
// at 32 KB); allgather of 1 MB 53–97 µs against 310–340 µs. (The reduce-scatter measured no
// better in place below an area: it keeps NodeGroup::kAreaBytes.)
constexpr std::size_t kInPlaceFrom = 48 << 10;

// The all-to-all past 8 KiB (2 ranks, comm_bench --op alltoall, 2026-11-28): 16 KB 4.9 µs in
// place against 7.4 by the areas, 4 KB 4.8 against 1.6 (two syncs and a read per peer cost more
// than copying so little twice).
constexpr std::size_t kAlltoallInPlaceFrom = 8 << 10;

// The single-copy reduction works in chunks that stay in cache: a peer's chunk is read into
// `theirs` and reduced into our result, which accumulates in place.
constexpr std::size_t kChunkBytes = 256 << 10;

// Block rank() of the reduction of every rank's published source → `mine` (no syncs), chunk by
// chunk: the next peer's chunk is read into cache and added to our own part in one pass, then
// the others' in turn. Each block has one reducer, so every rank ends with the same bits.
// With `push_result`, each finished chunk is averaged (avg) and written, while still in cache,
// into every peer's published result too: the allreduce's allgather without reading it back.
void reduce_block_in_place(NodeGroup& g, const void* send, void* mine, BlockLayout layout, DataType type, ReduceOp op,
                           bool push_result = false) {
  thread_local std::vector<char> theirs(kChunkBytes);
  const std::size_t es = size_of(type), chunk = kChunkBytes / es;
  const int me = g.rank();
  const std::size_t begin = layout.begin(me), size = layout.size(me);
  for (std::size_t offset = 0; offset < size; offset += chunk) {
    const std::size_t n = std::min(chunk, size - offset), bytes = n * es;
    const std::size_t first_byte = (begin + offset) * es;
    char* sum = at(mine, offset, type);
    for (int step = 1; step < g.size(); ++step) {
      const int r = (me + step) % g.size();
      g.read(r, g.source_of(r) + first_byte, theirs.data(), bytes);
      if (step == 1)
        reduce_pair(sum, at(send, begin + offset, type), theirs.data(), n, type, op);
      else
        reduce_into(sum, theirs.data(), n, type, op);
    }
    if (!push_result) continue;
    finish_average(sum, n, type, op, g.size());
    for (int step = 1; step < g.size(); ++step) {
      const int r = (me + step) % g.size();
      g.write(r, g.result_of(r) + first_byte, sum, bytes);
    }
  }
}

// Block r of rank r's published result → block r of `buffer`, for every other rank r (no syncs).
void gather_blocks_in_place(NodeGroup& g, void* buffer, BlockLayout layout, DataType type) {
  for (int step = 1; step < g.size(); ++step) {
    const int r = (g.rank() + step) % g.size();  // each rank starts at a different peer
    const std::size_t first = layout.begin(r);
    g.read(r, g.result_of(r) + first * size_of(type), at(buffer, first, type), layout.size(r) * size_of(type));
  }
}

// One shot: every rank's `count` elements into its area, one sync, then the reduction of all
// areas in rank order into `recv` (on every rank, or only on `root` ≥ 0).
void reduce_one_shot(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                     int root) {
  const int area = g.next_area();
  const std::size_t bytes = count * size_of(type);
  copy_bytes(g.area(g.rank(), area), send, bytes);
  g.sync();
  if (root >= 0 && g.rank() != root) return;
  copy_bytes(recv, g.area(0, area), bytes);
  for (int r = 1; r < g.size(); ++r) reduce_into(recv, g.area(r, area), count, type, op);
  finish_average(recv, count, type, op, g.size());
}

// reduce and the copy-in allreduce: one shot per area-sized round.
void reduce_in_rounds(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                      int root) {
  const std::size_t round = per_area(type, 1);
  for (std::size_t offset = 0; offset < count; offset += round) {
    const std::size_t n = std::min(round, count - offset);
    reduce_one_shot(g, at(send, offset, type), recv ? at(recv, offset, type) : nullptr, n, type, op, root);
  }
}

}  // namespace

void reduce_scatter_blocks(NodeGroup& g, const void* send, void* mine, BlockLayout layout, DataType type, ReduceOp op) {
  const int me = g.rank();
  if (g.size() == 1) {
    copy_bytes(mine, at(send, layout.begin(0), type), layout.size(0) * size_of(type));
    return;
  }
  if (use_single_copy(g, layout.count * size_of(type))) {
    g.publish(send, nullptr);
    g.sync();
    reduce_block_in_place(g, send, mine, layout, type, op);
    g.sync();  // the peers have read our send
    return;
  }
  // Copy-in: each round, every rank stages a piece of every block; rank r reduces piece r.
  const std::size_t round = per_area(type, g.size());
  const std::size_t es = size_of(type);
  for (std::size_t offset = 0; offset < longest_block(layout); offset += round) {
    const int area = g.next_area();
    char* staged = g.area(me, area);
    for (int b = 0; b < layout.blocks; ++b)
      copy_bytes(staged + static_cast<std::size_t>(b) * round * es, at(send, layout.begin(b) + offset, type),
                 piece(layout, b, offset, round) * es);
    g.sync();
    const std::size_t n = piece(layout, me, offset, round);
    char* out = at(mine, offset, type);
    const std::size_t where = static_cast<std::size_t>(me) * round * es;
    copy_bytes(out, g.area(0, area) + where, n * es);
    for (int r = 1; r < g.size(); ++r) reduce_into(out, g.area(r, area) + where, n, type, op);
  }
}

void allgather_blocks(NodeGroup& g, void* buffer, BlockLayout layout, DataType type) {
  if (g.size() == 1) return;
  const int me = g.rank();
  if (use_single_copy(g, layout.count * size_of(type), kInPlaceFrom)) {
    g.publish(nullptr, buffer);
    g.sync();
    gather_blocks_in_place(g, buffer, layout, type);
    g.sync();  // the peers have read our block
    return;
  }
  const std::size_t round = per_area(type, 1), es = size_of(type);
  for (std::size_t offset = 0; offset < longest_block(layout); offset += round) {
    const int area = g.next_area();
    copy_bytes(g.area(me, area), at(buffer, layout.begin(me) + offset, type), piece(layout, me, offset, round) * es);
    g.sync();
    for (int r = 0; r < g.size(); ++r)
      if (r != me)
        copy_bytes(at(buffer, layout.begin(r) + offset, type), g.area(r, area), piece(layout, r, offset, round) * es);
  }
}

void allreduce(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  if (g.size() == 1) {
    copy_bytes(recv, send, bytes);
    return;
  }
  if (!use_single_copy(g, bytes, kInPlaceFrom)) return reduce_in_rounds(g, send, recv, count, type, op, -1);
  // Single copy: rank r reduces block r and writes each finished chunk into every rank's
  // result, so the allgather moves it from cache (two syncs).
  const BlockLayout layout{count, g.size()};
  g.publish(send, recv);
  g.sync();
  reduce_block_in_place(g, send, at(recv, layout.begin(g.rank()), type), layout, type, op, true);
  g.sync();  // every block is in every rank's result, and nobody reads our send any more
}

void reduce(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root) {
  if (g.size() == 1) {
    copy_bytes(recv, send, count * size_of(type));
    return;
  }
  const std::size_t es = size_of(type);
  if (!use_single_copy(g, count * es)) return reduce_in_rounds(g, send, recv, count, type, op, root);
  // Single copy: the allreduce's reduce-scatter (each rank reduces its block, the root's straight
  // into its recv), then the root reads every other rank's block in place.
  const BlockLayout layout{count, g.size()};
  const int me = g.rank();
  thread_local std::vector<char> block;
  void* mine = nullptr;  // (recv is only the root's: elsewhere it may be null)
  if (me == root) {
    mine = at(recv, layout.begin(me), type);
  } else {
    block.resize(layout.size(me) * es);
    mine = block.data();
  }
  g.publish(send, mine);
  g.sync();
  reduce_block_in_place(g, send, mine, layout, type, op);
  finish_average(mine, layout.size(me), type, op, g.size());
  g.sync();
  if (me == root)
    for (int r = 0; r < g.size(); ++r)
      if (r != root) g.read(r, g.result_of(r), at(recv, layout.begin(r), type), layout.size(r) * es);
  g.sync();  // the root has read our block
}

void broadcast(NodeGroup& g, void* data, std::size_t count, DataType type, int root) {
  if (g.size() == 1) return;
  const std::size_t es = size_of(type);
  if (use_single_copy(g, count * es)) {
    g.publish(data, nullptr);
    g.sync();
    if (g.rank() != root) g.read(root, g.source_of(root), data, count * es);
    g.sync();
    return;
  }
  const std::size_t round = per_area(type, 1);
  for (std::size_t offset = 0; offset < count; offset += round) {
    const int area = g.next_area();
    const std::size_t n = std::min(round, count - offset);
    if (g.rank() == root) copy_bytes(g.area(root, area), at(data, offset, type), n * es);
    g.sync();
    if (g.rank() != root) copy_bytes(at(data, offset, type), g.area(root, area), n * es);
  }
}

void allgather(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t bytes = count * size_of(type);
  void* mine = at(recv, count * static_cast<std::size_t>(g.rank()), type);
  copy_bytes(mine, send, bytes);  // then it is an allgather in place
  allgather_blocks(g, recv, BlockLayout{count * static_cast<std::size_t>(g.size()), g.size()}, type);
}

void gather(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t round = per_area(type, 1), es = size_of(type);
  if (g.size() == 1) {
    copy_bytes(recv, send, count * es);
    return;
  }
  if (use_single_copy(g, count * es * static_cast<std::size_t>(g.size()), kCopyOnlyFrom)) {  // the root reads
    g.publish(send, nullptr);
    g.sync();
    if (g.rank() == root)
      for (int r = 0; r < g.size(); ++r) {
        char* block = at(recv, count * static_cast<std::size_t>(r), type);
        if (r == root)
          copy_bytes(block, send, count * es);
        else
          g.read(r, g.source_of(r), block, count * es);
      }
    g.sync();
    return;
  }
  for (std::size_t offset = 0; offset < count; offset += round) {
    const int area = g.next_area();
    const std::size_t n = std::min(round, count - offset);
    copy_bytes(g.area(g.rank(), area), at(send, offset, type), n * es);
    g.sync();
    if (g.rank() == root)
      for (int r = 0; r < g.size(); ++r)
        copy_bytes(at(recv, count * static_cast<std::size_t>(r) + offset, type), g.area(r, area), n * es);
  }
}

void scatter(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t round = per_area(type, g.size()), es = size_of(type);
  if (g.size() == 1) {
    copy_bytes(recv, send, count * es);
    return;
  }
  if (use_single_copy(g, count * es * static_cast<std::size_t>(g.size()), kCopyOnlyFrom)) {  // each reads its block
    g.publish(send, nullptr);
    g.sync();
    const std::size_t mine = count * static_cast<std::size_t>(g.rank());
    if (g.rank() == root)
      copy_bytes(recv, at(send, mine, type), count * es);
    else
      g.read(root, g.source_of(root) + mine * es, recv, count * es);
    g.sync();
    return;
  }
  for (std::size_t offset = 0; offset < count; offset += round) {
    const int area = g.next_area();
    const std::size_t n = std::min(round, count - offset);
    if (g.rank() == root)
      for (int r = 0; r < g.size(); ++r)
        copy_bytes(g.area(root, area) + static_cast<std::size_t>(r) * round * es,
                   at(send, count * static_cast<std::size_t>(r) + offset, type), n * es);
    g.sync();
    copy_bytes(at(recv, offset, type), g.area(root, area) + static_cast<std::size_t>(g.rank()) * round * es, n * es);
  }
}

void reduce_scatter(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  reduce_scatter_blocks(g, send, recv, BlockLayout{count * static_cast<std::size_t>(g.size()), g.size()}, type, op);
  finish_average(recv, count, type, op, g.size());
}

// Single copy: every rank publishes its send buffer and where its blocks start (its
// displacements), and reads its own block from every peer straight into its recv — rank r
// starting at peer r+1, so the ranks do not all read rank 0 first. A block whose place the
// reader does not know (alltoallv) costs one more read of 8 bytes: the peer's displacement.
//
//   publish ─ sync ─ for each peer p: read p's displs[me], then p's block for me ─ sync (nobody
//   reads our send any more)
void alltoallv(NodeGroup& g, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks, DataType type) {
  const int me = g.rank();
  const std::size_t es = size_of(type), mine = static_cast<std::size_t>(me);
  copy_bytes(at(recv, recv_blocks.displs[mine], type), at(send, send_blocks.displs[mine], type),
             send_blocks.counts[mine] * es);
  if (g.size() == 1) return;
  g.publish(send, send_blocks.displs.data());  // (the "result" slot carries the displacements' address)
  g.sync();
  for (int step = 1; step < g.size(); ++step) {
    const int r = (me + step) % g.size();
    const auto from = static_cast<std::size_t>(r);
    if (recv_blocks.counts[from] == 0) continue;
    std::size_t displ = 0;
    g.read(r, g.result_of(r) + mine * sizeof(std::size_t), &displ, sizeof displ);
    g.read(r, g.source_of(r) + displ * es, at(recv, recv_blocks.displs[from], type), recv_blocks.counts[from] * es);
  }
  g.sync();
}

// Equal blocks of `count`: small ones in one shot through the areas — each rank copies all its
// blocks into its area, one sync, each reads block me of every area (a round of at most an area:
// longer blocks go in rounds, a piece of every block per round) — larger ones by single copy.
void alltoall(NodeGroup& g, const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t n = static_cast<std::size_t>(g.size()), es = size_of(type);
  if (use_single_copy(g, count * n * es, kAlltoallInPlaceFrom)) {
    std::vector<std::size_t> counts(n, count), displs(n);
    for (std::size_t r = 0; r < n; ++r) displs[r] = r * count;
    const Blocks blocks{counts, displs};
    return alltoallv(g, send, blocks, recv, blocks, type);
  }
  const std::size_t round = per_area(type, g.size()), me = static_cast<std::size_t>(g.rank());
  for (std::size_t offset = 0; offset < count; offset += round) {
    const std::size_t piece_count = std::min(round, count - offset), bytes = piece_count * es;
    const int area = g.next_area();
    char* out = g.area(g.rank(), area);
    for (std::size_t r = 0; r < n; ++r) copy_bytes(out + r * bytes, at(send, r * count + offset, type), bytes);
    g.sync();
    for (std::size_t r = 0; r < n; ++r)
      copy_bytes(at(recv, r * count + offset, type), g.area(static_cast<int>(r), area) + me * bytes, bytes);
  }
}

}  // namespace comm::shm
