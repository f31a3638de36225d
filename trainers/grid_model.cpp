#include "trainers/grid_model.hpp"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/checkpoint.hpp"
#include "nn/error.hpp"
#include "nn/grad_clip.hpp"
#include "parallel/pp_inference.hpp"
#include "parallel/pp_stage.hpp"
#include "parallel/tied_embedding.hpp"
#include "parallel/tp_checkpoint.hpp"
#include "trainers/gradient_averaging.hpp"
#include "trainers/run_setup.hpp"

namespace trainers {

void check_grid(const GridShape& s, const nn::GPTConfig& config, int world_size) {
  if (s.dp * s.pp * s.tp != world_size)
    throw comm::UsageError(fmt::format("{} ranks cannot be --dp {} × --pp {} × --tp {} = {}: run D·P·T ranks",
                                       world_size, s.dp, s.pp, s.tp, s.dp * s.pp * s.tp));
  if (config.n_head % s.tp != 0)
    throw comm::UsageError(
        fmt::format("--n-head {} is not divisible by --tp {}: each tensor-parallel rank runs n_head / tp whole heads",
                    config.n_head, s.tp));
  if (s.sequence_parallel && s.tp == 1)
    throw comm::UsageError("--sequence-parallel needs --tp 2 or more: it shards along the sequence over the tp group");
  if (s.sequence_parallel && config.block_size % s.tp != 0)
    throw comm::UsageError(
        fmt::format("--sequence-parallel: --block-size {} is not divisible by --tp {}", config.block_size, s.tp));
  parallel::stage_layers(config.n_layer, s.pp, s.stage_layers);  // throws on a bad split
}

GridModel::GridModel(comm::Communicator& world, const GridShape& shape, const nn::GPTConfig& config, uint64_t seed)
    : grid(parallel::Grid::make(world, shape.dp, shape.pp, shape.tp)),
      layers(parallel::stage_layers(config.n_layer, grid.pp, shape.stage_layers)),
      model(config, seed, grid.tp_group, shape.sequence_parallel, parallel::stage_part(layers, grid.pp_rank)) {}

void GridModel::load(const std::filesystem::path& dir, nn::AdamW* optimizer, comm::Communicator& world) {
  std::optional<nn::GPT> whole;
  std::optional<nn::AdamW> whole_optimizer;
  if (world.rank() == 0) {
    whole.emplace(model.config(), 0);
    whole_optimizer.emplace(whole->parameters(), optimizer ? optimizer->config() : nn::AdamWConfig{});
  }
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(dir, *whole, optimizer ? &*whole_optimizer : nullptr); });
  if (grid.dp_rank == 0)
    parallel::distribute_tensor_parallel_checkpoint(model, optimizer, grid, whole ? &*whole : nullptr,
                                                    whole_optimizer ? &*whole_optimizer : nullptr);
  broadcast_over_replicas(optimizer);
}

void GridModel::save(const std::filesystem::path& dir, nn::AdamW& optimizer, const nlohmann::json& train_state) {
  if (grid.dp_rank == 0) parallel::save_tensor_parallel_checkpoint(dir, model, optimizer, train_state, grid);
}

void GridModel::broadcast_over_replicas(nn::AdamW* optimizer) {
  if (grid.dp == 1) return;
  std::vector<nn::NamedTensor> parameters = model.named_parameters();
  broadcast_state(parameters, optimizer, grid.dp_group);
}

BatchLoss GridModel::batch_loss() {
  return [this](std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T) {
    return parallel::pipeline_loss(model, grid.pp_group, ids, targets, B, T);
  };
}

std::string GridModel::sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t seed) {
  nn::Rng rng(seed);
  return vocabulary.decode(parallel::pipeline_generate(model, grid.pp_group, vocabulary.encode(o.prompt),
                                                       o.sample_tokens, o.temperature, o.top_k, rng));
}

std::pair<float, float> GridModel::estimate(const Splits& data, const TrainOptions& o, int64_t step) {
  EvalMode eval(model);
  const int T = model.config().block_size;
  const auto r = static_cast<uint64_t>(grid.dp_rank), s = static_cast<uint64_t>(step);
  return {estimate_loss(batch_loss(), data.train, o.batch_size, T, o.eval_iters,
                        stream_seed(o.seed, Stream::eval, r, 2 * s), grid.dp_group),
          estimate_loss(batch_loss(), data.val, o.batch_size, T, o.eval_iters,
                        stream_seed(o.seed, Stream::eval, r, 2 * s + 1), grid.dp_group)};
}

void GridModel::print_sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, int64_t step,
                             comm::Communicator& world) {
  if (o.sample_tokens == 0 || grid.dp_rank != 0) return;  // the first replica samples; the others go on
  const std::string text = sample(vocabulary, o, stream_seed(o.seed, Stream::sample, static_cast<uint64_t>(step)));
  if (world.rank() == 0) comm::say("---- sample at step {} ----\n{}\n----", step, text);
}

void grid_eval_only(const TrainOptions& o, const GridShape& shape, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  const Splits data = load_data(o, world);
  check_vocabulary(start.train_state, data.vocabulary, data.dir);
  check_fits(data, start.config.block_size);
  check_grid(shape, start.config, world.size());
  GridModel g(world, shape, start.config, 0);
  g.load(o.init_from, nullptr, world);
  EvalMode eval(g.model);
  const double loss = full_split_loss(g.batch_loss(), data.val, start.config.block_size, g.grid.dp_group);
  comm::say("val_loss_full={:.6f}", loss);
}

void grid_sample_only(const TrainOptions& o, const GridShape& shape, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  check_grid(shape, start.config, world.size());
  GridModel g(world, shape, start.config, 0);
  g.load(o.init_from, nullptr, world);
  try {
    const nn::CharVocabulary vocabulary(start.train_state.at("vocabulary").get<std::string>());
    check_prompt(o.prompt, vocabulary);
    if (g.grid.dp_rank == 0) {
      const std::string text = g.sample(vocabulary, o, stream_seed(o.seed, Stream::sample, 0));
      if (world.rank() == 0) comm::say("{}", text);
    }
  } catch (const nn::Error& e) {
    throw comm::UsageError(fmt::format("--sample-only: {}", e.what()));
  }
}

float GridModel::finish_gradients(float max_norm) {
  model.sum_replicated_grads();  // sequence parallelism: each rank's positions' share
  if (model.tied_embedding().defined()) parallel::sum_tied_embedding_grads(model.tied_embedding(), grid.pp_group);
  std::vector<nn::NamedTensor> parameters = model.named_parameters();
  if (grid.dp > 1) average_gradients(parameters, grid.dp_group);
  std::array<double, 1> squares{model.squared_grad_norm()};  // this stage's, the same on its tp ranks
  if (grid.pp > 1) grid.pp_group.allreduce(std::span<double>(squares));
  const auto norm = static_cast<float>(std::sqrt(squares[0]));
  if (max_norm > 0.0f && std::isfinite(norm)) nn::clip_to_norm(parameters, max_norm, norm);
  return norm;
}

}  // namespace trainers
