// nanodist plan's model (planning/): the memory it predicts is the trainers' own formulas
// (nn/memory_estimate, parallel::zero_formula_held) and Korthikanti et al.'s, the α–β costs
// behave as the algorithms do, the bubble is the schedule's, and the published tables the
// docs compare against stay within the errors docs/planning.md reports.
#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "nn/memory_estimate.hpp"
#include "parallel/dp/zero_optimizer.hpp"
#include "planning/error.hpp"
#include "planning/megatron_activations.hpp"
#include "planning/plan.hpp"

using namespace planning;
using nn::Recompute;

namespace {

Workload main_job(int devices, int64_t batch) {
  return {.model = model_preset("main-job"), .global_batch = batch, .devices = devices};
}

// A machine whose links cost nothing: only compute and the bubble are left.
Machine free_links() {
  Machine m = machine_preset("a100-80gb");
  m.intra_node = m.inter_node = {.latency_s = 0, .bytes_per_s = 1e30};
  m.memory_bytes_per_s = 0;
  m.optimizer_seconds_per_parameter = 0;
  return m;
}

}  // namespace

TEST_CASE("planned parameters are the trainers' counts", "[planning]") {
  const nn::GPTConfig c = model_preset("main-job");
  CHECK(rank_parameter_count(c, 1, 1, 0) == nn::parameter_count(c));
  // train_tp on 2 ranks logs "parameters 819 KiB": wte split by vocabulary (the first rank
  // holds 33 of the 65 rows), wpe and the layernorms whole.
  CHECK(rank_parameter_count(c, 2, 1, 0) == 209664);
  // train_pp's 4-block model on 2 stages: 1.56 MiB and 1.53 MiB (the last holds ln_f and a
  // copy of the tied wte).
  nn::GPTConfig four = c;
  four.n_layer = 4;
  CHECK(rank_parameter_count(four, 1, 2, 0) == 410240);
  CHECK(rank_parameter_count(four, 1, 2, 1) == 402176);
  nn::GPTConfig biased = model_preset("gpt-1.7b");
  CHECK(rank_parameter_count(biased, 1, 1, 0) == nn::parameter_count(biased));
  // A mixture of experts: train_dp logs "parameters 4.57 MiB" for main-job-moe (1,197,824 floats,
  // 4 experts in both blocks); on 2 stages each holds one mixture block; Switch's shape every second.
  const nn::GPTConfig moe = model_preset("main-job-moe");
  CHECK(rank_parameter_count(moe, 1, 1, 0) == nn::parameter_count(moe));
  CHECK(nn::parameter_count(moe) == 1197824);
  CHECK(rank_parameter_count(moe, 1, 2, 0) + rank_parameter_count(moe, 1, 2, 1) ==
        nn::parameter_count(moe) + 65 * 128);  // + the last stage's copy of wte
  const nn::GPTConfig sw = model_preset("switch-base-8");
  CHECK(rank_parameter_count(sw, 1, 1, 0) == nn::parameter_count(sw));
  CHECK(moe_blocks_on_stage(sw, 2, 0) == 3);
  CHECK(moe_blocks_on_stage(sw, 1, 0) == 6);
  // Interleaved, 4 stages × 3 chunks of one block: stage 1 holds blocks 1, 5, 9 (all mixtures),
  // stage 0 blocks 0, 4, 8 (none).
  CHECK(moe_blocks_on_stage(sw, 4, 1, 3) == 3);
  CHECK(moe_blocks_on_stage(sw, 4, 0, 3) == 0);
}

TEST_CASE("nanodist's memory is nn/memory_estimate's and ZeRO's formula, not a copy", "[planning]") {
  for (auto precision : {nn::Precision::fp32, nn::Precision::bf16})
    for (auto r : {Recompute::none, Recompute::selective, Recompute::full}) {
      Workload w = main_job(1, 12);
      w.precision = precision;
      const Layout one{.recompute = r, .micro_batch = 12};
      const RankMemory m = stage_memory(w, one, 0);
      CHECK(m.activations == Approx(nn::kept_activation_bytes(w.model, 12, w.model.block_size, r, precision)).epsilon(1e-12));
    }
  for (int zero = 0; zero <= 3; ++zero) {
    const Workload w = main_job(4, 48);
    const Layout l{.dp = 4, .zero = zero, .micro_batch = 12};
    const RankMemory m = stage_memory(w, l, 0);
    const parallel::HeldBytes held = parallel::zero_formula_held(zero, nn::parameter_count(w.model), 4);
    CHECK(m.parameters == held.parameters);
    // ZeRO-1's full gradients are made as backward frees the activations: not in the peak.
    CHECK(m.gradients == (zero == 1 ? 0.0 : held.gradients));
    CHECK(m.optimizer == held.optimizer);
    CHECK(m.parameters + m.gradients + m.optimizer ==
          Approx(parallel::zero_formula_bytes(zero, nn::parameter_count(w.model), 4) -
                 (zero == 1 ? held.gradients : 0.0)));
  }
  // A tensor-parallel rank's block activations are the formula test_tensor_parallel checks
  // against the allocator.
  Workload w = main_job(2, 12);
  const Layout tp{.tp = 2, .sequence_parallel = true, .micro_batch = 12};
  nn::GPTConfig none = w.model;
  none.n_layer = 0;  // only the embedding and the head
  Workload head_only = w;
  head_only.model = none;
  const double blocks = stage_memory(w, tp, 0).activations - stage_memory(head_only, tp, 0).activations;
  CHECK(blocks == Approx(4.0 * 12 * 64 * 2 *
                         nn::block_activation_floats_per_token(w.model, 64, Recompute::none, nn::Precision::fp32, 2, true)));
}

TEST_CASE("micro-batches in flight follow the schedules", "[planning]") {
  Workload w = main_job(4, 16);
  w.model.n_layer = 8;
  const Layout one_f{.pp = 4, .micro_batch = 2};  // M = 8
  for (int s = 0; s < 4; ++s) CHECK(micro_batches_in_flight(w, one_f, s) == 4 - s);
  const Layout gpipe{.pp = 4, .schedule = Schedule::gpipe, .micro_batch = 2};
  CHECK(micro_batches_in_flight(w, gpipe, 3) == 8);
  const Layout interleaved{.pp = 4, .virtual_stages = 2, .schedule = Schedule::interleaved, .micro_batch = 2};
  CHECK(micro_batches_in_flight(w, interleaved, 0) == 2 * 3 + 4 + 1);  // 2(p − 1) + (v − 1)p + 1
  CHECK(micro_batches_in_flight(w, interleaved, 3) == 4 + 1);
}

TEST_CASE("Megatron's stages: Eq. 5 where it holds, the schedule's micro-batches elsewhere", "[planning]") {
  const Workload w{.model = model_preset("gpt-175b"), .precision = nn::Precision::bf16, .global_batch = 64,
                   .devices = 64, .implementation = Implementation::megatron};
  for (int v : {1, 3}) {
    const Layout l{.tp = 8, .pp = 8, .virtual_stages = v,
                   .schedule = v > 1 ? Schedule::interleaved : Schedule::one_f_one_b, .sequence_parallel = true,
                   .recompute = Recompute::selective, .micro_batch = 1};  // M = 64 ≥ p
    CHECK(stage_memory(w, l, 0).activations ==
          Approx(megatron_first_stage_activation_bytes(w.model, 1, 8, 8, v, true, Recompute::selective)));
  }
  // GPipe keeps every micro-batch: 64 where 1F1B keeps 8, so about 8× the layers' share.
  const Layout one_f{.tp = 8, .pp = 8, .sequence_parallel = true, .recompute = Recompute::selective, .micro_batch = 1};
  Layout gpipe = one_f;
  gpipe.schedule = Schedule::gpipe;
  CHECK(stage_memory(w, gpipe, 0).activations > 7.5 * stage_memory(w, one_f, 0).activations);
  // Fewer micro-batches than stages: 1F1B keeps only those.
  Workload four = w;
  four.global_batch = 4;
  CHECK(stage_memory(four, one_f, 0).activations == Approx(stage_memory(w, one_f, 0).activations / 2));
}

TEST_CASE("the bubble is (p − 1)/(v·m) of the compute when the links are free", "[planning]") {
  Workload w = main_job(4, 32);
  w.model.n_layer = 8;
  w.implementation = Implementation::megatron;  // every stage the same work but the head
  w.model.vocab_size = 1;                       // … which is then nothing
  for (int v : {1, 2}) {
    const Layout l{.pp = 4, .virtual_stages = v, .schedule = v > 1 ? Schedule::interleaved : Schedule::one_f_one_b,
                   .micro_batch = 4};  // m = 8
    const StepTime t = step_time(w, l, free_links());
    CHECK(t.bubble / t.compute == Approx(3.0 / (v * 8)).epsilon(1e-9));
  }
}

TEST_CASE("α–β: a tree wins small messages, a ring large ones; hierarchy across nodes", "[planning]") {
  const Machine m = machine_preset("a100-80gb");
  const GroupShape eight{8, 8};
  CHECK(allreduce_cost(eight, 8, m).algorithm == Algorithm::tree);
  CHECK(allreduce_cost(eight, 64e6, m).algorithm == Algorithm::ring);
  CHECK(ring_allreduce_seconds(8, 64e6, m.intra_node) ==
        Approx(14 * m.intra_node.latency_s + 2.0 * 7 / 8 * 64e6 / m.intra_node.bytes_per_s));
  const GroupShape two_nodes{16, 8};
  const CollectiveCost across = allreduce_cost(two_nodes, 1e9, m);
  CHECK(across.algorithm == Algorithm::hierarchical);
  CHECK(across.seconds < ring_allreduce_seconds(16, 1e9, m.inter_node));
  CHECK(allreduce_cost(GroupShape{1, 1}, 1e9, m).seconds == 0);
  // A group that does not fill its nodes evenly still leaves the node: 12 ranks, 8 a node.
  CHECK(GroupShape{12, 8}.nodes() == 2);
  CHECK(allreduce_cost(GroupShape{12, 8}, 1e9, m).algorithm == Algorithm::hierarchical);
  CHECK(allreduce_cost(GroupShape{12, 8}, 1e9, m).seconds > 1.3 * ring_allreduce_seconds(12, 1e9, m.intra_node));
}

TEST_CASE("Korthikanti et al. 2022: Table 2's per-layer forms and Eq. 5, for the paper's models", "[planning]") {
  struct Case {
    const char* model;
    int t, p, v;
  };
  for (const Case& k : {Case{"gpt-22b", 8, 1, 1}, Case{"gpt-175b", 8, 8, 3}, Case{"gpt-530b", 8, 35, 3},
                        Case{"gpt-1t", 8, 64, 1}}) {
    const nn::GPTConfig c = model_preset(k.model);
    const double s = 2048, b = 1, h = c.n_embd, a = c.n_head, t = k.t, L = c.n_layer, sbh = s * b * h;
    CHECK(megatron_layer_activation_bytes(c, b, 1, false, Recompute::none) == Approx(sbh * (34 + 5 * a * s / h)));
    CHECK(megatron_layer_activation_bytes(c, b, k.t, false, Recompute::none) ==
          Approx(sbh * (10 + 24 / t + 5 * a * s / (h * t))));
    CHECK(megatron_layer_activation_bytes(c, b, k.t, true, Recompute::none) == Approx(sbh / t * (34 + 5 * a * s / h)));
    CHECK(megatron_layer_activation_bytes(c, b, k.t, false, Recompute::selective) == Approx(sbh * (10 + 24 / t)));
    CHECK(megatron_layer_activation_bytes(c, b, k.t, true, Recompute::selective) == Approx(sbh * 34 / t));
    CHECK(megatron_layer_activation_bytes(c, b, k.t, true, Recompute::full) == Approx(2 * sbh));
    // Eq. 5: the first stage holds L layers' worth, × (1 + (p − 1)/(p·m)) interleaved.
    const double p = k.p, interleave = k.v > 1 ? 1 + (p - 1) / (p * k.v) : 1;
    const double baseline = sbh * L / t * (34 + 5 * a * s / h) * interleave;
    const double first = megatron_first_stage_activation_bytes(c, b, k.t, k.p, k.v, true, Recompute::none);
    CHECK(first == Approx(baseline + sbh * p / t + (k.p == 1 ? 4 * sbh / t + 4 * s * b * c.vocab_size / t : 0)));
    // The paper's claims: SP + selective cut tensor parallelism's activations about 5× (to
    // 16-20% here: the embedding's mask adds most on the deep pipelines), full to about 10%.
    const double tp_alone = megatron_first_stage_activation_bytes(c, b, k.t, k.p, k.v, false, Recompute::none);
    CHECK(megatron_first_stage_activation_bytes(c, b, k.t, k.p, k.v, true, Recompute::selective) < 0.21 * tp_alone);
    CHECK(megatron_first_stage_activation_bytes(c, b, k.t, k.p, k.v, false, Recompute::full) < 0.11 * tp_alone);
  }
}

TEST_CASE("Narayanan et al. 2021 Table 1: every row's teraFLOP/s within 20%", "[planning]") {
  struct Row {
    const char* model;
    int t, p, gpus, batch, micro, v;
    double published;
  };
  const Row rows[] = {{"gpt-1.7b", 1, 1, 32, 512, 16, 1, 137},      {"gpt-3.6b", 2, 1, 64, 512, 16, 1, 138},
                      {"gpt-7.5b", 4, 1, 128, 512, 16, 1, 142},     {"gpt-18.4b", 8, 1, 256, 1024, 8, 1, 135},
                      {"gpt-39.1b", 8, 2, 512, 1536, 4, 1, 138},    {"gpt-76.1b", 8, 4, 1024, 1792, 2, 3, 140},
                      {"gpt-145.6b", 8, 8, 1536, 2304, 2, 2, 148},  {"gpt-310.1b", 8, 16, 1920, 2160, 1, 2, 155},
                      {"gpt-529.6b", 8, 35, 2520, 2520, 1, 3, 163}, {"gpt-1t", 8, 64, 3072, 3072, 1, 1, 163}};
  const Machine a100 = machine_preset("a100-80gb");
  for (const Row& r : rows) {
    const Workload w{.model = model_preset(r.model), .precision = nn::Precision::bf16, .global_batch = r.batch,
                     .devices = r.gpus, .implementation = Implementation::megatron};
    const Layout l{.dp = r.gpus / (r.t * r.p), .tp = r.t, .pp = r.p, .virtual_stages = r.v,
                   .schedule = r.v > 1 ? Schedule::interleaved : Schedule::one_f_one_b,
                   .recompute = Recompute::full, .micro_batch = r.micro};
    REQUIRE(l.impossible(w).empty());
    const PlannedLayout planned = evaluate(w, l, a100);
    CHECK(planned.fits);
    // Eq. 3 is the planner's training FLOPs with full recomputation.
    const double s = 2048, h = w.model.n_embd, L = w.model.n_layer, V = w.model.vocab_size;
    const double eq3 = 96 * r.batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    CHECK(training_flops_per_token(w.model, Recompute::full) * r.batch * s == Approx(eq3));
    const double teraflops = eq3 / planned.time.total() / r.gpus / 1e12;
    INFO(r.model << ": predicted " << teraflops << " TF/s, published " << r.published);
    CHECK(std::abs(teraflops - r.published) / r.published < 0.20);
  }
}

TEST_CASE("the sweep: possible layouts only, those that fit first, fastest first; fixed choices kept", "[planning]") {
  const Workload w = main_job(4, 24);
  const auto all = sweep(w, machine_preset("this-cpu"), {});
  REQUIRE(!all.empty());
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(all[i].layout.impossible(w).empty());
    if (i > 0 && all[i].fits == all[i - 1].fits) CHECK(all[i - 1].time.total() <= all[i].time.total());
  }
  LayoutChoices fixed;
  fixed.tp = 2;
  fixed.recompute = Recompute::full;
  for (const auto& p : sweep(w, machine_preset("this-cpu"), fixed)) {
    CHECK(p.layout.tp == 2);
    CHECK(p.layout.recompute == Recompute::full);
  }
  // A model too large for a GPU does not fit on one, and fits on enough of them.
  const Workload big{.model = model_preset("gpt-175b"), .precision = nn::Precision::bf16, .global_batch = 64,
                     .devices = 1, .implementation = Implementation::megatron};
  CHECK_FALSE(sweep(big, machine_preset("a100-80gb"), {}).front().fits);
}

TEST_CASE("layouts that cannot run say why", "[planning]") {
  const Workload w = main_job(4, 24);
  CHECK(Layout{.dp = 1, .tp = 3, .pp = 1}.impossible(main_job(3, 24)) ==
        "--n-head 4 is not divisible by --tp 3: each tensor-parallel rank runs n_head / tp whole heads");
  CHECK(Layout{.dp = 2, .tp = 2}.impossible(main_job(8, 24)) ==
        "8 ranks cannot be --dp 2 × --pp 1 × --tp 2 = 4: run D·P·T ranks");
  CHECK(Layout{.dp = 1, .pp = 4}.impossible(w) ==
        "4 pipeline stages for 2 blocks: every stage needs at least one block (use fewer ranks, a larger --dp, or more --n-layer)");
  CHECK(Layout{.dp = 4, .micro_batch = 5}.impossible(w) == "dp 4 × micro-batch 5 does not divide the global batch 24");
  CHECK(Layout{.dp = 2, .tp = 2, .zero = 1}.impossible(w).empty());  // ZeRO 1-2 by role, on any layout
  CHECK_THAT((Layout{.dp = 2, .tp = 2, .zero = 3}.impossible(w)),
             Catch::StartsWith("--zero 3 runs with pure data parallelism (train_dp): on the grid"));
  Workload megatron = w;
  megatron.implementation = Implementation::megatron;
  CHECK(Layout{.dp = 4, .zero = 1}.impossible(megatron) ==
        "the megatron implementation is planned without ZeRO (Megatron-LM 2021 had none)");
  Workload odd = main_job(2, 24);
  odd.model.block_size = 63;
  CHECK(Layout{.tp = 2, .sequence_parallel = true}.impossible(odd) ==
        "--sequence-parallel: --block-size 63 is not divisible by --tp 2");
  CHECK(Layout{.pp = 2, .virtual_stages = 1 << 30, .schedule = Schedule::interleaved}.impossible(main_job(2, 24)) ==
        "--virtual-stages 1073741824 × 2 stages = 2147483648 chunks for 2 blocks: every chunk needs at least one block (a smaller --virtual-stages, or more --n-layer)");
}

TEST_CASE("context parallelism: the rank's T/c positions, the ring's and Ulysses' transfers, the refusals",
          "[planning]") {
  Workload w = main_job(4, 8);
  w.model.block_size = 1024;
  const auto& c = w.model;
  const Layout one{.dp = 4, .micro_batch = 2};
  const Layout ring{.dp = 1, .cp = 4, .cp_attention = CpAttention::ring, .micro_batch = 2};
  const Layout ulysses{.dp = 1, .cp = 4, .cp_attention = CpAttention::ulysses, .micro_batch = 2};
  REQUIRE(ring.impossible(w).empty());
  REQUIRE(ulysses.impossible(w).empty());
  // What a rank keeps is nn/memory_estimate's block formula for its 2 × 256 positions.
  for (const Layout& l : {ring, ulysses}) {
    const nn::ContextShape shape{.ranks = 4, .ring_attention = l.cp_attention == CpAttention::ring};
    const double tokens = 2.0 * 256;
    const double kept = 4 * tokens *
                        (c.n_layer * nn::block_activation_floats_per_token(c, 1024, Recompute::none, w.precision, 1,
                                                                           false, shape) +
                         nn::embedding_activation_floats_per_token(c, 2) + nn::head_activation_floats_per_token(c, w.precision));
    CHECK(stage_memory(w, l, 0).activations == Approx(kept));
  }
  // The ring keeps no T² (a log-sum-exp a row): its activations fall by more than c; Ulysses'
  // keep its heads' weights over all T, so they fall by less.
  const double whole = stage_memory(w, one, 0).activations;
  CHECK(stage_memory(w, ring, 0).activations < whole / 4);
  CHECK(stage_memory(w, ulysses, 0).activations > whole / 4);
  CHECK(stage_memory(w, ulysses, 0).activations < whole / 2);

  // Ulysses: four all-to-alls a block and micro-batch (4 of them), never hidden; the ring: K
  // and V c − 1 hops forward and backward (hidden behind attention where they fit), dK, dV c hops.
  const Machine m = machine_preset("a100-80gb");
  const GroupShape group{.size = 4, .per_node = 8};
  const double position_bytes = 2.0 * 256 * 4, C = c.n_embd;
  const double trades = 2 * (alltoall_cost(group, 3 * C * position_bytes, m).seconds +
                             alltoall_cost(group, C * position_bytes, m).seconds);
  const StepTime u = step_time(w, ulysses, m), r = step_time(w, ring, m);
  CHECK(u.cp == Approx(4 * c.n_layer * trades));
  CHECK(u.cp_overlapped == 0);
  CHECK(u.cp_algorithm == "pairwise");
  const double hop = send_cost(true, 2 * C * position_bytes, m).seconds;
  CHECK(r.cp + r.cp_overlapped == Approx(4 * c.n_layer * (2 * 3 + 4) * hop));
  CHECK(r.cp >= 4 * c.n_layer * 4 * hop * (1 - 1e-12));
  CHECK(r.cp_algorithm == "send/recv");
  // The all-to-all in the α–β model: (n − 1) steps of S/n.
  const Link& link = m.intra_node;
  CHECK(alltoall_cost(group, 8e6, m).seconds == Approx(3 * link.latency_s + 0.75 * 8e6 / link.bytes_per_s));
  // Each rank computes 1/c of the tokens: the compute falls by c with the same batch.
  CHECK(u.compute == Approx(step_time(w, Layout{.dp = 1, .cp = 1, .micro_batch = 2}, m).compute / 4).epsilon(0.01));

  // The sweep tries cp and both algorithms; the command is train_3d's.
  bool saw_ring = false, saw_ulysses = false;
  for (const auto& p : sweep(w, machine_preset("this-cpu"), {})) {
    saw_ring |= p.layout.cp > 1 && p.layout.cp_attention == CpAttention::ring;
    saw_ulysses |= p.layout.cp > 1 && p.layout.cp_attention == CpAttention::ulysses;
  }
  CHECK(saw_ring);
  CHECK(saw_ulysses);
  LayoutChoices fixed;
  fixed.cp = 2;
  fixed.cp_attention = CpAttention::ulysses;
  for (const auto& p : sweep(w, machine_preset("this-cpu"), fixed)) {
    CHECK(p.layout.cp == 2);
    CHECK(p.layout.cp_attention == CpAttention::ulysses);
  }
  CHECK(ring.describe(w) == "dp 1 · tp 1 · pp 1 · cp 4 ring · none · 2 × 4");
  CHECK(ring.trainer_command(w).find("train_3d") != std::string::npos);
  CHECK(ring.trainer_command(w).find("--cp 4 --cp-attention ring --batch-size 8") != std::string::npos);

  // What train_3d refuses, the planner refuses in the same terms.
  Workload odd = w;
  odd.model.block_size = 1020;
  CHECK(ring.impossible(odd) ==
        "--cp 4: --block-size 1020 does not split into 2·cp = 8 equal chunks (each cp rank holds two, one from each end)");
  CHECK(Layout{.dp = 1, .cp = 8, .cp_attention = CpAttention::ulysses, .micro_batch = 2}.impossible(main_job(8, 8)) ==
        "--cp-attention ulysses: the 4 heads of each tp rank do not split over --cp 8 (--cp-attention ring, or a cp dividing them)");
  CHECK(Layout{.dp = 1, .tp = 2, .cp = 2, .sequence_parallel = true, .micro_batch = 2}.impossible(w).empty());
  Workload six = main_job(6, 8);
  six.model.n_head = 6;
  six.model.n_embd = 192;
  six.model.block_size = 48;
  CHECK(Layout{.dp = 1, .tp = 3, .cp = 2, .sequence_parallel = true, .micro_batch = 2}.impossible(six) ==
        "--cp with --sequence-parallel needs an even --tp (got 3): each tp rank's share of a cp rank's positions must lie within one of its two chunks");
  Workload bf16 = w;
  bf16.precision = nn::Precision::bf16;
  CHECK(ring.impossible(bf16).empty());  // its products on bf16 inputs, the online softmax in fp32
  CHECK(ulysses.impossible(bf16).empty());
  CHECK(Layout{.dp = 2, .cp = 2, .micro_batch = 2}.impossible(main_job(8, 8)) ==
        "8 ranks cannot be --dp 2 × --pp 1 × --cp 2 × --tp 1 = 4: run D·P·C·T ranks");
  CHECK(Layout{.dp = 1, .cp = 1 << 30}.impossible(w) ==
        "4 ranks cannot be --dp 1 × --pp 1 × --cp 1073741824 × --tp 1 = 1073741824: run D·P·C·T ranks");
}

TEST_CASE("machine files: round trip, and a missing or bad field named", "[planning]") {
  const Machine a100 = machine_preset("a100-80gb");
  const Machine back = Machine::from_json(a100.to_json());
  CHECK(back.to_json() == a100.to_json());
  nlohmann::json j = a100.to_json();
  j.erase("peak_flops_bf16");
  CHECK_THROWS_WITH(Machine::from_json(j), "machine: the field \"peak_flops_bf16\" is missing");
  j = a100.to_json();
  j["matmul_efficiency"] = 1.5;
  CHECK_THROWS_WITH(Machine::from_json(j), "machine: \"matmul_efficiency\" must be from 0.001 to 1 (got 1.5)");
  for (const char* field : {"peak_flops_fp32", "block_overhead_s", "memory_bytes_per_s"}) {
    j = a100.to_json();
    j[field] = "fast";
    CHECK_THROWS_WITH(Machine::from_json(j), fmt::format("machine: \"{}\" must be a number", field));
    j[field] = 1e308;
    CHECK_THROWS_WITH(Machine::from_json(j), Catch::Contains(fmt::format("machine: \"{}\" must be from", field)));
  }
  j = a100.to_json();
  j["devices_per_node"] = 2.5;
  CHECK_THROWS_WITH(Machine::from_json(j), "machine: \"devices_per_node\" must be a whole number");
  // The CPU's backends, each as comm_bench measured it: --backend takes one as the node's link.
  const Machine cpu = machine_preset("this-cpu");
  REQUIRE(cpu.backends.count("shm") == 1);
  CHECK(cpu.with_backend("shm").intra_node.bytes_per_s == cpu.backends.at("shm").bytes_per_s);
  CHECK(cpu.with_backend("mpi").intra_node.bytes_per_s == cpu.intra_node.bytes_per_s);
  CHECK(Machine::from_json(cpu.to_json()).backends.size() == cpu.backends.size());
  CHECK_THROWS_WITH(a100.with_backend("shm"), "machine a100-80gb has no measured backend \"shm\" (it has none)");
  CHECK_THROWS_AS(machine_preset("tpu"), planning::Error);
  CHECK_THROWS_AS(model_preset("gpt-5"), planning::Error);
}

TEST_CASE("expert parallelism: E/ep experts a rank, the dispatch's copies and all-to-alls, the refusals",
          "[planning]") {
  Workload w = main_job(4, 24);
  w.model = model_preset("main-job-moe");  // 4 experts, one a token, in both blocks
  const auto& c = w.model;
  const Layout dense_experts{.dp = 4, .micro_batch = 6};
  const Layout ep2{.dp = 4, .ep = 2, .micro_batch = 6};
  const Layout ep4{.dp = 4, .ep = 4, .micro_batch = 6};
  REQUIRE(ep2.impossible(w).empty());
  REQUIRE(ep4.impossible(w).empty());
  // Parameters: each rank E/ep experts of each mixture block (8C² + its router row share stays whole).
  const double C = c.n_embd, expert = 8 * C * C;
  CHECK(rank_parameter_count(c, 1, 1, 0, 1, 2) == Approx(nn::parameter_count(c) - 2 * 2 * expert));
  CHECK(rank_parameter_count(c, 1, 1, 0, 1, 4) == Approx(nn::parameter_count(c) - 2 * 3 * expert));
  CHECK(stage_memory(w, ep4, 0).parameters == Approx(4 * rank_parameter_count(c, 1, 1, 0, 1, 4)));
  // Activations: the dispatch's five copies of each kept row, 5·k·C floats a token and mixture block.
  const double tokens = 6.0 * c.block_size;
  CHECK(nn::moe_block_extra_floats_per_token(c, w.precision, 2) - nn::moe_block_extra_floats_per_token(c, w.precision) ==
        Approx(5 * C));
  CHECK(stage_memory(w, ep2, 0).activations - stage_memory(w, dense_experts, 0).activations ==
        Approx(4 * tokens * 2 * 5 * C));
  // Time: per block and micro-batch, dispatch and combine forward and backward (4 all-to-alls of
  // the rank's k·b·T rows) and the counts'.
  const Machine m = machine_preset("a100-80gb");
  const GroupShape pair{.size = 2, .per_node = 8};
  const StepTime t = step_time(w, ep2, m);
  const double trades = 4 * alltoall_cost(pair, tokens * C * 4, m).seconds + alltoall_cost(pair, 8.0 * 4, m).seconds;
  CHECK(t.ep == Approx(1 * 2 * trades));  // 1 micro-batch, 2 mixture blocks
  CHECK(t.ep_algorithm == "pairwise");
  CHECK(step_time(w, dense_experts, m).ep == 0);
  // The sweep tries every ep dividing dp and the experts; the command is train_3d's.
  bool saw_ep = false;
  for (const auto& p : sweep(w, machine_preset("this-cpu"), {})) saw_ep |= p.layout.ep > 1;
  CHECK(saw_ep);
  CHECK(ep2.describe(w) == "dp 4 ep 2 · tp 1 · pp 1 · none · 6 × 1");
  CHECK(ep2.trainer_command(w).find("train_3d") != std::string::npos);
  CHECK(ep2.trainer_command(w).find("--dp 4 --ep 2 --pp 1") != std::string::npos);
  // What train_3d refuses, the planner refuses.
  CHECK(Layout{.dp = 4, .ep = 3, .micro_batch = 6}.impossible(w) ==
        "--ep 3 does not divide --dp 4: expert-parallel groups are carved from the data-parallel ranks");
  CHECK(Layout{.dp = 4, .ep = 2, .micro_batch = 6}.impossible(main_job(4, 24)) ==
        "--ep 2 needs a mixture of experts (--n-experts): it splits the experts over data-parallel ranks");
  Workload three = w;
  three.model.n_experts = 6;
  CHECK(Layout{.dp = 4, .ep = 4, .micro_batch = 6}.impossible(three) ==
        "--n-experts 6 is not divisible by --ep 4: each expert-parallel rank holds n_experts / ep of them");
  CHECK(Layout{.dp = 4, .ep = 2, .zero = 1, .micro_batch = 6}.impossible(w).empty());
  CHECK_THAT((Layout{.dp = 4, .ep = 2, .zero = 3, .micro_batch = 6}.impossible(w)),
             Catch::StartsWith("--zero 3 runs with pure data parallelism (train_dp)"));
}
