// Backend "shm": collectives through memory the ranks of a node share (comm/shm/), and, when a
// communicator spans nodes, a hierarchical allreduce (Horovod's):
//
//   node A: a0 a1        1. reduce-scatter inside each node over shared memory:
//   node B: b0 b1           local rank i holds shard i of its node's sum
//                        2. each local rank i allreduces shard i with local rank i of every
//                           other node (a ring over the network): shard i of the global sum
//                        3. allgather inside each node over shared memory
//
// Every local rank carries 1/L of the network traffic (L ranks per node), and a node sends
// 2(M−1)/M of the buffer for M nodes: the ring's optimum, whatever L is. Reduce-scatter and
// allgather (ZeRO's pair) go the same way — the two halves, each with a ring of its own kind
// between the nodes — after sorting the blocks by local rank. The other collectives of a
// communicator that spans nodes run the ring backend's algorithms over MPI, as do all of them
// when the nodes hold different numbers of its ranks.
//
// Each communicator gets its own segment when it is made (attach): split() sub-communicators
// (tp, pp, dp groups) too. The asynchronous forms complete when started (the Backend default).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/algorithms/algorithms.hpp"
#include "comm/host_split.hpp"
#include "comm/backends/registry.hpp"
#include "comm/mpi_comm.hpp"
#include "comm/error.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/shm/collectives.hpp"
#include "comm/watchdog/watchdog.hpp"

namespace comm {
namespace {

using algorithms::BlockLayout;

// A blocking MPI collective on ranks that are all here already (attach runs inside a watched
// collective whose ranks have all arrived), as Communicator's own MPI_Comm_split does.
int node_count_of(MPI_Comm group, MPI_Comm node, int* min_local, int* max_local) {
  int local = 0, leader = 0, rank = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_rank(node, &rank);
  leader = rank == 0 ? 1 : 0;
  int nodes = 0;
  check_mpi(MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, group), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&local, min_local, 1, MPI_INT, MPI_MIN, group), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&local, max_local, 1, MPI_INT, MPI_MAX, group), "MPI_Allreduce");
  return nodes;
}

class ShmBackend final : public Backend {
 public:
  // The factory's: unattached, each Communicator attaches its own (with the same settings).
  explicit ShmBackend(const shm::Settings& settings) : settings_(settings) {}
  std::string_view name() const override { return "shm"; }
  std::string describe() const override {
    if (!node_) return "shm (not yet attached to ranks)";
    if (group_size_ == 1) return "shm: one rank, nothing to move";
    if (!one_node() && !even_nodes_) return "shm: nodes of unequal sizes, so the ring's collectives";
    const char* moves = node_->single_copy()
                            ? "single copy (peers' buffers read and written in place: process_vm_readv/writev)"
                            : "copy-in (through each rank's staging areas)";
    if (one_node()) return fmt::format("shm: {} ranks on one node, {}", node_->size(), moves);
    if (node_->size() == 1) return fmt::format("shm: {} nodes of one rank, rings between them", across_size_);
    // This rank's node: the others have the same size (even_nodes_), each its own probe.
    return fmt::format("shm: {} nodes of {} ranks, hierarchical (rings between the nodes), {} inside this rank's node",
                       across_size_, node_->size(), moves);
  }
  bool per_communicator() const override { return true; }

  std::shared_ptr<Backend> attach(const Transport& t) override {
    auto attached = std::make_shared<ShmBackend>(settings_);
    attached->init(t);
    return attached;
  }

  void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    node_->begin_call(OpKind::allreduce, count, type, static_cast<int>(op), -1);
    if (one_node()) return shm::allreduce(*node_, send, recv, count, type, op);
    if (!even_nodes_) return ring_->allreduce(t, send, recv, count, type, op);
    // 1. node reduce-scatter (sums: the average is divided once, at the end), 2. shard
    // allreduce across nodes, 3. node allgather.
    const BlockLayout layout{count, node_->size()};
    const int local = node_->rank();
    void* shard = at(recv, layout.begin(local), type);
    const ReduceOp sum_or_op = op == ReduceOp::avg ? ReduceOp::sum : op;
    shm::reduce_scatter_blocks(*node_, send, shard, layout, type, sum_or_op);
    algorithms::ring_allreduce(Transport(across_.get(), across_rank_, across_size_), shard, shard, layout.size(local),
                               type, sum_or_op);
    finish_average(shard, layout.size(local), type, op, t.size());
    shm::allgather_blocks(*node_, recv, layout, type);
  }
  void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root) override {
    node_->begin_call(OpKind::reduce, count, type, static_cast<int>(op), root);
    if (one_node()) return shm::reduce(*node_, send, recv, count, type, op, root);
    ring_->reduce(t, send, recv, count, type, op, root);
  }
  void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) override {
    node_->begin_call(OpKind::broadcast, count, type, -1, root);
    if (one_node()) return shm::broadcast(*node_, data, count, type, root);
    ring_->broadcast(t, data, count, type, root);
  }
  void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    node_->begin_call(OpKind::allgather, count, type, -1, -1);
    if (one_node()) return shm::allgather(*node_, send, recv, count, type);
    if (!even_nodes_) return ring_->allgather(t, send, recv, count, type);
    // The reduce-scatter's steps backwards: between the nodes, then inside them, then unsorted.
    if (count == 0) return;
    const std::size_t bytes = count * size_of(type);
    const std::size_t per_local = bytes * static_cast<std::size_t>(across_size_);
    char* sorted = scratch(bytes * static_cast<std::size_t>(t.size()));
    algorithms::ring_allgather(across(), send, sorted + per_local * static_cast<std::size_t>(node_->rank()), count,
                               type);
    shm::allgather_blocks(*node_, sorted, BlockLayout{count * static_cast<std::size_t>(t.size()), node_->size()}, type);
    for_each_block([&](std::size_t place, int owner) {
      std::memcpy(at(recv, count * static_cast<std::size_t>(owner), type), sorted + place * bytes, bytes);
    });
  }
  void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    node_->begin_call(OpKind::gather, count, type, -1, root);
    if (one_node()) return shm::gather(*node_, send, recv, count, type, root);
    ring_->gather(t, send, recv, count, type, root);
  }
  void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) override {
    node_->begin_call(OpKind::scatter, count, type, -1, root);
    if (one_node()) return shm::scatter(*node_, send, recv, count, type, root);
    ring_->scatter(t, send, recv, count, type, root);
  }
  void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    node_->begin_call(OpKind::reduce_scatter, count, type, static_cast<int>(op), -1);
    if (one_node()) return shm::reduce_scatter(*node_, send, recv, count, type, op);
    if (!even_nodes_) return ring_->reduce_scatter(t, send, recv, count, type, op);
    // Blocks sorted by local rank: [blocks of local rank 0's ranks, in node order | local 1's | …],
    // so the node's reduce-scatter leaves local rank l the node's sum of exactly the blocks of
    // the ranks with local index l, which a reduce-scatter between them then finishes.
    if (count == 0) return;  // nothing moves (on every rank alike)
    const std::size_t bytes = count * size_of(type);
    char* sorted = scratch(2 * bytes * static_cast<std::size_t>(t.size()));
    char* shard = sorted + bytes * static_cast<std::size_t>(t.size());
    for_each_block([&](std::size_t place, int owner) {
      std::memcpy(sorted + place * bytes, at(send, count * static_cast<std::size_t>(owner), type), bytes);
    });
    const ReduceOp sum_or_op = op == ReduceOp::avg ? ReduceOp::sum : op;
    shm::reduce_scatter_blocks(*node_, sorted, shard,
                               BlockLayout{count * static_cast<std::size_t>(t.size()), node_->size()}, type, sum_or_op);
    algorithms::ring_reduce_scatter(across(), shard, recv, count, type, sum_or_op);
    finish_average(recv, count, type, op, t.size());
  }
  // On one node: shared memory (alltoallv only by single copy); otherwise, and across nodes, the
  // pairwise exchange over MPI (an all-to-all has no sum to build inside a node first).
  void alltoall(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) override {
    node_->begin_call(OpKind::alltoall, count, type, -1, -1);
    if (one_node()) return shm::alltoall(*node_, send, recv, count, type);
    algorithms::pairwise_alltoall(t, send, recv, count, type);
  }
  void alltoallv(const Transport& t, const void* send, Blocks send_blocks, void* recv, Blocks recv_blocks,
                 DataType type) override {
    node_->begin_call(OpKind::alltoallv, 0, type, -1, -1);
    if (one_node() && node_->single_copy()) return shm::alltoallv(*node_, send, send_blocks, recv, recv_blocks, type);
    algorithms::pairwise_alltoallv(t, send, send_blocks, recv, recv_blocks, type);
  }
  void barrier(const Transport& t) override {
    node_->begin_call(OpKind::barrier, 0, DataType::i32, -1, -1);
    if (one_node()) return node_->sync();
    ring_->barrier(t);
  }

 private:
  bool one_node() const { return node_ranks_ == group_size_; }
  Transport across() const { return Transport(across_.get(), across_rank_, across_size_); }

  // Calls f(place, owner) for every block of a buffer sorted by local rank: the block at
  // `place` belongs to communicator rank `owner` (place = local index × nodes + node index).
  template <class F>
  void for_each_block(F f) const {
    for (std::size_t place = 0; place < owner_by_place_.size(); ++place) f(place, owner_by_place_[place]);
  }
  // Work space kept between calls (fresh pages on every call would cost more than the copies).
  char* scratch(std::size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  void init(const Transport& t) {
    group_size_ = t.size();
    MPI_Comm node;
    node = split_by_host(t.mpi_comm(), t.rank());
    if (const int pretend = settings_.ranks_per_node; pretend > 0) {  // smaller "nodes" inside it
      int local = 0;
      MPI_Comm_rank(node, &local);
      MPI_Comm part;
      check_mpi(MPI_Comm_split(node, local / pretend, local, &part), "MPI_Comm_split");
      MPI_Comm_free(&node);
      node = part;
    }
    node_comm_ = MpiComm(node);
    int node_rank = 0;
    MPI_Comm_rank(node, &node_rank);
    MPI_Comm_size(node, &node_ranks_);
    // The blocking MPI calls first (every rank is here), the segment last: a rank that fails to
    // make it then leaves the others in a watched wait, never in an MPI call.
    if (!one_node()) find_the_other_nodes(t, node, node_rank);
    node_ = std::make_unique<shm::NodeGroup>(Transport(node, node_rank, node_ranks_), settings_);
  }

  void find_the_other_nodes(const Transport& t, MPI_Comm node, int node_rank) {
    int fewest = 0, most = 0;
    node_count_of(t.mpi_comm(), node, &fewest, &most);
    even_nodes_ = fewest == most;
    ring_ = make_ring_backend();
    // The ranks with our local index on every node, in the communicator's order.
    MPI_Comm across;
    check_mpi(MPI_Comm_split(t.mpi_comm(), node_rank, t.rank(), &across), "MPI_Comm_split");
    across_ = MpiComm(across);
    MPI_Comm_set_errhandler(across, MPI_ERRORS_RETURN);
    MPI_Comm_rank(across, &across_rank_);
    MPI_Comm_size(across, &across_size_);
    // Which communicator rank has local index l and node index m (its rank in `across`).
    const int place = node_rank * across_size_ + across_rank_;
    std::vector<int> places(static_cast<std::size_t>(group_size_));
    check_mpi(MPI_Allgather(&place, 1, MPI_INT, places.data(), 1, MPI_INT, t.mpi_comm()), "MPI_Allgather");
    owner_by_place_.assign(static_cast<std::size_t>(group_size_), -1);
    for (int r = 0; r < group_size_; ++r)
      if (even_nodes_) owner_by_place_.at(static_cast<std::size_t>(places[static_cast<std::size_t>(r)])) = r;
  }

  shm::Settings settings_;
  int group_size_ = 1;
  int node_ranks_ = 1;
  bool even_nodes_ = true;
  MpiComm node_comm_;
  std::unique_ptr<shm::NodeGroup> node_;
  MpiComm across_;
  int across_rank_ = 0;
  int across_size_ = 1;
  std::unique_ptr<Backend> ring_;
  std::vector<int> owner_by_place_;  // see for_each_block
  std::vector<char> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_shm_backend(const shm::Settings& settings) {
  return std::make_unique<ShmBackend>(settings);
}

}  // namespace comm
