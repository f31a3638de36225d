// train_3d: data × pipeline × context × tensor parallelism (the lecture's "3D parallelism", and
// the fourth dimension, context) of a GPT on tiny Shakespeare.
//
//   mpiexec -n 8 build/trainers/train_3d --dp 2 --pp 2 --tp 2 --n-layer 4 --micro-batches 4
//   mpiexec -n 4 build/trainers/train_3d --pp 2 --tp 2 --sequence-parallel
//   mpiexec -n 4 build/trainers/train_3d --cp 4 --cp-attention ring     # T/4 positions per rank
//   mpiexec -n 4 build/trainers/train_3d --dp 4 --ep 2 --n-experts 4    # 2 experts per rank
//
// The ranks form a grid (parallel/grid.hpp), tp fastest, then cp. With --cp each rank of a
// replica's cp group holds its load-balanced T/cp positions of every sequence while training, and
// attention goes round the group (parallel/cp/context_parallel_layers.hpp); the gradients are
// averaged over dp × cp in one collective. Each rank holds pipeline stage
// pp_rank's blocks, and of those, tp_rank's slice of every big matmul (parallel/tp/tensor_parallel_layers.hpp).
// Each step:
//   1. the replica's batch (dp_rank's share of the global batch) is cut into M micro-batches
//      that flow through the pipeline under a schedule (trainers/pipeline_strategy.hpp, as in
//      train_pp); every stage's forward and backward run on its tp group (f/g all-reduces, or
//      with --sequence-parallel all-gathers and reduce-scatters)
//   2. gradients: the sequence-parallel replicated ones summed over tp, the tied embedding
//      over first and last stage, everything averaged over the dp replicas and their cp ranks
//   3. the global norm summed over the pipeline (each element once), clipped, AdamW
// The loop, data, evaluation, samples, checkpoints and logs are the shared trainer parts; the
// checkpoint is one whole nanoGPT-named model.safetensors (trainers/grid_model.hpp).
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cli_checks.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/tp/tensor_parallel_layers.hpp"
#include "trainers/pipeline_strategy.hpp"
#include "trainers/trainer_main.hpp"

namespace {

using namespace trainers;

class ThreeDParallel final : public PipelineStrategy {
 public:
  // Every replica draws the same start from the run's seed (each rank keeps its slice of its stage).
  ThreeDParallel(const RunStart& run, comm::Communicator& world, const GridShape& shape, const ScheduleOptions& s)
      : PipelineStrategy(run, world, shape, stream_seed(run.options.seed, Stream::init, 0), s) {}

  StrategyFacts facts() const override {
    const nn::GPTConfig& c = run_.start.config;
    StrategyFacts facts = PipelineStrategy::facts();
    facts.layout = {
        fmt::format("train_3d: {} ranks = dp {}{} × pp {}{} × tp {}{}, schedule {}{}, {} micro-batches of {}{}",
                    world_.size(), grid_.dp, ep_note(), grid_.pp, cp_note(), grid_.tp,
                    shape_.sequence_parallel ? " (sequence parallel)" : "",
                    parallel::name_of(s_.schedule), virtual_stages_note(), shape_.micro_batches,
                    o_.batch_size / shape_.micro_batches,
                    parallel::wire_note(o_.grad_comm)),
        fmt::format("layout: {}", grid_.layout(world_.size())),
        fmt::format("{}: {} blocks each; each block's matmuls split over {} tp ranks ({} heads each); vocabulary "
                    "padded to {}",
                    shape_.virtual_stages > 1 ? "chunks in model order" : "stages", fmt::join(grid_model_.layers, "/"), grid_.tp, c.n_head / grid_.tp,
                    parallel::padded_vocab(c.vocab_size, grid_.tp))};
    if (averager_) facts.layout.push_back(fmt::format("dp averaging: {}", averager_->describe()));
    if (zero_) facts.layout.push_back(fmt::format("dp averaging and update: {}", zero_->describe()));
    return facts;
  }

 private:
  // " × cp 2 (ring attention, 32 of 64 positions per cp rank)" (with sequence parallelism: ",
  // 16 in each tp rank's stream"), or nothing without context parallelism.
  std::string cp_note() const {
    if (grid_.cp == 1) return "";
    const std::string pieces =
        shape_.sequence_parallel ? fmt::format(", {} in each tp rank's stream", T() / grid_.cp / grid_.tp) : "";
    return fmt::format(" × cp {} ({} attention, {} of {} positions per cp rank{})", grid_.cp,
                       parallel::kCpAttentionNames[static_cast<std::size_t>(shape_.cp_attention)], T() / grid_.cp, T(),
                       pieces);
  }

  // " (ep 2: each rank 2 of the 4 experts, its tokens sent to their experts' ranks)"; with tp
  // folded into the experts' group " (ep 1 × tp 2 folded: …)"; or nothing.
  std::string ep_note() const {
    const int E = run_.start.config.n_experts, ranks = grid_.ep * grid_.tp;
    if (E == 0 || ranks == 1) return "";
    if (grid_.tp == 1)
      return fmt::format(" (ep {}: each rank {} of the {} experts, tokens sent to their experts' ranks and back)",
                         grid_.ep, E / grid_.ep, E);
    return fmt::format(" (ep {} × tp {} folded: each rank {} of the {} experts, each tp rank's share of the tokens "
                       "sent to their experts' ranks and back)",
                       grid_.ep, grid_.tp, E / ranks, E);
  }
};

// The testing flags that need their dimension (the layout's own rules: parallel/layout.hpp).
void check_fault_flags(const GridShape& shape, const ScheduleOptions& s) {
  if (s.skip_ring_at_step >= 0 && !(shape.cp > 1 && shape.cp_attention == parallel::CpAttention::ring))
    throw comm::UsageError("--skip-ring-at-step needs a ring: --cp 2 or more with --cp-attention ring");
  if (s.skip_dispatch_at_step >= 0 && shape.ep == 1)
    throw comm::UsageError("--skip-dispatch-at-step needs a dispatch: --ep 2 or more");
}

// The layout's flags (parallel/layout.hpp) and the testing faults of its layers.
void add_3d_flags(CLI::App& app, GridShape& shape, ScheduleOptions& s) {
  app.add_option("--dp", shape.dp, "data-parallel replicas")->check(comm::cli::whole(1))->capture_default_str();
  app.add_option("--pp", shape.pp, "pipeline stages")->check(comm::cli::whole(1))->capture_default_str();
  app.add_option("--tp", shape.tp, "tensor-parallel ranks per stage (must divide n_head)")
      ->check(comm::cli::whole(1))
      ->capture_default_str();
  app.add_option("--cp", shape.cp,
                 "context-parallel ranks per sequence: each holds T/cp of its positions (load-balanced chunks), "
                 "attention goes round them")
      ->check(comm::cli::whole(1))
      ->capture_default_str();
  comm::cli::add_choice(app, "--cp-attention", shape.cp_attention, parallel::kCpAttentionNames,
                        "how attention sees the other cp ranks' positions: ring (keys and values round the cp ring) "
                        "or ulysses (two all-to-alls)");
  app.add_option("--cp-overlap", shape.cp_overlap,
                 "ring attention: post the next block's keys and values before computing the current block (1), "
                 "or exchange them after it (0); the same results either way")
      ->capture_default_str();
  app.add_flag("--sequence-parallel", shape.sequence_parallel,
               "shard layernorm and dropout along the sequence over the tp ranks (Megatron-SP)");
  app.add_option("--stage-layers", shape.stage_layers, "blocks per stage, e.g. 3,1 (per chunk with --virtual-stages; default: even)")->delimiter(',');
  add_schedule_flags(app, s, shape);
  app.add_option("--ep", shape.ep,
                 "expert-parallel ranks: each of ep consecutive dp ranks holds n_experts / ep of a mixture's "
                 "experts (with --tp, n_experts / (ep·tp): the tp ranks are folded in), tokens go to their expert's "
                 "rank and back (must divide --dp; ep·tp must divide --n-experts)")
      ->check(comm::cli::whole(1))
      ->capture_default_str();
  app.add_option("--zero", shape.zero,
                 "ZeRO stage: 0 replicated; 1 optimizer state, 2 + gradients sharded over the ranks replicating each "
                 "parameter (dp × cp; an expert's expert-dp ranks)")
      ->check(comm::cli::whole(0, 3))
      ->capture_default_str();
  app.add_option("--skip-ring-at-step", s.skip_ring_at_step,
                 "testing: rank --crash-rank computes attention alone (skips the cp ring) at this step")
      ->check(comm::cli::whole(0));
  app.add_option("--skip-dispatch-at-step", s.skip_dispatch_at_step,
                 "testing: rank --crash-rank runs only its own experts on its own tokens (skips the ep dispatch) "
                 "at this step")
      ->check(comm::cli::whole(0));
}

// ZeRO-3 gathers every block around its use: train_dp's; on the grid the gathers would have to
// follow the pipeline's schedule and the tensor-parallel cuts.
constexpr const char* kZeroThreeRefused =
    "--zero 3 runs with pure data parallelism (train_dp): train_3d shards with --zero 1 or 2";
void check_zero_stage(const GridShape& shape) {
  if (shape.zero == 3) throw comm::UsageError(kZeroThreeRefused);
}

}  // namespace

int main(int argc, char** argv) {
  Program program{
      "train_3d: data × pipeline × context × tensor parallel GPT training (mpiexec -n D·P·C·T train_3d --dp D --pp P "
      "--cp C --tp T)"};
  program.defaults.out_dir = "out/train_3d";
  program.defaults.model.n_layer = 4;  // enough blocks for 4 stages
  GridShape shape;
  ScheduleOptions s;
  program.add_flags = [&](CLI::App& app, TrainOptions&) { add_3d_flags(app, shape, s); };
  program.layout_flags = {"--dp",           "--pp",       "--tp",            "--cp",           "--cp-attention", "--ep",
                          "--sequence-parallel", "--stage-layers", "--schedule", "--micro-batches", "--virtual-stages", "--zero"};
  program.check_world = [&](const TrainOptions&, comm::Communicator& world) {
    check_zero_stage(shape);
    shape.check(world.size());
  };
  program.layout_query = [&](const TrainOptions& o, int) {
    LayoutQuery query = grid_layout_query(shape, o);
    query.fixed_flags = {{"--schedule", std::string(parallel::name_of(s.schedule))}};
    if (shape.zero == 3) query.why = kZeroThreeRefused;  // (the layout alone would allow it with pure dp)
    return query;
  };
  program.load_model = [&](const TrainOptions& o, const Start& start, int, comm::Communicator& world) {
    return load_grid_model(shape, o, start, world);
  };
  program.make_strategy = [&](const RunStart& run, comm::Communicator& world) -> std::unique_ptr<Strategy> {
    // On --resume, shape and s hold the checkpoint's layout now.
    settle_pipeline_layout(shape, run, world.size(), "train_3d");
    check_fault_flags(shape, s);
    check_zero_stage(shape);
    check_memory(run.start.config, run.options.batch_size, /*training=*/true, world, 0,
                 {shape.cp, shape.cp_attention == parallel::CpAttention::ring});
    return std::make_unique<ThreeDParallel>(run, world, shape, s);
  };
  return run_trainer(argc, argv, program);
}
