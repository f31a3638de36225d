#include "parallel/tp/tensor_parallel_gpt.hpp"

#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/grad_clip.hpp"
#include "nn/ops.hpp"
#include "nn/recompute.hpp"
#include "parallel/tp/sequence_parallel_ops.hpp"
#include "parallel/tp/conjugate_ops.hpp"
#include "parallel/tp/linear.hpp"
#include "parallel/tp/vocab_parallel_cross_entropy.hpp"
#include "parallel/tp/vocab_parallel_embedding.hpp"

namespace parallel {
namespace {

int64_t rows_of(const nn::Shape& s) { return s[0]; }
int64_t columns_of(const nn::Shape& s) { return s.size() > 1 ? s[1] : 1; }

// Megatron's split of a block tensor: q, k, v by heads and mlp.c_fc by columns (their rows
// here, out × in), both output projections by their input columns; the layernorms and the
// output projections' biases whole on every rank.
TpSplit block_split(std::string_view name) {
  if (name.starts_with("attn.c_attn.")) return TpSplit::qkv_rows;
  if (name.starts_with("mlp.c_fc.")) return TpSplit::rows;
  if (name == "attn.c_proj.weight" || name == "mlp.c_proj.weight") return TpSplit::columns;
  return TpSplit::replicated;
}

}  // namespace

TensorParallelGPT::TensorParallelGPT(const nn::GPTConfig& config, uint64_t seed, comm::Communicator& tp,
                                     bool sequence_parallel, std::optional<nn::GPTPart> part,
                                     const nn::ComputeModes& modes)
    : config_(config),
      part_(part.value_or(nn::GPTPart::whole(config))),
      modes_(modes),
      tp_(tp),
      sequence_parallel_(sequence_parallel),
      dropout_batch_{.seed = seed} {
  const int W = tp.size();
  if (config.n_head % W != 0)
    nn::fail("tensor parallelism: n_head {} is not divisible by the {} tensor-parallel ranks", config.n_head, W);
  if (sequence_parallel && config.block_size % W != 0)
    nn::fail("sequence parallelism: block_size {} is not divisible by the {} tensor-parallel ranks", config.block_size,
             W);
  rows_per_rank_ = (config.vocab_size + W - 1) / W;
  // The whole model's part, drawn as one process would draw it; this rank keeps its slices.
  const nn::GPT whole(config, seed, part_);
  if (part_.embedding || part_.head) wte_rows_ = keep(whole, "transformer.wte.weight", TpSplit::rows);
  if (part_.embedding) wpe_ = keep(whole, "transformer.wpe.weight", TpSplit::replicated);
  if (part_.embedding) embedding_group_ = indices_from(0);
  for (const nn::BlockRange& chunk : part_.chunks)
    for (int l = chunk.first; l < chunk.end; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      const std::size_t first = parameters_.size();
      nn::BlockWeights b;
      for (const nn::BlockTensor& t : nn::block_tensors()) b.*t.field = keep(whole, p + t.name, block_split(t.name));
      blocks_.push_back(b);
      block_ids_.push_back(l);
      block_groups_.push_back(indices_from(first));
    }
  if (part_.head) {
    const std::size_t first = parameters_.size();
    ln_f_weight_ = keep(whole, "transformer.ln_f.weight", TpSplit::replicated);
    ln_f_bias_ = keep(whole, "transformer.ln_f.bias", TpSplit::replicated);
    ln_f_group_ = indices_from(first);
    if (!part_.embedding) ln_f_group_.push_back(0);  // this stage's wte serves only lm_head
  }
  positions_.resize(static_cast<std::size_t>(config.block_size));
  std::iota(positions_.begin(), positions_.end(), 0);
}

// This rank's part of parameter `name` of the whole model (nothing when the model has no such
// parameter: biases with bias = false).
nn::Tensor TensorParallelGPT::keep(const nn::GPT& whole, const std::string& name, TpSplit split) {
  for (const nn::NamedTensor& w : whole.parameters()) {
    if (w.name != name) continue;
    TpParameter p{name, {}, split, w.tensor.shape()};
    const std::vector<float> mine = shard_of(p, w.tensor.values());
    nn::Shape shape = w.tensor.shape();
    if (split == TpSplit::rows || split == TpSplit::qkv_rows)
      shape[0] = static_cast<int64_t>(mine.size()) / columns_of(shape);
    else if (split == TpSplit::columns)
      shape[1] /= tp_.size();
    p.tensor = nn::Tensor::from(mine, shape, /*requires_grad=*/true);
    parameters_.push_back(p);
    return p.tensor;
  }
  return {};
}

std::vector<float> TensorParallelGPT::shard_of(const TpParameter& p, std::span<const float> whole) const {
  const int W = tp_.size(), r = tp_.rank();
  const int64_t rows = rows_of(p.full_shape), columns = columns_of(p.full_shape);
  switch (p.split) {
    case TpSplit::replicated:
      return {whole.begin(), whole.end()};
    case TpSplit::rows: {
      // The vocabulary is padded with zero rows up to W·⌈V/W⌉ (the other row splits divide evenly).
      const int64_t padded = (rows + W - 1) / W * W;
      std::vector<float> full(whole.begin(), whole.end());
      full.resize(static_cast<std::size_t>(padded * columns), 0.0f);
      return row_slice(full, padded, columns, r, W);
    }
    case TpSplit::qkv_rows:
      return row_slice(whole, rows, columns, r, W, 3);
    case TpSplit::columns:
      return column_slice(whole, rows, columns, r, W);
  }
  return {};
}

std::vector<float> TensorParallelGPT::gather(const TpParameter& p, std::span<const float> mine) {
  if (p.split == TpSplit::replicated) return {mine.begin(), mine.end()};
  const int W = tp_.size();
  std::vector<float> parts(mine.size() * static_cast<std::size_t>(W));
  tp_.allgather(mine, std::span(parts));  // rank r's part at r·|mine|
  const int64_t rows = rows_of(p.full_shape), columns = columns_of(p.full_shape);
  const auto part = static_cast<int64_t>(mine.size());
  std::vector<float> whole(static_cast<std::size_t>(rows * columns));
  for (int r = 0; r < W; ++r) {
    const float* from = parts.data() + r * part;
    if (p.split == TpSplit::rows) {  // consecutive rows; the padding rows past `rows` are cut
      const int64_t first = r * part / columns, n = std::min(part / columns, rows - first);
      if (n > 0) std::copy_n(from, n * columns, whole.data() + first * columns);
    } else if (p.split == TpSplit::qkv_rows) {  // q, k and v each: consecutive rows
      const int64_t piece = rows / 3, mine_rows = piece / W;
      for (int q = 0; q < 3; ++q)
        std::copy_n(from + q * mine_rows * columns, mine_rows * columns,
                    whole.data() + (q * piece + r * mine_rows) * columns);
    } else {  // columns
      const int64_t mine_columns = columns / W;
      for (int64_t row = 0; row < rows; ++row)
        std::copy_n(from + row * mine_columns, mine_columns, whole.data() + row * columns + r * mine_columns);
    }
  }
  return whole;
}

nn::Tensor TensorParallelGPT::maybe_dropout(const nn::Tensor& x, const nn::DropoutBatch& batch, nn::DropoutSite which,
                                            int layer) {
  const int64_t first_element = sharded() ? tp_.rank() * x.size(1) * x.size(2) : 0;  // this rank's positions
  return nn::dropout(x, nn::dropout_mask(config_.dropout, training_, batch, which, layer, first_element));
}

nn::Shape TensorParallelGPT::activation_shape(int64_t B, int64_t T) const {
  return {B, sharded() ? T / tp_.size() : T, config_.n_embd};
}

nn::Tensor TensorParallelGPT::column_in(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias) {
  if (!sharded()) return column_parallel_linear(x, weight, bias, tp_, modes_.precision);
  // [B,T/tp,C] → [B,T,out/tp]
  return nn::linear(gather_from_sequence_parallel(x, tp_), weight, bias, "GEMM linear", modes_.precision);
}

nn::Tensor TensorParallelGPT::row_out(const nn::Tensor& x, const nn::Tensor& weight, const nn::Tensor& bias) {
  if (!sharded()) return row_parallel_linear(x, weight, bias, tp_, modes_.precision);
  // [B,T,out] partial → [B,T/tp,out], then the bias
  return add_bias_to_sum(
      reduce_scatter_to_sequence_parallel(nn::linear(x, weight, {}, "GEMM linear", modes_.precision), tp_), bias);
}

nn::Tensor TensorParallelGPT::embed(std::span<const int32_t> ids, int64_t B, int64_t T) {
  if (!part_.embedding) nn::fail("TensorParallelGPT::embed: this part has no embedding");
  if (T <= 0 || B <= 0 || static_cast<int64_t>(ids.size()) != B * T)
    nn::fail("GPT: {} ids do not make a batch of {}×{}", ids.size(), B, T);
  if (T > config_.block_size) nn::fail("GPT: sequence length {} exceeds block_size {}", T, config_.block_size);
  mark_grad_ready(embedding_group_);  // recorded first, so it runs last: wte also serves lm_head
  nn::Tensor partial = vocab_parallel_lookup(wte_rows_, rows_per_rank_ * tp_.rank(), ids, {B, T});  // [B,T,C]
  if (!sharded()) {
    nn::Tensor tok = reduce_from_tensor_parallel(partial, tp_);
    return maybe_dropout(nn::add(tok, nn::embedding(wpe_, std::span(positions_).first(static_cast<size_t>(T)), {T})),
                         dropout_batch_, nn::DropoutSite::embedding, 0);
  }
  // Sequence parallel: the sum of the lookups, this rank's positions only, and their position rows.
  const int64_t S = T / tp_.size();
  nn::Tensor tok = reduce_scatter_to_sequence_parallel(partial, tp_);  // [B,S,C]
  std::span<const int32_t> mine =
      std::span(positions_).subspan(static_cast<size_t>(S * tp_.rank()), static_cast<size_t>(S));
  return maybe_dropout(nn::add(tok, nn::embedding(wpe_, mine, {S})), dropout_batch_, nn::DropoutSite::embedding, 0);
}

nn::Tensor TensorParallelGPT::run_blocks(nn::Tensor x) {
  auto [stream, mlp_out] = run_blocks_open(std::move(x));
  return nn::add_pending(stream, mlp_out);
}

std::pair<nn::Tensor, nn::Tensor> TensorParallelGPT::run_blocks_open(nn::Tensor x) {
  nn::Tensor mlp_out;
  for (int c = 0; c < chunks(); ++c) std::tie(x, mlp_out) = run_chunk_open(x, mlp_out, c);
  return {x, mlp_out};
}

nn::Tensor TensorParallelGPT::run_chunk(nn::Tensor x, int chunk) {
  auto [stream, mlp_out] = run_chunk_open(std::move(x), {}, chunk);  // a stage hands on the whole stream
  return nn::add_pending(stream, mlp_out);
}

// As nn::GPT's: with --fusion fused a block's MLP residual add runs in the next layernorm's
// pass (ln_1, or ln_f), except under --recompute full, whose replay starts from a whole stream.
std::pair<nn::Tensor, nn::Tensor> TensorParallelGPT::run_chunk_open(nn::Tensor x, nn::Tensor mlp_out, int chunk) {
  int first = 0;  // the chunk's blocks in blocks_ (held chunk after chunk)
  for (int c = 0; c < chunk; ++c) first += part_.chunks[static_cast<std::size_t>(c)].end - part_.chunks[static_cast<std::size_t>(c)].first;
  const nn::BlockRange range = part_.chunks.at(static_cast<std::size_t>(chunk));
  const bool full = modes_.recompute == nn::Recompute::full;
  const bool carry = modes_.fusion == nn::Fusion::fused && !full;
  for (int l = first; l < first + range.end - range.first; ++l) {
    nn::BlockWeights& b = blocks_[static_cast<std::size_t>(l)];
    const int layer = block_ids_[static_cast<std::size_t>(l)];
    mark_grad_ready(block_groups_[static_cast<std::size_t>(l)]);  // outside the recomputed span
    if (full) {
      x = nn::add_pending(x, std::exchange(mlp_out, {}));
      // the batch by value: by backward the model may be on another micro-batch
      auto block = [this, &b, layer, batch = dropout_batch_](const nn::Tensor& input) {
        auto [stream, out] = block_forward(b, layer, batch, input, {});
        return nn::add(stream, out);
      };
      // The replay runs the block's collectives again, on every rank of the group alike.
      x = nn::recomputed(x, block);
    } else {
      // handed over, not copied: without a tape nothing else keeps them alive through the block
      std::tie(x, mlp_out) = block_forward(b, layer, dropout_batch_, std::move(x), std::exchange(mlp_out, {}));
      if (!carry) x = nn::add(x, std::exchange(mlp_out, {}));
    }
  }
  return {x, mlp_out};
}

// One block on this rank's slices: x [B,T,C] (or [B,T/tp,C]; plus the previous MLP's output
// when its add was left to this ln_1) → {x + attention, the MLP's output}, the same shape each.
// Under --recompute selective the attention core on this rank's heads is recomputed in backward.
std::pair<nn::Tensor, nn::Tensor> TensorParallelGPT::block_forward(const nn::BlockWeights& b, int layer,
                                                                   const nn::DropoutBatch& batch, nn::Tensor x,
                                                                   nn::Tensor previous_mlp_out) {
  const int local_heads = config_.n_head / tp_.size();
  auto attention_core = [this, local_heads, layer, batch](const nn::Tensor& qkv) {
    // This rank's heads: from head rank·local_heads of the sample's weights [n_head,T,T].
    const int64_t T = qkv.size(1), first_element = int64_t{tp_.rank()} * local_heads * T * T;
    const nn::DropoutMask mask =
        nn::dropout_mask(config_.dropout, training_, batch, nn::DropoutSite::attention_weights, layer, first_element);
    return nn::attention(qkv, local_heads, mask, modes_.attention, modes_.precision);  // [B,T,3C/tp] → [B,T,C/tp]
  };
  nn::Tensor h;
  std::tie(x, h) = nn::add_pending_layernorm(x, std::exchange(previous_mlp_out, {}), b.ln_1_weight, b.ln_1_bias);
  h = column_in(h, b.c_attn_weight, b.c_attn_bias);  // [B,T,3C/tp]
  h = modes_.recompute == nn::Recompute::selective ? nn::recomputed(h, attention_core)
                                                       : attention_core(h);  // [B,T,C/tp]
  h = maybe_dropout(row_out(h, b.attn_proj_weight, b.attn_proj_bias), batch, nn::DropoutSite::attention_output,
                    layer);  // [B,T,C] (or [B,T/tp,C])
  if (modes_.fusion == nn::Fusion::fused) {
    std::tie(x, h) = nn::add_layernorm(x, h, b.ln_2_weight, b.ln_2_bias);  // x + h, and its layernorm
  } else {
    x = nn::add(x, h);
    h = nn::layernorm(x, b.ln_2_weight, b.ln_2_bias);
  }
  if (modes_.fusion == nn::Fusion::fused && b.c_fc_bias.defined())  // this rank's bias columns, in GELU's pass
    h = nn::bias_gelu(column_in(h, b.c_fc_weight, {}), b.c_fc_bias);  // [B,T,4C/tp]
  else
    h = nn::gelu(column_in(h, b.c_fc_weight, b.c_fc_bias));  // [B,T,4C/tp]
  return {x, maybe_dropout(row_out(h, b.mlp_proj_weight, b.mlp_proj_bias), batch, nn::DropoutSite::mlp_output, layer)};
}

// ln_f, then lm_head (tied to wte: a column-parallel linear over the vocabulary) → [B,T,Vr].
// (ln_f also adds the last MLP's output when that add was left to its pass.)
nn::Tensor TensorParallelGPT::head_local_logits(const nn::Tensor& x, const nn::Tensor& mlp_out) {
  if (!part_.head) nn::fail("TensorParallelGPT: this part has no head");
  mark_grad_ready(ln_f_group_);
  return column_in(nn::add_pending_layernorm(x, mlp_out, ln_f_weight_, ln_f_bias_).second, wte_rows_, {});
}

nn::Tensor TensorParallelGPT::head_loss(const nn::Tensor& x, std::span<const int32_t> targets) {
  return vocab_loss(head_local_logits(x), targets);
}

// The mean cross-entropy of this rank's logit columns [B,T,Vr] over the whole vocabulary.
nn::Tensor TensorParallelGPT::vocab_loss(const nn::Tensor& local_logits, std::span<const int32_t> targets) {
  return vocab_parallel_cross_entropy(local_logits, targets, rows_per_rank_ * tp_.rank(), config_.vocab_size, tp_);
}

nn::Tensor TensorParallelGPT::loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t B,
                                   int64_t T) {
  auto [x, mlp_out] = run_blocks_open(embed(ids, B, T));
  return vocab_loss(head_local_logits(x, mlp_out), targets);  // the last MLP's residual add in ln_f's pass
}

nn::Tensor TensorParallelGPT::local_logits(std::span<const int32_t> ids, int64_t B, int64_t T) {
  auto [x, mlp_out] = run_blocks_open(embed(ids, B, T));
  return head_local_logits(x, mlp_out);
}

void TensorParallelGPT::next_token_logits(const nn::Tensor& x, int64_t T, float temperature, std::span<float> logits) {
  const int64_t Vr = rows_per_rank_;
  const nn::Tensor local = head_local_logits(x);  // [1,T,Vr]
  std::vector<float> last(local.data() + (T - 1) * Vr, local.data() + T * Vr);
  for (float& z : last) z /= temperature;
  std::vector<float> all(static_cast<std::size_t>(Vr * tp_.size()));
  tp_.allgather(std::span<const float>(last), std::span(all));   // the padded vocabulary, in order
  std::copy_n(all.begin(), config_.vocab_size, logits.begin());  // the padding cut
}

std::vector<int32_t> TensorParallelGPT::generate(std::vector<int32_t> tokens, int max_new_tokens, float temperature,
                                                 int top_k, nn::Rng& rng) {
  return nn::generate_tokens(*this, std::move(tokens), max_new_tokens, temperature, top_k, rng);
}

std::vector<int> TensorParallelGPT::indices_from(std::size_t first) const {
  std::vector<int> group;
  for (std::size_t i = first; i < parameters_.size(); ++i) group.push_back(static_cast<int>(i));
  return group;
}

void TensorParallelGPT::mark_grad_ready(const std::vector<int>& group) {
  if (grad_ready_hook_ && nn::autograd::grad_enabled())
    nn::autograd::record([this, &group] { grad_ready_hook_(group); });  // group: a member, alive as long as *this
}

std::vector<nn::NamedTensor> TensorParallelGPT::named_parameters() const {
  std::vector<nn::NamedTensor> named;
  for (const TpParameter& p : parameters_) named.push_back({p.name, p.tensor});
  return named;
}

void TensorParallelGPT::sum_replicated_grads() {
  if (!sequence_parallel_) return;
  std::vector<float> flat;  // every replicated gradient in one buffer: one all-reduce
  for (const TpParameter& p : parameters_)
    if (p.split == TpSplit::replicated) flat.insert(flat.end(), p.tensor.grad(), p.tensor.grad() + p.tensor.numel());
  tp_.allreduce(std::span(flat));
  std::size_t at = 0;
  for (const TpParameter& p : parameters_)
    if (p.split == TpSplit::replicated) {
      std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), p.tensor.numel(), p.tensor.grad());
      at += static_cast<std::size_t>(p.tensor.numel());
    }
}

double TensorParallelGPT::squared_grad_norm() {
  std::vector<nn::NamedTensor> split, replicated;
  for (const TpParameter& p : parameters_) {
    if (p.name == "transformer.wte.weight" && !part_.embedding) continue;  // the head's copy: counted on stage 0
    (p.split == TpSplit::replicated ? replicated : split).push_back({p.name, p.tensor});
  }
  double squares = nn::squared_grad_norm(split);
  tp_.allreduce(std::span(&squares, 1));
  return squares + nn::squared_grad_norm(replicated);
}

float TensorParallelGPT::clip_grad_norm(float max_norm) {
  const auto norm = static_cast<float>(std::sqrt(squared_grad_norm()));
  std::vector<nn::NamedTensor> all = named_parameters();
  if (max_norm > 0.0f) nn::clip_to_norm(all, max_norm, norm);
  return norm;
}

void TensorParallelGPT::zero_grad() {
  for (TpParameter& p : parameters_) p.tensor.zero_grad();
}

}  // namespace parallel
