// The harness every collective benchmark shares, after nccl-tests: message sizes, and one
// record per collective (nccl-tests' testColl) holding what the benchmark knows about it —
// its buffers' shapes, its forms, its bus-bandwidth factor, the result each element must
// hold, and how to call it.
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

#include "comm/communicator.hpp"
#include "comm/types.hpp"

namespace bench {

// "8", "1K", "256M", "1G" (binary multiples, as nccl-tests) → bytes. Throws comm::Error.
std::size_t parse_size(std::string_view text);
// 1536 → "1.5K", 268435456 → "256M"
std::string format_size(std::size_t bytes);
// begin, begin·factor, ... up to end (inclusive).
std::vector<std::size_t> size_sweep(std::size_t begin, std::size_t end, double factor);

struct Collective;

// What the benchmark runs; the same on every rank.
struct Case {
  const Collective* collective = nullptr;
  comm::DataType type = comm::DataType::f32;
  comm::ReduceOp op = comm::ReduceOp::sum;
  int root = 0;
  bool in_place = false;
};

// Element counts of one rank's buffers for a message of `bytes`.
struct Shape {
  std::size_t send = 0;      // elements this rank sends (0 for a non-root in scatter)
  std::size_t recv = 0;      // elements this rank receives (0 for a non-root in reduce/gather)
  std::size_t per_rank = 0;  // the count passed to the collective
  std::size_t reported = 0;  // the "count" column
};

// One rank's buffers for a call, whatever their element type.
struct CallBuffers {
  void* send = nullptr;
  std::size_t send_count = 0;
  void* recv = nullptr;
  std::size_t recv_count = 0;
  template <class T>
  std::span<T> send_as() const {
    return {static_cast<T*>(send), send_count};
  }
  template <class T>
  std::span<T> recv_as() const {
    return {static_cast<T*>(recv), recv_count};
  }
};

// Where element i of a rank's result comes from: element `index` of rank `rank`'s inputs,
// or (reduced) the reduction over every rank of element `index`.
struct Source {
  int rank = 0;
  std::size_t index = 0;
  bool reduced = false;
};

// A buffer of one block (the per-rank count) or of all n blocks, on every rank or on the root.
enum class Blocks { one, all, one_on_root, all_on_root };
// Where the input sits in the in-place form: all of recv, recv on the root, this rank's block of recv.
enum class InPlaceInput { none, recv, recv_on_root, own_block };

struct Collective {
  const char* name;
  comm::OpKind kind;  // its arguments: comm::has_root, comm::has_reduce_op
  Blocks send, recv;
  bool out_of_place;            // has the out-of-place form (comm's broadcast has only in place)
  InPlaceInput in_place_input;  // none: no in-place form
  double (*bus)(double n);      // the bus-bandwidth factor on n ranks (bus_factor)
  Source (*source)(std::size_t i, int rank, int ranks, int root, std::size_t per_rank);
  void (*run)(comm::Communicator& comm, const Case& c, const CallBuffers& buffers);

  bool uses_reduce_op() const { return comm::has_reduce_op(kind); }
  bool uses_root() const { return comm::has_root(kind); }
  bool has_in_place_form() const { return in_place_input != InPlaceInput::none; }
  // busbw = algbw × factor: the bandwidth each link would need for this algbw with an optimal
  // algorithm, so numbers compare across rank counts (nccl-tests' PERFORMANCE.md).
  double bus_factor(int ranks) const;
  Shape shape(std::size_t bytes, comm::DataType type, int ranks, int rank, int root) const;
};

// Every benchmarked collective, in the order nccl-tests lists them.
const std::vector<Collective>& collectives();
std::vector<std::string> collective_names();
const Collective& collective(std::string_view name);  // throws comm::Error for an unknown name

// Rank r's element i: small integers, so every sum, product and average is exact in
// every type and any order of addition gives the same bits.
template <class T>
T input(int rank, std::size_t i, comm::ReduceOp op) {
  if (op == comm::ReduceOp::prod) return static_cast<T>((static_cast<std::size_t>(rank) + i) % 3 == 0 ? -1 : 1);
  return static_cast<T>(static_cast<long long>((static_cast<std::size_t>(rank) * 13 + i * 7) % 11) - 5);
}

// Fills a buffer with this rank's inputs (the root's n blocks for scatter).
template <class T>
void fill_inputs(const Case& c, int rank, std::span<T> buffer) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = input<T>(rank, i, c.op);
}

// Elements of `out` (this rank's result of `c` on `ranks` ranks) that differ from the
// expected value; `per_rank` is Shape::per_rank.
template <class T>
std::size_t count_wrong(const Case& c, int rank, int ranks, std::size_t per_rank, std::span<const T> out);

// Calls f.template operator()<T>() with T the C++ type of `type`.
template <class F>
void with_element_type(comm::DataType type, F&& f) {
  switch (type) {
    case comm::DataType::f32:
      return f.template operator()<float>();
    case comm::DataType::f64:
      return f.template operator()<double>();
    case comm::DataType::i32:
      return f.template operator()<std::int32_t>();
    case comm::DataType::i64:
      return f.template operator()<std::int64_t>();
    case comm::DataType::bf16:
      return f.template operator()<comm::bfloat16>();
    case comm::DataType::u8:
      return f.template operator()<std::uint8_t>();
  }
}

}  // namespace bench
