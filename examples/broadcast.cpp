// broadcast: the root's data is copied to every rank.
//   mpiexec -n 4 broadcast [--root 1] [--backend ring]
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "broadcast demo: every rank ends with the root's data", true, false,
                   [](comm::Communicator& world, const demo::Settings& s) {
                     std::vector<int> data(static_cast<std::size_t>(s.count), 0);
                     if (world.rank() == s.root)  // the root holds [7 8 9 ...]
                       for (std::size_t i = 0; i < data.size(); ++i) data[i] = 7 + static_cast<int>(i);
                     comm::say("broadcast from rank {} on {} ranks, backend {}", s.root, world.size(),
                               world.backend_name());
                     demo::show(world, "before:", data);
                     demo::Placed placed(data, s);
                     world.broadcast(placed.span(), s.root);
                     demo::show(world, fmt::format("after broadcast from rank {}", s.root), placed.host());
                   });
}
