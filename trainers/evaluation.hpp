// Measuring the model during and after training: loss estimates, the exact validation loss,
// and text samples. The losses are collective: every rank computes its share, then an
// allreduce averages them, so every rank ends with the same number.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

#include "comm/communicator.hpp"
#include "nn/autograd.hpp"
#include "nn/data.hpp"
#include "nn/gpt.hpp"
#include "trainers/run_setup.hpp"

namespace trainers {

// Evaluation mode for one scope: no tape, no dropout; training mode restored afterwards.
class EvalMode {
 public:
  explicit EvalMode(nn::GPT& model) : model_(model), was_training_(model.training()) { model.set_training(false); }
  ~EvalMode() { model_.set_training(was_training_); }

 private:
  nn::GPT& model_;
  bool was_training_;
  nn::autograd::NoGrad no_grad_;
};

// The loss of one batch (ids, targets [B,T]) under evaluation (no dropout, no tape): the
// same number on every rank that calls it. For one model: model.loss; for a pipeline: the
// last stage's loss, shared with the others (parallel/pp/inference.hpp).
using BatchLoss =
    std::function<float(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T)>;

// One model's loss as a BatchLoss (call it in EvalMode).
BatchLoss loss_of(nn::GPT& model);

// nanoGPT's estimate_loss at `step` on the train split, then on the val split: replica
// `replica` of `group` draws its own batches (the eval stream of --seed, replica and step),
// and the group averages. The same pair on every rank of the group.
std::pair<float, float> estimate_train_val(const BatchLoss& loss, const Splits& data, const TrainOptions& o, int T,
                                           int replica, int64_t step, comm::Communicator& group);

// Mean loss over `iters` random batches of B windows per rank (drawn from stream `seed`,
// which differs per rank), averaged over the group: nanoGPT's estimate_loss(). The same
// measurements for any BatchLoss; `group` holds the ranks that share out the work
// (the data-parallel replicas) and average the result.
float estimate_loss(const BatchLoss& loss, std::span<const int32_t> tokens, int B, int T, int iters, uint64_t seed,
                    comm::Communicator& group);
// `in_step`: every rank of the group makes the same number of forwards (the last of them a
// repeat on a rank whose share is shorter, not counted) — expert parallelism's exchanges are
// collectives inside every forward.
double full_split_loss(const BatchLoss& loss, std::span<const int32_t> tokens, int T, comm::Communicator& group,
                       bool in_step = false);

// The exact loss over a whole split: every token predicted once, in consecutive
// non-overlapping windows of block_size (the last partial window is left out), the windows
// shared out among the ranks. Not an estimate: the same number on any rank count.
double full_split_loss(nn::GPT& model, std::span<const int32_t> tokens, comm::Communicator& world);

// Generates --sample-tokens characters after --prompt (which must use the vocabulary's
// characters), at --temperature and --top-k, from the sample stream `stream` of --seed.
std::string sample_text(nn::GPT& model, const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream);

}  // namespace trainers
