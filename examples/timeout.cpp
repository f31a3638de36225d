// The timeout demo: the last rank skips one allreduce, as a bug in a training loop would.
// The others wait in it — and instead of hanging forever, after --timeout seconds each
// prints the watchdog's report: which collective, which rank never arrived, and what that
// rank is doing instead. Then the whole job ends with a non-zero status (3).
//   mpiexec -n 4 timeout --timeout 3
#include "demo.hpp"

int main(int argc, char** argv) {
  // A short default deadline for the demo (the library's default is 300 s).
  if (!std::getenv("NANODIST_TIMEOUT")) setenv("NANODIST_TIMEOUT", "3", 1);
  return demo::run(argc, argv, "timeout demo: one rank skips a collective; the watchdog reports it", false, false,
                   [](comm::Communicator& world, const demo::Settings&) {
                     if (world.size() < 2)
                       throw comm::UsageError(
                           "the timeout demo needs at least 2 ranks (one skips a collective "
                           "the others wait in): mpiexec -n 4 timeout");
                     std::vector<float> gradient(1024, 1.0f);
                     world.allreduce(std::span(gradient));  // step 0: everybody takes part
                     comm::say("step 0: allreduce done on all {} ranks", world.size());
                     const bool skip = world.rank() == world.size() - 1;
                     if (!skip) world.allreduce(std::span(gradient));  // step 1: the last rank forgot it
                     world.barrier();  // the last rank waits here: a different collective
                     comm::say("not reached: the job ends in the watchdog");
                   });
}
