// Catch2's implementation without a main, compiled once, for the test programs that write
// their own (mpi_test_main.cpp, test_device.cpp, test_multihost.cpp, …): they call this.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

#include <cstdlib>

int run_catch_session(int argc, char** argv) {
  // The mpiexec jobs the test cases start run as root where CI runs them (in containers):
  // Open MPI refuses that unless told. Set here, so that a plain `ctest` in any build directory
  // works without scripts/env.sh (a variable already set is kept).
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  // Open MPI's session folder, one that ctest keeps (tests/CMakeLists.txt says why).
  setenv("OMPI_MCA_orte_top_session_dir", NANODIST_OMPI_TEST_SESSION_DIR, 0);
  Catch::Session session;
  if (session.applyCommandLine(argc, argv) != 0) return -1;
  return session.run();
}
