#include "bench_harness.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "comm/reduce_kernels.hpp"

namespace bench {

std::size_t parse_size(std::string_view text) {
  if (text.empty()) comm::fail("empty message size");
  std::size_t multiplier = 1;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K':
      multiplier = 1ull << 10;
      break;
    case 'M':
      multiplier = 1ull << 20;
      break;
    case 'G':
      multiplier = 1ull << 30;
      break;
    default:
      break;
  }
  const std::string_view digits = multiplier == 1 ? text : text.substr(0, text.size() - 1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    comm::fail("'{}' is not a message size (examples: 8, 1K, 256M, 1G)", text);
  // Digits too many for 64 bits, or a count that the unit multiplies past them: refused, never
  // wrapped around (17179869184G would otherwise be 0 bytes).
  std::uint64_t count = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
  if (error != std::errc{} || end != digits.data() + digits.size() ||
      count > std::numeric_limits<std::size_t>::max() / multiplier)
    comm::fail("'{}' is too large a message size (the largest is {} bytes)", text,
               std::numeric_limits<std::size_t>::max());
  return static_cast<std::size_t>(count) * multiplier;
}

std::string format_size(std::size_t bytes) {
  const char* units[] = {"", "K", "M", "G"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:g}{}", std::round(value * 100) / 100, units[unit]);
}

std::vector<std::size_t> size_sweep(std::size_t begin, std::size_t end, double factor) {
  if (begin > end) comm::fail("the first size ({}) is larger than the last ({})", begin, end);
  if (factor <= 1.0 && begin != end) comm::fail("the size factor must be larger than 1, not {}", factor);
  std::vector<std::size_t> sizes;
  for (double size = static_cast<double>(begin); size <= static_cast<double>(end) * 1.0000001;
       size = std::max(size * factor, size + 1)) {
    sizes.push_back(static_cast<std::size_t>(size));
    if (begin == end) break;
  }
  return sizes;
}

namespace {

using comm::Communicator, comm::OpKind;

// How each collective is called, in its forms; every element type.
void run_allreduce(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type, [&]<class T>() {
    if (c.in_place)
      comm.allreduce(b.recv_as<T>(), c.op);
    else
      comm.allreduce(std::span<const T>(b.send_as<T>()), b.recv_as<T>(), c.op);
  });
}
void run_reduce(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type, [&]<class T>() {
    if (c.in_place && comm.rank() == c.root)
      comm.reduce(b.recv_as<T>(), c.op, c.root);
    else
      comm.reduce(std::span<const T>(b.send_as<T>()), b.recv_as<T>(), c.op, c.root);
  });
}
void run_broadcast(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type, [&]<class T>() { comm.broadcast(b.recv_as<T>(), c.root); });
}
void run_allgather(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type, [&]<class T>() {
    if (c.in_place)
      comm.allgather(b.recv_as<T>());
    else
      comm.allgather(std::span<const T>(b.send_as<T>()), b.recv_as<T>());
  });
}
void run_gather(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type,
                    [&]<class T>() { comm.gather(std::span<const T>(b.send_as<T>()), b.recv_as<T>(), c.root); });
}
void run_scatter(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type,
                    [&]<class T>() { comm.scatter(std::span<const T>(b.send_as<T>()), b.recv_as<T>(), c.root); });
}
void run_reduce_scatter(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type,
                    [&]<class T>() { comm.reduce_scatter(std::span<const T>(b.send_as<T>()), b.recv_as<T>(), c.op); });
}
void run_alltoall(Communicator& comm, const Case& c, const CallBuffers& b) {
  with_element_type(c.type, [&]<class T>() { comm.alltoall(std::span<const T>(b.send_as<T>()), b.recv_as<T>()); });
}
void run_sendrecv(Communicator& comm, const Case& c, const CallBuffers& b) {  // to the right, from the left
  const int n = comm.size(), right = (comm.rank() + 1) % n, left = (comm.rank() + n - 1) % n;
  with_element_type(
      c.type, [&]<class T>() { comm.send_recv(std::span<const T>(b.send_as<T>()), right, b.recv_as<T>(), left); });
}

double ring_twice(double n) { return 2 * (n - 1) / n; }  // a reduce-scatter and an allgather
double ring_once(double n) { return (n - 1) / n; }
double one(double) { return 1; }

Source reduced_at_same(std::size_t i, int, int, int, std::size_t) { return {0, i, true}; }
Source roots(std::size_t i, int, int, int root, std::size_t) { return {root, i}; }
Source left_neighbours(std::size_t i, int rank, int ranks, int, std::size_t) { return {(rank + ranks - 1) % ranks, i}; }
Source block_of_each(std::size_t i, int, int, int, std::size_t per) { return {static_cast<int>(i / per), i % per}; }
Source roots_block(std::size_t i, int rank, int, int root, std::size_t per) {
  return {root, per * static_cast<std::size_t>(rank) + i};
}
// alltoall: block b of this rank's result is rank b's block for this rank.
Source transposed_block(std::size_t i, int rank, int, int, std::size_t per) {
  return {static_cast<int>(i / per), per * static_cast<std::size_t>(rank) + i % per};
}
Source reduced_block(std::size_t i, int rank, int, int, std::size_t per) {
  return {0, per * static_cast<std::size_t>(rank) + i, true};
}

}  // namespace

const std::vector<Collective>& collectives() {
  using B = Blocks;
  using In = InPlaceInput;
  // name, kind, send, recv, out of place, in-place input, bus factor, expected source, call
  static const std::vector<Collective> all = {
      {"allreduce", OpKind::allreduce, B::one, B::one, true, In::recv, ring_twice, reduced_at_same, run_allreduce},
      {"reduce", OpKind::reduce, B::one, B::one_on_root, true, In::recv_on_root, one, reduced_at_same, run_reduce},
      {"broadcast", OpKind::broadcast, B::one, B::one, false, In::recv_on_root, one, roots, run_broadcast},
      {"allgather", OpKind::allgather, B::one, B::all, true, In::own_block, ring_once, block_of_each, run_allgather},
      {"gather", OpKind::gather, B::one, B::all_on_root, true, In::none, ring_once, block_of_each, run_gather},
      {"scatter", OpKind::scatter, B::all_on_root, B::one, true, In::none, ring_once, roots_block, run_scatter},
      {"reduce_scatter", OpKind::reduce_scatter, B::all, B::one, true, In::none, ring_once, reduced_block,
       run_reduce_scatter},
      {"alltoall", OpKind::alltoall, B::all, B::all, true, In::none, ring_once, transposed_block, run_alltoall},
      {"sendrecv", OpKind::sendrecv, B::one, B::one, true, In::none, one, left_neighbours, run_sendrecv},
  };
  return all;
}

std::vector<std::string> collective_names() {
  std::vector<std::string> names;
  for (const Collective& c : collectives()) names.emplace_back(c.name);
  return names;
}

const Collective& collective(std::string_view name) {
  for (const Collective& c : collectives())
    if (c.name == name) return c;
  comm::fail("unknown operation '{}'", name);
}

double Collective::bus_factor(int ranks) const { return bus(static_cast<double>(ranks)); }

Shape Collective::shape(std::size_t bytes, comm::DataType type, int ranks, int rank, int root) const {
  const std::size_t n = static_cast<std::size_t>(ranks), elements = bytes / comm::size_of(type);
  const bool whole = send == Blocks::all || send == Blocks::all_on_root || recv == Blocks::all ||
                     recv == Blocks::all_on_root;  // the size names the whole n-block buffer
  Shape s;
  s.per_rank = whole ? elements / n : elements;
  s.reported = whole ? s.per_rank * n : elements;
  const auto count = [&](Blocks b) -> std::size_t {
    const bool here = rank == root || b == Blocks::one || b == Blocks::all;
    const bool all_blocks = b == Blocks::all || b == Blocks::all_on_root;
    return here ? (all_blocks ? s.per_rank * n : s.per_rank) : 0;
  };
  s.send = count(send);
  s.recv = count(recv);
  return s;
}

namespace {
// The reduction over all ranks of element i, computed the way the backends compute it.
template <class T>
T reduced(const Case& c, int ranks, std::size_t i) {
  T value = input<T>(0, i, c.op);
  for (int q = 1; q < ranks; ++q) {
    T other = input<T>(q, i, c.op);
    comm::reduce_into(&value, &other, 1, comm::datatype_of<T>(), c.op);
  }
  comm::finish_average(&value, 1, comm::datatype_of<T>(), c.op, ranks);
  return value;
}
}  // namespace

template <class T>
std::size_t count_wrong(const Case& c, int rank, int ranks, std::size_t per_rank, std::span<const T> out) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Source from = c.collective->source(i, rank, ranks, c.root, per_rank);
    wrong += out[i] != (from.reduced ? reduced<T>(c, ranks, from.index) : input<T>(from.rank, from.index, c.op));
  }
  return wrong;
}

template std::size_t count_wrong<float>(const Case&, int, int, std::size_t, std::span<const float>);
template std::size_t count_wrong<double>(const Case&, int, int, std::size_t, std::span<const double>);
template std::size_t count_wrong<std::int32_t>(const Case&, int, int, std::size_t, std::span<const std::int32_t>);
template std::size_t count_wrong<std::int64_t>(const Case&, int, int, std::size_t, std::span<const std::int64_t>);
template std::size_t count_wrong<comm::bfloat16>(const Case&, int, int, std::size_t, std::span<const comm::bfloat16>);
template std::size_t count_wrong<std::uint8_t>(const Case&, int, int, std::size_t, std::span<const std::uint8_t>);

}  // namespace bench
