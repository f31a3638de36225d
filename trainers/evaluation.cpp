#include "trainers/evaluation.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "nn/autograd.hpp"
#include "trainers/batches.hpp"

namespace trainers {

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

double full_split_loss(const BatchLoss& loss, std::span<const int32_t> tokens, int T, comm::Communicator& group,
                       bool in_step) {
  // Window w is tokens [wT, wT+T] (+1 for the targets). The windows go in fixed chunks of 32 —
  // chunk c is windows [32c, 32c+32), whichever rank computes it — and each chunk's loss sum
  // lands in a slot of its own; the slots are added in chunk order in double. So the number is
  // the same to the last bit on any rank count and layout: chunks that followed the ranks'
  // shares grouped the windows differently on 3 ranks than on 2, and the float sums differed.
  constexpr int64_t kWindowsPerChunk = 32;
  const int64_t windows = (static_cast<int64_t>(tokens.size()) - 1) / T;
  const int64_t chunks = (windows + kWindowsPerChunk - 1) / kWindowsPerChunk;
  const int64_t first = chunks * group.rank() / group.size(), last = chunks * (group.rank() + 1) / group.size();
  std::vector<double> chunk_sums(static_cast<std::size_t>(chunks), 0.0);  // Σ token losses of each chunk
  Batch batch;
  const int64_t most = (chunks + group.size() - 1) / group.size();  // the longest share
  for (int64_t i = 0; i < (in_step && chunks > 0 ? most : last - first); ++i) {
    const int64_t c = std::min(first + i, chunks - 1);  // past this rank's share: a repeat, not counted
    const int64_t w = c * kWindowsPerChunk, B = std::min(kWindowsPerChunk, windows - w);
    batch.ids.assign(tokens.begin() + w * T, tokens.begin() + (w + B) * T);
    batch.targets.assign(tokens.begin() + w * T + 1, tokens.begin() + (w + B) * T + 1);
    const double sum = static_cast<double>(loss(batch.ids, batch.targets, B, T)) * static_cast<double>(B * T);
    if (first + i < last) chunk_sums[static_cast<std::size_t>(c)] = sum;
  }
  group.allreduce(std::span<double>(chunk_sums), comm::ReduceOp::sum);  // one rank's value + zeros: exact
  double total = 0.0;
  for (double sum : chunk_sums) total += sum;
  return total / static_cast<double>(windows * T);
}

BatchLoss loss_of(nn::GPT& model) {
  return [&model](std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B, int64_t T) {
    return model.loss(ids, targets, B, T).item();
  };
}

std::pair<float, float> estimate_train_val(const BatchLoss& loss, const Splits& data, const TrainOptions& o, int T,
                                           int replica, int64_t step, comm::Communicator& group) {
  const auto r = static_cast<uint64_t>(replica), s = static_cast<uint64_t>(step);
  return {estimate_loss(loss, data.train, o.batch_size, T, o.eval_iters, stream_seed(o.seed, Stream::eval, r, 2 * s),
                        group),
          estimate_loss(loss, data.val, o.batch_size, T, o.eval_iters, stream_seed(o.seed, Stream::eval, r, 2 * s + 1),
                        group)};
}

double full_split_loss(nn::GPT& model, std::span<const int32_t> tokens, comm::Communicator& world) {
  EvalMode eval(model);
  return full_split_loss(loss_of(model), tokens, model.config().block_size, world);
}

std::string sample_text(nn::GPT& model, const nn::CharVocabulary& vocabulary, const TrainOptions& o, uint64_t stream) {
  nn::Rng rng(stream_seed(o.seed, Stream::sample, stream));
  return vocabulary.decode(model.generate(vocabulary.encode(o.prompt), o.sample_tokens, o.temperature, o.top_k, rng));
}

}  // namespace trainers
