// memcpy_bench: the ceiling for collectives on one machine. Every rank copies a buffer
// with memcpy at the same time (as ranks do in a collective), over the same size sweep
// as comm_bench; GB/s = bytes copied / time, the median of the repeats, per rank.
//   mpiexec -n 2 memcpy_bench -b 1M -e 256M -f 4
//   mpiexec -n 1 memcpy_bench --device cuda -e 1G   # device-to-device (cudaMemcpy): a GPU's ceiling
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_harness.hpp"
#include "comm/cli_checks.hpp"
#include "comm/device_memory.hpp"
#include "comm/runtime.hpp"

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"memcpy_bench: memory-copy bandwidth, every rank copying at once"};
    comm::Options options;
    comm::add_options(app, options);
    std::string begin = "1M", end = "256M";
    double factor = 4;
    int repeats = 10;
    app.add_option("-b,--minbytes", begin, "first size")->capture_default_str();
    app.add_option("-e,--maxbytes", end, "last size")->capture_default_str();
    app.add_option("-f,--stepfactor", factor, "size factor")->capture_default_str();
    app.add_option("-n,--iters", repeats, "repeats per size")
        ->check(comm::cli::whole(1, 100000))
        ->capture_default_str();
    std::string device = "cpu";
    app.add_option("--device", device, "cpu (memcpy) or cuda (cudaMemcpy from device to device)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    comm::parse(app, argc, argv);
    comm::Communicator& world = runtime.start(options);
    if (device == "cuda") comm::select_device(runtime.local_rank(), "--device cuda");
    std::vector<std::size_t> sizes;
    try {
      sizes = bench::size_sweep(bench::parse_size(begin), bench::parse_size(end), factor);
    } catch (const comm::Error& e) {
      throw comm::UsageError(e.what());
    }
    comm::say("# memcpy_bench: {} ranks copying at once{}; GB/s per rank (median of {})", world.size(),
              device == "cuda" ? " on the device" : "", repeats);
    comm::say("# {:>10} {:>12} {:>12}", "size", "time(us)", "GB/s");
    for (std::size_t bytes : sizes) {
      std::vector<char> from(bytes, 1), to(bytes, 0);
      std::optional<comm::DeviceBuffer> device_from, device_to;
      if (device == "cuda") {
        device_from.emplace(bytes);
        device_to.emplace(bytes);
        comm::copy_memory(device_from->data(), from.data(), bytes);
      }
      std::vector<double> times;
      for (int i = 0; i < repeats + 1; ++i) {
        world.barrier();
        auto start = std::chrono::steady_clock::now();
        if (device_to)
          comm::copy_memory(device_to->data(), device_from->data(), bytes);  // synchronous: done when it returns
        else
          std::memcpy(to.data(), from.data(), bytes);
        times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      times.erase(times.begin());  // the first touches fresh pages
      std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
      double median = times[static_cast<std::size_t>(repeats / 2)];
      double worst = 0;
      world.allreduce(std::span<const double>(&median, 1), std::span(&worst, 1), comm::ReduceOp::max);
      comm::say("  {:>10} {:>12.2f} {:>12.2f}", bytes, worst, static_cast<double>(bytes) / (worst * 1e-6) / 1e9);
    }
  });
}
