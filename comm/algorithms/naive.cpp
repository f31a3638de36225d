// Naive collectives: everything goes through rank 0 — collect, combine, send back.
//
//        r1   r2   r3                      r1   r2   r3
//          \   |   /      rank 0 combines     ^    ^    ^
//           v  v  v       everything           \   |   /
//             r0         ------------->         r0
//
// The starting point a student writes first, and the baseline the other backends are
// measured against: correct for every collective, but rank 0 sends and receives (n-1) ×
// the data, so its link and its CPU are the bottleneck and time grows linearly with n.
// Reductions combine in rank order (x0 op x1 op x2 ...), the simplest order to reason about.
#include <cstring>
#include <vector>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce_kernels.hpp"

namespace comm::algorithms::naive {
namespace {

constexpr int kHub = 0;

// Rank 0 returns every rank's `count` elements in rank order; the others send theirs and get {}.
std::vector<char> collect(const Transport& t, const void* send, std::size_t count, DataType type) {
  const std::size_t bytes = count * size_of(type);
  if (t.rank() != kHub) {
    t.send(send, count, type, kHub);
    return {};
  }
  std::vector<char> all(bytes * static_cast<std::size_t>(t.size()) + 1);
  std::vector<MPI_Request> receives;
  for (int r = 1; r < t.size(); ++r) receives.push_back(t.irecv(all.data() + bytes * r, count, type, r));
  copy_elements(all.data(), send, count, type);
  t.wait_all(receives);
  return all;
}

// On rank 0: folds the n collected blocks of `count` elements into the first one.
void combine(std::vector<char>& all, int n, std::size_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  for (int r = 1; r < n; ++r) reduce_into(all.data(), all.data() + bytes * r, count, type, op);
  finish_average(all.data(), count, type, op, n);
}

// Rank 0 sends `data` to every other rank, which receives it into `data`.
void send_to_all(const Transport& t, void* data, std::size_t count, DataType type) {
  if (t.rank() != kHub) {
    t.recv(data, count, type, kHub);
    return;
  }
  std::vector<MPI_Request> sends;
  for (int r = 1; r < t.size(); ++r) sends.push_back(t.isend(data, count, type, r));
  t.wait_all(sends);
}

}  // namespace

void reduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root) {
  auto all = collect(t, send, count, type);
  if (t.rank() == kHub) {
    combine(all, t.size(), count, type, op);
    if (root == kHub)
      copy_elements(recv, all.data(), count, type);
    else
      t.send(all.data(), count, type, root);
  } else if (t.rank() == root) {
    t.recv(recv, count, type, kHub);
  }
}

void allreduce(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  auto all = collect(t, send, count, type);
  if (t.rank() == kHub) {
    combine(all, t.size(), count, type, op);
    copy_elements(recv, all.data(), count, type);
  }
  send_to_all(t, recv, count, type);
}

void broadcast(const Transport& t, void* data, std::size_t count, DataType type, int root) {
  if (root != kHub) {  // the data first travels to the hub
    if (t.rank() == root) t.send(data, count, type, kHub);
    if (t.rank() == kHub) t.recv(data, count, type, root);
  }
  send_to_all(t, data, count, type);
}

void allgather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t total = count * static_cast<std::size_t>(t.size());
  auto all = collect(t, send, count, type);
  if (t.rank() == kHub) copy_elements(recv, all.data(), total, type);
  send_to_all(t, recv, total, type);
}

void gather(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t total = count * static_cast<std::size_t>(t.size());
  auto all = collect(t, send, count, type);
  if (t.rank() == kHub) {
    if (root == kHub)
      copy_elements(recv, all.data(), total, type);
    else
      t.send(all.data(), total, type, root);
  } else if (t.rank() == root) {
    t.recv(recv, total, type, kHub);
  }
}

void scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t total = count * static_cast<std::size_t>(t.size());
  std::vector<char> all;
  if (t.rank() == kHub) {
    all.resize(total * size_of(type) + 1);
    if (root == kHub)
      copy_elements(all.data(), send, total, type);
    else
      t.recv(all.data(), total, type, root);
  } else if (t.rank() == root) {
    t.send(send, total, type, kHub);
  }
  if (t.rank() != kHub) {
    t.recv(recv, count, type, kHub);
    return;
  }
  std::vector<MPI_Request> sends;
  for (int r = 1; r < t.size(); ++r) sends.push_back(t.isend(at(all.data(), count * r, type), count, type, r));
  copy_elements(recv, all.data(), count, type);
  t.wait_all(sends);
}

void reduce_scatter(const Transport& t, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const std::size_t total = count * static_cast<std::size_t>(t.size());
  auto all = collect(t, send, total, type);
  if (t.rank() != kHub) {
    t.recv(recv, count, type, kHub);
    return;
  }
  combine(all, t.size(), total, type, op);
  std::vector<MPI_Request> sends;
  for (int r = 1; r < t.size(); ++r) sends.push_back(t.isend(at(all.data(), count * r, type), count, type, r));
  copy_elements(recv, all.data(), count, type);
  t.wait_all(sends);
}

void barrier(const Transport& t) {
  int token = 0;
  auto all = collect(t, &token, 0, DataType::i32);
  send_to_all(t, &token, 0, DataType::i32);
}

}  // namespace comm::algorithms::naive
