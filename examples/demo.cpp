#include "demo.hpp"

#include "comm/cli_checks.hpp"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace demo {
namespace {
comm::Communicator* g_host_world = nullptr;  // set by run() under nccl
}  // namespace

int run(int argc, char** argv, const std::string& description, bool uses_root, bool uses_op,
        const std::function<void(comm::Communicator&, const Settings&)>& body) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{description};
    Settings settings;
    comm::add_options(app, settings.comm);
    if (uses_root)
      app.add_option("--root", settings.root, "the root rank")->check(comm::cli::whole(0))->capture_default_str();
    if (uses_op)
      app.add_option("--op", settings.op, "reduction: sum, prod, min, max or avg")
          ->check(CLI::IsMember({"sum", "prod", "min", "max", "avg"}))
          ->capture_default_str();
    app.add_option("--count", settings.count, "elements per rank")
        ->check(comm::cli::whole(1, 16))
        ->capture_default_str();
    app.add_option("--device", settings.device, "where the data lives: cpu, or cuda (GPU memory)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    comm::parse(app, argc, argv);
    comm::Communicator& world = runtime.start(settings.comm);
    if (settings.device == "cuda") comm::select_device(runtime.local_rank(), "--device cuda");
    // Printing is host work: under nccl (device memory only) show() uses the same ranks over mpi.
    std::optional<comm::Communicator> host_world;
    if (world.backend_name() == "nccl") host_world.emplace(world.with_backend(comm::BackendKind::mpi));
    g_host_world = host_world ? &*host_world : nullptr;
    if (settings.root < 0 || settings.root >= world.size())
      throw comm::UsageError(fmt::format("--root {} is not a rank of this {}-rank job", settings.root, world.size()));
    body(world, settings);
    g_host_world = nullptr;
  });
}

std::string format_values(std::span<const int> values) {
  return values.empty() ? std::string("nothing") : fmt::format("[{}]", fmt::join(values, " "));
}

Placed::Placed(std::vector<int>& host, const Settings& s) : host_(host) {
  if (s.device != "cuda") return;
  device_.emplace(host.size() * sizeof(int));
  comm::copy_memory(device_->data(), host.data(), host.size() * sizeof(int));
}

std::span<int> Placed::span() {
  return device_ ? std::span<int>(static_cast<int*>(device_->data()), host_.size()) : std::span<int>(host_);
}

std::vector<int>& Placed::host() {
  if (device_) comm::copy_memory(host_.data(), device_->data(), host_.size() * sizeof(int));
  return host_;
}

void show(comm::Communicator& device_world, const std::string& heading, std::span<const int> data) {
  comm::Communicator& world = g_host_world ? *g_host_world : device_world;
  // Ranks may hold different amounts: gather the sizes, then the data padded to the largest.
  const int n = world.size();
  const int mine = static_cast<int>(data.size());
  std::vector<int> sizes(static_cast<std::size_t>(n));
  world.allgather(std::span<const int>(&mine, 1), std::span<int>(sizes));
  const int widest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<int> padded(static_cast<std::size_t>(widest), 0);
  std::copy(data.begin(), data.end(), padded.begin());
  std::vector<int> all(world.rank() == 0 ? static_cast<std::size_t>(widest * n) : 0);
  world.gather(std::span<const int>(padded), std::span<int>(all), 0);
  if (world.rank() != 0) return;

  auto of = [&](int r) {
    return std::span<const int>(all).subspan(static_cast<std::size_t>(r * widest),
                                             static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
  };
  bool same = true;
  for (int r = 1; r < n; ++r) same = same && std::ranges::equal(of(r), of(0));
  if (same && n > 1) {
    comm::say("{} every rank holds {}", heading, format_values(of(0)));
    return;
  }
  comm::say("{}", heading);
  for (int r = 0; r < n; ++r) comm::say("  rank {} holds {}", r, format_values(of(r)));
}

}  // namespace demo
