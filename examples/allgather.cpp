// allgather: every rank contributes x_r; afterwards every rank holds [x_0 x_1 ... x_{n-1}].
//   mpiexec -n 4 allgather [--count 2] [--backend ring]
#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "allgather demo: every rank ends with every rank's data, in rank order", false, false,
                   [](comm::Communicator& world, const demo::Settings& s) {
                     std::vector<int> data(static_cast<std::size_t>(s.count), world.rank());
                     std::vector<int> all(data.size() * static_cast<std::size_t>(world.size()));
                     comm::say("allgather on {} ranks, backend {}", world.size(), world.backend_name());
                     demo::show(world, "before:", data);
                     demo::Placed in(data, s), out(all, s);
                     world.allgather(std::span<const int>(in.span()), out.span());
                     demo::show(world, "after allgather", out.host());
                   });
}
