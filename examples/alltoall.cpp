// alltoall: every rank has a block for every rank; afterwards rank r holds every rank's block
// for r, in rank order — the ranks' blocks transposed. Rank r's block for rank j holds 10·r + j:
//
//   before   rank 0: [0 1 2]     rank 1: [10 11 12]   rank 2: [20 21 22]
//   after    rank 0: [0 10 20]   rank 1: [1 11 21]    rank 2: [2 12 22]
//
//   mpiexec -n 3 alltoall [--count 2] [--backend ring]
#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "alltoall demo: block j of rank r goes to rank j, which keeps it at place r", false,
                   false, [](comm::Communicator& world, const demo::Settings& s) {
                     const auto n = static_cast<std::size_t>(world.size()), count = static_cast<std::size_t>(s.count);
                     std::vector<int> blocks(count * n), received(count * n);
                     for (std::size_t j = 0; j < n; ++j)  // block j: for rank j
                       std::fill_n(blocks.begin() + static_cast<std::ptrdiff_t>(j * count), count,
                                   10 * world.rank() + static_cast<int>(j));
                     comm::say("alltoall on {} ranks, backend {}: block j of each rank goes to rank j", world.size(),
                               world.backend_name());
                     demo::show(world, "before:", blocks);
                     demo::Placed in(blocks, s), out(received, s);
                     world.alltoall(std::span<const int>(in.span()), out.span());
                     demo::show(world, "after alltoall:", out.host());
                   });
}
