// The model-parallel toy from the lecture: y = w0·x0 + w1·x1 + ... + w_{n-1}·x_{n-1},
// with rank r holding only its weight w_r (and input x_r). The partial sum travels down
// the ranks with send/recv, each adding its term — a pipeline of one number.
//
//   rank 0: p = w0·x0 ──send──▶ rank 1: p += w1·x1 ──send──▶ rank 2: y = p + w2·x2
//
//   mpiexec -n 3 model_parallel
#include <fmt/format.h>

#include "demo.hpp"

int main(int argc, char** argv) {
  return demo::run(argc, argv, "model-parallel toy: a dot product split across ranks, passed along with send/recv",
                   false, false, [](comm::Communicator& world, const demo::Settings&) {
                     const int r = world.rank();
                     const int n = world.size();
                     const double w = r + 1.0;        // this rank's weight
                     const double x = 2.0 * r + 1.0;  // this rank's input
                     comm::say("model-parallel toy on {} ranks: rank r holds w_r = r+1 and x_r = 2r+1", n);
                     double partial = 0;
                     if (r > 0) world.recv(std::span(&partial, 1), r - 1);
                     const double received = partial;
                     partial += w * x;
                     if (r + 1 < n) world.send(std::span<const double>(&partial, 1), r + 1);
                     // Report in rank order: each rank sends its line's numbers to rank 0.
                     std::vector<double> mine = {received, w, x, partial};
                     std::vector<double> all(r == 0 ? 4 * static_cast<std::size_t>(n) : 0);
                     world.gather(std::span<const double>(mine), std::span(all), 0);
                     if (r != 0) return;
                     double expected = 0;
                     for (int k = 0; k < n; ++k) {
                       const double* v = &all[4 * static_cast<std::size_t>(k)];
                       comm::say("  rank {}: received {:g}, adds w{}·x{} = {:g}·{:g}, passes on {:g}", k, v[0], k, k,
                                 v[1], v[2], v[3]);
                       expected += v[1] * v[2];
                     }
                     comm::say("y = {:g} (computed on one rank: {:g})", all[4 * static_cast<std::size_t>(n) - 1],
                               expected);
                   });
}
