#include "nn/memory_estimate.hpp"

#include <fmt/format.h>

namespace nn {

double parameter_count(const GPTConfig& c) {
  const double C = c.n_embd, L = c.n_layer, bias = c.bias ? 1.0 : 0.0;
  const double per_block = 12 * C * C + 2 * C /* layernorms */ + bias * (2 * C + 3 * C + C + 4 * C + C);
  return static_cast<double>(c.vocab_size) * C + c.block_size * C + L * per_block + C * (1 + bias);
}

MemoryEstimate estimate_memory(const GPTConfig& c, int64_t batch_size, bool training) {
  constexpr double kFloat = 4;
  const double P = parameter_count(c), B = static_cast<double>(batch_size), T = c.block_size, C = c.n_embd;
  const double per_token = c.n_layer * (18 * C + 2.0 * c.n_head * T) + 4 * C + 2.0 * c.vocab_size;
  MemoryEstimate e;
  e.parameter_bytes = kFloat * P;
  e.state_bytes = training ? kFloat * 4 * P : 0;
  e.activation_bytes = kFloat * B * T * per_token * (training ? 2 : 1);
  return e;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  return fmt::format("{:.3g} {}", bytes, units[u]);
}

std::string MemoryEstimate::describe() const {
  return fmt::format("{} (parameters {}, gradients and optimizer {}, activations {})", format_bytes(total()),
                     format_bytes(parameter_bytes), format_bytes(state_bytes), format_bytes(activation_bytes));
}

double flops_per_token(const GPTConfig& config, int64_t T) {
  // As GPT::flops_per_token: 6 per non-embedding parameter (without wpe) plus attention's q·k and p·v.
  return 6.0 * (parameter_count(config) - static_cast<double>(config.block_size) * config.n_embd) +
         12.0 * config.n_layer * config.n_embd * static_cast<double>(T);
}

}  // namespace nn
