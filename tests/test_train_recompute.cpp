// --recompute selective|full end to end, under mpiexec: with dropout on, every trainer
// (train_dp in fp32 and, with ZeRO-3, bf16; train_pp on both schedules, train_tp with
// sequence parallelism and train_3d, each in fp32 and bf16) ends bit-identical to the same run
// with --recompute none; the memory line says which setting ran and its step peak falls.
#include <regex>

#include "trainer_test_util.hpp"

namespace {

constexpr int kSteps = 3;

// 4 heads (tp 2 splits them), 2 blocks (one per stage), dropout on: the replay must draw
// forward's masks, from the coordinates it captured when forward ran.
std::string common(int layers = 2) {
  return tiny(shakespeareish(), "data", layers) + fmt::format(" --n-head 4 --dropout 0.1 --max-iters {}", kSteps);
}

// The step peak above the step's start on rank 0, from the memory line (MiB or KiB).
double activation_peak(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex("memory rank 0 .*step peak [^,]*, ([0-9.]+) (KiB|MiB) above")));
  return std::stod(m[1].str()) * (m[2].str() == "MiB" ? 1024 : 1);
}

// Runs `program` on `ranks` with `args` under each setting; each must end with the model and
// optimizer files of --recompute none, byte for byte. Returns the three outputs.
std::vector<std::string> same_under_every_setting(const char* program, int ranks, const std::string& name,
                                                  const std::string& args) {
  std::vector<std::string> outputs;
  for (const char* setting : {"none", "selective", "full"}) {
    const std::string run = fmt::format("{}_{}", name, setting);
    CommandResult r =
        run_trainer(program, ranks, fmt::format("{} --recompute {} --out-dir {}", args, setting, out(run)));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains(fmt::format("recompute {})", setting)));  // the memory line says it
    outputs.push_back(r.output);
    if (std::string(setting) == "none") continue;
    INFO(run << " against " << name << "_none");
    CHECK(same_bytes(checkpoint(run) / "model.safetensors", checkpoint(name + "_none") / "model.safetensors"));
    CHECK(same_bytes(checkpoint(run) / "optimizer.safetensors",
                     checkpoint(name + "_none") / "optimizer.safetensors"));
  }
  return outputs;
}

}  // namespace

TEST_CASE("train_dp: recompute selective and full end bit-identical to none (2 ranks, ZeRO-3 too), in fp32 and bf16") {
  const auto fp32 = same_under_every_setting(TRAIN_DP, 2, "dp", common() + " --batch-size 4");
  // The attention weights go first, then all but each block's input.
  CHECK(activation_peak(fp32[1]) < activation_peak(fp32[0]));
  CHECK(activation_peak(fp32[2]) < activation_peak(fp32[1]));
  same_under_every_setting(TRAIN_DP, 2, "dp_zero3_bf16", common() + " --batch-size 4 --zero 3 --precision bf16");
}

TEST_CASE("train_pp: recompute ends bit-identical to none on GPipe and 1F1B (2 stages, 4 micro-batches), fp32 and bf16") {
  for (const char* precision : {"fp32", "bf16"})
    for (const char* schedule : {"gpipe", "1f1b"})
      same_under_every_setting(
          TRAIN_PP, 2, fmt::format("pp_{}_{}", schedule, precision),
          common() + fmt::format(" --batch-size 8 --micro-batches 4 --schedule {} --precision {}", schedule, precision));
  // Interleaved chunks on 2 replicas with small buckets: each chunk's replay inside the
  // overlapped averaging (the grad-ready markers stay outside the recomputed blocks).
  same_under_every_setting(TRAIN_PP, 4, "pp_interleaved_dp2",
                           common(4) + " --dp 2 --batch-size 4 --micro-batches 2 --virtual-stages 2 --bucket-mb 0.01");
}

TEST_CASE("train_tp (sequence parallel) and train_3d: recompute ends bit-identical to none, in fp32 and bf16") {
  for (const char* precision : {"fp32", "bf16"}) {
    same_under_every_setting(TRAIN_TP, 2, fmt::format("tp_sp_{}", precision),
                             common() + " --batch-size 4 --sequence-parallel --precision " + precision);
    same_under_every_setting(TRAIN_3D, 4, fmt::format("3d_{}", precision),
                             common() + " --dp 1 --tp 2 --pp 2 --batch-size 4 --micro-batches 2 --sequence-parallel "
                                        "--precision " + precision);
  }
}
