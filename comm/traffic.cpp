#include "comm/traffic.hpp"

#include <fmt/format.h>

namespace comm {

double call_bytes(OpKind kind, std::size_t count, DataType type, int ranks) {
  const bool per_rank = kind == OpKind::reduce_scatter || kind == OpKind::allgather || kind == OpKind::gather ||
                        kind == OpKind::scatter || kind == OpKind::alltoall;
  return static_cast<double>(count * size_of(type)) * (per_rank ? ranks : 1);
}

double bytes_sent_per_rank(const TrafficByKind& traffic, int n) {
  const double part = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  double sent = 0;
  for (std::size_t k = 0; k < kOpKinds; ++k) {
    const double b = traffic[k].bytes;
    switch (static_cast<OpKind>(k)) {
      case OpKind::allreduce:
        sent += 2 * part * b;
        break;
      case OpKind::reduce_scatter:
      case OpKind::allgather:
      case OpKind::gather:
      case OpKind::scatter:
      case OpKind::alltoall:   // all but the block a rank keeps
      case OpKind::alltoallv:  // (as if equal: nccl-tests' convention)
        sent += part * b;
        break;
      case OpKind::broadcast:
      case OpKind::reduce:
        sent += n > 1 ? b : 0;
        break;
      case OpKind::send:
      case OpKind::sendrecv:
        sent += b;
        break;
      default:
        break;
    }
  }
  return sent;
}

std::string describe(const TrafficByKind& traffic) {
  std::string text;
  for (std::size_t k = 0; k < kOpKinds; ++k) {
    if (traffic[k].calls == 0 || static_cast<OpKind>(k) == OpKind::split) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {} ({:.1f} MB)", traffic[k].calls, name_of(static_cast<OpKind>(k)), traffic[k].bytes / 1e6);
  }
  return text.empty() ? "nothing" : text;
}

TrafficByKind operator-(const TrafficByKind& later, const TrafficByKind& earlier) {
  TrafficByKind d{};
  for (std::size_t k = 0; k < kOpKinds; ++k)
    d[k] = {later[k].calls - earlier[k].calls, later[k].bytes - earlier[k].bytes};
  return d;
}

}  // namespace comm
