// Catch2's implementation without a main, compiled once, for the test programs that write
// their own (mpi_test_main.cpp, test_device.cpp, test_multihost.cpp, …): they call this.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

int run_catch_session(int argc, char** argv) {
  // The mpiexec jobs the test cases start run as root where CI runs them (in containers):
  // Open MPI refuses that unless told. Set here, so that a plain `ctest` in any build directory
  // works without scripts/env.sh (a variable already set is kept).
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  // Open MPI's session folder, unless one is set (an MPI test's ranks have theirs): one of this
  // process's own inside the folder ctest keeps (tests/CMakeLists.txt says why), holding a file
  // so that no job's clean-up removes it while another job of this test starts; removed when the
  // test cases end.
  std::filesystem::path own_folder;
  std::error_code ignored;
  if (std::getenv("OMPI_MCA_orte_top_session_dir") == nullptr) {
    own_folder = std::filesystem::path(NANODIST_OMPI_TEST_SESSION_DIR) / ("run." + std::to_string(getpid()));
    std::filesystem::remove_all(own_folder, ignored);  // a dead process's of the same pid
    std::filesystem::create_directories(own_folder / "kept", ignored);
    std::ofstream(own_folder / "kept" / "why") << "the jobs of one nanodist test program\n";
    setenv("OMPI_MCA_orte_top_session_dir", own_folder.c_str(), 1);
  }
  Catch::Session session;
  const int result = session.applyCommandLine(argc, argv) != 0 ? -1 : session.run();
  if (!own_folder.empty()) std::filesystem::remove_all(own_folder, ignored);
  return result;
}
