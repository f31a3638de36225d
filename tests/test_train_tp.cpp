// train_tp and train_3d end to end, under mpiexec: tensor parallelism (with and without
// sequence parallelism) and every DP × TP × PP layout end where one process with the same
// global batch ends; the communication per step is the formula's; checkpoints are one whole
// nanoGPT model (no padding rows) that train_dp evaluates to the same val_loss_full and that
// resumes exactly, and under another layout; a killed tp rank is named; bad input is one line.
#include <map>
#include <regex>
#include <tuple>
#include <vector>

#include "trainer_test_util.hpp"

namespace {

CommandResult train_tp(int ranks, const std::string& args) { return run_trainer(TRAIN_TP, ranks, args); }
CommandResult train_3d(int ranks, const std::string& args) { return run_trainer(TRAIN_3D, ranks, args); }
CommandResult train_dp(int ranks, const std::string& args) { return run_trainer(TRAIN_DP, ranks, args); }

constexpr int kSteps = 5;
constexpr float kTolerance = 2e-5f;  // float sums in another order (as the data-parallel test)
constexpr int kLayers = 4;

// 4 heads (so T = 4 splits them), 4 blocks (enough for 2 stages), dropout on and the default
// random sampling: every layout draws the one-process masks (a rank's heads and positions placed
// in the whole tensor) on the same global batch.
std::string common() {
  return tiny(shakespeareish(), "data", kLayers) + fmt::format(" --n-head 4 --dropout 0.1 --max-iters {}", kSteps);
}

// One process with batch B: the reference every layout with that global batch must match.
fs::path reference(int B) {
  const std::string name = fmt::format("tp_ref_b{}", B);
  if (!fs::exists(checkpoint(name) / "model.safetensors"))
    REQUIRE(train_dp(1, common() + fmt::format(" --batch-size {} --out-dir {}", B, out(name))).status == 0);
  return checkpoint(name);
}

// The number of calls of `kind` in a group of the "communication per training step" line.
int calls(const std::string& output, const std::string& group, const std::string& kind) {
  const auto line_at = output.find("communication per training step");
  REQUIRE(line_at != std::string::npos);
  const std::string line = output.substr(line_at, output.find('\n', line_at) - line_at);
  const auto group_at = line.find(group + " group:");
  REQUIRE(group_at != std::string::npos);
  const std::string part = line.substr(group_at, line.find(" · ", group_at) - group_at);
  std::smatch m;
  if (!std::regex_search(part, m, std::regex("(\\d+) " + kind + " ")) || m.size() < 2) return 0;
  return std::stoi(m[1].str());
}

}  // namespace

TEST_CASE("train_tp on T = 2 and 4 ranks ends where one process ends, sequence parallelism too, no padding rows") {
  for (int T : {2, 4})
    for (bool sp : {false, true}) {
      const std::string name = fmt::format("tp{}{}", T, sp ? "_sp" : "");
      const std::string backend = T == 4 ? " --backend shm" : "";  // the tp group's segment, its split too
      auto r = train_tp(
          T, common() + " --batch-size 4" + (sp ? " --sequence-parallel" : "") + backend + " --out-dir " + out(name));
      REQUIRE(r.status == 0);
      const float diff = max_difference(checkpoint(name), reference(4));
      INFO(name << ": largest parameter difference from one process is " << diff);
      CHECK(diff <= kTolerance);
      // Per step on the tp group (L blocks, one micro-step): f and g twice per block forward and
      // backward, the embedding's g and the head's f, 3 for the vocab-parallel loss, 1 for the norm;
      // with sequence parallelism the block ones are all-gathers and reduce-scatters instead, and
      // one more all-reduce sums the replicated gradients.
      if (!sp) {
        CHECK(calls(r.output, "tp", "allreduce") == 4 * kLayers + 2 + 3 + 1);
        CHECK(calls(r.output, "tp", "allgather") == 0);
      } else {
        CHECK(calls(r.output, "tp", "allgather") == 4 * kLayers + 2);
        CHECK(calls(r.output, "tp", "reduce_scatter") == 4 * kLayers + 2);
        CHECK(calls(r.output, "tp", "allreduce") == 3 + 1 + 1);
      }
    }
  // A vocabulary that 5 ranks do not divide (24 characters) is padded on the ranks, never in the file.
  auto five = train_tp(5, common() + " --n-head 5 --n-embd 40 --max-iters 2 --batch-size 4 --out-dir " + out("tp5"));
  REQUIRE(five.status == 0);
  const nn::CheckpointInfo info = nn::read_checkpoint_info(checkpoint("tp5"));
  REQUIRE(info.config.vocab_size % 5 != 0);
  CHECK_THAT(five.output, Catch::Contains(fmt::format("vocabulary {} padded to {}", info.config.vocab_size,
                                                      (info.config.vocab_size / 5 + 1) * 5)));
  nn::GPT model(info.config, 0);
  nn::load_checkpoint(checkpoint("tp5"), model, nullptr);  // throws on any shape other than [V, C]
  CHECK(model.parameter("transformer.wte.weight").size(0) == info.config.vocab_size);
  SECTION("the comparison has teeth: another seed ends far away") {
    REQUIRE(train_tp(2, common() + " --batch-size 4 --seed 7 --out-dir " + out("tp2_seed7")).status == 0);
    CHECK(max_difference(checkpoint("tp2_seed7"), reference(4)) > 100 * kTolerance);
  }
}

TEST_CASE(
    "train_3d: (D,T,P) = (2,2,1), (1,2,2), (2,1,2), (2,2,2), (1,2,3) end where one process with the global batch "
    "ends") {
  struct Layout {
    int dp, tp, pp;
  };
  // (1,2,3): a middle stage, with neither the embedding nor the head.
  for (Layout l : {Layout{2, 2, 1}, Layout{1, 2, 2}, Layout{2, 1, 2}, Layout{2, 2, 2}, Layout{1, 2, 3}}) {
    const std::string name = fmt::format("3d_d{}t{}p{}", l.dp, l.tp, l.pp);
    const int N = l.dp * l.tp * l.pp;
    const char* backend = N == 8 ? "shm" : "mpi";  // (2,2,2) on shm: dp, tp and pp groups each with a segment
    auto r = train_3d(N, common() + fmt::format(" --dp {} --tp {} --pp {} --batch-size 4 --micro-batches 2 "
                                                "--backend {} --out-dir {}",
                                                l.dp, l.tp, l.pp, backend, out(name)));
    REQUIRE(r.status == 0);
    const float diff = max_difference(checkpoint(name), reference(4 * l.dp));
    INFO(name << ": largest parameter difference from one process with batch " << 4 * l.dp << " is " << diff);
    CHECK(diff <= kTolerance);
    if (N == 8) CHECK_THAT(r.output, Catch::Contains("rank 5 = dp 1 · pp 0 · tp 1"));
    // Once per step, the dp group averages every gradient in one all-reduce.
    CHECK(calls(r.output, "dp", "allreduce") == (l.dp > 1 ? 1 : 0));
  }
  SECTION("with sequence parallelism and the GPipe schedule too") {
    auto r = train_3d(4, common() +
                             " --tp 2 --pp 2 --sequence-parallel --schedule gpipe --batch-size 4 "
                             "--micro-batches 2 --out-dir " +
                             out("3d_sp"));
    REQUIRE(r.status == 0);
    CHECK(max_difference(checkpoint("3d_sp"), reference(4)) <= kTolerance);
  }
}

TEST_CASE("train_3d: Ctrl-C, then the printed command as it is: the run goes on exactly (1×2×2, SP, dropout)",
          "[alone]") {
  const int steps = steps_outlasting_ctrl_c(600);
  const std::string run = common() +
                          fmt::format(" --dp 1 --pp 2 --tp 2 --sequence-parallel --batch-size 4 --micro-batches 2 "
                                      "--max-iters {} --lr-decay-iters {} --ckpt-interval 2 --log-interval 100",
                                      steps, steps);
  auto resumed = ctrl_c_then_printed_resume(TRAIN_3D, 4, run, "3d_uninterrupted", "3d_ctrl_c");
  CHECK_THAT(resumed.output, Catch::Contains("dp 1 × pp 2 × tp 2 (sequence parallel), schedule 1f1b, 2 micro-batches"));
  // Another rank count: the layout comes from the command line, and a refusal says so.
  usage_failure(train_3d(2, common() + " --resume --out-dir " + out("3d_ctrl_c")),
                "2 ranks cannot be --dp 1 × --pp 1 × --tp 1 = 1: run D·P·T ranks; the layout comes from this command "
                "line: the checkpoint's was for train_3d on 4 ranks");
  // The same rank count with one layout flag typed again: the refusal names what came back.
  usage_failure(train_3d(4, common() + " --resume --tp 4 --out-dir " + out("3d_ctrl_c")),
                "4 ranks cannot be --dp 1 × --pp 2 × --tp 4 = 8: run D·P·T ranks (from the checkpoint: --dp 1 --pp 2 "
                "--cp 1 --cp-attention ring --ep 1 --sequence-parallel true --schedule 1f1b --micro-batches 2 --virtual-stages "
                "1 --zero 0; a flag typed again changes it)");
}

TEST_CASE("a 3D checkpoint: train_dp evaluates it alike, it resumes exactly, and under another layout") {
  const std::string settings = common() + " --batch-size 4 --lr-decay-iters 8 --ckpt-interval 4";
  const std::string run = settings + " --micro-batches 2";
  auto straight = train_3d(4, run + " --tp 2 --pp 2 --max-iters 8 --check-collectives --out-dir " + out("3d_straight"));
  REQUIRE(straight.status == 0);
  CHECK_THAT(straight.output, !Catch::Contains("differ"));
  // The same val_loss_full from train_dp (one whole model), train_tp and train_3d.
  const std::string from = " --eval-only --init-from " + checkpoint("3d_straight").string();
  auto dp = train_dp(1, common() + from);
  auto tp = train_tp(2, common() + from);
  auto three_d = train_3d(4, common() + " --dp 2 --tp 2" + from);
  REQUIRE(dp.status == 0);
  REQUIRE(tp.status == 0);
  REQUIRE(three_d.status == 0);
  CHECK(printed_val_loss_full(dp.output) == printed_val_loss_full(tp.output));
  CHECK(printed_val_loss_full(dp.output) == printed_val_loss_full(three_d.output));
  // And in every other layout and rank count: the windows' losses are summed in one order.
  const std::vector<std::pair<int, std::string>> layouts = {{2, std::string(TRAIN_DP)},
                                                            {3, std::string(TRAIN_DP)},
                                                            {4, std::string(TRAIN_DP)},
                                                            {5, std::string(TRAIN_DP)},
                                                            {3, std::string(TRAIN_DP) + " --zero 3"},
                                                            {3, std::string(TRAIN_PP) + " --dp 3"},
                                                            {4, std::string(TRAIN_PP) + " --dp 2"},
                                                            {3, std::string(TRAIN_3D) + " --dp 3"}};
  for (const auto& [ranks, program] : layouts) {
    auto r = run_command(mpirun(ranks, program, common() + from));
    INFO("mpiexec -n " << ranks << " " << program << "\n" << r.output);
    REQUIRE(r.status == 0);
    CHECK(printed_val_loss_full(r.output) == printed_val_loss_full(dp.output));
  }
  // Samples: every tp rank draws the same token from the gathered logits.
  auto sample = train_tp(
      2, "--sample-only --sample-tokens 30 --prompt 'the king' --init-from " + checkpoint("3d_straight").string());
  REQUIRE(sample.status == 0);
  CHECK_THAT(sample.output, Catch::StartsWith("the king"));
  CHECK(sample.output.size() >= 38);
  // 4 steps, then 4 more resumed: bit-identical to 8 in one run (dropout on).
  REQUIRE(train_3d(4, run + " --tp 2 --pp 2 --max-iters 4 --out-dir " + out("3d_resumed")).status == 0);
  auto resumed = train_3d(4, run + " --tp 2 --pp 2 --max-iters 8 --resume --out-dir " + out("3d_resumed"));
  REQUIRE(resumed.status == 0);
  CHECK(same_bytes(checkpoint("3d_straight") / "model.safetensors", checkpoint("3d_resumed") / "model.safetensors"));
  CHECK(same_bytes(checkpoint("3d_straight") / "optimizer.safetensors",
                   checkpoint("3d_resumed") / "optimizer.safetensors"));
  // Under another layout (and by another trainer) it resumes too.
  REQUIRE(train_3d(4, run + " --tp 2 --pp 2 --max-iters 4 --out-dir " + out("3d_other")).status == 0);
  auto other = train_tp(4, settings + " --max-iters 6 --resume --out-dir " + out("3d_other"));
  CHECK(other.status == 0);
  CHECK(nn::read_checkpoint_info(checkpoint("3d_other")).train_state.at("step") == 6);
}

TEST_CASE("a tp rank killed mid-run is named by the watchdog, and the job ends") {
  auto killed = train_tp(2, common() +
                                " --batch-size 4 --max-iters 8 --timeout 3 --crash-at-step 3 --crash-rank 1 "
                                "--out-dir " +
                                out("tp_killed"));
  CHECK(killed.status != 0);
  CHECK_THAT(killed.output, Catch::Contains("rank 1 is dead"));
}

TEST_CASE("bad tensor-parallel input: one line, exit status 2") {
  const std::string run = common() + " --batch-size 4 --out-dir " + out("tp_bad");
  usage_failure(train_tp(3, run), "--n-head 4 is not divisible by --tp 3");
  usage_failure(train_3d(4, run + " --dp 2 --tp 2 --pp 2"), "4 ranks cannot be --dp 2 × --pp 2 × --tp 2 = 8");
  usage_failure(train_3d(2, run + " --dp 2 --sequence-parallel"), "--sequence-parallel needs --tp 2 or more");
  usage_failure(train_tp(3, run + " --n-head 3 --n-embd 48 --sequence-parallel"),
                "--sequence-parallel: --block-size 16 is not divisible by --tp 3");
  usage_failure(train_3d(2, run + " --pp 2 --micro-batches 3"), "--micro-batches 3 does not divide --batch-size 4");
}

TEST_CASE("gradients as bf16 on the wire (--grad-comm bf16) halve what the dp group sends in train_pp and train_3d") {
  // The default model (Ψ = 0.41M: 1.6 MB of fp32 gradients), one step, 2 replicas × 2 ranks.
  const std::string one_step =
      fmt::format("--text {} --data-dir {} --max-iters 1 --eval-interval 0 --no-full-val --sample-tokens 0 --dp 2",
                  shakespeareish().string(), (work_dir() / "data").string());
  const std::regex dp_group(R"(dp group: [0-9]+ allreduce \(([0-9.]+) MB\))");
  for (const auto& [program, layout] : {std::pair{TRAIN_PP, ""}, std::pair{TRAIN_3D, " --tp 2"}}) {
    std::map<std::string, double> megabytes;
    for (std::string wire : {"fp32", "bf16"}) {
      auto r = run_trainer(
          program, 4, one_step + layout + " --grad-comm " + wire + " --out-dir " + out(std::string("dp_wire_") + wire));
      REQUIRE(r.status == 0);
      // The layout line says how gradients travel, as train_dp's does.
      CHECK((r.output.find("gradients sent as bf16") != std::string::npos) == (wire == "bf16"));
      std::smatch m;
      REQUIRE(std::regex_search(r.output, m, dp_group));
      megabytes[wire] = std::stod(m[1]);
    }
    INFO(program << ": the dp group sends " << megabytes["fp32"] << " MB in fp32, " << megabytes["bf16"]
                 << " MB in bf16");
    CHECK(megabytes["fp32"] > 1.0);
    CHECK(megabytes["bf16"] == Approx(megabytes["fp32"] / 2).epsilon(0.07));
  }
}

// --precision bf16 in the other trainers: a tp shard multiplies its slice of the same
// bf16-rounded inputs, a pipeline stage its layers; what changes is only the order of fp32
// sums, which can flip a bf16 rounding downstream. So each layout ends within bf16
// rounding's bound (check_within_bf16_rounding) of one process in bf16.
TEST_CASE("bf16 matrix multiplies (--precision bf16): train_tp (SP), train_pp, train_3d and ring attention end near one process") {
  const double one_step = 1e-3;
  const std::string bf16 = common() + " --precision bf16 --batch-size 4";
  REQUIRE(train_dp(1, bf16 + " --out-dir " + out("bf16_ref")).status == 0);
  CHECK(mean_difference(checkpoint("bf16_ref"), reference(4)) > 1e-8);  // teeth: bf16 differs from fp32
  const std::vector<std::tuple<const char*, int, std::string, std::string>> layouts = {
      {TRAIN_TP, 2, "bf16_tp2_sp", " --sequence-parallel"},
      {TRAIN_PP, 2, "bf16_pp2", " --micro-batches 2"},
      {TRAIN_3D, 4, "bf16_3d_122", " --tp 2 --pp 2 --micro-batches 2"},
      // ring attention's own kernel: bf16 products, the online softmax's statistics in fp32
      {TRAIN_3D, 2, "bf16_cp2_ring", " --cp 2 --cp-attention ring"}};
  for (const auto& [program, ranks, name, flags] : layouts) {
    auto r = run_trainer(program, ranks, bf16 + flags + " --out-dir " + out(name));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("bf16 matrix multiplies on"));
    // Nearer the bf16 process than the fp32 one: the shards really multiplied in bf16.
    CHECK(check_within_bf16_rounding(checkpoint(name), checkpoint("bf16_ref"), kSteps, one_step) <
          mean_difference(checkpoint(name), reference(4)));
  }
}

TEST_CASE("train_3d's dp averaging overlaps the backward in buckets (--ddp bucketed) and ends where naive ends") {
  // Small buckets, so that each rank's gradients go in several allreduces, each started as
  // backward completes it: 2 replicas × 2 interleaved stages, and 2 replicas × tp 2 with SP
  // (its replicated gradients summed over tp after the average). 8 ranks would crowd 2 cores.
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"pp", " --dp 2 --pp 2 --tp 1 --virtual-stages 2"}, {"tp_sp", " --dp 2 --pp 1 --tp 2 --sequence-parallel"}}) {
    const std::string run = common() + layout + " --batch-size 4 --micro-batches 2";
    auto bucketed = train_3d(4, run + " --ddp bucketed --bucket-mb 0.02 --out-dir " + out("3d_bucketed_" + name));
    auto naive = train_3d(4, run + " --ddp naive --out-dir " + out("3d_naive_" + name));
    REQUIRE(bucketed.status == 0);
    REQUIRE(naive.status == 0);
    CHECK_THAT(bucketed.output, Catch::Contains("dp averaging: bucketed:"));
    CHECK_THAT(naive.output, Catch::Contains("dp averaging: naive:"));
    CHECK(calls(bucketed.output, "dp", "allreduce") > 2);  // several buckets per rank
    // Two replicas: (a + b)/2 per element whatever the packing, so the same bytes.
    CHECK(same_bytes(checkpoint("3d_bucketed_" + name) / "model.safetensors",
                     checkpoint("3d_naive_" + name) / "model.safetensors"));
    CHECK(max_difference(checkpoint("3d_bucketed_" + name), reference(8)) <= kTolerance);
  }
}
