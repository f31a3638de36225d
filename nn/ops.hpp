// Every differentiable operation. Each lives in nn/ops/<name>.cpp with its forward and its
// backward side by side; shapes are in the comments there. All take and return float32
// contiguous tensors; integer inputs (token ids, targets) are spans of int32.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "nn/dropout_mask.hpp"
#include "nn/gemm.hpp"  // Precision
#include "nn/tensor.hpp"

namespace nn {

// matmul.cpp — a [M,K] · b [K,N] → [M,N]; linear: x [...,in] · weightᵀ [in,out] + bias [out]
// → [...,out], with weight laid out [out,in] like PyTorch's nn.Linear. bias may be empty.
// `precision`: the products' inputs (nn/autocast.hpp); the models pass their ComputeModes'.
Tensor matmul(const Tensor& a, const Tensor& b, Precision precision = Precision::fp32);
// `family` names the product in gpt_bench --profile (nn/profile.hpp): a string literal (the
// backward closure keeps the pointer).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const char* family = "GEMM linear",
              Precision precision = Precision::fp32);

// elementwise.cpp — a + b where b's shape equals a's trailing dimensions (a bias, a
// position embedding) or all of them; a ⊙ b (same shapes); a · s.
Tensor add(const Tensor& a, const Tensor& b);
// x + pending, or x itself when pending is empty: a residual add that was left for the next
// layernorm's pass (add_pending_layernorm) done on its own where no layernorm follows.
Tensor add_pending(const Tensor& x, const Tensor& pending);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float s);

// gelu.cpp — 0.5·x·(1 + erf(x/√2)), the exact form (PyTorch's nn.GELU()); bias_gelu: gelu(x +
// bias), bias [N] added to every row of x [..., N] in the same pass (c_fc's bias, when the
// model has biases); the same bits as add then gelu.
Tensor gelu(const Tensor& x);
Tensor bias_gelu(const Tensor& x, const Tensor& bias);

// layernorm.cpp — over the last dimension, eps 1e-5; bias may be empty.
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, float eps = 1e-5f);
// The residual add fused into the layernorm after it: {s, layernorm(s)} with s = x + h, one
// pass per row forward and backward; the same bits as add then layernorm.
std::pair<Tensor, Tensor> add_layernorm(const Tensor& x, const Tensor& h, const Tensor& weight, const Tensor& bias = {},
                                        float eps = 1e-5f);
// The same where a sublayer's residual add may have been left to this layernorm: {x + pending,
// its layernorm} in one pass when pending is defined, else {x, layernorm(x)}.
std::pair<Tensor, Tensor> add_pending_layernorm(const Tensor& x, const Tensor& pending, const Tensor& weight,
                                                const Tensor& bias = {});
// Whether the models call the fused elementwise kernels (add_layernorm, and bias_gelu in a model
// with biases) or the separate ops they fuse (a model's ComputeModes; --fusion separate is the
// speed ladder's rung before).
enum class Fusion { fused, separate };

// softmax.cpp — over the last dimension.
Tensor softmax(const Tensor& x);

// attention.cpp — causal multi-head self-attention on the packed output of c_attn:
// qkv [B,T,3C] = (q | k | v) → y [B,T,C]. Dropout on the attention weights [B,H,T,T] when
// dropout.p > 0 (its rows: samples; head h's weights at h·T·T of the sample's).
Tensor causal_self_attention(const Tensor& qkv, int n_head, const DropoutMask& dropout = {},
                             Precision precision = Precision::fp32);

// attention_naive.cpp — the same attention as eager PyTorch computes it, one op per step
// (--attention naive), and those steps: q, k or v (which = 0, 1, 2) of qkv as [B,H,T,hs]; its
// inverse [B,H,T,hs] → [B,T,C]; a product per leading index ([…,M,K]·[…,K,N], or […,N,K]ᵀ);
// the causal mask of […,T,T] scores.
Tensor causal_self_attention_naive(const Tensor& qkv, int n_head, const DropoutMask& dropout = {});
Tensor split_heads(const Tensor& qkv, int which, int n_head);
Tensor merge_heads(const Tensor& y);
Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_b);
Tensor causal_mask(const Tensor& x);
// Which of the two a model calls (its ComputeModes; the naive one runs its products in fp32).
enum class AttentionKernel { fused, naive };
Tensor attention(const Tensor& qkv, int n_head, const DropoutMask& dropout, AttentionKernel kernel, Precision precision);

// embedding.cpp — rows of weight [V,C] picked by ids → [ids.size(), C] viewed as out_shape + [C].
Tensor embedding(const Tensor& weight, std::span<const int32_t> ids, const Shape& ids_shape);

// dropout.cpp — zero each element with probability mask.p, scale the rest by 1/(1-p); which
// ones: nn/dropout_mask.hpp. x's first dimension counts samples (a 1-D x: each element its
// own sample); an empty or 0-d x is refused. p == 0 returns x itself.
Tensor dropout(const Tensor& x, const DropoutMask& mask);

// cross_entropy.cpp — mean over rows whose target is not ignore_index of
// -log softmax(logits[row])[target]. logits [N,V] (or [...,V]), targets N ints.
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, int32_t ignore_index = -1);

// routing.cpp — a mixture of experts' routing (nn/moe_mlp.hpp decides where tokens go):
// gather_rows: x's rows `rows` ([N,C] or [...,C]) → [M,C]; combine_rows: Σ over experts e of
// gates[gate_index_e[m]] · y_e[m] added into row rows_e[m] of an [N,C] zero tensor (an undefined
// y_e: an expert with no rows); load_balancing_loss: Switch's E·Σ_e f_e·P_e per group of probs
// [G,T,E] (f [G·E]: the share of the group's choices naming e), averaged over groups → [1];
// attach_loss: x again, and in backward `coefficient` added to aux's gradient (one element).
Tensor gather_rows(const Tensor& x, std::span<const int32_t> rows);
Tensor combine_rows(std::span<const Tensor> expert_outputs, std::span<const std::vector<int32_t>> rows,
                    const Tensor& gates, std::span<const std::vector<int64_t>> gate_index, int64_t N);
Tensor load_balancing_loss(const Tensor& probs, std::span<const float> f);
Tensor attach_loss(const Tensor& x, const Tensor& aux, float coefficient);

// reduce.cpp — all elements to one.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

}  // namespace nn
