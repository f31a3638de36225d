// What every collective demo shares: start-up, its flags, and printing each rank's data in
// rank order, the way textbook figures show collectives.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/device_memory.hpp"
#include "comm/runtime.hpp"

namespace demo {

struct Settings {
  comm::Options comm;
  int root = 0;
  std::string op = "sum";
  int count = 3;  // elements per rank
  std::string device = "cpu";  // --device cuda: the collective works on GPU memory
};

// The demo's data where --device puts it: the host vector itself, or (cuda) a device copy that
// the collective works on — through nccl directly, through the CPU backends by staging.
class Placed {
 public:
  Placed(std::vector<int>& host, const Settings& s);
  std::span<int> span();    // what the collective gets
  std::vector<int>& host();  // the values, copied back from the device first

 private:
  std::vector<int>& host_;
  std::optional<comm::DeviceBuffer> device_;
};

// Starts the runtime, parses --backend/--timeout/... plus --root/--op/--count as the demo
// uses them, and runs body(world, settings). Returns the process exit status.
int run(int argc, char** argv, const std::string& description, bool uses_root, bool uses_op,
        const std::function<void(comm::Communicator&, const Settings&)>& body);

// Every rank passes its data (host memory; under nccl it travels over a CPU copy of the
// communicator); rank 0 prints "  rank r holds [..]" for each rank in order,
// or, when all ranks hold the same, "<summary> every rank holds [..]".
void show(comm::Communicator& world, const std::string& heading, std::span<const int> data);

std::string format_values(std::span<const int> values);

}  // namespace demo
