// train_pp: pipeline-parallel training of a GPT on tiny Shakespeare (× data parallelism).
//
//   mpiexec -n 4 build/trainers/train_pp --n-layer 4 --schedule 1f1b --micro-batches 8
//   mpiexec -n 4 build/trainers/train_pp --dp 2 --n-layer 4        # 2 pipelines of 2 stages
//
// The model's blocks are split over the P = world / dp stages of a pipeline (layers split
// "vertically"): stage 0 owns the embedding, the last stage the head and the loss. Each step,
// the replica's batch is cut into M micro-batches that flow through the pipeline; a schedule
// orders their forwards and backwards (trainers/pipeline_strategy.hpp, shared with train_3d).
// Each stage holds its blocks whole (the grid with tp = 1). Per step, after the schedule
// (trainers/grid_model.hpp's finish_gradients, the same for train_3d):
//   1. each stage's gradients averaged over the dp replicas of that stage — bucketed and
//      overlapped with the last micro-batch's backward, as train_dp does
//   2. the tied embedding's two copies (first and last stage) sum their gradients
//   3. the global gradient norm summed over the stages, clipped; then AdamW
// The loop, data, evaluation, samples, checkpoints and logs are the shared trainer parts; the
// checkpoint is one whole nanoGPT-named model.safetensors, so train_dp and PyTorch load it.
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cli_checks.hpp"
#include "parallel/dp/replicas.hpp"
#include "nn/grad_clip.hpp"
#include "parallel/pp/tied_embedding.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "trainers/pipeline_strategy.hpp"
#include "trainers/trainer_main.hpp"

namespace {

using namespace trainers;

// train_pp's layout: --dp pipelines of world/dp stages, no tp, no cp.
GridShape grid_shape(GridShape shape, int world_size) {
  shape.pp = world_size / shape.dp;
  return shape;
}

std::string replicas_why_not(const GridShape& shape, int world_size) {
  if (world_size % shape.dp == 0) return "";
  return fmt::format("--dp {} does not divide the world size {}: run D × P ranks", shape.dp, world_size);
}

class PipelineParallel final : public PipelineStrategy {
 public:
  // The same start: replica 0 builds every stage from the run's seed (each stage keeps the
  // whole model's numbers for its part); the others from other seeds, then rank 0's are broadcast.
  PipelineParallel(const RunStart& run, comm::Communicator& world, const GridShape& shape, const ScheduleOptions& s)
      : PipelineStrategy(run, world, shape,
                         stream_seed(run.options.seed, Stream::init, 0) +
                             static_cast<uint64_t>(world.rank() / (world.size() / shape.dp)),
                         s) {
    if (o_.check) parallel::verify_identical(grid_model_.model(), grid_.dp_group);
    replicas_are_ = "pipeline(s)";
  }
  StrategyFacts facts() const override {
    StrategyFacts facts = PipelineStrategy::facts();
    facts.layout = {
        fmt::format("train_pp: {} ranks = {} pipeline(s) × {} stages, schedule {}{}, {} micro-batches of {}{}",
                    world_.size(), grid_.dp, grid_.pp, parallel::name_of(s_.schedule), virtual_stages_note(),
                    shape_.micro_batches, o_.batch_size / shape_.micro_batches, parallel::wire_note(o_.grad_comm)),
        fmt::format("layout: {}", grid_.layout(world_.size())),
        fmt::format("{}: {} blocks each (stage 0 + embedding, stage {} + head)",
                    shape_.virtual_stages > 1 ? "chunks in model order" : "stages", fmt::join(grid_model_.layers, "/"),
                    grid_.pp - 1)};
    facts.groups = {{"pp", &grid_.pp_group}, {"dp", &grid_.dp_group}};  // no tp group: each stage's blocks are whole
    return facts;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Program program{"train_pp: pipeline-parallel GPT training on tiny Shakespeare (mpiexec -n P·D train_pp --dp D)"};
  program.defaults.out_dir = "out/train_pp";
  program.defaults.model.n_layer = 4;  // enough blocks for 4 stages
  GridShape shape;
  ScheduleOptions s;
  program.add_flags = [&](CLI::App& app, TrainOptions&) {
    add_schedule_flags(app, s, shape);
    app.add_option("--stage-layers", shape.stage_layers, "blocks per stage, e.g. 3,2,2,1 (per chunk with --virtual-stages; default: even)")->delimiter(',');
    app.add_option("--dp", shape.dp, "data-parallel replicas of the pipeline (world = dp × stages)")
        ->check(comm::cli::whole(1))
        ->capture_default_str();
    app.add_option("--skip-send-at-step", s.skip_send_at_step,
                   "testing: rank --crash-rank skips its sends at this step")
        ->check(comm::cli::whole(0));
  };
  program.layout_flags = {"--dp", "--stage-layers", "--schedule", "--micro-batches", "--virtual-stages"};
  const auto check_replicas = [&](int world_size) {
    if (std::string why = replicas_why_not(shape, world_size); !why.empty()) throw comm::UsageError(why);
  };
  program.check_world = [&](const TrainOptions&, comm::Communicator& world) { check_replicas(world.size()); };
  program.layout_query = [&](const TrainOptions& o, int from) {
    if (std::string why = replicas_why_not(shape, from); !why.empty()) return LayoutQuery{.layout = shape, .why = why};
    LayoutQuery query = grid_layout_query(grid_shape(shape, from), o);
    query.fixed_flags = {{"--schedule", std::string(parallel::name_of(s.schedule))}};
    return query;
  };
  program.load_model = [&](const TrainOptions& o, const Start& start, int, comm::Communicator& world) {
    return load_grid_model(grid_shape(shape, world.size()), o, start, world);
  };
  program.make_strategy = [&](const RunStart& run, comm::Communicator& world) -> std::unique_ptr<Strategy> {
    check_layout(run, [&] { check_replicas(world.size()); });  // on --resume, shape holds the checkpoint's layout
    GridShape pipelines = grid_shape(shape, world.size());
    settle_pipeline_layout(pipelines, run, world.size(), "train_pp");
    check_memory(run.start.config, run.options.batch_size, /*training=*/true, world);
    return std::make_unique<PipelineParallel>(run, world, pipelines, s);
  };
  return run_trainer(argc, argv, program);
}
