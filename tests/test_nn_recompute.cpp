// Activation recomputation (nn/recompute.hpp): with dropout on, in fp32 and bf16, the loss and
// every gradient under --recompute selective and full are bit-identical to none's, and the
// allocator's peak falls in the order the
// settings promise (full < selective < none).
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "nn/autocast.hpp"
#include "nn/autograd.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/compute_modes.hpp"
#include "nn/gpt.hpp"
#include "nn/ops.hpp"
#include "nn/recompute.hpp"

namespace {

struct Pass {
  float loss = 0;
  std::vector<std::vector<float>> grads;  // every parameter's, in order
  std::size_t peak_bytes = 0;             // the allocator's peak above the start
};

// Two forward + backward passes (gradients accumulate; the second with other samples' masks) of a small
// GPT with dropout, whose attention weights [B,H,T,T] outweigh a block's other activations.
Pass run(nn::Recompute recompute, nn::PrecisionSetting precision) {
  nn::GPTConfig config;
  config.n_layer = 3, config.n_head = 4, config.n_embd = 32, config.block_size = 64, config.vocab_size = 17;
  config.dropout = 0.2f;
  nn::GPT model(config, 5, nn::resolve_modes(precision, nn::AttentionKernel::fused, recompute));
  const int64_t B = 4, T = 64;
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = static_cast<int32_t>((i * 7) % 17), targets[i] = static_cast<int32_t>((i * 5 + 3) % 17);
  Pass pass;
  nn::WeightCastCache casts;
  const std::size_t start = nn::BufferPool::bytes_in_use();
  nn::BufferPool::reset_peak();
  for (int micro = 0; micro < 2; ++micro) {
    model.set_dropout_batch({.seed = 9, .step = 1, .first_sample = micro * B});
    nn::Tensor loss = model.loss(ids, targets, B, T);
    // A pipeline runs other micro-batches' forwards before this one's backward: a replay that
    // read the model's batch then, instead of the one it captured, would draw other masks.
    model.set_dropout_batch({.seed = 9, .step = 1, .first_sample = 1000});
    nn::autograd::backward(loss);
    pass.loss += loss.item();
  }
  pass.peak_bytes = nn::BufferPool::peak_bytes_in_use() - start;
  for (auto& p : model.parameters()) pass.grads.emplace_back(p.tensor.grad_values().begin(), p.tensor.grad_values().end());
  return pass;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("recompute selective and full: the same loss and gradients bit for bit, less memory, in fp32 and bf16") {
  for (auto precision : {nn::PrecisionSetting::fp32, nn::PrecisionSetting::bf16}) {
    const Pass none = run(nn::Recompute::none, precision);
    const Pass selective = run(nn::Recompute::selective, precision);
    const Pass full = run(nn::Recompute::full, precision);
    INFO("precision " << (precision == nn::PrecisionSetting::fp32 ? "fp32" : "bf16") << "; peaks: none "
                      << none.peak_bytes << ", selective " << selective.peak_bytes << ", full " << full.peak_bytes);
    for (const Pass* other : {&selective, &full}) {
      CHECK(other->loss == none.loss);
      REQUIRE(other->grads.size() == none.grads.size());
      for (std::size_t i = 0; i < none.grads.size(); ++i) {
        INFO("parameter " << i);
        CHECK(bit_identical(other->grads[i], none.grads[i]));
      }
    }
    // The attention weights of 3 blocks (3·B·H·T·T floats = 786 KiB each pass) are what
    // selective gives up; full keeps one block's activations at a time.
    CHECK(selective.peak_bytes < none.peak_bytes);
    CHECK(full.peak_bytes < selective.peak_bytes);
  }
}

TEST_CASE("recomputed(): the replay draws forward's dropout mask when the mask is captured by value") {
  // The model's batch moves on between a micro-batch's forward and its backward (a pipeline
  // runs other forwards in between): a replay must use the mask forward used.
  nn::DropoutBatch batch{.seed = 99, .step = 0, .first_sample = 0};
  nn::Tensor x = nn::Tensor::full({1, 1000}, 1.0f, true);
  auto mask_of = [](const nn::DropoutBatch& b) {
    return nn::dropout_mask(0.5f, true, b, nn::DropoutSite::mlp_output, 0);
  };
  nn::Tensor y = nn::recomputed(x, [mask = mask_of(batch)](const nn::Tensor& in) { return nn::dropout(in, mask); });
  batch.first_sample = 1;  // the next micro-batch
  nn::Tensor total = nn::sum(y);
  nn::autograd::backward(total);
  // dy/dx_i is the mask's factor (0 or 2), the same one forward used: x.grad equals y.
  CHECK(bit_identical({x.grad(), x.grad() + 1000}, {y.data(), y.data() + 1000}));

  SECTION("teeth: a replay that reads the batch as it is by then draws another mask") {
    nn::Tensor x2 = nn::Tensor::full({1, 1000}, 1.0f, true);
    batch.first_sample = 0;
    nn::Tensor y2 = nn::recomputed(x2, [&](const nn::Tensor& in) { return nn::dropout(in, mask_of(batch)); });
    batch.first_sample = 1;
    nn::Tensor total2 = nn::sum(y2);
    nn::autograd::backward(total2);
    CHECK_FALSE(bit_identical({x2.grad(), x2.grad() + 1000}, {y2.data(), y2.data() + 1000}));
  }
}
