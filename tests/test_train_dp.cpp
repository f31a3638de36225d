// train_dp end to end, under mpiexec: data-parallel equivalence, gradient accumulation,
// bit-exact resume, bad input, a killed rank. Each case runs the real program on a small
// synthetic text with a tiny GPT and compares the checkpoints it leaves.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "nn/atomic_file.hpp"
#include "nn/checkpoint.hpp"
#include "nn/rng.hpp"
#include "run_command.hpp"
#include "trainers/batches.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kWork = fs::path(TEST_WORK_DIR);
const bool kFreshRuns = (fs::remove_all(kWork / "runs"), true);  // no run of an earlier invocation is ever compared

// A text with a small vocabulary and some structure to learn: words from a list, lines of them.
fs::path synthetic_text(const std::string& name, const std::vector<std::string>& words, int n_words) {
  const fs::path file = kWork / name;
  if (fs::exists(file)) return file;
  fs::create_directories(kWork);
  nn::Rng rng(42);
  std::string text;
  for (int i = 0; i < n_words; ++i) {
    text += words[rng.next_u64() % words.size()];
    text += (i % 9 == 8) ? ".\n" : " ";
  }
  std::ofstream(file) << text;
  return file;
}

fs::path shakespeareish() {
  return synthetic_text("words.txt", {"the", "king", "shall", "speak", "and", "thou", "art", "my", "lord", "what", "noble",
                                      "heart", "doth", "love", "o", "come", "hither", "good", "night", "sweet"}, 6000);
}

// The tiny model and quiet settings every run here uses (the data is prepared into `data`).
std::string tiny(const fs::path& text, const std::string& data = "data") {
  return fmt::format("--text {} --data-dir {} --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --eval-interval 0 "
                     "--eval-iters 2 --no-full-val --sample-tokens 0 --log-interval 1 --threads 1 --timeout 30 "
                     "--learning-rate 1e-3 --warmup-iters 2",
                     text.string(), (kWork / data).string());
}

CommandResult train_dp(int ranks, const std::string& args) {
  CommandResult r = run_command(mpirun(ranks, TRAIN_DP, args));
  UNSCOPED_INFO("$ train_dp -n " << ranks << " " << args << "\n" << r.output);
  return r;
}

std::string out(const std::string& name) { return (kWork / "runs" / name).string(); }
fs::path checkpoint(const std::string& name) { return kWork / "runs" / name / "checkpoint"; }

std::vector<std::vector<float>> parameters_of(const fs::path& dir) {
  nn::CheckpointInfo info = nn::read_checkpoint_info(dir);
  nn::GPT model(info.config, 0);
  nn::load_checkpoint(dir, model, nullptr);
  std::vector<std::vector<float>> values;
  for (auto& p : model.parameters()) values.emplace_back(p.tensor.values().begin(), p.tensor.values().end());
  return values;
}

float max_difference(const fs::path& a, const fs::path& b) {
  auto pa = parameters_of(a), pb = parameters_of(b);
  REQUIRE(pa.size() == pb.size());
  float worst = 0.0f;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].size() == pb[i].size());
    for (std::size_t j = 0; j < pa[i].size(); ++j) worst = std::max(worst, std::abs(pa[i][j] - pb[i][j]));
  }
  return worst;
}

bool same_bytes(const fs::path& a, const fs::path& b) { return nn::read_whole_file(a) == nn::read_whole_file(b); }

// One line saying what was wrong, a non-zero exit, and no crash dump.
void clean_failure(const CommandResult& r, const std::string& expected) {
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains(expected));
  CHECK_THAT(r.output, !Catch::Contains("terminate called") && !Catch::Contains("Segmentation") &&
                           !Catch::Contains("MPI_ABORT") && !Catch::Contains("core dumped"));
  std::size_t error_lines = 0;
  for (std::size_t at = r.output.find("error"); at != std::string::npos; at = r.output.find("error", at + 1))
    if (at == 0 || r.output[at - 1] == '\n') ++error_lines;
  CHECK(error_lines == 1);
}

// Data-parallel runs are compared after kSteps optimizer steps. Float sums in another order
// differ in the last bits; the tolerance is far below one step's change (≈ lr = 1e-3).
constexpr int kSteps = 5;
constexpr float kTolerance = 2e-5f;

}  // namespace

TEST_CASE("partition sampling deals one global batch out in disjoint slices") {
  std::vector<int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i);
  const int T = 8, B = 3;
  for (int N : {2, 3}) {
    trainers::BatchSampler whole(tokens, T, N * B, 1, trainers::Sampling::partition, 7, 0, 1);
    for (int64_t step : {0, 1, 40}) {  // step 40 crosses into the next epoch (124 windows)
      trainers::Batch global, part;
      whole.fill(step, 0, global);
      std::vector<int32_t> joined;
      for (int r = 0; r < N; ++r) {
        trainers::BatchSampler rank(tokens, T, B, 1, trainers::Sampling::partition, 7, r, N);
        rank.fill(step, 0, part);
        joined.insert(joined.end(), part.ids.begin(), part.ids.end());
        for (std::size_t i = 0; i < part.ids.size(); ++i) CHECK(part.targets[i] == part.ids[i] + 1);
      }
      CHECK(joined == global.ids);
    }
  }
  // Random sampling: each rank its own stream.
  trainers::Batch r0, r1;
  trainers::BatchSampler(tokens, T, B, 1, trainers::Sampling::random, 7, 0, 2).fill(3, 0, r0);
  trainers::BatchSampler(tokens, T, B, 1, trainers::Sampling::random, 7, 1, 2).fill(3, 0, r1);
  CHECK(r0.ids != r1.ids);
}

TEST_CASE("N ranks with micro-batch B end where 1 rank with batch N·B ends") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --sampling partition --max-iters {}", kSteps);
  for (int N : {2, 3}) {
    const std::string reference = fmt::format("ref_{}", N);
    REQUIRE(train_dp(1, common + fmt::format(" --batch-size {} --out-dir {}", 4 * N, out(reference))).status == 0);
    for (std::string ddp : {"naive", "bucketed"})
      for (std::string backend : {"mpi", "ring"}) {
        const std::string name = fmt::format("dp{}_{}_{}", N, ddp, backend);
        // A small bucket size makes several buckets, so overlap really happens.
        auto r = train_dp(N, common + fmt::format(" --batch-size 4 --ddp {} --bucket-mb 0.01 --backend {} --out-dir {}",
                                                  ddp, backend, out(name)));
        REQUIRE(r.status == 0);
        CHECK_THAT(r.output, Catch::Contains(fmt::format("global batch: {} ranks × micro-batch 4", N)));
        const float diff = max_difference(checkpoint(name), checkpoint(reference));
        INFO(name << ": largest parameter difference from 1 rank × batch " << 4 * N << " is " << diff);
        CHECK(diff <= kTolerance);
      }
  }
  SECTION("the comparison has teeth: random sampling (other data) ends far away") {
    REQUIRE(train_dp(2, common + " --batch-size 4 --sampling random --out-dir " + out("dp2_random")).status == 0);
    CHECK(max_difference(checkpoint("dp2_random"), checkpoint("ref_2")) > 100 * kTolerance);
  }
}

TEST_CASE("K accumulation steps of batch B equal one step of batch K·B") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --sampling partition --max-iters {}", kSteps);
  REQUIRE(train_dp(1, common + " --batch-size 8 --out-dir " + out("acc_ref8")).status == 0);
  REQUIRE(train_dp(1, common + " --batch-size 16 --out-dir " + out("acc_ref16")).status == 0);
  auto r = train_dp(1, common + " --batch-size 4 --grad-accum 2 --out-dir " + out("acc_1x2"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("1 ranks × micro-batch 4 × 2 accumulation step(s) × block 16 = 128 tokens"));
  CHECK(max_difference(checkpoint("acc_1x2"), checkpoint("acc_ref8")) <= kTolerance);
  // With ranks: 2 ranks × 2 micro-steps × 4 = 16, both averaging implementations.
  for (std::string ddp : {"naive", "bucketed"}) {
    const std::string name = "acc_2x2_" + ddp;
    REQUIRE(train_dp(2, common + " --batch-size 4 --grad-accum 2 --bucket-mb 0.01 --ddp " + ddp + " --out-dir " +
                            out(name)).status == 0);
    CHECK(max_difference(checkpoint(name), checkpoint("acc_ref16")) <= kTolerance);
  }
}

TEST_CASE("resume: T steps and then T resumed steps end bit-identical to 2T steps in one run") {
  // With dropout, so the random streams must continue exactly too.
  const std::string common = tiny(shakespeareish()) + " --dropout 0.1 --lr-decay-iters 8 --ckpt-interval 2";
  for (auto [N, extra] : {std::pair{1, std::string("")}, std::pair{2, std::string(" --ddp bucketed --backend ring")}}) {
    const std::string straight = fmt::format("straight_{}", N), resumed = fmt::format("resumed_{}", N);
    REQUIRE(train_dp(N, common + extra + " --max-iters 8 --out-dir " + out(straight)).status == 0);
    REQUIRE(train_dp(N, common + extra + " --max-iters 4 --out-dir " + out(resumed)).status == 0);
    auto r = train_dp(N, common + extra + " --max-iters 8 --resume --out-dir " + out(resumed));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("at step 4"));
    CHECK(same_bytes(checkpoint(straight) / "model.safetensors", checkpoint(resumed) / "model.safetensors"));
    CHECK(same_bytes(checkpoint(straight) / "optimizer.safetensors", checkpoint(resumed) / "optimizer.safetensors"));
    CHECK(nn::read_checkpoint_info(checkpoint(resumed)).train_state.at("step") == 8);
  }
}

TEST_CASE("eval-only prints the exact val loss (the same on any rank count) and sample-only prints text") {
  const std::string common = tiny(shakespeareish());
  REQUIRE(train_dp(2, common + " --max-iters 3 --out-dir " + out("eval")).status == 0);
  auto value = [](const std::string& output) {
    const auto at = output.find("val_loss_full=");
    REQUIRE(at != std::string::npos);
    return std::stod(output.substr(at + 14));
  };
  auto one = train_dp(1, common + " --eval-only --init-from " + checkpoint("eval").string());
  auto three = train_dp(3, common + " --eval-only --init-from " + checkpoint("eval").string());
  REQUIRE(one.status == 0);
  REQUIRE(three.status == 0);
  CHECK(value(one.output) == Approx(value(three.output)).epsilon(1e-6));
  CHECK(value(one.output) > 1.0);  // 3 steps: far from trained
  CHECK(value(one.output) < 4.0);  // below a uniform guess over ~30 characters (ln 30 = 3.4) plus slack

  auto sample = train_dp(1, "--sample-only --sample-tokens 40 --prompt 'the king' --init-from " + checkpoint("eval").string());
  REQUIRE(sample.status == 0);
  CHECK_THAT(sample.output, Catch::StartsWith("the king"));
  CHECK(sample.output.size() >= 48);
}

TEST_CASE("the metrics file has a row per log line and per evaluation") {
  const std::string csv = (kWork / "runs" / "metrics" / "m.csv").string();
  fs::remove(csv);
  auto r = train_dp(2, tiny(shakespeareish()) + " --max-iters 4 --log-interval 2 --eval-interval 2 --out-dir " +
                           out("metrics") + " --metrics " + csv);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("tok/s") && Catch::Contains("eta") && Catch::Contains("comm"));
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  CHECK_THAT(header, Catch::StartsWith("kind,step,loss,lr,grad_norm,step_ms,data_ms,forward_ms,backward_ms,comm_ms"));
  int train_rows = 0, eval_rows = 0;
  while (std::getline(in, line)) {
    train_rows += line.starts_with("train,");
    eval_rows += line.starts_with("eval,");
  }
  CHECK(train_rows == 2);
  CHECK(eval_rows == 2);  // step 2 and the end
}

TEST_CASE("bad input: one line naming the problem and a non-zero exit") {
  const fs::path text = shakespeareish();
  const std::string common = tiny(text);
  static const bool trained = train_dp(2, common + " --max-iters 2 --out-dir " + out("good")).status == 0;
  REQUIRE(trained);

  SECTION("missing data") {
    const fs::path empty = kWork / "empty";
    fs::create_directories(empty);
    auto r = run_command("env -u NANODIST_DATA_MIRROR NANODIST_NO_DOWNLOAD=1 " +
                         mpirun(2, TRAIN_DP, "--data-dir " + empty.string() + " --out-dir " + out("nodata")));
    clean_failure(r, "no Shakespeare text");
    clean_failure(train_dp(1, "--text /no/such/file.txt --out-dir " + out("nodata")), "--text /no/such/file.txt: no such file");
  }
  SECTION("a corrupt checkpoint") {
    fs::remove_all(out("corrupt"));
    fs::create_directories(out("corrupt"));
    fs::copy(checkpoint("good"), checkpoint("corrupt"));
    {
      std::fstream f(checkpoint("corrupt") / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-7, std::ios::end);
      f.put('\x5a');
    }
    clean_failure(train_dp(2, common + " --resume --max-iters 4 --out-dir " + out("corrupt")), "checksum");
  }
  SECTION("a checkpoint whose config contradicts the flags") {
    clean_failure(train_dp(2, common + " --n-layer 3 --eval-only --init-from " + checkpoint("good").string()),
                  "the checkpoint has n_layer=2 but the flags ask for n_layer=3");
  }
  SECTION("block_size longer than the data") {
    const fs::path small = synthetic_text("small.txt", {"ab", "ba"}, 40);  // ~120 chars: val has ~12
    clean_failure(train_dp(2, tiny(small, "data_small") + " --out-dir " + out("small")),
                  "--block-size 16 is longer than the data: the val split");
  }
  SECTION("a vocabulary mismatch") {
    const fs::path other = synthetic_text("other.txt", {"xyz", "zyx", "q"}, 3000);
    clean_failure(train_dp(2, tiny(other, "data_other") + " --eval-only --init-from " + checkpoint("good").string()),
                  "vocabulary mismatch");
  }
  SECTION("nonsense flag values") {
    clean_failure(train_dp(2, common + " --batch-size 0"), "--batch-size");
    clean_failure(train_dp(2, common + " --ddp fancy"), "--ddp");
    clean_failure(train_dp(2, common + " --max-iters many"), "--max-iters");
    clean_failure(train_dp(2, common + " --n-embd 30 --n-head 4"), "n_embd");
    clean_failure(train_dp(2, common + " --eval-only"), "--eval-only needs --init-from");
    clean_failure(train_dp(2, common + " --prompt 'QUEEN:'"), "--prompt: the character \"Q\"");
    clean_failure(train_dp(2, common + " --resume --out-dir " + out("never")), "no checkpoint");
  }
}

TEST_CASE("a rank killed mid-training: the others stop with the watchdog's report; the checkpoint survives") {
  const std::string common = tiny(shakespeareish()) + " --ckpt-interval 2 --max-iters 8";
  fs::remove_all(out("killed"));
  auto r = train_dp(3, common + " --crash-at-step 5 --crash-rank 1 --out-dir " + out("killed"));
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("rank 1 is dead"));
  // The last checkpoint (step 4) is intact and resumable.
  const nn::CheckpointInfo info = nn::read_checkpoint_info(checkpoint("killed"));
  CHECK(info.train_state.at("step") == 4);
  auto resumed = train_dp(3, common + " --resume --out-dir " + out("killed"));
  CHECK(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resuming from") && Catch::Contains("at step 4"));
  CHECK(nn::read_checkpoint_info(checkpoint("killed")).train_state.at("step") == 8);
}
