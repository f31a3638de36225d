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

const std::vector<std::string>& operation_names() {
  static const std::vector<std::string> names = {"allreduce", "reduce",  "broadcast",      "allgather",
                                                 "gather",    "scatter", "reduce_scatter", "sendrecv"};
  return names;
}

bool uses_reduce_op(std::string_view op) { return op == "allreduce" || op == "reduce" || op == "reduce_scatter"; }
bool has_in_place_form(std::string_view op) {
  return op == "allreduce" || op == "reduce" || op == "allgather" || op == "broadcast";
}
bool has_out_of_place_form(std::string_view op) { return op != "broadcast"; }
bool uses_root(std::string_view op) { return op == "reduce" || op == "broadcast" || op == "gather" || op == "scatter"; }

double bus_factor(std::string_view op, int ranks) {
  const double n = ranks;
  if (op == "allreduce") return 2 * (n - 1) / n;  // a reduce-scatter and an allgather
  if (op == "allgather" || op == "reduce_scatter" || op == "gather" || op == "scatter") return (n - 1) / n;
  if (op == "broadcast" || op == "reduce" || op == "sendrecv") return 1;
  comm::fail("unknown operation '{}'", op);
}

Shape shape_of(std::string_view op, std::size_t bytes, comm::DataType type, int ranks, int rank, int root) {
  const std::size_t n = static_cast<std::size_t>(ranks);
  const std::size_t elements = bytes / comm::size_of(type);
  Shape s;
  if (op == "allreduce" || op == "broadcast" || op == "sendrecv" || op == "reduce") {
    s.per_rank = elements;
    s.send = elements;
    s.recv = (op == "reduce" && rank != root) ? 0 : elements;
    s.reported = elements;
    return s;
  }
  s.per_rank = elements / n;  // the whole buffer is n blocks
  s.reported = s.per_rank * n;
  if (op == "allgather") {
    s.send = s.per_rank;
    s.recv = s.reported;
  } else if (op == "gather") {
    s.send = s.per_rank;
    s.recv = rank == root ? s.reported : 0;
  } else if (op == "scatter") {
    s.send = rank == root ? s.reported : 0;
    s.recv = s.per_rank;
  } else if (op == "reduce_scatter") {
    s.send = s.reported;
    s.recv = s.per_rank;
  } else {
    comm::fail("unknown operation '{}'", op);
  }
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
  const std::string& op = c.operation;
  std::size_t wrong = 0;
  auto expect = [&](std::size_t index, T value) { wrong += out[index] != value; };
  const int left = (rank + ranks - 1) % ranks;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (op == "allreduce" || op == "reduce")
      expect(i, reduced<T>(c, ranks, i));
    else if (op == "broadcast")
      expect(i, input<T>(c.root, i, c.op));
    else if (op == "sendrecv")
      expect(i, input<T>(left, i, c.op));
    else if (op == "allgather" || op == "gather")
      expect(i, input<T>(static_cast<int>(i / per_rank), i % per_rank, c.op));
    else if (op == "scatter")
      expect(i, input<T>(c.root, per_rank * static_cast<std::size_t>(rank) + i, c.op));
    else if (op == "reduce_scatter")
      expect(i, reduced<T>(c, ranks, per_rank * static_cast<std::size_t>(rank) + i));
  }
  return wrong;
}

template std::size_t count_wrong<float>(const Case&, int, int, std::size_t, std::span<const float>);
template std::size_t count_wrong<double>(const Case&, int, int, std::size_t, std::span<const double>);
template std::size_t count_wrong<std::int32_t>(const Case&, int, int, std::size_t, std::span<const std::int32_t>);
template std::size_t count_wrong<std::int64_t>(const Case&, int, int, std::size_t, std::span<const std::int64_t>);
template std::size_t count_wrong<comm::bfloat16>(const Case&, int, int, std::size_t, std::span<const comm::bfloat16>);

}  // namespace bench
