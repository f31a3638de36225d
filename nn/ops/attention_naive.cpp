// Causal self-attention the way eager PyTorch (and nanoGPT on PyTorch 1.13) computes it: one
// op per step, each writing a whole tensor — the reference beside the fused kernel of
// attention.cpp, as llm.c keeps matmul_forward_naive beside its fast matmul. --attention
// naive selects it, so a benchmark can start the speed-up ladder from eager's first rung.
//
//   q, k, v = split_heads(qkv)            3 × [B,H,T,hs]   (a copy each: .view().transpose())
//   S = batched_matmul(q, kᵀ)             [B,H,T,T]
//   S = scale(S, 1/√hs)                   [B,H,T,T]
//   S = causal_mask(S)                    [B,H,T,T]        "−∞" above the diagonal
//   P = softmax(S)                        [B,H,T,T]
//   P = dropout(P)                        [B,H,T,T]        (training only)
//   y = batched_matmul(P, v)              [B,H,T,hs]
//   y = merge_heads(y)                    [B,T,C]
//
// Five [B,H,T,T] tensors stay alive for backward where the fused kernel keeps one. The
// dropout masks are the fused kernel's (a hash of the element's index in [B,H,T,T]), so both
// give the same numbers up to the order of float sums.
#include <cmath>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  out[b,h,t,d] = qkv[b, t, which·C + h·hs + d]
// backward: dqkv[b, t, which·C + h·hs + d] += dout[b,h,t,d]
Tensor split_heads(const Tensor& qkv, int which, int n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = n_head, hs = C / H;
  profile::Scope scope("copies (heads)", 8.0 * B * T * C);
  bool track = autograd::needs_grad({&qkv});
  Tensor out = Tensor::empty({B, H, T, hs}, track);
  auto index = [=](int64_t b, int64_t h, int64_t t, int64_t d) { return (b * T + t) * 3 * C + which * C + h * hs + d; };
  const float* in = qkv.data();
  float* o = out.data();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d) o[((b * H + h) * T + t) * hs + d] = in[index(b, h, t, d)];
  if (track)
    autograd::record([qkv, out, B, H, T, hs, index]() mutable {
      profile::Scope backward_scope("copies (heads)", 8.0 * B * H * T * hs);
      float* dq = qkv.grad();  // zeroed on first use: the three splits add into disjoint columns
      const float* dout = out.grad();
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t d = 0; d < hs; ++d) dq[index(b, h, t, d)] += dout[((b * H + h) * T + t) * hs + d];
    });
  return out;
}

// forward:  out[b,t,h·hs + d] = y[b,h,t,d]          backward: dy[b,h,t,d] += dout[b,t,h·hs + d]
Tensor merge_heads(const Tensor& y) {
  const int64_t B = y.size(0), H = y.size(1), T = y.size(2), hs = y.size(3), C = H * hs;
  profile::Scope scope("copies (heads)", 8.0 * B * T * C);
  bool track = autograd::needs_grad({&y});
  Tensor out = Tensor::empty({B, T, C}, track);
  const float* in = y.data();
  float* o = out.data();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d) o[(b * T + t) * C + h * hs + d] = in[((b * H + h) * T + t) * hs + d];
  if (track)
    autograd::record([y, out, B, H, T, hs, C]() mutable {
      profile::Scope backward_scope("copies (heads)", 8.0 * B * T * C);
      float* dy = y.grad();
      const float* dout = out.grad();
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t d = 0; d < hs; ++d) dy[((b * H + h) * T + t) * hs + d] += dout[(b * T + t) * C + h * hs + d];
    });
  return out;
}

// a [..., M, K] · b [..., K, N] (or bᵀ with b [..., N, K] when trans_b) → c [..., M, N], one
// product per leading index (the batch: B·H heads).
// backward: da = dc · op(b)ᵀ;  db = aᵀ · dc (or dcᵀ · a when trans_b)
Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = trans_b ? b.size(-2) : b.size(-1);
  if (M * K == 0) fail("batched_matmul: {} holds empty matrices", shape_string(a.shape()));
  const int64_t batch = a.numel() / (M * K);
  if ((trans_b ? b.size(-1) : b.size(-2)) != K || b.numel() != batch * K * N)
    fail("batched_matmul: shapes {} and {}{} do not fit", shape_string(a.shape()), shape_string(b.shape()),
         trans_b ? "ᵀ" : "");
  profile::Scope scope("GEMM attention (naive)", 0, 2.0 * batch * M * N * K);
  Shape c_shape = a.shape();
  c_shape.back() = N;
  bool track = autograd::needs_grad({&a, &b});
  Tensor c = Tensor::empty(c_shape, track);
  const int64_t ldb = trans_b ? K : N;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < batch; ++i)
    gemm(false, trans_b, M, N, K, 1.0f, a.data() + i * M * K, K, b.data() + i * K * N, ldb, 0.0f, c.data() + i * M * N,
         N);
  if (track)
    autograd::record([a, b, c, M, N, K, batch, trans_b, ldb]() mutable {
      profile::Scope backward_scope("GEMM attention (naive)", 0, 2.0 * batch * M * N * K * (a.requires_grad() + b.requires_grad()));
      const float* dc = c.grad();
      if (a.requires_grad()) {
        auto da = a.grad_target();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < batch; ++i)  // da[M,K] = dc[M,N] · op(b)ᵀ
          gemm(false, !trans_b, M, K, N, 1.0f, dc + i * M * N, N, b.data() + i * K * N, ldb,
               da.accumulate ? 1.0f : 0.0f, da.data + i * M * K, K);
      }
      if (b.requires_grad()) {
        auto db = b.grad_target();
        const float beta = db.accumulate ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < batch; ++i) {
          if (trans_b)  // db[N,K] = dcᵀ · a
            gemm(true, false, N, K, M, 1.0f, dc + i * M * N, N, a.data() + i * M * K, K, beta, db.data + i * K * N, K);
          else  // db[K,N] = aᵀ · dc
            gemm(true, false, K, N, M, 1.0f, a.data() + i * M * K, K, dc + i * M * N, N, beta, db.data + i * K * N, N);
        }
      }
    });
  return c;
}

// forward:  out[..., t, j] = x[..., t, j] for j ≤ t, −1e30 for j > t: softmax gives it exactly 0.
//           (PyTorch writes −∞; softmax.cpp is compiled with -ffast-math, which assumes no
//           infinities, and exp(−1e30 − max) is 0 just the same.)
// backward: dx[..., t, j] += dout[..., t, j] for j ≤ t (the masked entries do not depend on x)
Tensor causal_mask(const Tensor& x) {
  const int64_t T = x.size(-1), rows = x.rows_of_last("causal_mask");
  if (x.size(-2) != T) fail("causal_mask: {} is not […, T, T]", shape_string(x.shape()));
  profile::Scope scope("causal mask", 8.0 * rows * T);
  bool track = autograd::needs_grad({&x});
  Tensor out = Tensor::empty(x.shape(), track);
  const float* in = x.data();
  float* o = out.data();
  const float minus_infinity = -1e30f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < T; ++j) o[r * T + j] = j <= r % T ? in[r * T + j] : minus_infinity;
  if (track)
    autograd::record([x, out, T, rows]() mutable {
      profile::Scope backward_scope("causal mask", 8.0 * rows * T);
      float* dx = x.grad();
      const float* dout = out.grad();
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j <= r % T; ++j) dx[r * T + j] += dout[r * T + j];
    });
  return out;
}

Tensor causal_self_attention_naive(const Tensor& qkv, int n_head, const DropoutMask& dropout_mask) {
  if (qkv.ndim() != 3 || n_head <= 0 || qkv.size(2) % (3 * n_head) != 0)
    fail("attention: qkv {} cannot be split into q, k, v of {} heads", shape_string(qkv.shape()), n_head);
  const int64_t hs = qkv.size(2) / 3 / n_head;
  Tensor q = split_heads(qkv, 0, n_head), k = split_heads(qkv, 1, n_head), v = split_heads(qkv, 2, n_head);
  Tensor scores = scale(batched_matmul(q, k, /*trans_b=*/true), 1.0f / std::sqrt(static_cast<float>(hs)));
  Tensor weights = softmax(causal_mask(scores));
  if (dropout_mask.active()) weights = dropout(weights, dropout_mask);  // [B, H·T·T] per sample
  return merge_heads(batched_matmul(weights, v, /*trans_b=*/false));
}

Tensor attention(const Tensor& qkv, int n_head, const DropoutMask& dropout, AttentionKernel kernel, Precision precision) {
  return kernel == AttentionKernel::naive ? causal_self_attention_naive(qkv, n_head, dropout)
                                          : causal_self_attention(qkv, n_head, dropout, precision);
}

}  // namespace nn
