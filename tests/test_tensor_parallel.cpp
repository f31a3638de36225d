// The tensor-parallel building blocks against their one-process meaning, on every rank
// count: f and g (parallel/tp/conjugate_ops.*) give the forward sum and the gradient of
// the whole computation; the vocab-parallel cross-entropy equals nn::cross_entropy on the
// gathered logits — loss and every gradient column — with padding columns ignored; the GPT
// built from them equals nn::GPT, and sequence parallelism equals plain tensor parallelism.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "comm/runtime.hpp"
#include "nn/adamw.hpp"
#include "nn/autocast.hpp"
#include "nn/autograd.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/compute_modes.hpp"
#include "nn/grad_clip.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "parallel/tp/conjugate_ops.hpp"
#include "parallel/tp/tensor_parallel_layers.hpp"
#include "parallel/tp/vocab_parallel_cross_entropy.hpp"

namespace {

std::vector<float> pattern(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(seed));
  return v;
}

}  // namespace

TEST_CASE("f then g: the sum of every rank's branch forward, the whole gradient backward") {
  comm::Communicator& tp = comm::runtime().world();
  const int T = tp.size();
  const nn::Shape shape = {4, 6};
  const std::size_t n = 24;
  nn::Tensor x = nn::Tensor::from(pattern(n, 0), shape, true);
  nn::Tensor c = nn::Tensor::from(pattern(n, 100), shape);
  // Rank r's branch multiplies by w_r: out = Σ_r x ⊙ w_r, loss = Σ out ⊙ c.
  nn::Tensor w = nn::Tensor::from(pattern(n, 1 + tp.rank()), shape);
  nn::Tensor out = parallel::reduce_from_tensor_parallel(nn::mul(parallel::copy_to_tensor_parallel(x, tp), w), tp);
  nn::Tensor loss = nn::sum(nn::mul(out, c));
  nn::autograd::backward(loss);

  std::vector<float> expected_out(n, 0.0f), expected_grad(n, 0.0f);
  for (int r = 0; r < T; ++r) {
    const std::vector<float> wr = pattern(n, 1 + r), xs = pattern(n, 0), cs = pattern(n, 100);
    for (std::size_t i = 0; i < n; ++i) {
      expected_out[i] += xs[i] * wr[i];
      expected_grad[i] += wr[i] * cs[i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(out.data()[i] == Approx(expected_out[i]).margin(1e-6));
    CHECK(x.grad()[i] == Approx(expected_grad[i]).margin(1e-6));
  }
}

TEST_CASE("vocab-parallel cross-entropy equals the plain one on the gathered logits; padding never counts") {
  comm::Communicator& tp = comm::runtime().world();
  const int T = tp.size();
  const int64_t N = 7, V = 13;  // 13 classes: padded to a multiple of T (T = 2, 3, 4 pad)
  const int64_t Vp = (V + T - 1) / T * T, Vr = Vp / T, start = Vr * tp.rank();
  std::vector<float> full_values = pattern(static_cast<std::size_t>(N * V), 7);
  for (float& v : full_values) v *= 4.0f;
  const std::vector<int32_t> targets = {3, 12, -1, 0, 7, 12, 5};  // one ignored row

  nn::Tensor full = nn::Tensor::from(full_values, {N, V}, true);
  nn::Tensor reference = nn::cross_entropy(full, targets);
  nn::autograd::backward(reference);

  // This rank's columns; padding columns get large values, which must not matter.
  std::vector<float> mine(static_cast<std::size_t>(N * Vr));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < Vr; ++j) mine[r * Vr + j] = start + j < V ? full_values[r * V + start + j] : 50.0f;
  nn::Tensor local = nn::Tensor::from(mine, {N, Vr}, true);
  nn::Tensor loss = parallel::vocab_parallel_cross_entropy(local, targets, start, V, tp);
  nn::autograd::backward(loss);

  CHECK(loss.item() == Approx(reference.item()).epsilon(1e-6));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < Vr; ++j) {
      const float expected = start + j < V ? full.grad()[r * V + start + j] : 0.0f;
      CHECK(local.grad()[r * Vr + j] == Approx(expected).margin(1e-7));
    }
  }
}

TEST_CASE("tensor-parallel GPT ≡ the one-process GPT: the loss and every gradient, sliced; gather undoes the cut") {
  comm::Communicator& world = comm::runtime().world();
  const int T = world.size();
  nn::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 12;  // divisible by 1, 2, 3 and 4 ranks: 4-wide heads
  config.n_embd = 48;
  config.block_size = 8;
  config.vocab_size = 13;  // padded to 14 on 2 ranks, 15 on 3, 16 on 4
  for (bool bias : {false, true}) {
    config.bias = bias;
    const int64_t B = 3, S = 8;
    std::vector<int32_t> ids(static_cast<std::size_t>(B * S)), targets(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>((i * 7 + 3) % 13);
      targets[i] = static_cast<int32_t>((i * 5 + 1) % 13);
    }
    nn::GPT whole(config, 1234);
    nn::Tensor reference = whole.loss(ids, targets, B, S);
    nn::autograd::backward(reference);

    nn::GPT model = parallel::tensor_parallel_gpt(config, 1234, world);
    nn::Tensor loss = model.loss(ids, targets, B, S);
    nn::autograd::backward(loss);
    CHECK(loss.item() == Approx(reference.item()).epsilon(1e-5));
    CHECK(model.parameters().size() == whole.parameters().size());
    for (const nn::NamedTensor& p : model.parameters()) {
      INFO(p.name << " (" << nn::name_of(p.role) << ") on " << T << " ranks, bias " << bias);
      const nn::Tensor& full = whole.parameter(p.name);
      const std::vector<float> expected_grad = model.layers().weights->shard(p.role, full.shape(), full.grad_values());
      REQUIRE(expected_grad.size() == static_cast<std::size_t>(p.tensor.numel()));
      float worst = 0.0f;
      for (std::size_t i = 0; i < expected_grad.size(); ++i)
        worst = std::max(worst, std::abs(p.tensor.grad()[i] - expected_grad[i]));
      CHECK(worst < 2e-6f);
      CHECK(model.layers().weights->gather(p.role, p.tensor.shape(), p.tensor.values()) ==
            std::vector<float>(full.values().begin(), full.values().end()));
      CHECK(model.layers().weights->whole_shape(p.role, p.tensor.shape()) == full.shape());
    }
  }
}

TEST_CASE("tensor-parallel GPT ≡ one process after 5 AdamW steps with global-norm clipping") {
  comm::Communicator& world = comm::runtime().world();
  nn::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 12;
  config.n_embd = 48;
  config.block_size = 8;
  config.vocab_size = 13;
  config.bias = true;
  const int64_t B = 2, S = 8;
  const float max_norm = 0.5f;  // below the gradients' norm here: clipping acts
  nn::GPT whole(config, 99);
  nn::GPT model = parallel::tensor_parallel_gpt(config, 99, world);
  nn::AdamW whole_optimizer(whole.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f});
  nn::AdamW optimizer(model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f});
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> ids(static_cast<std::size_t>(B * S)), targets(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>((i * 7 + 3 * step) % 13);
      targets[i] = static_cast<int32_t>((i * 5 + step) % 13);
    }
    whole.zero_grad();
    nn::Tensor reference = whole.loss(ids, targets, B, S);
    nn::autograd::backward(reference);
    const float whole_norm = nn::clip_grad_norm(whole.parameters(), max_norm);
    whole_optimizer.step(1e-3f);

    model.zero_grad();
    nn::Tensor loss = model.loss(ids, targets, B, S);
    nn::autograd::backward(loss);
    const auto norm = static_cast<float>(std::sqrt(model.squared_grad_norm()));
    nn::clip_to_norm(model.parameters(), max_norm, norm);
    optimizer.step(1e-3f);
    CHECK(loss.item() == Approx(reference.item()).epsilon(1e-5));
    CHECK(norm == Approx(whole_norm).epsilon(1e-4));
    CHECK(whole_norm > 2 * max_norm);
  }
  float worst = 0.0f;
  for (const nn::NamedTensor& p : model.parameters()) {
    const std::vector<float> gathered = model.layers().weights->gather(p.role, p.tensor.shape(), p.tensor.values());
    const nn::Tensor& full = whole.parameter(p.name);
    for (std::size_t i = 0; i < gathered.size(); ++i) worst = std::max(worst, std::abs(gathered[i] - full.data()[i]));
  }
  INFO("largest difference " << worst);
  CHECK(worst < 2e-5f);
}

namespace {
nn::GPTConfig small_config() {
  nn::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 12;  // divisible by 1, 2, 3 and 4 ranks
  config.n_embd = 48;
  config.block_size = 8;
  config.vocab_size = 13;
  return config;
}
}  // namespace

TEST_CASE("tensor-parallel sampling draws the one-process GPT's tokens") {
  comm::Communicator& world = comm::runtime().world();
  nn::GPT whole(small_config(), 5);
  nn::GPT model = parallel::tensor_parallel_gpt(small_config(), 5, world);
  for (int top_k : {0, 4}) {
    nn::Rng a(77), b(77);
    const std::vector<int32_t> expected = whole.generate({1, 2, 3}, 20, 1.0f, top_k, a);
    CHECK(model.generate({1, 2, 3}, 20, 1.0f, top_k, b) == expected);
  }
}

TEST_CASE("tensor-parallel communication per step: 2 all-reduces of [B,T,C] per block forward and 2 backward") {
  comm::Communicator& world = comm::runtime().world();
  const nn::GPTConfig config = small_config();
  nn::GPT model = parallel::tensor_parallel_gpt(config, 5, world);
  const int64_t B = 2, S = 8, L = config.n_layer, C = config.n_embd;
  std::vector<int32_t> ids(static_cast<std::size_t>(B * S), 3), targets(ids.size(), 4);
  const comm::TrafficByKind before = world.traffic();
  nn::Tensor loss = model.loss(ids, targets, B, S);
  nn::autograd::backward(loss);
  const comm::Traffic allreduce = (world.traffic() - before)[static_cast<std::size_t>(comm::OpKind::allreduce)];
  // Forward: the embedding's g, 2 g per block, the loss's 3 (max, target logit, Σ exp) of B·T
  // numbers; backward: 2 f per block and the head's f. Nothing else moves. (On one rank f and g
  // are the identity and send nothing.)
  const int64_t activations = world.size() > 1 ? 1 + 2 * L + 2 * L + 1 : 0;
  CHECK(allreduce.calls == activations + 3);
  CHECK(allreduce.bytes == 4.0 * (activations * B * S * C + 3 * B * S));
  CHECK(comm::describe(world.traffic() - before).find("allgather") == std::string::npos);
}

TEST_CASE(
    "sequence parallelism ≡ plain tensor parallelism: the loss and every gradient; all-gathers and "
    "reduce-scatters instead of all-reduces") {
  comm::Communicator& world = comm::runtime().world();
  nn::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 12;
  config.n_embd = 48;
  config.block_size = 12;  // divisible by 1, 2, 3 and 4 ranks
  config.vocab_size = 13;
  config.bias = true;  // the row-parallel biases are replicated: their gradients are summed too
  const int64_t B = 2, S = 12, L = config.n_layer, C = config.n_embd;
  std::vector<int32_t> ids(static_cast<std::size_t>(B * S)), targets(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + 3) % 13);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % 13);
  }
  nn::GPT plain = parallel::tensor_parallel_gpt(config, 77, world);
  nn::Tensor expected = plain.loss(ids, targets, B, S);
  nn::autograd::backward(expected);

  nn::GPT sp = parallel::tensor_parallel_gpt(config, 77, world, /*sequence_parallel=*/true);
  const comm::TrafficByKind before = world.traffic();
  nn::Tensor loss = sp.loss(ids, targets, B, S);
  nn::autograd::backward(loss);
  const comm::TrafficByKind moved = world.traffic() - before;
  sp.sum_replicated_grads();
  CHECK(loss.item() == Approx(expected.item()).epsilon(1e-5));
  REQUIRE(sp.parameters().size() == plain.parameters().size());
  for (std::size_t i = 0; i < sp.parameters().size(); ++i) {
    const nn::NamedTensor &a = sp.parameters()[i], &b = plain.parameters()[i];
    INFO(a.name << " on " << world.size() << " ranks");
    float worst = 0.0f;
    for (int64_t j = 0; j < a.tensor.numel(); ++j)
      worst = std::max(worst, std::abs(a.tensor.grad()[j] - b.tensor.grad()[j]));
    CHECK(worst < 2e-6f);
  }
  // Each all-reduce of an activation [B,S,C] became a reduce-scatter and an all-gather of the
  // same buffer: per block 2 all-gathers and 2 reduce-scatters forward, and their mirror images
  // backward; the embedding's reduce-scatter and the head's all-gather (and theirs backward).
  const auto kind = [&](comm::OpKind k) { return moved[static_cast<std::size_t>(k)]; };
  if (world.size() > 1) {
    CHECK(kind(comm::OpKind::allgather).calls == 4 * L + 2);
    CHECK(kind(comm::OpKind::reduce_scatter).calls == 4 * L + 2);
    CHECK(kind(comm::OpKind::allgather).bytes == 4.0 * (4 * L + 2) * B * S * C);
    CHECK(kind(comm::OpKind::reduce_scatter).bytes == 4.0 * (4 * L + 2) * B * S * C);
    CHECK(kind(comm::OpKind::allreduce).calls == 3);  // the loss's, of B·S numbers each
  }
}

TEST_CASE("activations a tensor-parallel block keeps: the formula's, for every --recompute, with SP, fp32 and bf16, with and without biases") {
  // docs/memory.md derives what a block keeps for backward; the allocator measures it: what
  // forward leaves in use with 2 blocks minus with 1 is one block's share.
  comm::Communicator& world = comm::runtime().world();
  const int tp = world.size();
  nn::GPTConfig config;
  config.n_head = 12, config.n_embd = 48, config.block_size = 12, config.vocab_size = 13;
  config.dropout = 0.1f;
  const int64_t B = 2, S = 12;
  std::vector<int32_t> ids(static_cast<std::size_t>(B * S), 3), targets(ids.size(), 4);
  for (nn::PrecisionSetting precision : {nn::PrecisionSetting::fp32, nn::PrecisionSetting::bf16})
    for (nn::Recompute recompute : {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full})
      for (bool sp : {false, true})
        for (bool bias : {false, true}) {  // with biases c_fc's bias runs inside GELU's pass (bias_gelu)
          if (sp && tp == 1) continue;  // SP needs 2 ranks or more
          config.bias = bias;
          const nn::ComputeModes modes = nn::resolve_modes(precision, nn::AttentionKernel::fused, recompute);
          const nn::Precision runs = modes.precision;
          double kept[2];
          for (int layers : {1, 2}) {
            config.n_layer = layers;
            nn::GPT model = parallel::tensor_parallel_gpt(config, 9, world, sp, modes);
            nn::WeightCastCache casts_once;  // as the training loop: the step's bf16 weights stay
            const std::size_t before = nn::BufferPool::bytes_in_use();
            nn::Tensor loss = model.loss(ids, targets, B, S);
            kept[layers - 1] = static_cast<double>(nn::BufferPool::bytes_in_use() - before);
            nn::autograd::clear_tape();  // (what forward keeps is measured; backward's collectives would only cost time)
          }
          // The block's weights cast to bf16 stay in the step's cache too (2 bytes each): 12·C²/tp.
          const double C = config.n_embd, casts = runs == nn::Precision::bf16 ? 2 * 12 * C * C / tp : 0;
          const double formula =
              4.0 * B * S * nn::block_activation_floats_per_token(config, S, recompute, runs, tp, sp) + casts;
          INFO(tp << " ranks, SP " << sp << ", recompute " << nn::name_of(recompute) << ", " << nn::name_of(runs)
                  << ", biases " << bias << ": a block keeps " << kept[1] - kept[0] << " bytes, the formula says " << formula);
          CHECK(kept[1] - kept[0] == Approx(formula).epsilon(1e-9));
        }
}
