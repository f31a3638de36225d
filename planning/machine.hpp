// The machine a plan is made for: how many devices a node has, what each can compute and hold,
// and what a message costs inside a node and between nodes (the α–β model: a message of S
// bytes takes α + S/bandwidth, docs/planning.md).
//
// Presets: this CPU (calibrated by the project's own benchmarks: gpt_bench for the compute,
// memcpy for the bandwidth, comm_bench for α and β), and DGX A100 / DGX H100 clusters (the
// numbers' sources are beside them in machine.cpp). A JSON file gives any other machine
// (`nanodist plan --machine-file m.json`; `--print-machine` writes one to start from).
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/gemm.hpp"  // Precision

namespace planning {

// One kind of link: α seconds per message, and bytes per second a rank moves through it.
struct Link {
  double latency_s = 0;
  double bytes_per_s = 1;
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_s; }
};

struct Machine {
  std::string name;
  std::string source;                 // where the numbers come from, one line
  int devices_per_node = 1;           // GPUs, or a CPU's cores
  bool ranks_share_devices = false;   // a CPU: more ranks than cores take turns (one node)
  double device_memory_bytes = 0;     // per device; a CPU's node memory is shared by its ranks
  double peak_flops_fp32 = 0;         // per device, dense matrix products
  double peak_flops_bf16 = 0;
  double matmul_efficiency = 1;       // the fraction of the fp32 peak the model's products reach
  double matmul_efficiency_bf16 = 1;  // … of the bf16 peak
  double memory_bytes_per_s = 0;      // per device: the elementwise work's roof (0: inside the efficiency)
  double optimizer_seconds_per_parameter = 0;  // AdamW's update of one parameter
  double block_overhead_s = 0;        // a block's fixed cost per micro-batch, forward + backward (dispatch, launches)
  Link intra_node, inter_node;        // a rank's share: bus bandwidth, as nccl-tests reports it
  // Inside a node, per communication backend where they were measured (this CPU: mpi, ring,
  // naive, shm); intra_node is the trainers' default backend's.
  std::map<std::string, Link> backends;

  // This machine with `backend`'s link inside a node (--backend); throws planning::Error
  // naming the backends it has when it has no such one.
  Machine with_backend(const std::string& backend) const;

  // FLOP/s a device reaches on the model's products in `precision`.
  double achieved_flops(nn::Precision precision) const {
    return precision == nn::Precision::bf16 ? peak_flops_bf16 * matmul_efficiency_bf16
                                            : peak_flops_fp32 * matmul_efficiency;
  }
  double peak_flops(nn::Precision precision) const {
    return precision == nn::Precision::bf16 ? peak_flops_bf16 : peak_flops_fp32;
  }
  nlohmann::json to_json() const;
  static Machine from_json(const nlohmann::json& j);  // throws planning::Error naming a missing/bad field
};

// "this-cpu", "a100-80gb", "h100-80gb".
std::vector<std::string> machine_preset_names();
Machine machine_preset(std::string_view name);  // throws planning::Error for an unknown name
Machine machine_from_file(const std::string& path);

}  // namespace planning
