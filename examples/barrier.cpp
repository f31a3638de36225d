// barrier: no rank leaves before every rank has arrived.
// Rank r arrives r × 100 ms late; every rank leaves right after the last one arrives.
//   mpiexec -n 4 barrier [--backend ring]
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "barrier demo: nobody leaves before everybody has arrived", false, false,
      [](comm::Communicator& world, const demo::Settings&) {
        using clock = std::chrono::steady_clock;  // system-wide on one machine
        auto ms = [](clock::time_point t) {
          return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() %
                                  1000000000);
        };
        comm::say("barrier on {} ranks, backend {}; rank r arrives r × 100 ms late", world.size(),
                  world.backend_name());
        world.barrier();
        std::this_thread::sleep_for(std::chrono::milliseconds(100 * world.rank()));
        const int arrived = ms(clock::now());
        world.barrier();
        const int left = ms(clock::now());
        std::vector<int> times = {arrived, left};
        std::vector<int> all(2 * static_cast<std::size_t>(world.size()));
        world.gather(std::span<const int>(times), std::span(all), 0);
        if (world.rank() != 0) return;
        int last_arrival = 0, first_departure = all[1];
        for (int r = 0; r < world.size(); ++r) {
          last_arrival = std::max(last_arrival, all[2 * r]);
          first_departure = std::min(first_departure, all[2 * r + 1]);
        }
        for (int r = 0; r < world.size(); ++r)
          comm::say("  rank {} arrived at +{} ms, left at +{} ms", r, all[2 * r] - all[0], all[2 * r + 1] - all[0]);
        comm::say("first departure {} the last arrival: {}", first_departure >= last_arrival ? "after" : "BEFORE",
                  first_departure >= last_arrival ? "the barrier held" : "the barrier is broken");
      });
}
