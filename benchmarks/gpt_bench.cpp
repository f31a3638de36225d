// gpt_bench: training throughput of the GPT in one process — forward + backward + AdamW
// step on random tokens — as median milliseconds per step and tokens per second, with the
// time split by phase. Presets are the two configs of docs/nn.md:
//   a  nanoGPT's CPU recipe: 4 layers, 4 heads, n_embd 128, block 64, batch 12, vocab 65
//   b  the "baby GPT":       6 layers, 6 heads, n_embd 384, block 256, batch 64, vocab 65
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/cli_checks.hpp"
#include "nn/adamw.hpp"
#include "nn/autograd.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/gpt.hpp"
#include "nn/grad_clip.hpp"
#include "nn/threads.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT training throughput (forward + backward + AdamW), one process"};
  std::string preset = "a";
  nn::GPTConfig c;
  int batch = 12, steps = 0, warmup = 2, threads = nn::machine_cores();
  bool json = false;
  app.add_option("--preset", preset, "a (nanoGPT CPU recipe) or b (baby GPT)")->check(CLI::IsMember({"a", "b"}));
  app.add_option("--steps", steps, "timed steps (default: 20 for a, 3 for b)")->check(comm::cli::whole(1));
  app.add_option("--warmup", warmup, "untimed steps first")->check(comm::cli::whole(0));
  app.add_option("--threads", threads, "compute threads")->check(comm::cli::whole(1));
  app.add_flag("--json", json, "one JSON line instead of the table");
  if (const int status = comm::cli::parse_or_exit_status(app, argc, argv); status >= 0) return status;

  try {
    if (preset == "b") {
      c = {6, 6, 384, 256, 65, 0.0f, false};
      batch = 64;
    }
    if (steps == 0) steps = preset == "a" ? 20 : 3;
    nn::set_compute_threads(threads);
    const int64_t B = batch, T = c.block_size;
    nn::GPT model(c, 1337);
    nn::AdamW opt(model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f});
    nn::Rng rng(7);
    std::vector<int32_t> ids(B * T), targets(B * T);

    std::vector<double> total, forward, backward, update;
    for (int s = 0; s < warmup + steps; ++s) {
      for (auto& v : ids) v = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
      for (auto& v : targets) v = static_cast<int32_t>(rng.next_u64() % c.vocab_size);
      auto t0 = Clock::now();
      nn::Tensor loss = model.loss(ids, targets, B, T);
      double f = seconds_since(t0);
      auto t1 = Clock::now();
      nn::autograd::backward(loss);
      double b = seconds_since(t1);
      auto t2 = Clock::now();
      nn::clip_grad_norm(model.parameters(), 1.0f);
      opt.step(1e-3f);
      opt.zero_grad();
      double u = seconds_since(t2);
      if (s < warmup) continue;
      total.push_back(seconds_since(t0));
      forward.push_back(f);
      backward.push_back(b);
      update.push_back(u);
    }
    const double step = median(total), tokens = static_cast<double>(B * T);
    const double flops = model.flops_per_token(T) * tokens / step;
    if (json) {
      fmt::print(
          "{{\"impl\": \"nanodist\", \"preset\": \"{}\", \"threads\": {}, \"ms_per_step\": {:.2f}, "
          "\"best_ms\": {:.2f}, \"tokens_per_s\": {:.0f}, \"forward_ms\": {:.2f}, \"backward_ms\": {:.2f}, "
          "\"optimizer_ms\": {:.2f}}}\n",
          preset, threads, step * 1e3, *std::min_element(total.begin(), total.end()) * 1e3, tokens / step,
          median(forward) * 1e3, median(backward) * 1e3, median(update) * 1e3);
    } else {
      fmt::print(
          "preset {}: {} layers, {} heads, n_embd {}, block {}, batch {}, vocab {}; {:.2f}M parameters; "
          "{} threads; GEMM: {}\n",
          preset, c.n_layer, c.n_head, c.n_embd, T, B, c.vocab_size, model.num_params() / 1e6, threads,
          nn::gemm_library());
      fmt::print(
          "median of {} steps: {:.2f} ms/step (best {:.2f}; {:.2f} forward, {:.2f} backward, {:.2f} clip+AdamW), "
          "{:.0f} tokens/s, {:.1f} GFLOP/s\n",
          steps, step * 1e3, *std::min_element(total.begin(), total.end()) * 1e3, median(forward) * 1e3,
          median(backward) * 1e3, median(update) * 1e3, tokens / step, flops / 1e9);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
