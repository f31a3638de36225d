// gather: every rank contributes x_r; afterwards the root holds [x_0 x_1 ... x_{n-1}].
//   mpiexec -n 4 gather [--root 0] [--backend ring]
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "gather demo: the root ends with every rank's data, in rank order", true, false,
      [](comm::Communicator& world, const demo::Settings& s) {
        std::vector<int> data(static_cast<std::size_t>(s.count), world.rank());
        std::vector<int> all(world.rank() == s.root ? data.size() * static_cast<std::size_t>(world.size()) : 0);
        comm::say("gather to rank {} on {} ranks, backend {}", s.root, world.size(), world.backend_name());
        demo::show(world, "before:", data);
        demo::Placed in(data, s), out(all, s);
        world.gather(std::span<const int>(in.span()), out.span(), s.root);
        demo::show(world, fmt::format("after gather to rank {} (result buffers):", s.root), out.host());
      });
}
