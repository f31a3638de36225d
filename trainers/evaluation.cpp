#include "trainers/evaluation.hpp"

#include <algorithm>
#include <array>

#include "nn/autograd.hpp"
#include "trainers/batches.hpp"

namespace trainers {
namespace {

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

}  // namespace

float estimate_loss(nn::GPT& model, std::span<const int32_t> tokens, int B, int iters, uint64_t seed,
                    comm::Communicator& world) {
  EvalMode eval(model);
  const int T = model.config().block_size;
  nn::Rng rng(seed);
  Batch batch;
  double total = 0.0;
  for (int i = 0; i < iters; ++i) {
    random_windows(tokens, T, B, rng, batch);
    total += model.loss(batch.ids, batch.targets, B, T).item();
  }
  std::array<double, 1> mean{total / std::max(iters, 1)};
  world.allreduce(std::span<double>(mean), comm::ReduceOp::avg);
  return static_cast<float>(mean[0]);
}

double full_split_loss(nn::GPT& model, std::span<const int32_t> tokens, comm::Communicator& world) {
  EvalMode eval(model);
  const int T = model.config().block_size;
  const int64_t windows = (static_cast<int64_t>(tokens.size()) - 1) / T;  // window w: tokens [wT, wT+T], +1 for targets
  const int64_t first = windows * world.rank() / world.size(), last = windows * (world.rank() + 1) / world.size();
  constexpr int64_t kWindowsPerBatch = 32;
  Batch batch;
  std::array<double, 2> sum_and_count{0.0, 0.0};  // Σ token losses, tokens
  for (int64_t w = first; w < last; w += kWindowsPerBatch) {
    const int64_t B = std::min(kWindowsPerBatch, last - w);
    batch.ids.assign(tokens.begin() + w * T, tokens.begin() + (w + B) * T);
    batch.targets.assign(tokens.begin() + w * T + 1, tokens.begin() + (w + B) * T + 1);
    sum_and_count[0] += static_cast<double>(model.loss(batch.ids, batch.targets, B, T).item()) * static_cast<double>(B * T);
    sum_and_count[1] += static_cast<double>(B * T);
  }
  world.allreduce(std::span<double>(sum_and_count), comm::ReduceOp::sum);
  return sum_and_count[0] / sum_and_count[1];
}

std::string sample_text(nn::GPT& model, const nn::CharVocabulary& vocabulary, const std::string& prompt,
                        int new_tokens, float temperature, int top_k, uint64_t seed) {
  nn::Rng rng(seed);
  std::vector<int32_t> ids = model.generate(vocabulary.encode(prompt), new_tokens, temperature, top_k, rng);
  return vocabulary.decode(ids);
}

}  // namespace trainers
