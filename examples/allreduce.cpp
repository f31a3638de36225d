// allreduce: every rank contributes x_r; afterwards every rank holds x_0 op x_1 op ... op x_{n-1}.
//   mpiexec -n 4 allreduce [--backend ring] [--op max]
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "allreduce demo: every rank ends with the reduction of all ranks' data", false, true,
                   [](comm::Communicator& world, const demo::Settings& s) {
                     std::vector<int> data(static_cast<std::size_t>(s.count), world.rank());  // rank r holds [r r r]
                     comm::say("allreduce({}) on {} ranks, backend {}", s.op, world.size(), world.backend_name());
                     demo::show(world, "before:", data);
                     demo::Placed placed(data, s);
                     world.allreduce(placed.span(), comm::parse_reduce_op(s.op));
                     demo::show(world, fmt::format("after allreduce({})", s.op), placed.host());
                   });
}
