// train_dp stopped from outside: Ctrl-C, SIGTERM to one rank, a scheduler's SIGUSR1, a second
// interrupt. The cases are [alone]: they run with no other test beside them.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "nn/atomic_file.hpp"
#include "nn/checkpoint.hpp"
#include "nn/rng.hpp"
#include "train_dp_cases.hpp"
#include "trainers/batches.hpp"

namespace {
// A long run that logs every 20th step. After a Ctrl-C mpiexec reads none of the ranks' output
// until it ends them (about 2 s), and a rank that writes a line per 2-ms step fills its pipe
// and blocks there, killed before it can save (docs/trainers.md, "Stopping a run").
const std::string quiet_stop = " --max-iters 1000000 --log-interval 20";
}  // namespace

TEST_CASE("Ctrl-C: the ranks save the step they stop at, and one line says it and how to resume", "[alone]") {
  fs::remove_all(out("interrupted"));
  const fs::path log = work_dir() / "interrupted.log";
  const std::string command = mpirun(
      2, TRAIN_DP, tiny(shakespeareish()) + quiet_stop + " --ckpt-interval 50 --out-dir " + out("interrupted"));
  // Start the job, wait until its first checkpoint exists, then press Ctrl-C (SIGINT to mpiexec).
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do [ -f {}/state.json ] && break; sleep 0.1; done; kill -INT $pid; "
      "wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint("interrupted").string(), log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("SIGTERM: the job stops after this step and saves a checkpoint there"));
  // Not the last multiple of --ckpt-interval: the step it stopped at, saved there.
  const long stopped_at = interrupted_step(r.output);
  CHECK(stopped_at > 50);
  CHECK_THAT(r.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  CHECK(nn::read_checkpoint_info(checkpoint("interrupted")).train_state.at("step") == stopped_at);
  // The launcher as it was run, its own flags too (mpirun() adds --oversubscribe), and the
  // flags typed that the checkpoint does not keep (how often to log, the deadline, …).
  CHECK_THAT(r.output, Catch::Contains("resume with: " + mpirun(2, TRAIN_DP, "--resume --out-dir")));
  const std::string resume_line = r.output.substr(r.output.find("resume with: "));
  CHECK_THAT(resume_line.substr(0, resume_line.find('\n')), Catch::Contains("--log-interval 20"));
  CHECK_THAT(r.output, !Catch::Contains("exit=0"));
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
  // And the checkpoint it names resumes; a checkpoint.tmp that an interrupt left half-written
  // (made here by hand) is gone after it.
  const fs::path half_written = fs::path(out("interrupted")) / "checkpoint.tmp";
  fs::create_directories(half_written);
  std::ofstream(half_written / "model.safetensors") << "half";
  CHECK(train_dp(2, tiny(shakespeareish()) + " --resume --max-iters 9 --out-dir " + out("interrupted")).status == 0);
  CHECK_FALSE(fs::exists(half_written));
}

TEST_CASE("SIGTERM to one rank from outside the launcher: that rank is named, and all ranks stop together, saved",
          "[alone]") {
  fs::remove_all(out("one_rank_signalled"));
  const fs::path log = work_dir() / "one_rank_signalled.log";
  const std::string command =
      mpirun(2, TRAIN_DP,
             tiny(shakespeareish()) + quiet_stop + " --ckpt-interval 3 --out-dir " + out("one_rank_signalled"));
  // Rank 1 is the train_dp process whose environment says OMPI_COMM_WORLD_RANK=1.
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do [ -f {}/state.json ] && break; sleep 0.1; done; "
      "for p in $(pgrep -f {}.*one_rank_signalled); do tr \"\\0\" \"\\n\" < /proc/$p/environ | "
      "grep -qx OMPI_COMM_WORLD_RANK=1 && kill -TERM $p; done; wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint("one_rank_signalled").string(), fs::path(TRAIN_DP).filename().string(),
      log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rank 1 received SIGTERM from process "));
  CHECK_THAT(r.output, Catch::Contains("not from the launcher: the job stops as asked"));
  // Rank 0 got no signal, yet it stops at the same step as rank 1 (the vote) and says so.
  const long stopped_at = interrupted_step(r.output);
  CHECK_THAT(r.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  CHECK(nn::read_checkpoint_info(checkpoint("one_rank_signalled")).train_state.at("step") == stopped_at);
  CHECK_THAT(r.output, !Catch::Contains("rank 0 received"));
  CHECK_THAT(r.output, Catch::Contains("exit=143"));  // 128 + SIGTERM, from every rank
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
}

namespace {
// A shell loop that sends `signal` to every rank of the run whose out dir is `name`: the
// train_dp processes with a rank number from Open MPI (not mpiexec, not this shell).
std::string signal_ranks(const std::string& name, const std::string& signal) {
  return fmt::format("for p in $(pgrep -f {}.*{}); do tr \"\\0\" \"\\n\" < /proc/$p/environ | "
                     "grep -q OMPI_COMM_WORLD_RANK= && kill -{} $p; done",
                     fs::path(TRAIN_DP).filename().string(), name, signal);
}
}  // namespace

TEST_CASE("SIGUSR1 (a scheduler's warning) to mpiexec: the ranks save the step they stop at and end with 0",
          "[alone]") {
  fs::remove_all(out("usr1"));
  const fs::path log = work_dir() / "usr1.log";
  const std::string command =
      mpirun(2, TRAIN_DP, tiny(shakespeareish()) + " --max-iters 1000000 --ckpt-interval 50 --out-dir " + out("usr1"));
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do [ -f {}/state.json ] && break; sleep 0.1; done; "
      "kill -USR1 $pid; wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint("usr1").string(), log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("SIGUSR1: the job stops after this step"));
  const long stopped_at = interrupted_step(r.output);
  CHECK(stopped_at > 50);
  CHECK_THAT(r.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  CHECK(nn::read_checkpoint_info(checkpoint("usr1")).train_state.at("step") == stopped_at);
  CHECK_THAT(r.output, Catch::Contains("exit=0"));  // done as asked: the scheduler's script goes on
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
}

TEST_CASE("A second interrupt leaves at once, without saving", "[alone]") {
  // Both signals must land before the step ends: the ranks are stopped (SIGSTOP), get SIGINT
  // and SIGTERM, and go on (SIGCONT) with both pending — delivered one after the other.
  fs::remove_all(out("twice"));
  const fs::path log = work_dir() / "twice.log";
  const std::string command = mpirun(
      2, TRAIN_DP, tiny(shakespeareish()) + " --max-iters 1000000 --ckpt-interval 1000000 --out-dir " + out("twice"));
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 600); do grep -q \"^step\" {} && break; sleep 0.1; done; "
      "{}; {}; {}; {}; wait $pid; echo exit=$?; cat {}",
      command, log.string(), log.string(), signal_ranks("twice", "STOP"), signal_ranks("twice", "INT"),
      signal_ranks("twice", "TERM"), signal_ranks("twice", "CONT"), log.string());
  auto r = run_command("bash -c '" + script + "'");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains(": the job stops after this step"));  // the first of the two
  CHECK_THAT(r.output, Catch::Contains("; no checkpoint was written yet"));   // the second: at once
  CHECK_FALSE(fs::exists(checkpoint("twice")));
  CHECK_THAT(r.output, !Catch::Contains("exit=0"));
  CHECK_THAT(r.output, !Catch::Contains("[watchdog]"));
}
