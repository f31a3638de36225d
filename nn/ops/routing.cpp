// The ops a mixture of experts routes tokens with (nn/moe_mlp.cpp decides where each goes):
// pick an expert's rows out of the tokens, put the experts' gated outputs back, Switch's
// load-balancing loss, and the identity that hands that loss its gradient in backward.
#include <algorithm>
#include <cmath>

#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"

namespace nn {

// forward:  out[m, :] = x[rows[m], :]            x [N,C] (or [...,C]) → out [M,C]
// backward: dx[rows[m], :] += dout[m, :]
Tensor gather_rows(const Tensor& x, std::span<const int32_t> rows) {
  const int64_t C = x.size(-1), N = x.rows_of_last("gather_rows"), M = static_cast<int64_t>(rows.size());
  for (int32_t r : rows)
    if (r < 0 || r >= N) fail("gather_rows: row {} outside the {} rows", r, N);
  profile::Scope scope("routing", 8.0 * M * C);
  const bool track = autograd::needs_grad({&x});
  Tensor out = Tensor::empty({M, C}, track);
  const float* xd = x.data();
  float* od = out.data();
  for (int64_t m = 0; m < M; ++m) std::copy_n(xd + int64_t{rows[m]} * C, C, od + m * C);
  if (track) {
    std::vector<int32_t> saved(rows.begin(), rows.end());
    autograd::record([x, out, saved = std::move(saved), C]() mutable {
      profile::Scope backward_scope("routing", 12.0 * static_cast<double>(saved.size()) * C);
      float* dx = x.grad();
      const float* dout = out.grad();
      for (std::size_t m = 0; m < saved.size(); ++m) {
        float* row = dx + int64_t{saved[m]} * C;
        for (int64_t c = 0; c < C; ++c) row[c] += dout[static_cast<int64_t>(m) * C + c];
      }
    });
  }
  return out;
}

// forward:  out[rows_e[m], :] += gates[gate_e[m]] · y_e[m, :]   for each expert e, its rows m
//           y_e [M_e,C], gates: the router's probabilities (any shape, indexed flat) → out [N,C]
// backward: dy_e[m, :]        = gates[gate_e[m]] · dout[rows_e[m], :]
//           dgates[gate_e[m]] += y_e[m, :] · dout[rows_e[m], :]
// The experts are added in their order, each one's rows in slot order: the same sums on any
// layout that keeps that order.
Tensor combine_rows(std::span<const Tensor> expert_outputs, std::span<const std::vector<int32_t>> rows,
                    const Tensor& gates, std::span<const std::vector<int64_t>> gate_index, int64_t N) {
  const std::size_t E = expert_outputs.size();
  if (rows.size() != E || gate_index.size() != E) fail("combine_rows: {} outputs, {} row lists, {} gate lists", E,
                                                        rows.size(), gate_index.size());
  int64_t C = 0;
  for (std::size_t e = 0; e < E; ++e) {
    const Tensor& y = expert_outputs[e];
    if (!y.defined()) continue;
    C = y.size(-1);
    if (y.numel() != static_cast<int64_t>(rows[e].size()) * C || gate_index[e].size() != rows[e].size())
      fail("combine_rows: expert {}'s output {} for {} rows", e, shape_string(y.shape()), rows[e].size());
    for (std::size_t m = 0; m < rows[e].size(); ++m)
      if (rows[e][m] < 0 || rows[e][m] >= N || gate_index[e][m] < 0 || gate_index[e][m] >= gates.numel())
        fail("combine_rows: expert {} row {} (gate {}) outside {} rows / {} gates", e, rows[e][m], gate_index[e][m], N,
             gates.numel());
  }
  if (C == 0) fail("combine_rows: no expert has rows");
  profile::Scope scope("routing", 8.0 * N * C);
  bool track = autograd::needs_grad({&gates});
  for (const Tensor& y : expert_outputs) track = track || (y.defined() && autograd::needs_grad({&y}));
  Tensor out = Tensor::zeros({N, C}, track);
  float* od = out.data();
  const float* gd = gates.data();
  for (std::size_t e = 0; e < E; ++e) {
    if (!expert_outputs[e].defined()) continue;
    const float* yd = expert_outputs[e].data();
    for (std::size_t m = 0; m < rows[e].size(); ++m) {
      const float gate = gd[gate_index[e][m]];
      float* o = od + int64_t{rows[e][m]} * C;
      const float* y = yd + static_cast<int64_t>(m) * C;
      for (int64_t c = 0; c < C; ++c) o[c] += gate * y[c];
    }
  }
  if (track) {
    std::vector<Tensor> ys(expert_outputs.begin(), expert_outputs.end());
    std::vector<std::vector<int32_t>> saved_rows(rows.begin(), rows.end());
    std::vector<std::vector<int64_t>> saved_gates(gate_index.begin(), gate_index.end());
    autograd::record([ys, gates, out, saved_rows = std::move(saved_rows), saved_gates = std::move(saved_gates),
                      C]() mutable {
      profile::Scope backward_scope("routing", 16.0 * static_cast<double>(out.numel()));
      const float* dout = out.grad();
      const float* g = gates.data();
      float* dg = gates.requires_grad() ? gates.grad() : nullptr;
      for (std::size_t e = 0; e < ys.size(); ++e) {
        if (!ys[e].defined()) continue;
        const float* yd = ys[e].data();
        float* dy = ys[e].requires_grad() ? ys[e].grad() : nullptr;
        for (std::size_t m = 0; m < saved_rows[e].size(); ++m) {
          const float* d = dout + int64_t{saved_rows[e][m]} * C;
          const float* y = yd + static_cast<int64_t>(m) * C;
          const float gate = g[saved_gates[e][m]];
          double dot = 0.0;
          for (int64_t c = 0; c < C; ++c) {
            if (dy) dy[static_cast<int64_t>(m) * C + c] += gate * d[c];
            dot += static_cast<double>(y[c]) * d[c];
          }
          if (dg) dg[saved_gates[e][m]] += static_cast<float>(dot);
        }
      }
    });
  }
  return out;
}

// Switch's load-balancing loss, per group g of T tokens, averaged over the G groups:
// forward:  L = (1/G) Σ_g E · Σ_e f[g,e] · P[g,e],   P[g,e] = (1/T) Σ_t probs[g,t,e]
//           probs [G,T,E]; f [G,E]: the share of group g's choices that named e (a constant)
// backward: dprobs[g,t,e] += dL · E · f[g,e] / (G·T)
Tensor load_balancing_loss(const Tensor& probs, std::span<const float> f) {
  if (probs.ndim() != 3) fail("load_balancing_loss: probs must be [G,T,E], got {}", shape_string(probs.shape()));
  const int64_t G = probs.size(0), T = probs.size(1), E = probs.size(2);
  if (static_cast<int64_t>(f.size()) != G * E) fail("load_balancing_loss: {} shares for {} groups of {}", f.size(), G, E);
  const bool track = autograd::needs_grad({&probs});
  Tensor loss = Tensor::zeros({1}, track);
  const float* p = probs.data();
  double total = 0.0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t e = 0; e < E; ++e) {
      double column = 0.0;
      for (int64_t t = 0; t < T; ++t) column += p[(g * T + t) * E + e];
      total += static_cast<double>(f[static_cast<std::size_t>(g * E + e)]) * column / static_cast<double>(T);
    }
  loss.data()[0] = static_cast<float>(static_cast<double>(E) * total / static_cast<double>(G));
  if (track) {
    std::vector<float> shares(f.begin(), f.end());
    autograd::record([probs, loss, shares = std::move(shares), G, T, E]() mutable {
      const float scale = loss.grad()[0] * static_cast<float>(E) / static_cast<float>(G * T);
      float* dp = probs.grad();
      for (int64_t g = 0; g < G; ++g)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t e = 0; e < E; ++e) dp[(g * T + t) * E + e] += scale * shares[static_cast<std::size_t>(g * E + e)];
    });
  }
  return loss;
}

// forward:  out = x (a copy); `aux` (one element) rides along
// backward: dx += dout;  daux += coefficient
// How a loss computed inside the model (the load-balancing loss) joins the training loss
// wherever the model is cut: the gradient reaches it when backward passes its block, on the
// pipeline stage that holds that block (Megatron's MoEAuxLossAutoScaler).
Tensor attach_loss(const Tensor& x, const Tensor& aux, float coefficient) {
  if (aux.numel() != 1) fail("attach_loss: the loss must have one element, got {}", shape_string(aux.shape()));
  const bool track = autograd::needs_grad({&x, &aux});
  Tensor out = x.clone();
  if (track) {
    out.set_requires_grad(true);
    autograd::record([x, aux, out, coefficient]() mutable {
      if (x.requires_grad()) {
        float* dx = x.grad();
        const float* dout = out.grad();
        for (int64_t i = 0; i < x.numel(); ++i) dx[i] += dout[i];
      }
      if (aux.requires_grad()) aux.grad()[0] += coefficient;
    });
  }
  return out;
}

}  // namespace nn
