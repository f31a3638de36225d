#include "trainers/evaluation.hpp"

#include <algorithm>
#include <array>

#include "nn/autograd.hpp"
#include "trainers/batches.hpp"

namespace trainers {
namespace {}  // namespace

float estimate_loss(const BatchLoss& loss, std::span<const int32_t> tokens, int B, int T, int iters, uint64_t seed,
                    comm::Communicator& group) {
  nn::Rng rng(seed);
  Batch batch;
  double total = 0.0;
  for (int i = 0; i < iters; ++i) {
    random_windows(tokens, T, B, rng, batch);
    total += loss(batch.ids, batch.targets, B, T);
  }
  std::array<double, 1> mean{total / std::max(iters, 1)};
  group.allreduce(std::span<double>(mean), comm::ReduceOp::avg);
  return static_cast<float>(mean[0]);
}

double full_split_loss(const BatchLoss& loss, std::span<const int32_t> tokens, int T, comm::Communicator& group) {
  const int64_t windows = (static_cast<int64_t>(tokens.size()) - 1) / T;  // window w: tokens [wT, wT+T], +1 for targets
  const int64_t first = windows * group.rank() / group.size(), last = windows * (group.rank() + 1) / group.size();
  constexpr int64_t kWindowsPerBatch = 32;
  Batch batch;
  std::array<double, 2> sum_and_count{0.0, 0.0};  // Σ token losses, tokens
  for (int64_t w = first; w < last; w += kWindowsPerBatch) {
    const int64_t B = std::min(kWindowsPerBatch, last - w);
    batch.ids.assign(tokens.begin() + w * T, tokens.begin() + (w + B) * T);
    batch.targets.assign(tokens.begin() + w * T + 1, tokens.begin() + (w + B) * T + 1);
    sum_and_count[0] += static_cast<double>(loss(batch.ids, batch.targets, B, T)) * static_cast<double>(B * T);
    sum_and_count[1] += static_cast<double>(B * T);
  }
  group.allreduce(std::span<double>(sum_and_count), comm::ReduceOp::sum);
  return sum_and_count[0] / sum_and_count[1];
}

namespace {

BatchLoss loss_of(nn::GPT& model) {
  return [&model](std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T) {
    return model.loss(ids, targets, B, T).item();
  };
}

}  // namespace

float estimate_loss(nn::GPT& model, std::span<const int32_t> tokens, int B, int iters, uint64_t seed,
                    comm::Communicator& world) {
  EvalMode eval(model);
  return estimate_loss(loss_of(model), tokens, B, model.config().block_size, iters, seed, world);
}

double full_split_loss(nn::GPT& model, std::span<const int32_t> tokens, comm::Communicator& world) {
  EvalMode eval(model);
  return full_split_loss(loss_of(model), tokens, model.config().block_size, world);
}

std::string sample_text(nn::GPT& model, const nn::CharVocabulary& vocabulary, const std::string& prompt, int new_tokens,
                        float temperature, int top_k, uint64_t seed) {
  nn::Rng rng(seed);
  std::vector<int32_t> ids = model.generate(vocabulary.encode(prompt), new_tokens, temperature, top_k, rng);
  return vocabulary.decode(ids);
}

}  // namespace trainers
