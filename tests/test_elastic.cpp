// nanodist-run (launcher/nanodist-run) under mpiexec: a rank killed with SIGKILL at a seeded
// random step, and the job restarted from the newest state — on the same layout it ends
// byte-identical to a run never interrupted (model.safetensors); on fewer replicas, within the
// tolerance of float sums taken in another order. Each case compares with a straight run.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>

#include "nn/rng.hpp"
#include "trainer_test_util.hpp"

namespace {

constexpr int kSteps = 10;

// Every run here: the tiny model, a checkpoint every 3 steps (written in the background),
// the watchdog's deadline short (a lost rank is seen in about a second anyway).
std::string run_settings(const std::string& name) {
  return tiny(shakespeareish()) +
         fmt::format(" --batch-size 4 --max-iters {} --ckpt-interval 3 --timeout 10 --out-dir {}", kSteps, out(name));
}

CommandResult launcher(const std::string& options, const char* program, const std::string& args) {
  CommandResult r = run_command(fmt::format("{} --oversubscribe {} {} {}", NANODIST_RUN, options, program, args));
  UNSCOPED_INFO("$ nanodist-run --oversubscribe " << options << " " << program << " " << args << "\n" << r.output);
  return r;
}

// A step in [2, kSteps − 2]: the same on every run of the suite (the seed), another per case.
int seeded_step(uint64_t seed) {
  nn::Rng rng(seed);
  const int step = 2 + static_cast<int>(rng.next_u64() % (kSteps - 3));
  UNSCOPED_INFO("the kill comes at step " << step);
  return step;
}

std::string crash(int step, int rank) { return fmt::format(" --crash-at-step {} --crash-rank {}", step, rank); }

// The interrupted run's end is the straight run's, byte for byte, after all kSteps steps.
void same_end(const std::string& straight, const std::string& restarted) {
  CHECK(same_bytes(checkpoint(straight) / "model.safetensors", checkpoint(restarted) / "model.safetensors"));
  CHECK(same_bytes(checkpoint(straight) / "optimizer.safetensors", checkpoint(restarted) / "optimizer.safetensors"));
  CHECK(nn::read_checkpoint_info(checkpoint(restarted)).train_state.at("step") == kSteps);
  CHECK_FALSE(fs::exists(work_dir() / "runs" / restarted / "rescue"));  // used, then cleared
}

}  // namespace

TEST_CASE("train_dp: a rank killed at a random step, restarted on 3 ranks again: byte-identical, no step lost") {
  REQUIRE(run_trainer(TRAIN_DP, 3, run_settings("dp_straight")).status == 0);
  const int step = seeded_step(11);
  auto r = launcher("-n 3", TRAIN_DP, run_settings("dp_killed") + crash(step, 1));
  REQUIRE(r.status == 0);
  // A survivor saved the last completed step: the restart loses nothing finished.
  CHECK_THAT(r.output, Catch::Contains(fmt::format("a peer was lost after {} completed steps: saved them", step)));
  CHECK_THAT(r.output, Catch::Contains("restart 1/3: lost rank 1 (on localhost); 0 finished step(s) lost") &&
                           Catch::Contains(fmt::format("resuming at step {} from the save of rank", step)) &&
                           Catch::Contains("now 3 ranks: 3 replicas") && Catch::Contains("s after the failure"));
  // Open MPI's recovery noise after the loss is kept off the screen (said once, if it came).
  CHECK_THAT(r.output, !Catch::Contains("PMIX ERROR: BAD-PARAM in file"));
  same_end("dp_straight", "dp_killed");
}

TEST_CASE("train_dp: a device lost, the job shrinks 3 → 2 replicas with the global batch kept") {
  const std::string accumulate = " --grad-accum 2";  // 3 × 2 micro-steps of 4 = 2 × 3 of 4
  REQUIRE(run_trainer(TRAIN_DP, 3, run_settings("shrink_straight") + accumulate).status == 0);
  const int step = seeded_step(12);
  auto r = launcher("-n 3 --drop-lost-slots", TRAIN_DP, run_settings("shrink_killed") + accumulate + crash(step, 2));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("0 finished step(s) lost") &&
                           Catch::Contains("now 2 ranks: 2 replicas × micro-batch 4 × 3 accumulation step(s)") &&
                           Catch::Contains("2 ranks × micro-batch 4 × 3 accumulation step(s) × block 16 = 384 tokens"));
  CHECK(nn::read_checkpoint_info(checkpoint("shrink_killed")).train_state.at("step") == kSteps);
  // The same samples in the step; their gradients summed in another grouping: the last bits.
  CHECK(max_difference(checkpoint("shrink_straight"), checkpoint("shrink_killed")) <= 2e-5f);
}

TEST_CASE("train_pp and train_tp: a stage or a slice killed, restarted from the background checkpoint: byte-identical") {
  const std::string pipeline = " --micro-batches 2";
  REQUIRE(run_trainer(TRAIN_PP, 2, run_settings("pp_straight") + pipeline).status == 0);
  const int step = seeded_step(13);
  auto pp = launcher("-n 2", TRAIN_PP, run_settings("pp_killed") + pipeline + crash(step, 1));
  REQUIRE(pp.status == 0);
  // Sharded state: no survivor holds it all, so the last checkpoint (every 3 steps) serves.
  CHECK_THAT(pp.output, Catch::Contains("the state is sharded: a restart uses the last checkpoint"));
  CHECK_THAT(pp.output, Catch::Contains(fmt::format("{} finished step(s) lost (resuming at step {} from the checkpoint",
                                                    step % 3, step - step % 3)));
  same_end("pp_straight", "pp_killed");

  REQUIRE(run_trainer(TRAIN_TP, 2, run_settings("tp_straight")).status == 0);
  auto tp = launcher("-n 2", TRAIN_TP, run_settings("tp_killed") + crash(seeded_step(14), 0));
  REQUIRE(tp.status == 0);
  CHECK_THAT(tp.output, Catch::Contains("restart 1/3: lost rank 0"));
  same_end("tp_straight", "tp_killed");
}

TEST_CASE("train_3d with --cp 2: a rank of the ring killed, restarted on the same layout: byte-identical") {
  const std::string context = " --cp 2 --cp-attention ring";
  REQUIRE(run_trainer(TRAIN_3D, 2, run_settings("cp_straight") + context).status == 0);
  auto r = launcher("-n 2", TRAIN_3D, run_settings("cp_killed") + context + crash(seeded_step(15), 1));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("restart 1/3: lost rank 1"));
  same_end("cp_straight", "cp_killed");

  // A device lost from dp 2 × cp 2 (batch 2 a replica): 3 slots are not whole replicas of 2
  // ranks, so it goes on as one replica of cp 2 with the global batch of 4 kept (2 micro-batches).
  auto shrunk = launcher("-n 4 --drop-lost-slots", TRAIN_3D,
                         run_settings("cp_shrunk") + " --dp 2 --cp 2 --batch-size 2" + crash(seeded_step(17), 3));
  REQUIRE(shrunk.status == 0);
  CHECK_THAT(shrunk.output,
             Catch::Contains("now 2 ranks: 1 replica(s) of 2 rank(s) (pp 1 × cp 2 × tp 1) × batch 4 in 2 micro-batch(es)"));
  CHECK(nn::read_checkpoint_info(checkpoint("cp_shrunk")).train_state.at("step") == kSteps);
  CHECK(max_difference(checkpoint("cp_straight"), checkpoint("cp_shrunk")) <= 2e-5f);
}

TEST_CASE("train_3d with --ep 2: a rank holding half the experts killed, restarted: byte-identical") {
  const std::string experts = " --dp 2 --ep 2 --batch-size 2 --micro-batches 1 --n-experts 4 --capacity-factor 1";
  REQUIRE(run_trainer(TRAIN_3D, 2, run_settings("ep_straight") + experts).status == 0);
  auto r = launcher("-n 2", TRAIN_3D, run_settings("ep_killed") + experts + crash(seeded_step(16), 1));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("restart 1/3: lost rank 1") &&
                           Catch::Contains("the state is sharded: a restart uses the last checkpoint"));
  same_end("ep_straight", "ep_killed");

  // dp 4 × ep 2 loses a device: on 3 ranks ep 2 would not divide dp 3 (the trainer's own line
  // says so), so it goes on as dp 2 × ep 2 with the global batch of 4 kept.
  auto shrunk = launcher("-n 4 --drop-lost-slots", TRAIN_3D,
                         run_settings("ep_shrunk") + " --dp 4 --ep 2 --batch-size 1 --n-experts 4 --capacity-factor 1" +
                             crash(seeded_step(18), 3));
  REQUIRE(shrunk.status == 0);
  CHECK_THAT(shrunk.output, Catch::Contains("now 2 ranks: 2 replica(s) of 1 rank(s) (pp 1 × cp 1 × tp 1, ep 2)"));
  CHECK(nn::read_checkpoint_info(checkpoint("ep_shrunk")).train_state.at("step") == kSteps);
  CHECK(max_difference(checkpoint("ep_straight"), checkpoint("ep_shrunk")) <= 2e-5f);
  // Fewer replicas than ep: the restart's layout takes the largest ep left (dp 4 × ep 4 on 3
  // ranks: ep 1; the checkpoint holds every expert whole). Where no layout is left, the launcher
  // says why in the trainer's words before it starts.
  const std::string ep4 = std::string(TRAIN_3D) + " --n-experts 4 --dp 4 --ep 4 --batch-size 3 --micro-batches 3";
  CHECK_THAT(run_command(ep4 + " --layout-query 4:3").output,
             Catch::Contains(R"("--dp":"3")") && Catch::Contains(R"("--ep":"1")") && Catch::Contains(R"("ok":true)"));
  usage_failure(launcher("-n 4 --min-ranks 3", TRAIN_3D, run_settings("ep_min") + " --dp 2 --pp 2 --batch-size 2"),
                "--min-ranks 3: train_3d has no layout on fewer than 4 ranks (3 ranks is not a multiple of the 2 "
                "ranks of one replica (pp 2 × cp 1 × tp 1))");
}

TEST_CASE("ZeRO-3: the writer killed half-way through a checkpoint, the previous one serves: byte-identical") {
  const std::string zero = " --zero 3";
  REQUIRE(run_trainer(TRAIN_DP, 3, run_settings("zero_straight") + zero).status == 0);
  auto r = launcher("-n 3", TRAIN_DP, run_settings("zero_killed") + zero + " --crash-in-checkpoint 6");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("lost rank 0") && Catch::Contains("resuming at step 3 from the checkpoint"));
  same_end("zero_straight", "zero_killed");
  CHECK_FALSE(fs::exists(work_dir() / "runs" / "zero_killed" / "checkpoint.tmp"));
}

TEST_CASE("two failures in one run, the second during the restart: byte-identical") {
  REQUIRE(run_trainer(TRAIN_DP, 3, run_settings("twice_straight")).status == 0);
  // Launch 1 loses rank 1 at a random step; launch 2 loses rank 0 (the checkpoint writer) at
  // its first step, before it completes one; launch 3 finishes.
  const int step = seeded_step(15);
  auto r = launcher(fmt::format("-n 3 --inject-faults 1:{}:1,2:first:0", step), TRAIN_DP, run_settings("twice_killed"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("restart 1/3: lost rank 1") &&
                           Catch::Contains("failed again before its first step") &&
                           Catch::Contains("restart 2/3: lost rank 0") &&
                           Catch::Contains(fmt::format("resuming at step {} from the checkpoint", step)));
  same_end("twice_straight", "twice_killed");
}

TEST_CASE("nanodist-run: bad input is one line and exit 2, restarts used up or no layout left one line and exit 1") {
  const std::string run = run_settings("bad");
  usage_failure(launcher("-n 3 --max-restarts -1", TRAIN_DP, run), "--max-restarts -1: a count of restarts, 0 or more");
  usage_failure(launcher("-n 2 --min-ranks 3", TRAIN_DP, run), "--min-ranks 3 must be from 1 to -n 2");
  usage_failure(launcher("-n 2", "/bin/true", run), "/bin/true: not a nanodist trainer");
  usage_failure(launcher("-n 2 --min-ranks 1", TRAIN_TP, run),
                "--min-ranks 1: train_tp has no layout on fewer than 2 ranks (1 ranks is not a multiple of the 2 "
                "ranks of one replica (pp 1 × cp 1 × tp 2))");
  const fs::path no_slots = work_dir() / "no-slots";
  std::ofstream(no_slots) << "# every host is down\nnode-a slots=0\n";
  usage_failure(launcher("-n 2 --hostfile " + no_slots.string(), TRAIN_DP, run), "names no host with a slot");
  // The trainer's own bad flag is its answer (2), not a failure to restart from.
  auto flag = launcher("-n 2", TRAIN_DP, run + " --max-iters -3");
  usage_failure(flag, "--max-iters must be a whole number");
  CHECK_THAT(flag.output, !Catch::Contains("restart"));

  auto used_up = launcher("-n 2 --max-restarts 0", TRAIN_DP, run + crash(4, 1));
  clean_failure(used_up, "--max-restarts 0 used up; the last failure: rank 1 (on localhost), after 4 completed steps");
  CHECK(used_up.status == 1);
  auto no_layout = launcher("-n 2 --drop-lost-slots", TRAIN_TP, run + crash(4, 1));
  clean_failure(no_layout, "cannot restart after losing rank 1 (on localhost): 1 slot(s) left");
  CHECK_THAT(no_layout.output, Catch::Contains("1 ranks is not a multiple of the 2 ranks of one replica"));
  CHECK(no_layout.status == 1);
}

TEST_CASE("a layout that cannot run: the same line from the trainer, the planner and the launcher") {
  // The rule is written once (parallel/layout.cpp); each door says it in its words.
  const std::string why =
      "--ep 2 does not divide --dp 3: expert-parallel groups are carved from the data-parallel ranks";
  usage_failure(run_trainer(TRAIN_3D, 3, run_settings("same_line") + " --dp 3 --ep 2 --n-experts 4"), why);
  usage_failure(launcher("-n 3", TRAIN_3D, run_settings("same_line") + " --dp 3 --ep 2 --n-experts 4"), why);
  const CommandResult plan =
      run_command(fmt::format("{} plan --model main-job-moe --devices 3 --dp 3 --ep 2 --global-batch 12", NANODIST_PLAN));
  usage_failure(plan, "no layout can run this: " + why);
  // A context-parallel split the sequence cannot take, likewise.
  const std::string cp_why = "--cp 3: --block-size 16 does not split into 2·cp = 6 equal chunks";
  usage_failure(launcher("-n 3", TRAIN_3D, run_settings("same_line") + " --cp 3"), cp_why);
  usage_failure(run_command(fmt::format("{} plan --devices 3 --cp 3 --block-size 16 --global-batch 12", NANODIST_PLAN)),
                cp_why);
}

TEST_CASE("Ctrl-C to nanodist-run: the job stops after the step with a checkpoint, no restart, the note says nanodist-run") {
  const std::string run = run_settings("ctrl_c") + " --max-iters 1000000 --log-interval 1000";
  fs::create_directories(work_dir() / "runs");  // the log goes beside the run
  auto r = interrupt_until_noted(fmt::format("{} --oversubscribe -n 2 {} {}", NANODIST_RUN, TRAIN_DP, run),
                                 checkpoint("ctrl_c"));
  CHECK_THAT(r.output, Catch::Contains("interrupted at step") && !Catch::Contains("restart 1/"));
  CHECK_THAT(r.output, Catch::Contains(fmt::format("exit={}", 128 + 15)) || Catch::Contains("exit=130"));
  // The step it stopped at is saved, and the command to type again is the launcher's own.
  CHECK(nn::read_checkpoint_info(checkpoint("ctrl_c")).train_state.at("step") == interrupted_step(r.output));
  CHECK_THAT(printed_resume_command(r.output),
             Catch::StartsWith(fmt::format("{} --oversubscribe -n 2 {} --resume", NANODIST_RUN, TRAIN_DP)));
}

TEST_CASE("nanodist-run: the program's own error is the job's answer, not a failure to restart from") {
  // Diverged at the first step (every rank says so, exit 2): restarting would diverge again.
  auto r = launcher("-n 2", TRAIN_DP, run_settings("diverged") + " --learning-rate 1e30 --grad-clip 0");
  usage_failure(r, "training diverged at step");
  CHECK_THAT(r.output, !Catch::Contains("restart 1/"));
}
