// --eval-only and --sample-only, the same in every trainer: read the checkpoint named by
// --init-from, hold its model the way the program holds one, then measure or sample.
//
//   --eval-only     the exact loss over the val split: "val_loss_full=1.823456"
//   --sample-only   --sample-tokens characters after --prompt
//
// What a program supplies is only how its ranks hold the model: one whole model on every
// rank (train_dp: load_whole_model), or each rank its piece of a grid (grid_model.hpp).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "comm/communicator.hpp"
#include "nn/data.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/train_options.hpp"

namespace trainers {

class LoadedModel {
 public:
  virtual ~LoadedModel() = default;
  // Collective: the exact loss over `tokens` (full_split_loss), the same on every rank.
  virtual double full_loss(std::span<const int32_t> tokens) = 0;
  // Collective: the text after o.prompt, on rank 0 (the other ranks may return anything).
  virtual std::string sample(const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream) = 0;
};

// Builds the checkpoint's model on every rank and loads o.init_from into it; `windows`: the
// batch it will run (for the memory check).
using LoadModel = std::function<std::unique_ptr<LoadedModel>(const TrainOptions& o, const Start& start, int windows,
                                                             comm::Communicator& world)>;

// One whole nn::GPT on every rank: rank 0 reads the checkpoint, every rank takes a copy.
std::unique_ptr<LoadedModel> load_whole_model(const TrainOptions& o, const Start& start, int windows,
                                              comm::Communicator& world);

void eval_only(const TrainOptions& o, comm::Communicator& world, const LoadModel& load);
void sample_only(const TrainOptions& o, comm::Communicator& world, const LoadModel& load);

}  // namespace trainers
