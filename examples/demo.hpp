// What every collective demo shares: start-up, its flags, and printing each rank's data in
// rank order, the way textbook figures show collectives.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/runtime.hpp"

namespace demo {

struct Settings {
  comm::Options comm;
  int root = 0;
  std::string op = "sum";
  int count = 3;  // elements per rank
};

// Starts the runtime, parses --backend/--timeout/... plus --root/--op/--count as the demo
// uses them, and runs body(world, settings). Returns the process exit status.
int run(int argc, char** argv, const std::string& description, bool uses_root, bool uses_op,
        const std::function<void(comm::Communicator&, const Settings&)>& body);

// Every rank passes its data; rank 0 prints "  rank r holds [..]" for each rank in order,
// or, when all ranks hold the same, "<summary> every rank holds [..]".
void show(comm::Communicator& world, const std::string& heading, std::span<const int> data);

std::string format_values(std::span<const int> values);

}  // namespace demo
