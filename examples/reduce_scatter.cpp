// reduce_scatter: every rank holds n blocks; afterwards rank r holds block r reduced over all ranks.
// (allreduce = reduce_scatter followed by allgather: the ring allreduce does exactly that.)
//   mpiexec -n 4 reduce_scatter [--op sum] [--count 2] [--backend ring]
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "reduce_scatter demo: rank r ends with block r of the reduction", false, true,
                   [](comm::Communicator& world, const demo::Settings& s) {
                     const auto count = static_cast<std::size_t>(s.count);
                     std::vector<int> data(count * static_cast<std::size_t>(world.size()));
                     for (std::size_t i = 0; i < data.size(); ++i) data[i] = world.rank() + static_cast<int>(i);
                     std::vector<int> mine(count);
                     comm::say("reduce_scatter({}) on {} ranks, {} elements per block, backend {}", s.op, world.size(),
                               count, world.backend_name());
                     demo::show(world, "before:", data);
                     demo::Placed in(data, s), out(mine, s);
                     world.reduce_scatter(std::span<const int>(in.span()), out.span(), comm::parse_reduce_op(s.op));
                     demo::show(world, fmt::format("after reduce_scatter({}):", s.op), out.host());
                   });
}
