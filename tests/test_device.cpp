// comm on device memory, through the real programs under mpiexec. Which half runs depends on
// the machine, decided once at start by asking comm_bench for a device:
//
//   no GPU (CI, these machines)   ctest device_errors: --device cuda and --backend nccl end in
//                                 one line naming why (no device, or no CUDA in this build)
//   a GPU (the lent H100/H200)    ctest gpu_comm (label gpu): nccl at world size 1 on every
//                                 collective, type and reduction, in place and out; the staged
//                                 mpi, ring and naive backends with 2-4 ranks sharing the GPU;
//                                 the demos on device memory; a host buffer handed to nccl;
//                                 the watchdog on an injected NCCL stall
//
// Each ctest reports itself skipped (exit 77), not passed, on the machine it does not fit.
// On the GPU machine (docs/backends.md, "Running the GPU tests"): NANODIST_DEVICE_BIN=<folder
// with comm_bench, allreduce> MPIEXEC=mpiexec test_device [gpu]
// comm_bench checks every element of every result (#wrong), copied back from the device.
#include <catch2/catch.hpp>

#include "catch_session.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "run_command.hpp"

namespace {

// Where the programs are: the build's, or (on the lent GPU machine, where the build folder
// does not travel) $NANODIST_DEVICE_BIN holding comm_bench and allreduce, run by $MPIEXEC.
std::string program(const std::string& name, const char* built) {
  const char* folder = std::getenv("NANODIST_DEVICE_BIN");
  return folder ? std::string(folder) + "/" + name : std::string(built);
}

std::string launch(int ranks, const std::string& command) {
  const char* mpiexec = std::getenv("MPIEXEC");
  return fmt::format("{} --oversubscribe -n {} {}", mpiexec ? mpiexec : NANODIST_MPIEXEC, ranks, command);
}

CommandResult comm_bench(int ranks, const std::string& args, const std::string& env = "") {
  CommandResult r = run_command(env + " " + launch(ranks, program("comm_bench", COMM_BENCH) + " " + args));
  UNSCOPED_INFO("$ " << env << " mpiexec -n " << ranks << " comm_bench " << args << "\n" << r.output);
  return r;
}

CommandResult demo(int ranks, const std::string& name, const std::string& args) {
  CommandResult r =
      run_command(launch(ranks, program(name, (std::string(EXAMPLES_DIR) + "/" + name).c_str()) + " " + args));
  UNSCOPED_INFO("$ mpiexec -n " << ranks << " " << name << " " << args << "\n" << r.output);
  return r;
}

// One line naming what is wrong, exit status 2.
void one_line_usage_error(const CommandResult& r, const std::string& expected) {
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(expected));
  CHECK_THAT(r.output, !Catch::Contains("terminate called") && !Catch::Contains("Segmentation"));
}

void all_right(const CommandResult& r) {
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("# wrong elements in all: 0"));
}

const char* kSmall = "-b 8 -e 1M -f 64 -n 2 -w 1";

}  // namespace

TEST_CASE("without a GPU: --device cuda and --backend nccl are one line naming why", "[no-gpu]") {
#ifdef NANODIST_HAVE_CUDA
  const std::string why = "--device cuda: no CUDA device";  // the runtime is here, a GPU (or driver) is not
#else
  const std::string why = "--device cuda: this build has no CUDA";
#endif
  one_line_usage_error(comm_bench(2, "--device cuda -b 8 -e 8"), why);
  one_line_usage_error(demo(2, "allreduce", "--device cuda"), why);
#ifdef NANODIST_HAVE_NCCL
  one_line_usage_error(demo(2, "allreduce", "--backend nccl"), "--backend nccl (one GPU per rank): ");
#else
  one_line_usage_error(demo(2, "allreduce", "--backend nccl"),
                       "backend 'nccl' is not in this build (it has mpi, ring, naive, shm): configure with "
                       "NANODIST_WITH_CUDA=ON");
  one_line_usage_error(comm_bench(2, "--compare mpi,nccl"), "backend 'nccl' is not in this build");
#endif
  // Host memory is never staged or checked: the CPU backends run as ever.
  all_right(comm_bench(2, std::string("--compare mpi,ring,naive ") + kSmall));
}

TEST_CASE("nccl at world size 1: every collective, type and reduction, in place and out", "[gpu]") {
  for (const char* op :
       {"allreduce", "reduce", "broadcast", "allgather", "gather", "scatter", "reduce_scatter", "sendrecv"})
    for (const char* type : {"float", "double", "int32", "int64", "bf16"})  // both forms where there are two
      all_right(comm_bench(1, fmt::format("--device cuda --backend nccl --op {} -d {} {}", op, type, kSmall)));
  for (const char* reduction : {"sum", "prod", "min", "max", "avg"})
    all_right(comm_bench(1, fmt::format("--device cuda --backend nccl -o {} -d double {}", reduction, kSmall)));
}

TEST_CASE("the CPU backends on device memory: staged, 2-4 ranks sharing the GPU", "[gpu]") {
  for (int n : {2, 3, 4})
    for (const char* op :
         {"allreduce", "reduce", "broadcast", "allgather", "gather", "scatter", "reduce_scatter", "sendrecv"})
      all_right(comm_bench(n, fmt::format("--device cuda --compare mpi,ring,naive --op {} {}", op, kSmall)));
  auto shown = demo(3, "allreduce", "--device cuda");
  CHECK(shown.status == 0);
  CHECK_THAT(shown.output, Catch::Contains("every rank holds [3 3 3]"));  // 0 + 1 + 2, computed on the GPU's data
}

TEST_CASE("nccl: the demos on device memory; a host buffer is one line", "[gpu]") {
  auto shown = demo(1, "allreduce", "--backend nccl --device cuda --op max");
  CHECK(shown.status == 0);
  CHECK_THAT(shown.output, Catch::Contains("after allreduce(max)"));
  one_line_usage_error(demo(1, "allreduce", "--backend nccl"), "the nccl backend takes device memory");
}

TEST_CASE("a stuck NCCL call: the watchdog aborts the communicator and reports", "[gpu]") {
  auto stuck = comm_bench(1, "--device cuda --backend nccl --timeout 3 -b 8 -e 8", "NANODIST_NCCL_STALL=1");
  CHECK(stuck.status != 0);
  CHECK(stuck.seconds < 3 + 20);
  CHECK_THAT(stuck.output, Catch::Contains("[watchdog]"));
  CHECK_THAT(stuck.output, Catch::Contains("timed out"));
}

int main(int argc, char** argv) {
  // Is there a device? comm_bench answers in one line when there is none.
  const CommandResult probe =
      run_command(launch(1, program("comm_bench", COMM_BENCH) + " --device cuda -b 8 -e 8 -n 1 -w 0"));
  const bool gpu = probe.status == 0;
  std::string wanted;  // the tag ctest (or the user) passes: [gpu] or [no-gpu], among Catch2's options
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "[gpu]" || std::string_view(argv[i]) == "[no-gpu]") wanted = argv[i];
  if ((wanted == "[gpu]" && !gpu) || (wanted == "[no-gpu]" && gpu)) {
    std::printf("skipped: %s\n", gpu ? "this machine has a GPU (the [gpu] tests run instead)"
                                     : "no GPU here (the [no-gpu] tests run instead)");
    return 77;
  }
  const int failed = run_catch_session(argc, argv);
  return failed < 0 ? 2 : failed;
}
