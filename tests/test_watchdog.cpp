// The watchdog under mpiexec, with a 2 s deadline: a rank skips a collective, calls a
// different one, exits early, is killed, is signalled from outside while it allocates, or
// (check mode) passes a different count. Each run must end with a non-zero status within
// deadline + 10 s, and its report must name the operation and the rank that is missing or
// differs.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "comm/watchdog/status_board.hpp"
#include "comm/watchdog/watchdog.hpp"
#include "run_command.hpp"

namespace {

constexpr double kDeadline = 2.0;

CommandResult scenario(int ranks, const std::string& name, const std::string& backend, const std::string& extra = "") {
  return run_command(
      mpirun(ranks, FAULT_SCENARIOS,
             fmt::format("--scenario {} --timeout {} --backend {} {}", name, kDeadline, backend, extra)));
}

void ended_by_watchdog(const CommandResult& r) {
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.seconds < kDeadline + 10);
  CHECK_THAT(r.output, !Catch::Contains("collective #1 done"));
}

}  // namespace

TEST_CASE("a correct run passes through the watchdog untouched") {
  for (int n : {2, 3}) {
    auto r = scenario(n, "none", "ring", "--check-collectives");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains(fmt::format("collective #1 done: sum {}", n * n)));
    CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
  }
}

// The skipped call is a blocking allreduce, or (skip-async) a reduce-scatter the others
// started asynchronously, as ZeRO does, and wait for: the watchdog sees both alike, also when
// the communication thread runs it (--progress thread) while the program's thread waits.
TEST_CASE("a rank that skips a collective, blocking or asynchronous, is named, with what it does instead") {
  struct Case {
    int n;
    const char* backend;
    const char* scenario_name;
    const char* call;
    const char* extra;
  };
  for (auto [n, backend, name, call, extra] :
       {Case{2, "mpi", "skip", "allreduce", ""}, Case{3, "ring", "skip", "allreduce", ""},
        Case{2, "ring", "skip-async", "reduce_scatter", ""}, Case{3, "mpi", "skip-async", "reduce_scatter", ""},
        Case{2, "shm", "skip-async", "reduce_scatter", "--progress thread"},
        Case{3, "ring", "skip-async", "reduce_scatter", "--progress thread"}}) {
    auto r = scenario(n, name, backend, extra);
    ended_by_watchdog(r);
    INFO(r.output);
    CHECK(r.status == 3);
    // shm's communicator makes its segment as its first call (#0): the program's calls come after.
    const int first = std::string(backend) == "shm" ? 1 : 0, skipped = first + 1;
    // The thread's report says where the call ran: the teeth that it really ran there.
    const char* where = std::string(extra).empty() ? "" : " on the communication thread";
    CHECK_THAT(r.output, Catch::Contains(fmt::format("{} #{} on 'world' (count 4 float, op sum){} timed out", call,
                                                     skipped, where)));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("not arrived: rank {}", n - 1)));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("rank {} is not in any collective", n - 1)));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("its last call, allreduce #{} on 'world'", first)));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("[watchdog] diagnosis: rank {} never called {} #{}: not in "
                                                     "any collective where rank{} called {} #{}",
                                                     n - 1, call, skipped, n == 2 ? " 0" : "s 0-1", call, skipped)));
  }
}

TEST_CASE("a rank that skips an all-to-all is named, and check mode refuses alltoallv counts that disagree, naming the pair") {
  for (auto [n, backend] : {std::pair{3, "ring"}, std::pair{2, "shm"}}) {
    auto r = scenario(n, "skip-alltoall", backend);
    ended_by_watchdog(r);
    INFO(r.output);
    CHECK(r.status == 3);
    const int skipped = std::string(backend) == "shm" ? 2 : 1;  // (shm's first call makes its segment)
    CHECK_THAT(r.output, Catch::Contains(fmt::format("alltoall #{} on 'world' (count 4 float) timed out", skipped)));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("[watchdog] diagnosis: rank {} never called alltoall #{}", n - 1,
                                                     skipped)));
  }
  auto r = scenario(3, "alltoallv-counts", "mpi", "--check-collectives");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.seconds < kDeadline + 10);
  CHECK_THAT(r.output, Catch::Contains("alltoallv on 'world': rank 0 sends 1 elements to rank 2, which expects 2 "
                                       "(check mode)"));
  CHECK_THAT(r.output, !Catch::Contains("collective #1 done"));
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));  // refused before anything waits
}

TEST_CASE("a rank that calls a different collective is named, with that collective") {
  for (auto [n, backend] : {std::pair{2, "naive"}, std::pair{3, "mpi"}}) {
    auto r = scenario(n, "different", backend);
    ended_by_watchdog(r);
    INFO(r.output);
    CHECK(r.status == 3);
    // Whichever rank reports, the diagnosis is the same: the odd one out is named.
    CHECK_THAT(r.output, Catch::Contains(fmt::format("[watchdog] diagnosis: rank {} called broadcast #1 where rank{} "
                                                     "called allreduce #1",
                                                     n - 1, n == 2 ? " 0" : "s 0-1")));
    CHECK_THAT(r.output, Catch::Contains("waiting in a different call"));
    CHECK(r.output.find("[watchdog] diagnosis") == r.output.rfind("[watchdog] diagnosis"));  // one report
  }
}

TEST_CASE("a rank that exits early is named as shutting down") {
  for (auto [n, backend] : {std::pair{2, "ring"}, std::pair{3, "naive"}}) {
    auto r = scenario(n, "exit-early", backend);
    ended_by_watchdog(r);
    INFO(r.output);
    CHECK(r.status == 3);
    CHECK_THAT(r.output, Catch::Contains("allreduce #1 on 'world'"));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("rank {} has finished its work and is shutting down", n - 1)));
    CHECK_THAT(r.output,
               Catch::Contains(fmt::format("diagnosis: rank {} finished without calling allreduce #1", n - 1)));
  }
}

TEST_CASE("a killed rank ends the job quickly, and the survivors name it") {
  for (auto [n, backend] : {std::pair{2, "mpi"}, std::pair{3, "ring"}}) {
    auto r = scenario(n, "killed", backend);
    ended_by_watchdog(r);
    INFO(r.output);
    CHECK_THAT(r.output, Catch::Contains("allreduce #1 on 'world'"));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("rank {} is dead", n - 1)));
    CHECK_THAT(r.output, !Catch::Contains("ORTE_ERROR_LOG"));
  }
}

TEST_CASE("a rank signalled from outside while it allocates says so and ends the job, without hanging in its handler") {
  // The signal handler must not allocate: a SIGTERM that lands inside malloc would leave the
  // rank waiting for malloc's lock forever, and the others until their deadline.
  for (auto [n, backend] : {std::pair{2, "mpi"}, std::pair{3, "shm"}}) {
    auto r = run_command(
        mpirun(n, FAULT_SCENARIOS, fmt::format("--scenario signalled-allocating --timeout 10 --backend {}", backend)));
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK_THAT(r.output, Catch::Contains(fmt::format("rank {} received SIGTERM from process ", n - 1)));
    CHECK_THAT(r.output, Catch::Contains("interrupted (SIGTERM)"));  // rank 0's note: a Ctrl-C, not a failure
    CHECK_THAT(r.output, !Catch::Contains("timed out"));
    CHECK_THAT(r.output, !Catch::Contains("collective #1 done"));
  }
}

TEST_CASE("check mode names the rank whose arguments differ, before any data moves") {
  for (auto [n, backend] : {std::pair{2, "ring"}, std::pair{3, "mpi"}}) {
    auto r = scenario(n, "count-mismatch", backend, "--check-collectives");
    ended_by_watchdog(r);
    INFO(r.output);
    CHECK(r.status == 3);
    CHECK_THAT(r.output, Catch::Contains("disagree on collective #1"));
    CHECK_THAT(r.output, Catch::Contains(fmt::format("rank {} called allreduce #1 (count 8 float, op sum)", n - 1)));
    CHECK_THAT(r.output, Catch::Contains("called allreduce #1 (count 4 float, op sum)"));
  }
}

// Ranks that pass one collective different sizes (or types) meet at its first message, which
// is longer or shorter than the receive it lands in: the report then, without check mode and
// long before the deadline (60 s here), its diagnosis naming each rank's count and type. (shm
// meets at its first sync instead: its own case below.)
TEST_CASE("ring + naive + mpi: a rank that passes another size or type is named when the ranks meet") {
  struct Case {
    int n;
    const char* backend;
    const char* scenario_name;
    const char* what;  // the diagnosis's words
    const char* theirs;
  };
  for (const auto& [n, backend, name, what, theirs] :
       {Case{2, "ring", "count-mismatch", "the sizes disagree", "count 8 float"},
        Case{3, "naive", "count-mismatch", "the sizes disagree", "count 8 float"},
        Case{2, "mpi", "count-mismatch", "the sizes disagree", "count 8 float"},
        Case{3, "ring", "type-mismatch", "the types disagree", "count 4 double"}}) {
    auto r = run_command(
        mpirun(n, FAULT_SCENARIOS, fmt::format("--scenario {} --timeout 60 --backend {}", name, backend)));
    INFO(backend << " on " << n << " ranks, " << name << ":\n" << r.output);
    CHECK(r.status == comm::kWatchdogExitCode);
    CHECK(r.seconds < 30);
    CHECK_THAT(r.output, !Catch::Contains("timed out") && !Catch::Contains("collective #1 done"));
    CHECK_THAT(r.output, Catch::Contains(what) && Catch::Contains(theirs) && Catch::Contains("count 4 float, op sum"));
  }
}

namespace {
// The shm segments this machine holds now (their names start with "nanodist-").
std::vector<std::string> shm_segments() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().starts_with("nanodist-")) names.push_back(entry.path().filename());
  return names;
}
}  // namespace

// shm waits on flags in memory, not on MPI: the same reports must come from its waits, and no
// segment may be left in /dev/shm whatever happened (each is unlinked once every rank maps it).
TEST_CASE(
    "shm: a rank that skips, exits early, is killed (before or during), stopped or (check mode) passes another count "
    "is named, and /dev/shm is left empty") {
  struct Case {
    int n;
    const char* scenario_name;
    std::string expected;
    std::string extra = "";
  };
  for (const auto& [n, name, expected, extra] :
       {Case{2, "skip", "not arrived: rank 1"},
        Case{2, "different", "diagnosis: rank 1 called broadcast #2 where rank 0 called allreduce #2"},
        Case{3, "count-mismatch", "allreduce #2 on 'world' (count 8 float, op sum)"},
        Case{2, "count-mismatch", "— the sizes disagree"},
        Case{2, "type-mismatch", "the types disagree"},
        Case{3, "count-mismatch", "rank 2 called allreduce #2 (count 8 float, op sum)", "--check-collectives"},
        Case{3, "exit-early", "rank 2 has finished its work and is shutting down"}, Case{3, "killed", "rank 2 is dead"},
        Case{2, "stopped", "rank 1 is stopped"}, Case{2, "killed-mid", "rank 1 is dead"},
        Case{3, "none", "collective #1 done: sum 9"}}) {
    // killed-mid: a 128 MB allreduce (single copy), the culprit killed a few ms into it
    auto r = scenario(n, name, "shm", std::string(name) == "killed-mid" ? "--count 33554432" : extra);
    INFO(r.output);
    if (std::string(name) == "none") {
      CHECK(r.status == 0);
    } else {
      ended_by_watchdog(r);
      // Ranks in one call with other arguments meet at its first sync: the report then, not at the deadline.
      if (std::string(name).ends_with("mismatch") && extra.empty()) {
        CHECK(r.status == 3);
        CHECK_THAT(r.output, Catch::Contains("found a rank in this collective with other arguments") &&
                                 !Catch::Contains("timed out") && Catch::Contains("is in the same call, allreduce #2"));
        // Both counts (or types) named, whichever rank reports.
        if (n == 2 && std::string(name) == "count-mismatch")
          CHECK_THAT(r.output, Catch::Contains("count 8 float, op sum") && Catch::Contains("count 4 float, op sum"));
      }
      // #2: making shm's segment was the world's call #0 (as nccl's set-up is)
      CHECK_THAT(r.output,
                 Catch::Contains(extra.empty() ? "allreduce #2 on 'world' (count " : "disagree on collective #2"));
    }
    CHECK_THAT(r.output, Catch::Contains(expected));
    CHECK(shm_segments().empty());
  }
}

// The watchdog knows a rank's process by its pid and its start time: once the rank is gone, a
// new process given the same pid (pids are reused) must not pass for it.
TEST_CASE("a rank's process is its pid and its start time: a reused pid is not the rank") {
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  const std::int64_t started = comm::process_start_time(child);
  CHECK(started > 0);
  CHECK(comm::process_state(child, started) == comm::ProcessState::running);
  CHECK(comm::process_state(child, started + 1) == comm::ProcessState::gone);  // the same pid, another process
  CHECK(comm::process_state(child) == comm::ProcessState::running);            // no start time: any process
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK(comm::process_state(child, started) == comm::ProcessState::gone);
  CHECK(comm::process_start_time(child) == 0);
}
