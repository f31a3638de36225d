// The harness every collective benchmark shares, after nccl-tests: message sizes, buffer
// shapes, bus-bandwidth factors, input data and the check of results (#wrong).
//
// Sizes are in bytes, as nccl-tests prints them: for allreduce, reduce, broadcast and
// sendrecv, the buffer of one rank; for allgather, gather, scatter and reduce_scatter,
// the whole (n-block) buffer. Element counts follow from the size and the type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/types.hpp"

namespace bench {

// "8", "1K", "256M", "1G" (binary multiples, as nccl-tests) → bytes. Throws comm::Error.
std::size_t parse_size(std::string_view text);
// 1536 → "1.5K", 268435456 → "256M"
std::string format_size(std::size_t bytes);
// begin, begin·factor, ... up to end (inclusive).
std::vector<std::size_t> size_sweep(std::size_t begin, std::size_t end, double factor);

// The benchmarked operations, in the order nccl-tests lists them.
const std::vector<std::string>& operation_names();
bool uses_reduce_op(std::string_view operation);
bool uses_root(std::string_view operation);
bool has_in_place_form(std::string_view operation);      // allreduce, reduce, allgather, broadcast
bool has_out_of_place_form(std::string_view operation);  // all but broadcast (comm's is in place)

// busbw = algbw × factor: the bandwidth each link would need for this algbw with an
// optimal algorithm, so numbers compare across rank counts (nccl-tests' PERFORMANCE.md).
double bus_factor(std::string_view operation, int ranks);

// Element counts of one rank's buffers for a message of `bytes`.
struct Shape {
  std::size_t send = 0;      // elements this rank sends (0 for a non-root in scatter)
  std::size_t recv = 0;      // elements this rank receives (0 for a non-root in reduce/gather)
  std::size_t per_rank = 0;  // the count passed to the collective
  std::size_t reported = 0;  // the "count" column
};
Shape shape_of(std::string_view operation, std::size_t bytes, comm::DataType type, int ranks, int rank, int root);

// What the benchmark runs; the same on every rank.
struct Case {
  std::string operation;
  comm::DataType type = comm::DataType::f32;
  comm::ReduceOp op = comm::ReduceOp::sum;
  int root = 0;
  bool in_place = false;
};

// Rank r's element i: small integers, so every sum, product and average is exact in
// every type and any order of addition gives the same bits.
template <class T>
T input(int rank, std::size_t i, comm::ReduceOp op) {
  if (op == comm::ReduceOp::prod) return static_cast<T>((static_cast<std::size_t>(rank) + i) % 3 == 0 ? -1 : 1);
  return static_cast<T>(static_cast<long long>((static_cast<std::size_t>(rank) * 13 + i * 7) % 11) - 5);
}

// Fills this rank's send buffer with its inputs (the root's n blocks for scatter).
template <class T>
void fill_inputs(const Case& c, int rank, std::span<T> send) {
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = input<T>(rank, i, c.op);
}

// Elements of `out` (this rank's result of `c` on `ranks` ranks) that differ from the
// expected value; `per_rank` is Shape::per_rank.
template <class T>
std::size_t count_wrong(const Case& c, int rank, int ranks, std::size_t per_rank, std::span<const T> out);

// For the in-place allgather: where this rank's block starts inside the receive buffer.
inline std::size_t own_block_offset(std::size_t per_rank, int rank) {
  return per_rank * static_cast<std::size_t>(rank);
}

}  // namespace bench
