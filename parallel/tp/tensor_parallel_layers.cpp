#include "parallel/tp/tensor_parallel_layers.hpp"

#include <algorithm>
#include <string_view>

#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "parallel/tp/conjugate_ops.hpp"
#include "parallel/tp/linear.hpp"
#include "parallel/tp/sequence_parallel_ops.hpp"
#include "parallel/tp/vocab_parallel_cross_entropy.hpp"
#include "parallel/tp/vocab_parallel_embedding.hpp"

namespace parallel {
namespace {

int64_t rows_of(const nn::Shape& s) { return s[0]; }
int64_t columns_of(const nn::Shape& s) { return s.size() > 1 ? s[1] : 1; }

}  // namespace

TensorParallelLayers::TensorParallelLayers(const nn::GPTConfig& config, comm::Communicator& tp, bool sequence_parallel)
    : tp_(tp),
      sequence_parallel_(sequence_parallel),
      vocab_size_(config.vocab_size),
      rows_per_rank_((config.vocab_size + tp.size() - 1) / tp.size()) {
  const int W = tp.size();
  if (config.n_head % W != 0)
    nn::fail("tensor parallelism: n_head {} is not divisible by the {} tensor-parallel ranks", config.n_head, W);
  if (sequence_parallel && config.block_size % W != 0)
    nn::fail("sequence parallelism: block_size {} is not divisible by the {} tensor-parallel ranks", config.block_size,
             W);
}

nn::Tensor TensorParallelLayers::keep(const nn::Tensor& whole, nn::ParameterRole role) {
  const std::vector<float> mine = shard(role, whole.shape(), whole.values());
  nn::Shape shape = whole.shape();
  if (role == nn::ParameterRole::row)
    shape[1] /= tp_.size();
  else if (is_cut(role))  // the row cuts: [rows/W (padded for the vocabulary), …]
    shape[0] = static_cast<int64_t>(mine.size()) / columns_of(shape);
  return nn::Tensor::from(mine, shape, /*requires_grad=*/true);
}

nn::Shape TensorParallelLayers::whole_shape(nn::ParameterRole role, const nn::Shape& mine) const {
  nn::Shape whole = mine;
  const int W = tp_.size();
  switch (role) {
    case nn::ParameterRole::replicated:
    case nn::ParameterRole::expert: break;
    case nn::ParameterRole::column:
    case nn::ParameterRole::fused_qkv_column: whole[0] *= W; break;
    case nn::ParameterRole::row: whole[1] *= W; break;
    case nn::ParameterRole::vocabulary: whole[0] = vocab_size_; break;  // the padding rows cut
  }
  return whole;
}

std::vector<float> TensorParallelLayers::shard(nn::ParameterRole role, const nn::Shape& whole_shape,
                                               std::span<const float> whole) const {
  const int W = tp_.size(), r = tp_.rank();
  const int64_t rows = rows_of(whole_shape), columns = columns_of(whole_shape);
  switch (role) {
    case nn::ParameterRole::replicated:
    case nn::ParameterRole::expert:
      return {whole.begin(), whole.end()};
    case nn::ParameterRole::vocabulary: {
      // The vocabulary is padded with zero rows up to W·⌈V/W⌉ (the other row cuts divide evenly).
      const int64_t padded = (rows + W - 1) / W * W;
      std::vector<float> full(whole.begin(), whole.end());
      full.resize(static_cast<std::size_t>(padded * columns), 0.0f);
      return row_slice(full, padded, columns, r, W);
    }
    case nn::ParameterRole::column:
      return row_slice(whole, rows, columns, r, W);
    case nn::ParameterRole::fused_qkv_column:
      return row_slice(whole, rows, columns, r, W, 3);
    case nn::ParameterRole::row:
      return column_slice(whole, rows, columns, r, W);
  }
  return {};
}

std::vector<float> TensorParallelLayers::gather(nn::ParameterRole role, const nn::Shape& mine_shape,
                                                std::span<const float> mine) const {
  if (!is_cut(role)) return {mine.begin(), mine.end()};
  const int W = tp_.size();
  std::vector<float> parts(mine.size() * static_cast<std::size_t>(W));
  tp_.allgather(mine, std::span(parts));  // rank r's part at r·|mine|
  const nn::Shape shape = whole_shape(role, mine_shape);
  const int64_t rows = rows_of(shape), columns = columns_of(shape);
  const auto part = static_cast<int64_t>(mine.size());
  std::vector<float> whole(static_cast<std::size_t>(rows * columns));
  for (int r = 0; r < W; ++r) {
    const float* from = parts.data() + r * part;
    if (role == nn::ParameterRole::column || role == nn::ParameterRole::vocabulary) {
      // consecutive rows; the vocabulary's padding rows past `rows` are cut
      const int64_t first = r * part / columns, n = std::min(part / columns, rows - first);
      if (n > 0) std::copy_n(from, n * columns, whole.data() + first * columns);
    } else if (role == nn::ParameterRole::fused_qkv_column) {  // q, k and v each: consecutive rows
      const int64_t piece = rows / 3, mine_rows = piece / W;
      for (int q = 0; q < 3; ++q)
        std::copy_n(from + q * mine_rows * columns, mine_rows * columns,
                    whole.data() + (q * piece + r * mine_rows) * columns);
    } else {  // row: input columns
      const int64_t mine_columns = columns / W;
      for (int64_t row = 0; row < rows; ++row)
        std::copy_n(from + row * mine_columns, mine_columns, whole.data() + row * columns + r * mine_columns);
    }
  }
  return whole;
}

double TensorParallelLayers::sum_over_group(double mine) const {
  tp_.allreduce(std::span(&mine, 1));
  return mine;
}

void TensorParallelLayers::sum_replicated_grads(std::span<const nn::Tensor> replicated) {
  if (!sequence_parallel_) return;
  std::vector<float> flat;  // every replicated gradient in one buffer: one all-reduce
  for (const nn::Tensor& t : replicated) flat.insert(flat.end(), t.grad(), t.grad() + t.numel());
  tp_.allreduce(std::span(flat));
  std::size_t at = 0;
  for (const nn::Tensor& t : replicated) {
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), t.numel(), t.grad());
    at += static_cast<std::size_t>(t.numel());
  }
}

int64_t TensorParallelLayers::stream_length(int64_t T, bool training) const {
  return sharded(training) ? T / tp_.size() : T;
}

nn::SequenceLayout::StreamPlace TensorParallelLayers::stream_place(int64_t S, bool training) const {
  return {sharded(training) ? tp_.rank() * S : 0, -1};  // the shards in rank order
}

// Each rank looks up the ids in its vocabulary rows (zeros for the others'), and the sum over
// the group is the embedding: whole (g), or this rank's positions of it (a reduce-scatter).
nn::Tensor TensorParallelLayers::token_embedding(const nn::Tensor& wte, std::span<const int32_t> ids, int64_t B,
                                                 int64_t T, bool training) {
  nn::Tensor partial = vocab_parallel_lookup(wte, rows_per_rank_ * tp_.rank(), ids, {B, T});  // [B,T,C]
  return sharded(training) ? reduce_scatter_to_sequence_parallel(partial, tp_)               // [B,T/W,C]
                           : reduce_from_tensor_parallel(partial, tp_);                      // [B,T,C]
}

// Into a column-parallel layer: f, or the all-gather of the shards ([B,T/W,C] → [B,T,C]).
nn::Tensor TensorParallelLayers::column_linear(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias,
                                               const char* family, nn::Precision precision, bool training) {
  if (!sharded(training)) return column_parallel_linear(x, weight, bias, tp_, precision, family);
  return nn::linear(gather_from_sequence_parallel(x, tp_), weight, bias, family, precision);
}

// Out of a row-parallel one: g, or the reduce-scatter into shards ([B,T,out] partial →
// [B,T/W,out]); the bias added once, after the sum.
nn::Tensor TensorParallelLayers::row_linear(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias,
                                            const char* family, nn::Precision precision, bool training) {
  if (!sharded(training)) return row_parallel_linear(x, weight, bias, tp_, precision, family);
  return add_bias_to_sum(reduce_scatter_to_sequence_parallel(nn::linear(x, weight, {}, family, precision), tp_), bias);
}

// The mean cross-entropy of this rank's logit columns [B,T,V/W] over the whole vocabulary.
nn::Tensor TensorParallelLayers::cross_entropy(const nn::Tensor& logits, std::span<const int32_t> targets) {
  return vocab_parallel_cross_entropy(logits, targets, rows_per_rank_ * tp_.rank(), vocab_size_, tp_);
}

void TensorParallelLayers::gather_vocabulary(std::span<const float> mine, std::span<float> whole) {
  std::vector<float> all(static_cast<std::size_t>(padded_vocab()));
  tp_.allgather(mine, std::span(all));                          // the padded vocabulary, in order
  std::copy_n(all.begin(), vocab_size_, whole.begin());         // the padding cut
}

std::shared_ptr<TensorParallelLayers> make_tensor_parallel(const nn::GPTConfig& config, comm::Communicator& tp,
                                                           bool sequence_parallel) {
  if (tp.size() == 1) return nullptr;
  return std::make_shared<TensorParallelLayers>(config, tp, sequence_parallel);
}

nn::GPT tensor_parallel_gpt(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp, bool sequence_parallel,
                            const nn::ComputeModes& modes) {
  auto layers = std::make_shared<TensorParallelLayers>(config, tp, sequence_parallel);
  return nn::GPT(config, seed, nn::GPTPart::whole(config), modes, {.weights = layers, .sequence = layers});
}

}  // namespace parallel
