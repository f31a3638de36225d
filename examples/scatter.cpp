// scatter: the root holds n blocks; afterwards rank r holds block r.
//   mpiexec -n 4 scatter [--root 0] [--backend ring]
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "scatter demo: rank r ends with block r of the root's data", true, false,
                   [](comm::Communicator& world, const demo::Settings& s) {
                     const auto count = static_cast<std::size_t>(s.count);
                     std::vector<int> blocks;
                     if (world.rank() == s.root)  // block r is [r r ...]
                       for (int r = 0; r < world.size(); ++r) blocks.insert(blocks.end(), count, r);
                     std::vector<int> mine(count, -1);
                     comm::say("scatter from rank {} on {} ranks, backend {}", s.root, world.size(),
                               world.backend_name());
                     demo::show(world, "before (what each rank sends):", blocks);
                     demo::Placed in(blocks, s), out(mine, s);
                     world.scatter(std::span<const int>(in.span()), out.span(), s.root);
                     demo::show(world, fmt::format("after scatter from rank {}:", s.root), out.host());
                   });
}
