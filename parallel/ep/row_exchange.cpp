#include "parallel/ep/row_exchange.hpp"

#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "comm/error.hpp"
#include "nn/autograd.hpp"
#include "nn/timeline.hpp"

namespace parallel {
namespace {

// An alltoallv of `send` (blocks of send_rows[j] rows of C floats) into `recv`.
void exchange(const float* send, std::span<const int64_t> send_rows, float* recv, std::span<const int64_t> recv_rows,
              int64_t C, comm::Communicator& group, const std::string& name, double* seconds) {
  nn::timeline::Span span(name, "exchange");
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::size_t> send_counts, recv_counts;
  for (int64_t n : send_rows) send_counts.push_back(static_cast<std::size_t>(n * C));
  for (int64_t n : recv_rows) recv_counts.push_back(static_cast<std::size_t>(n * C));
  const std::size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
  const std::size_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
  group.alltoallv(std::span<const float>(send, sent), std::span<const std::size_t>(send_counts),
                  std::span<float>(recv, received), std::span<const std::size_t>(recv_counts));
  if (seconds) *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

nn::Tensor exchange_rows(const nn::Tensor& rows, std::span<const int64_t> send_rows, std::span<const int64_t> recv_rows,
                         comm::Communicator& group, const char* name, double* seconds) {
  const auto W = static_cast<std::size_t>(group.size());
  if (rows.ndim() != 2 || send_rows.size() != W || recv_rows.size() != W)
    comm::fail("exchange_rows: {} rows of {} dimensions, {} send and {} receive counts, for {} ranks", rows.numel(),
               rows.ndim(), send_rows.size(), recv_rows.size(), W);
  const int64_t C = rows.size(1);
  const int64_t N = std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
  const int64_t M = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0});
  if (N != rows.size(0)) comm::fail("exchange_rows: send counts add up to {} rows, the tensor has {}", N, rows.size(0));
  const bool track = nn::autograd::grad_enabled();  // (not needs_grad: see the header)
  nn::Tensor out = nn::Tensor::zeros({M, C}, track);
  exchange(rows.data(), send_rows, out.data(), recv_rows, C, group, name, seconds);
  if (track)
    nn::autograd::record([rows, out, sent = std::vector<int64_t>(send_rows.begin(), send_rows.end()),
                          received = std::vector<int64_t>(recv_rows.begin(), recv_rows.end()), C, &group,
                          backward_name = std::string(name) + "'s gradient", seconds]() {
      std::vector<float> back(static_cast<std::size_t>(rows.numel()));
      exchange(out.grad(), received, back.data(), sent, C, group, backward_name, seconds);  // each row's gradient to the rank that sent it
      if (!rows.requires_grad()) return;
      auto [dx, accumulate] = rows.grad_target();
      for (std::size_t i = 0; i < back.size(); ++i) dx[i] = (accumulate ? dx[i] : 0.0f) + back[i];
    });
  return out;
}

}  // namespace parallel
