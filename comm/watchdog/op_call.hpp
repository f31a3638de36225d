// A call as the caller made it: what the watchdog numbers, watches and names.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/types.hpp"

namespace comm {

// A collective (or point-to-point) call as the caller made it.
struct OpCall {
  OpKind kind = OpKind::none;
  std::int64_t comm_id = 0;
  std::string_view comm_name;
  const std::vector<int>* members = nullptr;  // world rank of each communicator rank
  int comm_rank = 0;
  std::int64_t seq = 0;    // per communicator: collectives count up together on all ranks
  std::int64_t count = 0;  // elements per rank
  DataType type = DataType::f32;
  int op = -1;    // ReduceOp or -1
  int root = -1;  // root (collectives) or peer (send/recv), or -1
  bool on_communication_thread = false;  // queued there (--progress thread): the report says so
};

}  // namespace comm
