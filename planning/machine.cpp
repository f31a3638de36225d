#include "planning/machine.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "planning/error.hpp"

namespace planning {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// This CPU (2 cores of an AMD EPYC with AVX-512, 24 GiB), the median of three runs of
// benchmarks/calibrate_machine.py on 2026-11-27 (it writes such a file for any machine):
//   gpt_bench --preset a --threads 1 --peak on both cores at once (mpiexec binds a rank to a
//     core), at batch 12 and 1: fp32 GEMM peak 213 GFLOP/s a core, the model's products reach
//     76% of it (bf16: peak 425, 57%); a block costs 93 µs a micro-batch whatever its size;
//     AdamW 0.73 ns a parameter;
//   comm_bench --op allreduce on 2 ranks, α a step and bus bandwidth: mpi 0.7 µs, 3.2 GB/s (the
//     trainers' default: the node's link); ring 0.86 µs, 7.5 GB/s; naive 0.39 µs, 3.4 GB/s;
//     shm 0.25 µs, 8.5 GB/s (the medians of three later runs; mpi's moved 3.2–4.1 GB/s).
// The efficiency holds the elementwise work too (the model's activations live in the caches
// here), so the memory-bandwidth term is off (0). One node: inter_node is never used.
Machine this_cpu() {
  return {.name = "this-cpu",
          .source = "2-core AMD EPYC (AVX-512), measured 2026-11-27 by benchmarks/calibrate_machine.py: "
                    "gpt_bench on every core (GEMM peak, efficiency, a block's overhead), comm_bench (mpi allreduce's α, "
                    "bus bandwidth)",
          .devices_per_node = 2,
          .ranks_share_devices = true,
          .device_memory_bytes = 12 * kGiB,
          .peak_flops_fp32 = 213e9,
          .peak_flops_bf16 = 425e9,
          .matmul_efficiency = 0.76,
          .matmul_efficiency_bf16 = 0.57,
          .memory_bytes_per_s = 0,
          .optimizer_seconds_per_parameter = 0.73e-9,
          .block_overhead_s = 93e-6,
          .intra_node = {.latency_s = 0.7e-6, .bytes_per_s = 3.2e9},
          .inter_node = {.latency_s = 0.7e-6, .bytes_per_s = 3.2e9},
          .backends = {{"mpi", {.latency_s = 0.7e-6, .bytes_per_s = 3.2e9}},
                       {"ring", {.latency_s = 0.86e-6, .bytes_per_s = 7.5e9}},
                       {"naive", {.latency_s = 0.39e-6, .bytes_per_s = 3.4e9}},
                       {"shm", {.latency_s = 0.25e-6, .bytes_per_s = 8.5e9}}}};
}

// DGX A100 80 GB (Selene, where Narayanan et al. 2021 and Korthikanti et al. 2022 ran):
//   peak 312 TFLOP/s bf16/fp16 dense, 19.5 fp32; HBM2e 2039 GB/s (NVIDIA A100 datasheet);
//   NVLink/NVSwitch inside a node: all-reduce bus bandwidth ≈ 230 GB/s measured by nccl-tests
//     (NVIDIA/nccl-tests issue 149, a maintainer's figure);
//   8 × 200 Gb/s HDR InfiniBand a node: all-reduce bus bandwidth 192 GB/s a node measured
//     (NVIDIA/nccl issue 812), so 24 GB/s a GPU;
//   α: 10 µs a step inside a node, 20 µs across: of the order of NCCL's own tuning constants
//     (src/graph/tuning.cc: 6–8 µs a call, 0.6–14 µs a step by link and protocol), taken a step;
//   matmul efficiency 0.74: the planner then predicts one 22B layer's measured forward +
//     backward (Korthikanti et al. 2022, Table 4: 7.7 + 11.9 ms at t = 8, b = 4; recompute it
//     with benchmarks/plan_vs_megatron.py --calibrate); a bare large GEMM reaches 0.86
//     (stas00/ml-engineering, MAMF table).
Machine a100() {
  return {.name = "a100-80gb",
          .source = "DGX A100 80 GB: NVIDIA datasheet; nccl-tests/nccl issues 149 and 812; "
                    "efficiency calibrated on Korthikanti et al. 2022 Table 4",
          .devices_per_node = 8,
          .device_memory_bytes = 80e9,
          .peak_flops_fp32 = 19.5e12,
          .peak_flops_bf16 = 312e12,
          .matmul_efficiency = 0.74,
          .matmul_efficiency_bf16 = 0.74,
          .memory_bytes_per_s = 2039e9,
          .optimizer_seconds_per_parameter = 28 / 2039e9,  // read p, g, m, v; write p, m, v (fp32)
          .intra_node = {.latency_s = 10e-6, .bytes_per_s = 230e9},
          .inter_node = {.latency_s = 20e-6, .bytes_per_s = 24e9}};
}

// DGX H100 80 GB: peak 989 TFLOP/s bf16 dense, 67 fp32; HBM3 3350 GB/s (NVIDIA H100
// datasheet); NVLink 4 / NVSwitch: ≈ 370 GB/s all-reduce bus bandwidth with rings
// (nccl-tests issue 212); 8 × 400 Gb/s NDR a node: 46–48 GB/s a NIC measured (nccl-tests
// issue 290), 46 GB/s a GPU; matmul efficiency 0.69, the A100's 0.74 scaled by the bare-GEMM
// ratio (0.80 / 0.86, stas00/ml-engineering's MAMF table): an assumption, not a measurement.
Machine h100() {
  return {.name = "h100-80gb",
          .source = "DGX H100 80 GB: NVIDIA datasheet; nccl-tests issues 212 and 290; "
                    "efficiency scaled from the A100 preset by the bare-GEMM ratio",
          .devices_per_node = 8,
          .device_memory_bytes = 80e9,
          .peak_flops_fp32 = 67e12,
          .peak_flops_bf16 = 989e12,
          .matmul_efficiency = 0.69,
          .matmul_efficiency_bf16 = 0.69,
          .memory_bytes_per_s = 3350e9,
          .optimizer_seconds_per_parameter = 28 / 3350e9,
          .intra_node = {.latency_s = 10e-6, .bytes_per_s = 370e9},
          .inter_node = {.latency_s = 20e-6, .bytes_per_s = 46e9}};
}

// A number from the file, named in the error when it is missing, not a number, not finite or
// outside [low, high].
double number(const nlohmann::json& j, const std::string& name, double low, double high,
              std::optional<double> fallback = std::nullopt) {
  if (!j.contains(name)) {
    if (fallback) return *fallback;
    throw Error(fmt::format("machine: the field \"{}\" is missing", name));
  }
  const auto& v = j.at(name);
  if (!v.is_number()) throw Error(fmt::format("machine: \"{}\" must be a number", name));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < low || x > high)
    throw Error(fmt::format("machine: \"{}\" must be from {} to {} (got {})", name, low, high, x));
  return x;
}

Link link_from(const nlohmann::json& j, const std::string& name) {
  if (!j.contains(name) || !j.at(name).is_object())
    throw Error(fmt::format("machine: the field \"{}\" is missing (an object with latency_s and bytes_per_s)", name));
  const auto& l = j.at(name);
  return {.latency_s = number(l, "latency_s", 0, 1), .bytes_per_s = number(l, "bytes_per_s", 1e3, 1e15)};
}

}  // namespace

nlohmann::json Machine::to_json() const {
  auto link = [](const Link& l) { return nlohmann::json{{"latency_s", l.latency_s}, {"bytes_per_s", l.bytes_per_s}}; };
  nlohmann::json by_backend = nlohmann::json::object();
  for (const auto& [backend, l] : backends) by_backend[backend] = link(l);
  return {{"name", name},
          {"source", source},
          {"devices_per_node", devices_per_node},
          {"ranks_share_devices", ranks_share_devices},
          {"device_memory_bytes", device_memory_bytes},
          {"peak_flops_fp32", peak_flops_fp32},
          {"peak_flops_bf16", peak_flops_bf16},
          {"matmul_efficiency", matmul_efficiency},
          {"matmul_efficiency_bf16", matmul_efficiency_bf16},
          {"memory_bytes_per_s", memory_bytes_per_s},
          {"optimizer_seconds_per_parameter", optimizer_seconds_per_parameter},
          {"block_overhead_s", block_overhead_s},
          {"intra_node", link(intra_node)},
          {"inter_node", link(inter_node)},
          {"backends", by_backend}};
}

Machine Machine::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("machine: expected a JSON object");
  auto text = [&j](const char* name, std::string fallback) {
    if (!j.contains(name)) return fallback;
    if (!j.at(name).is_string()) throw Error(fmt::format("machine: \"{}\" must be a string", name));
    return j.at(name).get<std::string>();
  };
  if (!j.contains("devices_per_node") || !j.at("devices_per_node").is_number_integer())
    throw Error("machine: \"devices_per_node\" must be a whole number");
  if (j.contains("ranks_share_devices") && !j.at("ranks_share_devices").is_boolean())
    throw Error("machine: \"ranks_share_devices\" must be true or false");
  const double efficiency = number(j, "matmul_efficiency", 1e-3, 1);
  std::map<std::string, Link> backends;
  if (j.contains("backends")) {
    if (!j.at("backends").is_object()) throw Error("machine: \"backends\" must be an object of links by name");
    for (const auto& [backend, l] : j.at("backends").items()) backends[backend] = link_from(j.at("backends"), backend);
  }
  return {.name = text("name", "a machine file"),
          .source = text("source", "a machine file"),
          .devices_per_node = static_cast<int>(number(j, "devices_per_node", 1, 1 << 20)),
          .ranks_share_devices = j.value("ranks_share_devices", false),
          .device_memory_bytes = number(j, "device_memory_bytes", 1e6, 1e18),
          .peak_flops_fp32 = number(j, "peak_flops_fp32", 1e6, 1e18),
          .peak_flops_bf16 = number(j, "peak_flops_bf16", 1e6, 1e18),
          .matmul_efficiency = efficiency,
          .matmul_efficiency_bf16 = number(j, "matmul_efficiency_bf16", 1e-3, 1, efficiency),
          .memory_bytes_per_s = number(j, "memory_bytes_per_s", 0, 1e15, 0.0),
          .optimizer_seconds_per_parameter = number(j, "optimizer_seconds_per_parameter", 0, 1e-3, 0.0),
          .block_overhead_s = number(j, "block_overhead_s", 0, 1, 0.0),
          .intra_node = link_from(j, "intra_node"),
          .inter_node = link_from(j, "inter_node"),
          .backends = backends};
}

Machine Machine::with_backend(const std::string& backend) const {
  const auto found = backends.find(backend);
  if (found == backends.end()) {
    std::vector<std::string> names;
    for (const auto& [known, link] : backends) names.push_back(known);
    throw Error(fmt::format("machine {} has no measured backend \"{}\" ({})", name, backend,
                            names.empty() ? std::string("it has none") : fmt::format("{}", fmt::join(names, ", "))));
  }
  Machine m = *this;
  m.intra_node = found->second;
  return m;
}

std::vector<std::string> machine_preset_names() { return {"this-cpu", "a100-80gb", "h100-80gb"}; }

Machine machine_preset(std::string_view name) {
  if (name == "this-cpu") return this_cpu();
  if (name == "a100-80gb") return a100();
  if (name == "h100-80gb") return h100();
  throw Error(fmt::format("unknown machine preset \"{}\" (this-cpu, a100-80gb, h100-80gb, or --machine-file)", name));
}

Machine machine_from_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) throw Error(fmt::format("machine file {}: cannot be read", path));
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("machine file {}: cannot be read", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("machine file {}: not JSON ({})", path, e.what()));
  }
  try {
    return Machine::from_json(j);
  } catch (const Error& e) {
    throw Error(fmt::format("machine file {}: {}", path, e.what()));
  }
}

}  // namespace planning
