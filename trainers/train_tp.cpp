// train_tp: tensor-parallel training (Megatron-LM) of a GPT on tiny Shakespeare.
//
//   mpiexec -n 2 build/trainers/train_tp
//   mpiexec -n 4 build/trainers/train_tp --n-head 4 --sequence-parallel
//
// Every rank sees the same batch and holds 1/W of every big weight (parallel/tp/tensor_parallel_layers.hpp, W
// ranks): attention's q, k, v by whole heads and the MLP's first layer by columns
// (column-parallel), both output projections by rows (row-parallel), the embedding and the
// lm_head by vocabulary rows. Each block costs two all-reduces of its [B,T,C] activation
// forward (g, after each row-parallel layer) and two backward (f, before each column-parallel
// one); the loss three small ones (vocab-parallel cross-entropy). Each step:
//   1. forward and backward of the batch (× --grad-accum micro-steps), on the tp group
//   2. with --sequence-parallel, the replicated parameters' gradients summed over the group
//   3. the global norm (every element once), clipped, AdamW on this rank's slices
// The loop, data, evaluation, samples, checkpoints and logs are the shared trainer parts; the
// checkpoint is one whole nanoGPT-named model.safetensors (trainers/grid_model.hpp).
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "parallel/dp/gradient_wire.hpp"
#include "parallel/tp/tensor_parallel_layers.hpp"
#include "trainers/micro_steps.hpp"
#include "trainers/grid_model.hpp"
#include "trainers/trainer_main.hpp"

namespace {

using namespace trainers;

class TensorParallel final : public GridStrategy {
 public:
  TensorParallel(const RunStart& run, comm::Communicator& world, const GridShape& shape)
      : GridStrategy(run, world, shape, stream_seed(run.options.seed, Stream::init, 0)),
        sequence_parallel_(shape.sequence_parallel),
        // One replica for the whole group: every rank draws the same batch.
        micro_steps_(o_, run.data.train, T(), 0, 1) {}

  StrategyFacts facts() const override {
    const nn::GPTConfig& c = run_.start.config;
    const int W = world_.size();
    const int64_t padded_vocab = parallel::padded_vocab(c.vocab_size, W);
    StrategyFacts facts{
        .layout = {fmt::format("train_tp: {} tensor-parallel ranks{}", W,
                               sequence_parallel_ ? " with sequence parallelism" : ""),
                   fmt::format("split: {} of {} heads and {} of {} MLP columns per rank; vocabulary {} padded to {} "
                               "({} rows each)",
                               c.n_head / W, c.n_head, 4 * c.n_embd / W, 4 * c.n_embd, c.vocab_size,
                               padded_vocab, padded_vocab / W)},
        .batch_layout =
            fmt::format("1 replica (every rank the same batch) × {} micro-step(s) × {}", o_.grad_accum, o_.batch_size),
        .step_batch = {1, static_cast<int64_t>(o_.grad_accum) * o_.batch_size},
        .groups = grid_groups()};
    for (int r = 0; r < W; ++r) facts.trace_rows.push_back(fmt::format("rank {} = tp {}", r, r));
    return facts;
  }

  // 1. Forward and backward of each micro-step; the loss is the same on every rank.
  void forward_backward(int64_t step, StepClock& clock) override {
    loss_ = micro_steps_.run(grid_model_.model(), step, clock);
  }
  // 2-3. Replicated gradients summed, the global norm, clipping.
  float finish_gradients(float max_norm) override {
    return grid_model_.finish_gradients(max_norm, o_.grad_comm);
  }
  LogFacts log_facts() override { return {loss_, ""}; }

 private:
  bool sequence_parallel_;
  MicroSteps micro_steps_;
  float loss_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Program program{"train_tp: tensor-parallel GPT training on tiny Shakespeare (mpiexec -n T train_tp)"};
  program.defaults.out_dir = "out/train_tp";
  GridShape shape;
  program.add_flags = [&](CLI::App& app, TrainOptions&) {
    app.add_flag("--sequence-parallel", shape.sequence_parallel,
                 "shard layernorm and dropout along the sequence over the ranks (Megatron-SP)");
  };
  program.layout_flags = {"--sequence-parallel"};
  // Tensor parallelism on its own: every rank in one tp group.
  auto tp_shape = [&](comm::Communicator& world) {
    GridShape s = shape;
    s.tp = world.size();
    return s;
  };
  program.layout_query = [&](const TrainOptions& o, int from) {
    GridShape s = shape;
    s.tp = from;
    return accumulating_layout_query(s, o);
  };
  program.load_model = [&](const TrainOptions& o, const Start& start, int, comm::Communicator& world) {
    return load_grid_model(tp_shape(world), o, start, world);
  };
  program.make_strategy = [&](const RunStart& run, comm::Communicator& world) -> std::unique_ptr<Strategy> {
    check_layout(run, [&] { tp_shape(world).check(layout_job(run.options, run.start.config, world.size())); });
    check_memory(run.start.config, run.options.batch_size, /*training=*/true, world);
    return std::make_unique<TensorParallel>(run, world, tp_shape(world));
  };
  return run_trainer(argc, argv, program);
}
