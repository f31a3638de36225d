// Catch2's implementation without a main, compiled once, for the test programs that write
// their own (mpi_test_main.cpp, test_device.cpp, test_multihost.cpp, …): they call this.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

int run_catch_session(int argc, char** argv) {
  Catch::Session session;
  if (session.applyCommandLine(argc, argv) != 0) return -1;
  return session.run();
}
