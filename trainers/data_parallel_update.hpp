// What train_dp does with the gradients backward leaves on every rank, for --zero 0-3:
//
//   0    ReplicatedUpdate: every gradient averaged on every rank (parallel::GradientAverager: naive or
//        bucketed), every rank steps the whole AdamW — the replicas stay identical
//   1-3  ShardedUpdate: parallel::ZeroOptimizer — each rank keeps and steps only its shard
//
// train_dp's strategy calls it the same way for all four (the loop: training_loop.hpp):
//
//   start(checkpoint)                          same start on every rank
//   for each micro-step: before_backward(last); forward; backward
//   finish_gradients(); clip_grad_norm(max); step(lr)
//   with_full_parameters(evaluate, sample); save(dir, state)
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "nn/adamw.hpp"
#include "nn/checkpoint_writer.hpp"
#include "nn/gpt.hpp"
#include "parallel/dp/gradient_averaging.hpp"
#include "parallel/dp/zero_optimizer.hpp"
#include "trainers/train_options.hpp"
#include "trainers/training_loop.hpp"  // TrafficFormula

namespace trainers {

class DataParallelUpdate {
 public:
  virtual ~DataParallelUpdate() = default;
  // Collective. Rank 0 loads `checkpoint` (its AdamW state too when `with_optimizer`) or keeps
  // its fresh initialisation when it is empty; every rank then starts from rank 0's state.
  virtual void start(const std::filesystem::path& checkpoint, bool with_optimizer) = 0;
  virtual void before_backward(bool last_micro_step) = 0;
  virtual void finish_gradients() = 0;               // every rank holds the average of what it keeps
  virtual float clip_grad_norm(float max_norm) = 0;  // the global norm before clipping; ≤ 0 only measures
  virtual void step(float lr) = 0;                   // AdamW, then the gradients zeroed
  // Every parameter on every rank while `work` runs (stage 3 holds only shards otherwise).
  virtual void with_full_parameters(const std::function<void()>& work) = 0;
  // Collective: one checkpoint (the whole model and AdamW state) handed to rank 0's writer.
  virtual void save(const std::filesystem::path& dir, const nlohmann::json& train_state,
                    nn::CheckpointWriter& writer) = 0;
  // Not collective: when every rank holds the whole state (replicated, no ZeRO), this rank
  // writes it alone, now — the survivors' save when a peer is lost. Returns false otherwise.
  virtual bool save_alone(const std::filesystem::path& /*dir*/, const nlohmann::json& /*train_state*/) {
    return false;
  }
  virtual parallel::HeldBytes held() const = 0;  // what this rank holds now
  virtual std::string describe() const = 0;
  // --trace: when each bucket's allreduce ran (the bucketed averager's; ZeRO has none).
  virtual void on_bucket_done(parallel::GradientAverager::BucketSeen /*seen*/) {}
};

std::unique_ptr<DataParallelUpdate> make_data_parallel_update(const TrainOptions& o, nn::GPT& model,
                                                              comm::Communicator& world);

// The first step's report beside ZeRO's formulas (parallel/dp/zero_optimizer.hpp): what follows
// each rank's memory line (" (ZeRO-1 formula 3.1 MiB)": its name and bytes), and rank 0's line on what the step
// sent ("communication in the step: 2 allreduce (1.6 MB) → each rank sends ≈ 1.6 MB (formula …)").
StrategyFacts::MemoryFormula zero_memory_formula(const TrainOptions& o, const nn::GPT& model, int ranks);
// ZeRO's traffic per step and rank, by the formula (parallel/dp/zero_optimizer.hpp:
// zero_traffic), with its terms.
TrafficFormula zero_traffic_formula(const TrainOptions& o, const nn::GPT& model, int ranks);

}  // namespace trainers
