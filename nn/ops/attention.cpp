// Causal multi-head self-attention, fused: scores, causal mask, softmax, dropout and the
// weighted sum of values in one pass per (batch, head), instead of eager PyTorch's five
// separate [B,H,T,T] tensors. Only the attention weights P are kept for backward.
//
// Under --precision bf16 (nn/autocast.hpp) the six products per head (QKᵀ and PV, and their
// four gradient products) take bf16 inputs, as autocast runs them: qkv and dy are cast once per call, P and dS per head into this
// thread's scratch; softmax, the mask, dropout and every sum stay fp32. Measured on preset b:
// docs/nn.md, "Mixed precision".
#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/autocast.hpp"
#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "numeric/bf16.hpp"
#include "nn/gemm.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {
namespace {

// Scratch of T×T floats per thread, kept between calls (no allocation per step).
float* thread_scratch(std::size_t count) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < count) scratch.resize(count);
  return scratch.data();
}

// A head's dropout factors per thread [T,T], apart from the scratch (which holds the weights).
float* thread_factors(std::size_t count) {
  thread_local std::vector<float> factors;
  if (factors.size() < count) factors.resize(count);
  return factors.data();
}

// Dropout on one head's weights: P_drop[t,j] = P[t,j]·m/(1−p), the mask of the head's rows
// from nn/dropout_mask.hpp — drawn once per pass into `factors` [T,T], then applied to the
// causal part (j ≤ t): forward to P, backward to P and to dP with the same draw. The whole
// square in one call: twice the elements of the causal part, but every draw a whole vector
// one (row by row, each row's two ends are partial draws, made one at a time — slower).
void draw_mask(const DropoutMask& head_mask, int64_t T, float* factors) { head_mask.factors(0, 0, T * T, factors); }

// out = P ⊙ factors on the causal part, 0 above it; in place too (out == P).
void apply_mask(const float* P, const float* factors, float* out, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j <= t; ++j) out[t * T + j] = P[t * T + j] * factors[t * T + j];
    std::fill(out + t * T + t + 1, out + (t + 1) * T, 0.0f);
  }
}

// One operand of a per-head product: its fp32 values, and under bf16 its bf16 copy (laid out
// alike); `product` multiplies in whichever the run uses.
struct Operand {
  const float* values;
  const numeric::bfloat16* bf16 = nullptr;
  Operand at(int64_t offset) const { return {values + offset, bf16 ? bf16 + offset : nullptr}; }
};

void product(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, Operand a, int64_t lda,
             Operand b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (a.bf16 && b.bf16)
    gemm_bf16(trans_a, trans_b, M, N, K, alpha, a.bf16, lda, b.bf16, ldb, beta, c, ldc);
  else
    gemm(trans_a, trans_b, M, N, K, alpha, a.values, lda, b.values, ldb, beta, c, ldc);
}

// A head's [T,T] matrix (P or dS) as an operand: under bf16, rounded into this thread's
// scratch `slot`.
Operand square(const float* values, int64_t T, bool bf16, int slot) {
  if (!bf16) return {values};
  thread_local std::vector<numeric::bfloat16> scratch[2];
  if (scratch[slot].size() < static_cast<std::size_t>(T * T)) scratch[slot].resize(T * T);
  numeric::round_to_bf16({values, static_cast<std::size_t>(T * T)}, {scratch[slot].data(), static_cast<std::size_t>(T * T)});
  return {values, scratch[slot].data()};
}

// P [T,T] = softmax of each row of the scores in place, row t over positions 0..t; the
// positions above the diagonal (the future) become 0. The row's max and sum are SIMD
// reductions (lanes summed in a tree, not left to right).
//
// A row is walked in whole chunks of kLanes floats (one AVX-512 register), the lanes past t
// counting as 0: a loop of t + 1 iterations leaves a remainder that calls the scalar expf up
// to 15 times per row, and at T = 64 that remainder was half the softmax's time (2× faster
// so; when T is not a multiple of 16 the rows of the last, partial chunk still end in a few
// scalar calls). The chunks end within the product's block (row t's block computed columns 0 … r1 − 1,
// r1 a multiple of 64 or T), so every value read is a computed score.
constexpr int64_t kLanes = 16;

void causal_softmax(float* P, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = P + t * T;
    const int64_t width = std::min(T, (t / kLanes + 1) * kLanes);  // t + 1 rounded up to whole chunks
    const int64_t whole = width / kLanes * kLanes;                   // < width only when T is not a multiple
    float max = row[0], total = 0.0f;
    for (int64_t j0 = 0; j0 < whole; j0 += kLanes) {
#pragma omp simd reduction(max : max)
      for (int64_t k = 0; k < kLanes; ++k) max = j0 + k <= t ? std::max(max, row[j0 + k]) : max;
    }
    for (int64_t j = whole; j <= t; ++j) max = std::max(max, row[j]);
    for (int64_t j0 = 0; j0 < whole; j0 += kLanes) {
#pragma omp simd reduction(+ : total)
      for (int64_t k = 0; k < kLanes; ++k) {
        const float e = j0 + k <= t ? std::exp(row[j0 + k] - max) : 0.0f;
        row[j0 + k] = e;
        total += e;
      }
    }
    for (int64_t j = whole; j <= t; ++j) total += row[j] = std::exp(row[j] - max);
    const float inverse = 1.0f / total;
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) row[j] *= inverse;
    std::fill(row + t + 1, row + T, 0.0f);
  }
}

// Softmax's backward in place: dP [T,T] becomes dS = P ⊙ (dP − rowsum(dP ⊙ P)), causal.
void causal_softmax_backward(float* dP, const float* P, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = dP + t * T;
    const float* p = P + t * T;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j <= t; ++j) dot += row[j] * p[j];
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) row[j] = p[j] * (row[j] - dot);
    std::fill(row + t + 1, row + T, 0.0f);
  }
}

// One head's sizes, and what its products and masks need.
struct Head {
  int64_t T, C, hs;
  float scale;               // 1/√hs
  bool bf16;                 // products on bf16 inputs (--precision bf16)
  const DropoutMask* dropout;  // null: none; else the batch's, row 0 = sample b = 0
  int64_t b = 0, h = 0;         // which sample and head

  // This head's weights: row b of the mask, from h·T·T in the sample's weights [H,T,T].
  DropoutMask head_mask() const { return dropout->shifted(b, h * T * T); }
};

// The causal mask makes the upper triangle of every [T,T] product future, so the products run
// on row blocks of kCausalRows and skip the blocks wholly above the diagonal (FlashAttention's
// block skipping). Row block [r0, r1) of S, P, dP and dS needs columns [0, r1) only; column
// block [c0, c1) of a transposed product (dv, dk) needs rows [c0, T) only. At T = 256 that is
// 10 of 16 blocks; as T grows the work tends to half the square. Smaller blocks skip more but
// each product then costs more in calls than it saves: measured on preset b (T = 256) the
// attention core took 720 ms a step unblocked, 510 ms in 64-row blocks, 555 ms in 32-row
// blocks; on preset a (T = 64, one block) 16- and 32-row blocks were slower than none.
constexpr int64_t kCausalRows = 64;
static_assert(kCausalRows % kLanes == 0, "causal_softmax's chunks must end inside a product's row block");

// How many of a [T,T] square's elements the products compute: Σ over row blocks of rows × r1.
double causal_block_area(int64_t T) {
  double area = 0;
  for (int64_t r0 = 0; r0 < T; r0 += kCausalRows) {
    const int64_t r1 = std::min(T, r0 + kCausalRows);
    area += static_cast<double>(r1 - r0) * r1;
  }
  return area;
}

// y_h [T,hs] = drop(softmax(q kᵀ / √hs + mask)) v; P [T,T] is kept for backward.
void head_forward(const Head& H, Operand q, float* P, float* y) {
  const int64_t T = H.T, C = H.C;
  const Operand k = q.at(C), v = q.at(2 * C);
  for (int64_t r0 = 0; r0 < T; r0 += kCausalRows) {  // S[r0:r1, 0:r1] = q[r0:r1] k[0:r1]ᵀ / √hs
    const int64_t r1 = std::min(T, r0 + kCausalRows);
    product(false, true, r1 - r0, r1, H.hs, H.scale, q.at(r0 * 3 * C), 3 * C, k, 3 * C, 0.0f, P + r0 * T, T);
  }
  causal_softmax(P, T);
  const float* weights = P;
  if (H.dropout) {
    float* dropped = thread_scratch(T * T);
    float* factors = thread_factors(T * T);
    draw_mask(H.head_mask(), T, factors);
    apply_mask(P, factors, dropped, T);
    weights = dropped;
  }
  const Operand W = square(weights, T, H.bf16, 0);
  for (int64_t r0 = 0; r0 < T; r0 += kCausalRows) {  // y[r0:r1] = W[r0:r1, 0:r1] v[0:r1]
    const int64_t r1 = std::min(T, r0 + kCausalRows);
    product(false, false, r1 - r0, H.hs, r1, 1.0f, W.at(r0 * T), T, v, 3 * C, 0.0f, y + r0 * C, C);
  }
}

// dv += drop(P)ᵀ dy,  dS = softmax'(drop'(dy vᵀ)),  dq += dS k / √hs,  dk += dSᵀ q / √hs;
// beta 1 adds to the gradients, 0 writes them.
void head_backward(const Head& H, Operand q, const float* P, Operand dy, float* dq, float beta) {
  const int64_t T = H.T, C = H.C, hs = H.hs;
  const Operand k = q.at(C), v = q.at(2 * C);
  float *dk = dq + C, *dv = dq + 2 * C;
  float* dP = thread_scratch(2 * T * T);
  float* dropped = dP + T * T;
  const float* weights = P;
  float* factors = H.dropout ? thread_factors(T * T) : nullptr;
  if (H.dropout) {
    draw_mask(H.head_mask(), T, factors);
    apply_mask(P, factors, dropped, T);
    weights = dropped;
  }
  const Operand W = square(weights, T, H.bf16, 0);
  // Block [b0, b1) is a row block of dP and dq, a column block of W and dS for dv and dk.
  for (int64_t b0 = 0; b0 < T; b0 += kCausalRows) {
    const int64_t b1 = std::min(T, b0 + kCausalRows);
    // dv[b0:b1] = W[b0:T, b0:b1]ᵀ dy[b0:T]
    product(true, false, b1 - b0, hs, T - b0, 1.0f, W.at(b0 * T + b0), T, dy.at(b0 * C), C, beta, dv + b0 * 3 * C,
            3 * C);
    // dP[b0:b1, 0:b1] = dy[b0:b1] v[0:b1]ᵀ
    product(false, true, b1 - b0, b1, hs, 1.0f, dy.at(b0 * C), C, v, 3 * C, 0.0f, dP + b0 * T, T);
  }
  if (H.dropout) apply_mask(dP, factors, dP, T);  // same mask and scale
  causal_softmax_backward(dP, P, T);
  const Operand dS = square(dP, T, H.bf16, 1);
  for (int64_t b0 = 0; b0 < T; b0 += kCausalRows) {
    const int64_t b1 = std::min(T, b0 + kCausalRows);
    // dq[b0:b1] = dS[b0:b1, 0:b1] k[0:b1] / √hs
    product(false, false, b1 - b0, hs, b1, H.scale, dS.at(b0 * T), T, k, 3 * C, beta, dq + b0 * 3 * C, 3 * C);
    // dk[b0:b1] = dS[b0:T, b0:b1]ᵀ q[b0:T] / √hs
    product(true, false, b1 - b0, hs, T - b0, H.scale, dS.at(b0 * T + b0), T, q.at(b0 * 3 * C), 3 * C, beta,
            dk + b0 * 3 * C, 3 * C);
  }
}

}  // namespace

// Shapes: qkv [B,T,3C] with q = qkv[..., 0:C], k = [C:2C], v = [2C:3C]; head h uses columns
// h·hs … (h+1)·hs of each, hs = C / n_head. Output y [B,T,C], heads side by side.
//
// forward, per (b, h):   S = q kᵀ / √hs           [T,T]
//                        P = softmax(S + causal mask: −∞ above the diagonal)
//                        y = drop(P) v            [T,hs]
// backward, per (b, h):  dv += drop(P)ᵀ dy        dPd = dy vᵀ,   dP = drop'(dPd)
//                        dS = P ⊙ (dP − rowsum(dP ⊙ P))
//                        dq += dS k / √hs         dk += dSᵀ q / √hs
Tensor causal_self_attention(const Tensor& qkv, int n_head, const DropoutMask& dropout, Precision precision) {
  if (qkv.ndim() != 3 || n_head <= 0 || qkv.size(2) % (3 * n_head) != 0)
    fail("attention: qkv {} cannot be split into q, k, v of {} heads", shape_string(qkv.shape()), n_head);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = n_head, hs = C / H;
  // q·kᵀ and P·v over the lower block triangle of each T×T square: 4·B·(causal area)·C
  const double area = causal_block_area(T);
  profile::Scope scope("attention core", 0, 4.0 * B * area * C);
  if (dropout.p < 0.0f || dropout.p >= 1.0f) fail("attention: dropout p must be in [0, 1), got {}", dropout.p);
  const bool bf16 = precision == Precision::bf16;
  const Head head{T, C, hs, 1.0f / std::sqrt(static_cast<float>(hs)), bf16, dropout.active() ? &dropout : nullptr};

  bool track = autograd::needs_grad({&qkv});
  Tensor y = Tensor::empty({B, T, C}, track);
  Tensor att = Tensor::empty({B, H, T, T});  // P, kept for backward
  Bf16Values qkv16 = bf16 ? cast_to_bf16(qkv.data(), qkv.numel()) : nullptr;  // kept for backward
  const Operand qkv_d{qkv.data(), bf16 ? qkv16->data() : nullptr};
  float *yd = y.data(), *att_d = att.data();

#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      Head bh = head;
      bh.b = b;
      bh.h = h;
      head_forward(bh, qkv_d.at(b * T * 3 * C + h * hs), att_d + (b * H + h) * T * T, yd + b * T * C + h * hs);
    }
  if (!track) return y;

  autograd::record([qkv, y, att, B, T, C, H, hs, head, dropout, qkv16]() mutable {
    // dP, dv, dq, dk: twice forward's products
    profile::Scope backward_scope("attention core", 0, 8.0 * B * causal_block_area(T) * C);
    Head with_mask = head;
    if (head.dropout) with_mask.dropout = &dropout;  // this closure's copy
    Bf16Values dy16 = head.bf16 ? cast_to_bf16(y.grad(), y.numel()) : nullptr;
    const Operand qkv_v{qkv.data(), head.bf16 ? qkv16->data() : nullptr};
    const Operand dy{y.grad(), head.bf16 ? dy16->data() : nullptr};
    auto [dqkv, accumulate] = qkv.grad_target();  // every element is written once per call
    const float beta = accumulate ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        Head bh = with_mask;
        bh.b = b;
        bh.h = h;
        const int64_t offset = b * T * 3 * C + h * hs;
        head_backward(bh, qkv_v.at(offset), att.data() + (b * H + h) * T * T, dy.at(b * T * C + h * hs),
                      dqkv + offset, beta);
      }
  });
  return y;
}

}  // namespace nn
