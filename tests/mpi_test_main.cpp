// Catch2 main for tests that run under mpiexec: every rank runs every test case in the same
// order (so their collectives match), and the job fails if any rank failed.
// Use CHECK, not REQUIRE, around collectives: a REQUIRE that stops one rank early would
// leave the others waiting in its next collective (the watchdog would end the job).
#include <catch2/catch.hpp>

#include "catch_session.hpp"

#include "comm/runtime.hpp"

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  int failed = 1;
  int status = runtime.run([&] {
    comm::Options options;
    options.timeout_s = 120;  // a hang in a test ends as a report, not a CI time-out
    comm::Communicator& world = runtime.start(options);
    const int result = run_catch_session(argc, argv);
    if (result < 0) throw comm::UsageError("bad Catch2 arguments");
    int mine = result != 0 ? 1 : 0;
    world.allreduce(std::span<const int>(&mine, 1), std::span<int>(&failed, 1), comm::ReduceOp::max);
  });
  return status != 0 ? status : failed;
}
