#include "parallel/pp/inference.hpp"

#include <algorithm>
#include <array>

#include "nn/autograd.hpp"

namespace parallel {
namespace {

// Stage 0 embeds ids; the others receive x. Every stage runs its blocks and passes x on —
// round the ring once per chunk when stages hold several (interleaved 1F1B: stage P − 1
// passes chunk v's output to stage 0's chunk v + 1). Returns x after this stage's last chunk.
nn::Tensor run_to_here(nn::GPT& model, comm::Communicator& pp, std::span<const int32_t> ids, int64_t B, int64_t T) {
  const int r = pp.rank(), P = pp.size(), V = static_cast<int>(model.part().chunks.size());
  nn::Tensor x;
  for (int v = 0; v < V; ++v) {
    if (r == 0 && v == 0) {
      x = model.embed(ids, B, T);
    } else {
      x = nn::Tensor::empty(model.activation_shape(B, T));
      pp.recv(x.values(), (r + P - 1) % P);
    }
    x = model.run_chunk(x, v);
    if (!(r == P - 1 && v == V - 1)) pp.send(std::span<const float>(x.values()), (r + 1) % P);
  }
  return x;
}

}  // namespace

float pipeline_loss(nn::GPT& model, comm::Communicator& pp, std::span<const int32_t> ids,
                    std::span<const int32_t> targets, int64_t B, int64_t T) {
  nn::Tensor x = run_to_here(model, pp, ids, B, T);
  std::array<float, 1> loss{0.0f};
  if (pp.rank() == pp.size() - 1) loss[0] = model.head_loss(x, targets).item();
  pp.broadcast(std::span<float>(loss), pp.size() - 1);
  return loss[0];
}

std::vector<int32_t> pipeline_generate(nn::GPT& model, comm::Communicator& pp, std::vector<int32_t> tokens,
                                       int new_tokens, float temperature, int top_k, nn::Rng& rng) {
  nn::autograd::NoGrad no_grad;
  const bool was_training = model.training();
  model.set_training(false);
  const bool last = pp.rank() == pp.size() - 1;
  std::vector<float> logits(static_cast<std::size_t>(model.config().vocab_size));
  for (int step = 0; step < new_tokens; ++step) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), model.config().block_size);
    std::span<const int32_t> context(tokens.data() + tokens.size() - T, static_cast<std::size_t>(T));
    nn::Tensor x = run_to_here(model, pp, context, 1, T);
    std::array<int32_t, 1> next{0};
    if (last) {
      model.next_token_logits(x, T, temperature, logits);
      next[0] = nn::sample_token(logits, top_k, rng);
    }
    pp.broadcast(std::span<int32_t>(next), pp.size() - 1);
    tokens.push_back(next[0]);
  }
  model.set_training(was_training);
  return tokens;
}

}  // namespace parallel
