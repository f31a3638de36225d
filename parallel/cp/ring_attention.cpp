#include "parallel/cp/ring_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "nn/autograd.hpp"
#include "nn/gemm.hpp"
#include "nn/profile.hpp"
#include "nn/timeline.hpp"
#include "numeric/bf16.hpp"

namespace parallel {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// The sizes of one call, and where a head's columns are in each buffer.
struct Layout {
  int64_t B, S, C, H, hs, T, half;  // half = S/2: one chunk
  float scale;
  bool bf16;  // the products take bf16 inputs (--precision bf16); the softmax's statistics stay fp32
  // qkv [B,S,3C]: q at h·hs, k at C + h·hs, v at 2C + h·hs; kv [B,S,2C]: k at h·hs, v at C + h·hs.
  int64_t qkv_row(int64_t b, int64_t s) const { return (b * S + s) * 3 * C; }
  int64_t kv_row(int64_t b, int64_t s) const { return (b * S + s) * 2 * C; }
  int64_t y_row(int64_t b, int64_t s) const { return (b * S + s) * C; }
};

// Which chunk of the whole sequence a half of a shard is (0: its first, 1: its second).
int64_t chunk_of(const ContextShard& shard, int half) {
  return half == 0 ? shard.rank : 2 * int64_t{shard.ranks} - 1 - shard.rank;
}

// Under --precision bf16 the six products take bf16 inputs, as one process's fused kernel
// (nn/ops/attention.cpp) does: each operand rounded to bf16 and kept in a float (the product of
// two such values is exact in fp32, so an fp32 product of them is a bf16 product with fp32
// accumulation). The running max m, the sum l, the output o and lse stay fp32.
void round_in_place(float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(numeric::bfloat16(values[i]));
}
std::vector<float> rounded(const float* values, int64_t n) {
  std::vector<float> out(values, values + n);
  round_in_place(out.data(), n);
  return out;
}

// One (query half qa, key half kb) pair of sample b and head h: which chunks of the whole
// sequence they are, and where their q rows (in qkv) and k, v rows (in the block) start.
struct Pair {
  int64_t q_chunk, k_chunk;
  const float *q, *k, *v;
};
Pair pair_of(const Layout& L, const float* qkv, const float* kv, const ContextShard& mine, const ContextShard& source,
             int64_t b, int64_t h, int qa, int kb) {
  const float* k = kv + L.kv_row(b, kb * L.half) + h * L.hs;
  return {chunk_of(mine, qa), chunk_of(source, kb), qkv + L.qkv_row(b, qa * L.half) + h * L.hs, k, k + L.C};
}

// The pair's [half, half] scores q·kᵀ/√hs, masked by position, into S, and (with dropout) the
// factors of its weights into F: row t is query position p_q + t, keys p_k … p_k + half − 1.
// Returns false when every key is later than every query (the pair is skipped).
bool open_pair(const Layout& L, const Pair& p, const nn::DropoutMask* mask, int64_t b, int64_t h, float* S, float* F) {
  if (p.k_chunk > p.q_chunk) return false;
  nn::gemm(false, true, L.half, L.half, L.hs, L.scale, p.q, 3 * L.C, p.k, 2 * L.C, 0.0f, S, L.half);
  if (p.k_chunk == p.q_chunk)  // the diagonal chunk: key j after query t is the future
    for (int64_t t = 0; t < L.half; ++t) std::fill(S + t * L.half + t + 1, S + (t + 1) * L.half, kMasked);
  if (mask)
    for (int64_t t = 0; t < L.half; ++t)
      mask->factors(b, h * L.T * L.T + (p.q_chunk * L.half + t) * L.T + p.k_chunk * L.half, L.half, F + t * L.half);
  return true;
}

// Per-thread scratch of a pair's [half, half] matrices.
float* scratch(int which, std::size_t count) {
  thread_local std::vector<float> buffers[3];
  if (buffers[which].size() < count) buffers[which].resize(count);
  return buffers[which].data();
}

// Forward of one key/value block (rank `source`'s) into the running m, l, o of every (b, h).
void forward_block(const Layout& L, const float* qkv, const float* kv, const ContextShard& mine,
                   const ContextShard& source, const nn::DropoutMask* mask, float* m, float* l, float* o) {
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.H; ++h) {
      float* S = scratch(0, static_cast<std::size_t>(L.half * L.half));
      float* F = mask ? scratch(1, static_cast<std::size_t>(L.half * L.half)) : nullptr;
      for (int qa = 0; qa < 2; ++qa)
        for (int kb = 0; kb < 2; ++kb) {
          const Pair pair = pair_of(L, qkv, kv, mine, source, b, h, qa, kb);
          if (!open_pair(L, pair, F ? mask : nullptr, b, h, S, F)) continue;
          for (int64_t t = 0; t < L.half; ++t) {  // the online softmax, row by row
            const int64_t row = (b * L.H + h) * L.S + qa * L.half + t;
            float* s = S + t * L.half;
            const float block_max = *std::max_element(s, s + L.half);
            const float m_new = std::max(m[row], block_max), alpha = std::exp(m[row] - m_new);
            float sum = 0.0f;
            for (int64_t j = 0; j < L.half; ++j) {
              const float e = s[j] == kMasked ? 0.0f : std::exp(s[j] - m_new);
              sum += e;
              s[j] = F ? e * F[t * L.half + j] : e;  // the weight as it multiplies v
            }
            l[row] = l[row] * alpha + sum;
            m[row] = m_new;
            float* o_row = o + L.y_row(b, qa * L.half + t) + h * L.hs;
            for (int64_t d = 0; d < L.hs; ++d) o_row[d] *= alpha;
          }
          // o[qa rows] += weights · v[kb rows]
          if (L.bf16) round_in_place(S, L.half * L.half);
          nn::gemm(false, false, L.half, L.hs, L.half, 1.0f, S, L.half, pair.v, 2 * L.C, 1.0f,
                   o + L.y_row(b, qa * L.half) + h * L.hs, L.C);
        }
    }
}

// Backward of one block: dq (this rank's) and dkv (the block's, travelling) accumulate.
void backward_block(const Layout& L, const float* qkv, const float* kv, const float* dy, const float* lse,
                    const float* D, const ContextShard& mine, const ContextShard& source, const nn::DropoutMask* mask,
                    float* dq, float* dkv) {
  // Heads write disjoint columns of dq and dkv; samples disjoint rows.
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.H; ++h) {
      float* P = scratch(0, static_cast<std::size_t>(L.half * L.half));
      float* F = mask ? scratch(1, static_cast<std::size_t>(L.half * L.half)) : nullptr;
      float* dS = scratch(2, static_cast<std::size_t>(L.half * L.half));
      for (int qa = 0; qa < 2; ++qa)
        for (int kb = 0; kb < 2; ++kb) {
          const Pair pair = pair_of(L, qkv, kv, mine, source, b, h, qa, kb);
          if (!open_pair(L, pair, F ? mask : nullptr, b, h, P, F)) continue;
          const float* dy_rows = dy + L.y_row(b, qa * L.half) + h * L.hs;
          float* dq_rows = dq + L.qkv_row(b, qa * L.half) + h * L.hs;
          float* dk_rows = dkv + L.kv_row(b, kb * L.half) + h * L.hs;
          float* dv_rows = dk_rows + L.C;
          for (int64_t t = 0; t < L.half; ++t) {  // P = e^(s − lse), and the weights as they multiplied v
            const float row_lse = lse[(b * L.H + h) * L.S + qa * L.half + t];
            for (int64_t j = 0; j < L.half; ++j) {
              float& p = P[t * L.half + j];
              p = p == kMasked ? 0.0f : std::exp(p - row_lse);
              dS[t * L.half + j] = F ? p * F[t * L.half + j] : p;
            }
          }
          // dv[kb rows] += weightsᵀ · dy[qa rows]
          if (L.bf16) round_in_place(dS, L.half * L.half);
          nn::gemm(true, false, L.half, L.hs, L.half, 1.0f, dS, L.half, dy_rows, L.C, 1.0f, dv_rows, 2 * L.C);
          // dP = dy · vᵀ, through the dropout; dS = P ⊙ (dP − D)
          nn::gemm(false, true, L.half, L.half, L.hs, 1.0f, dy_rows, L.C, pair.v, 2 * L.C, 0.0f, dS, L.half);
          for (int64_t t = 0; t < L.half; ++t) {
            const float row_D = D[(b * L.H + h) * L.S + qa * L.half + t];
            for (int64_t j = 0; j < L.half; ++j) {
              float& ds = dS[t * L.half + j];
              ds = P[t * L.half + j] * ((F ? ds * F[t * L.half + j] : ds) - row_D);
            }
          }
          // dq[qa rows] += dS · k / √hs,  dk[kb rows] += dSᵀ · q / √hs
          if (L.bf16) round_in_place(dS, L.half * L.half);
          nn::gemm(false, false, L.half, L.hs, L.half, L.scale, dS, L.half, pair.k, 2 * L.C, 1.0f, dq_rows, 3 * L.C);
          nn::gemm(true, false, L.half, L.hs, L.half, L.scale, dS, L.half, pair.q, 3 * L.C, 1.0f, dk_rows, 2 * L.C);
        }
    }
}

// This rank's keys and values, [B,S,2C].
std::vector<float> keys_and_values(const Layout& L, const float* qkv) {
  std::vector<float> kv(static_cast<std::size_t>(L.B * L.S * 2 * L.C));
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t s = 0; s < L.S; ++s) std::copy_n(qkv + L.qkv_row(b, s) + L.C, 2 * L.C, kv.data() + L.kv_row(b, s));
  return kv;
}

// One hop round the ring: `out` to rank + 1, `in` from rank − 1, started now and finished by
// Work::wait() — on the communication thread under --progress thread, else as two messages the
// transport moves while this rank computes.
comm::Work start_hop(comm::Communicator& cp, std::span<const float> out, std::span<float> in) {
  const int c = cp.size(), next = (cp.rank() + 1) % c, previous = (cp.rank() + c - 1) % c;
  return cp.send_recv_async(out, next, in, previous);
}

// The attention span of rank `source`'s block for --trace (named only while a trace records).
nn::timeline::Span block_span(int source) {
  return nn::timeline::Span(nn::timeline::recording() ? fmt::format("K,V of rank {}", source) : std::string(),
                            "attention");
}

// Goes round the ring once: calls visit(block, source) for every rank's block, starting with
// this rank's own; the next block is posted before the current one is visited (`overlap`), or
// exchanged after it.
// Under --trace: each hop on the communication row from its post to its end, and the wait for it
// on the rank's row (the part the visit did not hide); the visits name their blocks themselves.
template <class Visit>
void round_the_ring(comm::Communicator& cp, std::vector<float> block, bool overlap, Visit visit) {
  const int c = cp.size();
  std::vector<float> next(block.size());
  for (int step = 0; step < c; ++step) {
    const int source = (cp.rank() - step + c) % c;
    const bool more = step + 1 < c;
    comm::Work hop;
    double posted_s = 0;
    if (more && overlap) {
      posted_s = nn::timeline::now_s();
      hop = start_hop(cp, block, next);
    }
    visit(block, source);
    if (more && !overlap) {
      posted_s = nn::timeline::now_s();
      hop = start_hop(cp, block, next);
    }
    if (more) {
      {
        nn::timeline::Span span("waiting for the hop", "wait");
        hop.wait();
      }
      if (nn::timeline::recording())
        nn::timeline::record(fmt::format("hop {}: K,V of rank {}", step + 1, (source - 1 + c) % c), "exchange",
                             posted_s, nn::timeline::now_s(), nn::timeline::Row::communication);
      block.swap(next);
    }
  }
}

}  // namespace

nn::Tensor ring_attention(const nn::Tensor& qkv, int n_head, const nn::DropoutMask& dropout, const ContextShard& shard,
                          comm::Communicator& cp, bool overlap, nn::Precision precision) {
  if (qkv.ndim() != 3 || n_head <= 0 || qkv.size(2) % (3 * n_head) != 0 || qkv.size(1) != shard.length())
    comm::fail("ring attention: qkv {} is not {} positions of q, k, v of {} heads", nn::shape_string(qkv.shape()),
               shard.length(), n_head);
  const int64_t B = qkv.size(0), S = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
  const Layout L{B, S, C, n_head, hs, shard.T, S / 2, 1.0f / std::sqrt(static_cast<float>(hs)),
                 precision == nn::Precision::bf16};
  // The products' q, k, v: qkv itself, or under bf16 a copy rounded once (and so they travel the ring).
  auto rounded_qkv = std::make_shared<std::vector<float>>(L.bf16 ? rounded(qkv.data(), qkv.numel()) : std::vector<float>{});
  const auto operands_of = [qkv](const std::vector<float>& copy) { return copy.empty() ? qkv.data() : copy.data(); };
  const nn::DropoutMask* mask = dropout.active() ? &dropout : nullptr;
  // q·kᵀ and P·v over the causal half of every rank's S×T: as one rank's kernel counts.
  nn::profile::Scope scope("attention core (ring)", 0, 4.0 * B * S * (shard.T / 2.0) * C);

  const bool track = nn::autograd::needs_grad({&qkv});
  nn::Tensor y = nn::Tensor::zeros({B, S, C}, track);
  const auto rows = static_cast<std::size_t>(B * n_head * S);
  auto lse = std::make_shared<std::vector<float>>(rows, kMasked);  // m first, then m + log l
  std::vector<float> l(rows, 0.0f);
  const float* operands = operands_of(*rounded_qkv);
  round_the_ring(cp, keys_and_values(L, operands), overlap, [&](const std::vector<float>& kv, int source) {
    const nn::timeline::Span span = block_span(source);
    forward_block(L, operands, kv.data(), shard, shard.of_rank(source), mask, lse->data(), l.data(), y.data());
  });
  for (int64_t b = 0; b < B; ++b)  // y = o / l, lse = m + log l
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const auto row = static_cast<std::size_t>((b * n_head + h) * S + s);
        float* y_row = y.data() + L.y_row(b, s) + h * hs;
        for (int64_t d = 0; d < hs; ++d) y_row[d] /= l[row];
        (*lse)[row] += std::log(l[row]);
      }
  if (!track) return y;

  nn::autograd::record([qkv, rounded_qkv, operands_of, y, lse, L, shard, dropout, overlap, &cp]() {
    nn::profile::Scope backward_scope("attention core (ring)", 0, 8.0 * L.B * L.S * (L.T / 2.0) * L.C);
    // (the closure's own copy of the mask: the caller's may be gone when backward runs)
    const nn::DropoutMask* kept_mask = dropout.active() ? &dropout : nullptr;
    // The products' dy: y's gradient, or under bf16 rounded once (D below is taken from the same).
    const std::vector<float> dy_rounded = L.bf16 ? rounded(y.grad(), y.numel()) : std::vector<float>{};
    const float* dy = dy_rounded.empty() ? y.grad() : dy_rounded.data();
    // D_t = Σ_d dy_td · y_td per (b, h, t): softmax's backward needs rowsum(dP ⊙ P), which it is.
    std::vector<float> D(lse->size(), 0.0f);
    for (int64_t b = 0; b < L.B; ++b)
      for (int64_t h = 0; h < L.H; ++h)
        for (int64_t s = 0; s < L.S; ++s) {
          float sum = 0.0f;
          for (int64_t d = 0; d < L.hs; ++d) {
            const int64_t at = L.y_row(b, s) + h * L.hs + d;
            sum += dy[at] * y.data()[at];
          }
          D[static_cast<std::size_t>((b * L.H + h) * L.S + s)] = sum;
        }
    std::vector<float> dq(static_cast<std::size_t>(qkv.numel()), 0.0f);
    // The block's dK, dV travel with it; after the last block one more hop brings each home.
    std::vector<float> dkv(static_cast<std::size_t>(L.B * L.S * 2 * L.C), 0.0f), incoming(dkv.size());
    const int c = cp.size();
    const float* qkv_operands = operands_of(*rounded_qkv);
    round_the_ring(cp, keys_and_values(L, qkv_operands), overlap, [&](const std::vector<float>& kv, int source) {
      {
        const nn::timeline::Span span = block_span(source);
        backward_block(L, qkv_operands, kv.data(), dy, lse->data(), D.data(), shard, shard.of_rank(source), kept_mask,
                       dq.data(), dkv.data());
      }
      if (c > 1) {  // dK, dV of the block on to the rank that sees it next (home, after the last)
        nn::timeline::Span span("dK,dV hop", "exchange");
        start_hop(cp, dkv, incoming).wait();
        dkv.swap(incoming);
      }
    });
    auto [dqkv, accumulate] = qkv.grad_target();
    for (int64_t b = 0; b < L.B; ++b)
      for (int64_t s = 0; s < L.S; ++s) {
        float* to = dqkv + L.qkv_row(b, s);
        const float* from_q = dq.data() + L.qkv_row(b, s);
        const float* from_kv = dkv.data() + L.kv_row(b, s);
        for (int64_t i = 0; i < L.C; ++i) to[i] = (accumulate ? to[i] : 0.0f) + from_q[i];
        for (int64_t i = 0; i < 2 * L.C; ++i) to[L.C + i] = (accumulate ? to[L.C + i] : 0.0f) + from_kv[i];
      }
  });
  return y;
}

}  // namespace parallel
