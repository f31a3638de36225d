// reduce: every rank contributes x_r; afterwards only the root holds x_0 op ... op x_{n-1}.
//   mpiexec -n 4 reduce [--root 2] [--op sum] [--backend ring]
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "reduce demo: the root ends with the reduction of all ranks' data", true, true,
      [](comm::Communicator& world, const demo::Settings& s) {
        std::vector<int> data(static_cast<std::size_t>(s.count), world.rank());  // rank r holds [r r r]
        std::vector<int> result(world.rank() == s.root ? data.size() : 0);
        comm::say("reduce({}) to rank {} on {} ranks, backend {}", s.op, s.root, world.size(), world.backend_name());
        demo::show(world, "before:", data);
        demo::Placed in(data, s), out(result, s);
        world.reduce(std::span<const int>(in.span()), out.span(), comm::parse_reduce_op(s.op), s.root);
        demo::show(world, fmt::format("after reduce({}) to rank {} (result buffers):", s.op, s.root), out.host());
      });
}
