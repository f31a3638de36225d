// Causal multi-head self-attention, fused: scores, causal mask, softmax, dropout and the
// weighted sum of values in one pass per (batch, head), instead of eager PyTorch's five
// separate [B,H,T,T] tensors. Only the attention weights P are kept for backward.
//
// Under --precision bf16 (nn/autocast.hpp) the four products per head take bf16 inputs, as
// autocast runs QKᵀ and PV: qkv and dy are cast once per call, P and dS per head into this
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

namespace nn {
namespace {

// Scratch of T×T floats per thread, kept between calls (no allocation per step).
float* thread_scratch(std::size_t count) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < count) scratch.resize(count);
  return scratch.data();
}

// Dropout on one head's weights: P_drop[t,j] = P[t,j]·keep/(1−p). The mask element for
// (head slice, t, j) is a hash of its global index, so backward recomputes it exactly.
bool kept(uint64_t stream, int64_t index, float p) {
  return unit_float(hash64(stream, static_cast<uint64_t>(index))) >= p;
}

// Works in place too (out == P).
void drop(const float* P, float* out, int64_t T, uint64_t stream, int64_t first_index, float p) {
  const float kept_scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < T * T; ++i) out[i] = kept(stream, first_index + i, p) ? P[i] * kept_scale : 0.0f;
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
Tensor causal_self_attention(const Tensor& qkv, int n_head, float dropout_p, Rng* rng) {
  if (qkv.ndim() != 3 || n_head <= 0 || qkv.size(2) % (3 * n_head) != 0)
    fail("attention: qkv {} cannot be split into q, k, v of {} heads", shape_string(qkv.shape()), n_head);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = n_head, hs = C / H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool use_dropout = dropout_p > 0.0f && rng != nullptr;
  const uint64_t stream = use_dropout ? rng->next_u64() : 0;

  bool track = autograd::needs_grad({&qkv});
  Tensor y = Tensor::empty({B, T, C}, track);
  Tensor att = Tensor::empty({B, H, T, T});  // P, kept for backward
  const bool bf16 = matmul_precision() == Precision::bf16;
  Bf16Values qkv16 = bf16 ? cast_to_bf16(qkv.data(), qkv.numel()) : nullptr;  // kept for backward
  const Operand qkv_d{qkv.data(), bf16 ? qkv16->data() : nullptr};
  float *yd = y.data(), *att_d = att.data();

#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Operand q = qkv_d.at(b * T * 3 * C + h * hs), k = q.at(C), v = q.at(2 * C);
      float* P = att_d + (b * H + h) * T * T;
      product(false, true, T, T, hs, scale, q, 3 * C, k, 3 * C, 0.0f, P, T);
      for (int64_t t = 0; t < T; ++t) {  // row t attends to positions 0..t
        float* row = P + t * T;
        float max = *std::max_element(row, row + t + 1), total = 0.0f;
        for (int64_t j = 0; j <= t; ++j) total += row[j] = std::exp(row[j] - max);
        for (int64_t j = 0; j <= t; ++j) row[j] /= total;
        std::fill(row + t + 1, row + T, 0.0f);
      }
      const float* weights = P;
      if (use_dropout) {
        float* dropped = thread_scratch(T * T);
        drop(P, dropped, T, stream, (b * H + h) * T * T, dropout_p);
        weights = dropped;
      }
      product(false, false, T, hs, T, 1.0f, square(weights, T, bf16, 0), T, v, 3 * C, 0.0f, yd + b * T * C + h * hs, C);
    }

  if (track) {
    autograd::record([qkv, y, att, B, T, C, H, hs, scale, use_dropout, stream, dropout_p, bf16, qkv16]() mutable {
      Bf16Values dy16 = bf16 ? cast_to_bf16(y.grad(), y.numel()) : nullptr;
      const Operand qkv_v{qkv.data(), bf16 ? qkv16->data() : nullptr}, dy{y.grad(), bf16 ? dy16->data() : nullptr};
      const float* att_v = att.data();
      auto [dqkv, accumulate] = qkv.grad_target();  // every element is written once per call
      const float beta = accumulate ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static) collapse(2)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t offset = b * T * 3 * C + h * hs;
          const Operand q = qkv_v.at(offset), k = q.at(C), v = q.at(2 * C);
          float *dq = dqkv + offset, *dk = dq + C, *dv = dq + 2 * C;
          const float* P = att_v + (b * H + h) * T * T;
          const Operand dyh = dy.at(b * T * C + h * hs);
          float* dP = thread_scratch(2 * T * T);
          float* dropped = dP + T * T;
          const float* weights = P;
          if (use_dropout) {
            drop(P, dropped, T, stream, (b * H + h) * T * T, dropout_p);
            weights = dropped;
          }
          product(true, false, T, hs, T, 1.0f, square(weights, T, bf16, 0), T, dyh, C, beta, dv, 3 * C);
          product(false, true, T, T, hs, 1.0f, dyh, C, v, 3 * C, 0.0f, dP, T);
          if (use_dropout) drop(dP, dP, T, stream, (b * H + h) * T * T, dropout_p);  // same mask and scale
          for (int64_t t = 0; t < T; ++t) {                                          // dP becomes dS in place
            float* row = dP + t * T;
            const float* p = P + t * T;
            float dot = 0.0f;
            for (int64_t j = 0; j <= t; ++j) dot += row[j] * p[j];
            for (int64_t j = 0; j <= t; ++j) row[j] = p[j] * (row[j] - dot);
            std::fill(row + t + 1, row + T, 0.0f);
          }
          const Operand dS = square(dP, T, bf16, 1);
          product(false, false, T, hs, T, scale, dS, T, k, 3 * C, beta, dq, 3 * C);
          product(true, false, T, hs, T, scale, dS, T, q, 3 * C, beta, dk, 3 * C);
        }
    });
  }
  return y;
}

}  // namespace nn
