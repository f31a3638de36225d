// A program that goes wrong on purpose, for the watchdog's tests: the last rank (or the last
// --culprits ranks) misbehaves in the second collective of a loop, in the way --scenario names.
//   mpiexec -n 3 fault_scenarios --scenario skip --timeout 2
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "comm/runtime.hpp"

namespace {

// Has a shell, a process that is not the launcher, send `signal` to this process 0.2 s from
// now (as `kill -TERM <pid>` from a terminal would).
void signal_me_soon(int signal) {
  const std::string command = "sleep 0.2; kill -" + std::to_string(signal) + " " + std::to_string(getpid());
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t shell = 0;
  if (posix_spawn(&shell, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
    comm::fail("cannot start /bin/sh to send the signal");
}

// Allocates and frees in a loop, as computing code does, with blocks too large for malloc's
// per-thread cache (which takes no lock): most of the time is spent inside malloc holding its
// arena's lock, so the signal almost surely lands there.
void allocate_for(std::chrono::seconds seconds) {
  const auto end = std::chrono::steady_clock::now() + seconds;
  std::vector<std::unique_ptr<char[]>> live(64);
  std::size_t bytes = 2048;
  for (std::size_t i = 0; std::chrono::steady_clock::now() < end; ++i) {
    for (int k = 0; k < 1000; ++k, ++i) {
      bytes = bytes * 7 % 60'000 + 2048;  // 2 KB to 62 KB: chunks that split and merge
      live[(i * 13) % live.size()] = std::make_unique_for_overwrite<char[]>(bytes);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"fault scenarios for the watchdog tests"};
    comm::Options options;
    comm::add_options(app, options);
    std::string scenario;
    app.add_option("--scenario", scenario, "what the last rank does wrong")
        ->required()
        ->check(CLI::IsMember({"none", "skip", "different", "exit-early", "killed", "killed-mid", "stopped",
                               "count-mismatch", "skip-async", "signalled-allocating", "skip-alltoall",
                               "alltoallv-counts", "type-mismatch"}));
    int culprits = 1;
    app.add_option("--culprits", culprits, "how many ranks, the last ones, misbehave")->check(CLI::PositiveNumber);
    std::size_t count = 4;
    app.add_option("--count", count, "elements of the allreduces (killed-mid: large, so that it lasts)")
        ->check(CLI::PositiveNumber);
    comm::parse(app, argc, argv);
    comm::Communicator& world = runtime.start(options);
    const bool culprit = world.rank() >= world.size() - culprits;

    std::vector<float> gradient(count, 1.0f);
    world.allreduce(std::span(gradient));  // collective #0: everyone
    comm::say("collective #0 done");
    if (culprit) {
      if (scenario == "skip") {  // goes on computing instead of the collective
        std::this_thread::sleep_for(std::chrono::seconds(60));
      } else if (scenario == "different") {
        world.broadcast(std::span(gradient), 0);
      } else if (scenario == "exit-early") {
        return;  // leaves the loop: its runtime shuts down
      } else if (scenario == "killed") {
        std::raise(SIGKILL);                  // as `kill -9` would
      } else if (scenario == "killed-mid") {  // dies a few milliseconds into collective #1
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
          std::raise(SIGKILL);
        }).detach();
        world.allreduce(std::span(gradient));
        std::this_thread::sleep_for(std::chrono::seconds(60));  // a collective faster than 3 ms: die outside it
      } else if (scenario == "stopped") {
        std::raise(SIGSTOP);                  // as `kill -STOP` or Ctrl-Z would: alive, but never runs again
      } else if (scenario == "skip-async" || scenario == "skip-alltoall") {  // skips collective #1
        std::this_thread::sleep_for(std::chrono::seconds(60));
      } else if (scenario == "signalled-allocating") {  // SIGTERM from another process, inside malloc
        signal_me_soon(SIGTERM);
        allocate_for(std::chrono::seconds(60));
      } else if (scenario == "count-mismatch") {
        std::vector<float> longer(8, 1.0f);
        world.allreduce(std::span(longer));
      } else if (scenario == "type-mismatch") {  // the same count, in doubles
        std::vector<double> wider(count, 1.0);
        world.allreduce(std::span(wider));
      }
    }
    const auto n = static_cast<std::size_t>(world.size());
    if (scenario == "skip-alltoall") {  // collective #1: an all-to-all of 4 floats a block
      if (!culprit) {
        std::vector<float> send(4 * n, 1.0f), recv(4 * n);
        world.alltoall(std::span<const float>(send), std::span(recv));
      }
    } else if (scenario == "alltoallv-counts") {  // collective #1: the culprits expect 2 elements from rank 0, not 1
      std::vector<std::size_t> send_counts(n, 1), recv_counts(n, 1);
      if (culprit) recv_counts[0] = 2;
      std::vector<float> send(n, 1.0f), recv(n + 1);
      world.alltoallv(std::span<const float>(send), std::span<const std::size_t>(send_counts), std::span(recv),
                      std::span<const std::size_t>(recv_counts));
    } else if (scenario == "skip-async") {  // collective #1, as ZeRO starts it: in flight while the rank works
      if (!culprit) {
        std::vector<float> send(4 * static_cast<std::size_t>(world.size()), 1.0f);
        comm::Work work = world.reduce_scatter_async(std::span(send), std::span(gradient));
        work.test();
        work.wait();
      }
    } else if (!culprit || scenario == "none") {
      world.allreduce(std::span(gradient));  // collective #1
    }
    comm::say("collective #1 done: sum {}", gradient[0]);
  });
}
