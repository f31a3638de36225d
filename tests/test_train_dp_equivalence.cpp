// train_dp ends where one process ends: N ranks against one, accumulation against a larger
// batch, the communication thread against caller progress, bf16 on the wire and in the
// matrix multiplies against fp32.
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

TEST_CASE("N ranks with micro-batch B end where 1 rank with batch N·B ends, with dropout and random sampling") {
  // The defaults' random sampling and dropout: the global batch and every mask are the same on any rank count.
  const std::string common = tiny(shakespeareish()) + fmt::format(" --dropout 0.1 --max-iters {}", kSteps);
  for (int N : {2, 3}) {
    const std::string reference = fmt::format("ref_{}", N);
    REQUIRE(train_dp(1, common + fmt::format(" --batch-size {} --out-dir {}", 4 * N, out(reference))).status == 0);
    for (std::string ddp : {"naive", "bucketed"})
      for (std::string backend : {"mpi", "ring", "shm"}) {
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
  SECTION("the comparison has teeth: other data (partition sampling) ends far away, and so do other masks") {
    REQUIRE(train_dp(2, common + " --batch-size 4 --sampling partition --out-dir " + out("dp2_partition")).status == 0);
    CHECK(max_difference(checkpoint("dp2_partition"), checkpoint("ref_2")) > 100 * kTolerance);
    REQUIRE(train_dp(2, common + " --batch-size 4 --dropout 0.11 --out-dir " + out("dp2_other_masks")).status == 0);
    CHECK(max_difference(checkpoint("dp2_other_masks"), checkpoint("ref_2")) > 100 * kTolerance);
  }
}

// --progress thread runs each bucket's allreduce (ZeRO's reduce-scatters and allgathers) on the
// communication thread, as the blocking collective of the same backend: the same sums, so the
// same bytes as caller progress, on every backend.

TEST_CASE("the communication thread (--progress thread): the same model and optimizer bytes as caller progress") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --batch-size 4 --max-iters {}", kSteps);
  for (const std::string layout : {"--ddp bucketed --bucket-mb 0.01", "--zero 3"})
    for (const std::string backend : {"shm", "ring", "mpi"}) {
      std::string names[2];
      for (const std::string progress : {"caller", "thread"}) {
        const std::string name = fmt::format("progress_{}_{}_{}", layout.substr(2, 3), backend, progress);
        auto r = train_dp(2, common + fmt::format(" {} --backend {} --progress {} --out-dir {}", layout, backend,
                                                  progress, out(name)));
        REQUIRE(r.status == 0);
        if (layout.find("bucketed") != std::string::npos)
          CHECK_THAT(r.output, Catch::Contains(progress == "thread" ? "moved by the communication thread"
                                                                    : "moved when backward tests it"));
        names[progress == "thread"] = name;
      }
      INFO(layout << " on " << backend);
      CHECK(same_bytes(checkpoint(names[0]) / "model.safetensors", checkpoint(names[1]) / "model.safetensors"));
      CHECK(same_bytes(checkpoint(names[0]) / "optimizer.safetensors",
                       checkpoint(names[1]) / "optimizer.safetensors"));
    }
  SECTION("a bad value is one line naming it") {
    usage_failure(run_command("env NANODIST_PROGRESS=soon " + mpirun(2, TRAIN_DP, common)),
                  "--progress: soon not in {caller,thread}");
  }
}

TEST_CASE("K accumulation steps of batch B equal one step of batch K·B (partition sampling, dropout)") {
  const std::string common =
      tiny(shakespeareish()) + fmt::format(" --sampling partition --dropout 0.1 --max-iters {}", kSteps);
  REQUIRE(train_dp(1, common + " --batch-size 8 --out-dir " + out("acc_ref8")).status == 0);
  REQUIRE(train_dp(1, common + " --batch-size 16 --out-dir " + out("acc_ref16")).status == 0);
  auto r = train_dp(1, common + " --batch-size 4 --grad-accum 2 --out-dir " + out("acc_1x2"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("1 ranks × micro-batch 4 × 2 accumulation step(s) × block 16 = 128 tokens"));
  CHECK(max_difference(checkpoint("acc_1x2"), checkpoint("acc_ref8")) <= kTolerance);
  // With ranks: 2 ranks × 2 micro-steps × 4 = 16, both averaging implementations.
  for (std::string ddp : {"naive", "bucketed"}) {
    const std::string name = "acc_2x2_" + ddp;
    REQUIRE(
        train_dp(2, common + " --batch-size 4 --grad-accum 2 --bucket-mb 0.01 --ddp " + ddp + " --out-dir " + out(name))
            .status == 0);
    CHECK(max_difference(checkpoint(name), checkpoint("acc_ref16")) <= kTolerance);
  }
}

TEST_CASE("gradients as bf16 on the wire (--grad-comm bf16): half the bytes, and a run that ends near the fp32 one") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --batch-size 4 --max-iters {}", kSteps);
  const double one_step = 1e-3;  // --learning-rate: what AdamW moves a parameter per step
  // (Catch2 runs the case once per section, and what stands outside them each time: the runs
  // live inside the sections that use them.)
  SECTION("every way of averaging ends within bf16 rounding of fp32, and another seed farther away") {
    REQUIRE(train_dp(3, common + " --out-dir " + out("fp32_n3")).status == 0);
    const std::vector<std::pair<std::string, std::string>> layouts = {{"naive", "--ddp naive"},
                                                                      {"bucketed", "--ddp bucketed --bucket-mb 0.01"},
                                                                      {"zero1", "--zero 1"},
                                                                      {"zero2", "--zero 2"},
                                                                      {"zero3", "--zero 3"}};
    for (const auto& [name, flags] : layouts) {
      auto r = train_dp(
          3, common + fmt::format(" {} --grad-comm bf16 --backend ring --out-dir {}", flags, out("bf16_" + name)));
      REQUIRE(r.status == 0);
      CHECK_THAT(r.output, Catch::Contains("gradients sent as bf16"));
      INFO(name);
      CHECK(check_within_bf16_rounding(checkpoint("bf16_" + name), checkpoint("fp32_n3"), kSteps, one_step) >
            1e-8);  // teeth: the gradients really went as bf16
    }
    // The bound has teeth: another seed (other data) ends farther away than bf16 rounding.
    REQUIRE(train_dp(3, common + " --seed 7 --out-dir " + out("fp32_seed7")).status == 0);
    CHECK(mean_difference(checkpoint("fp32_seed7"), checkpoint("fp32_n3")) >= 0.05 * one_step);
  }
  SECTION("the step's traffic halves: counted and by the formula, replicated and ZeRO-2") {
    for (std::string zero : {"0", "2"}) {
      const std::string one_step_run = fmt::format(
          "--text {} --data-dir {} --max-iters 1 --eval-interval 0 --no-full-val --sample-tokens 0 --zero {}",
          shakespeareish().string(), (work_dir() / "data").string(), zero);
      auto fp32 = train_dp(2, one_step_run + " --out-dir " + out("traffic_fp32_" + zero));
      auto bf16 = train_dp(2, one_step_run + " --grad-comm bf16 --out-dir " + out("traffic_bf16_" + zero));
      REQUIRE((fp32.status == 0 && bf16.status == 0));
      const std::regex sent(R"(each rank sends ≈ ([0-9.]+) MB \(formula ([0-9.]+) MB)");
      std::smatch a, b;
      REQUIRE(std::regex_search(fp32.output, a, sent));
      REQUIRE(std::regex_search(bf16.output, b, sent));
      INFO("--zero " << zero << ": fp32 sends " << a[1] << " MB (formula " << a[2] << "), bf16 " << b[1]
                     << " MB (formula " << b[2] << ")");
      CHECK(std::stod(b[1]) == Approx(std::stod(b[2])).epsilon(0.07));  // counted = formula
      // Replicated: every byte is a gradient, so exactly half; ZeRO-2 all-gathers fp32
      // parameters too: Ψ·2 + Ψ·4 bytes of 2Ψ·4, three quarters.
      CHECK(std::stod(b[1]) == Approx(std::stod(a[1]) * (zero == "0" ? 0.5 : 0.75)).epsilon(0.07));
    }
  }
}

// --precision bf16: the linear layers' products on bf16 inputs. N ranks against one process
// then differ by more than fp32's last bits: a sum in another order can flip an activation's
// bf16 rounding. They must stay within bf16 rounding's bound (check_within_bf16_rounding),
// while the bf16 run itself differs from the fp32 one (the teeth); resume stays bit-exact.

TEST_CASE("bf16 matrix multiplies (--precision bf16): N ranks and ZeRO-3 end near one process, resume is bit-exact") {
  const std::string common = tiny(shakespeareish()) + fmt::format(" --sampling partition --max-iters {}", kSteps);
  const double one_step = 1e-3;
  // (Catch2 runs the case once per section, and what stands outside them each time: only the
  // one-process bf16 reference, which two sections use, stands outside.)
  auto ref = train_dp(1, common + " --batch-size 8 --precision bf16 --out-dir " + out("prec_bf16_ref"));
  REQUIRE(ref.status == 0);
  CHECK_THAT(ref.output, Catch::Contains("bf16 matrix multiplies on"));
  SECTION("N ranks and ZeRO-3 end within bf16 rounding of one bf16 process, nearer it than fp32") {
    REQUIRE(train_dp(1, common + " --batch-size 8 --out-dir " + out("prec_fp32_ref")).status == 0);
    CHECK(mean_difference(checkpoint("prec_bf16_ref"), checkpoint("prec_fp32_ref")) > 1e-8);  // bf16 was used
    for (const auto& [name, flags] :
         std::vector<std::pair<std::string, std::string>>{{"prec_naive_ring", "--ddp naive --backend ring"},
                                                          {"prec_bucketed", "--ddp bucketed --bucket-mb 0.01"},
                                                          {"prec_zero3", "--zero 3"}}) {
      auto r = train_dp(2, common + fmt::format(" --batch-size 4 --precision bf16 {} --out-dir {}", flags, out(name)));
      REQUIRE(r.status == 0);
      // Nearer the bf16 process than the fp32 one: the ranks really multiplied in bf16.
      CHECK(check_within_bf16_rounding(checkpoint(name), checkpoint("prec_bf16_ref"), kSteps, one_step) <
            mean_difference(checkpoint(name), checkpoint("prec_fp32_ref")));
    }
  }
  SECTION("without bf16 units (emulated: NANODIST_GEMM=eigen) the same products, summed in another order") {
    auto r =
        run_command("env NANODIST_GEMM=eigen " +
                    mpirun(1, TRAIN_DP, common + " --batch-size 8 --precision bf16 --out-dir " + out("prec_emulated")));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("bf16 matrix multiplies on Eigen, emulated"));
    check_within_bf16_rounding(checkpoint("prec_emulated"), checkpoint("prec_bf16_ref"), kSteps, one_step);
  }
  SECTION("resume: 4 + 4 steps ≡ 8 steps bit for bit, and the checkpoint keeps bf16") {
    const std::string run = tiny(shakespeareish()) + " --dropout 0.1 --lr-decay-iters 8 --ckpt-interval 2";
    REQUIRE(train_dp(2, run + " --precision bf16 --max-iters 8 --out-dir " + out("prec_straight")).status == 0);
    REQUIRE(train_dp(2, run + " --precision bf16 --max-iters 4 --out-dir " + out("prec_resumed")).status == 0);
    auto r = train_dp(2, run + " --max-iters 8 --resume --out-dir " + out("prec_resumed"));  // no --precision
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("bf16 matrix multiplies on"));
    CHECK(same_bytes(checkpoint("prec_straight") / "model.safetensors",
                     checkpoint("prec_resumed") / "model.safetensors"));
    CHECK(same_bytes(checkpoint("prec_straight") / "optimizer.safetensors",
                     checkpoint("prec_resumed") / "optimizer.safetensors"));
  }
}
