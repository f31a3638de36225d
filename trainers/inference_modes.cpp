#include "trainers/inference_modes.hpp"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "parallel/dp/replicas.hpp"
#include "comm/runtime.hpp"
#include "nn/checkpoint.hpp"
#include "trainers/evaluation.hpp"

namespace trainers {

namespace {

class WholeModel final : public LoadedModel {
 public:
  WholeModel(const TrainOptions& o, const Start& start, comm::Communicator& world)
      : world_(world), model_(start.config, 0, compute_modes(o)) {
    on_rank0_then_agree(world, [&] { nn::load_checkpoint(o.init_from, model_, nullptr); });
    parallel::broadcast_state(model_, nullptr, world);
  }
  double full_loss(std::span<const int32_t> tokens) override { return full_split_loss(model_, tokens, world_); }
  std::string sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream) override {
    if (world_.rank() != 0) return "";  // the other ranks do not wait for it
    return sample_text(model_, vocabulary, o, stream);
  }

 private:
  comm::Communicator& world_;
  nn::GPT model_;
};

}  // namespace

std::unique_ptr<LoadedModel> load_whole_model(const TrainOptions& o, const Start& start, int windows,
                                              comm::Communicator& world) {
  check_memory(start.config, windows, /*training=*/false, world);
  return std::make_unique<WholeModel>(o, start, world);
}

void eval_only(const TrainOptions& o, comm::Communicator& world, const LoadModel& load) {
  const Start start = read_start(o, o.init_from, world);
  const Splits data = load_data(o, world);
  check_vocabulary(start.train_state, data.vocabulary, data.dir);
  check_fits(data, start.config.block_size);
  const std::unique_ptr<LoadedModel> model = load(o, start, 32, world);  // full_split_loss: 32 windows at a time
  const auto t0 = Clock::now();
  const double loss = model->full_loss(data.val);
  if (!std::isfinite(loss))
    throw comm::UsageError(fmt::format("the val loss of {} is {}: the model is diverged", o.init_from, loss));
  comm::say("exact loss over the {} val tokens in windows of {} ({:.1f} s, {} ranks)", data.val.size(),
            start.config.block_size, seconds_since(t0), world.size());
  comm::say("val_loss_full={:.6f}", loss);
}

void sample_only(const TrainOptions& o, comm::Communicator& world, const LoadModel& load) {
  const Start start = read_start(o, o.init_from, world);
  const std::unique_ptr<LoadedModel> model = load(o, start, 1, world);
  std::optional<nn::CharVocabulary> vocabulary;
  try {
    vocabulary.emplace(start.train_state.at("vocabulary").get<std::string>());
  } catch (const std::exception& e) {
    throw comm::UsageError(fmt::format("--sample-only: {}", e.what()));
  }
  check_prompt(o.prompt, *vocabulary);
  const std::string text = model->sample(*vocabulary, o, 0);
  if (world.rank() == 0) comm::say("{}", text);
}

}  // namespace trainers
