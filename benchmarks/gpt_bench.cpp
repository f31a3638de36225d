// gpt_bench: training throughput of the GPT in one process — forward + backward + AdamW
// step on random tokens — as median milliseconds per step and tokens per second, with the
// time split by phase. Presets are the two configs of docs/nn.md:
//   a  nanoGPT's CPU recipe: 4 layers, 4 heads, n_embd 128, block 64, batch 12, vocab 65
//   b  the "baby GPT":       6 layers, 6 heads, n_embd 384, block 256, batch 64, vocab 65
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/cli_checks.hpp"
#include "nn/adamw.hpp"
#include "nn/autocast.hpp"
#include "nn/autograd.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/compute_modes.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/gpt.hpp"
#include "nn/grad_clip.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "nn/profile.hpp"
#include "nn/threads.hpp"
#include "numeric/bf16.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The machine's matrix-multiply peak in a precision, measured as a large GEMM reaches it:
// C[n,n] = A·Bᵀ with n = 2048 (the shape of a linear layer), the median of 5 after a warm-up.
double gemm_peak_gflops(nn::Precision precision) {
  const int64_t n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<numeric::bfloat16> a16(n * n, numeric::bfloat16(0.5f)), b16(n * n, numeric::bfloat16(0.25f));
  std::vector<double> seconds;
  for (int i = 0; i < 6; ++i) {
    const auto t = Clock::now();
    if (precision == nn::Precision::bf16)
      nn::gemm_bf16(false, true, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
    else
      nn::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (i > 0) seconds.push_back(seconds_since(t));
  }
  return 2.0 * n * n * n / median(seconds) / 1e9;
}

// What the command line asks for.
struct BenchOptions {
  std::string preset = "a";
  int batch = 0;  // 0: the preset's
  int steps = 0, warmup = 2, threads = nn::machine_cores(), vocab = 65;
  nn::PrecisionSetting precision_setting = nn::PrecisionSetting::fp32;  // --precision, auto resolved below
  nn::Precision precision = nn::Precision::fp32;                       // what runs
  nn::AttentionKernel attention = nn::AttentionKernel::fused;
  nn::Recompute recompute = nn::Recompute::none;
  nn::AdamWKernel adamw = nn::AdamWKernel::fused;
  nn::Fusion fusion = nn::Fusion::fused;
  bool peak = false, json = false, profile = false, bias = false;
};

void add_flags(CLI::App& app, BenchOptions& o) {
  app.add_option("--preset", o.preset, "a (nanoGPT CPU recipe) or b (baby GPT)")->check(CLI::IsMember({"a", "b"}));
  app.add_option("--batch", o.batch, "sequences per step (default: the preset's, 12 for a, 64 for b)")
      ->check(comm::cli::whole(1, 1 << 16));
  app.add_option("--steps", o.steps, "timed steps (default: 20 for a, 3 for b)")->check(comm::cli::whole(1));
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(comm::cli::whole(0));
  app.add_option("--threads", o.threads, "compute threads")->check(comm::cli::whole(1));
  comm::cli::add_choice(app, "--precision", o.precision_setting, nn::kPrecisionSettingNames,
                        "fp32, bf16 (the linear layers' products in bf16: nn/autocast.hpp), or auto (bf16 where the "
                        "CPU has bf16 units), as the trainers take it");
  comm::cli::add_choice(app, "--attention", o.attention, nn::kAttentionKernelNames,
                        "fused, or naive (eager PyTorch's separate ops)");
  comm::cli::add_choice(app, "--recompute", o.recompute, nn::kRecomputeNames,
                        "activations recomputed in backward: none, selective (the attention core) or full (each "
                        "block), as the trainers take it");
  comm::cli::add_choice(app, "--adamw", o.adamw, nn::kAdamWKernelNames,
                        "fused (every parameter in one pass, as PyTorch's fused AdamW) or per-tensor (one loop per "
                        "tensor: the speed ladder's rung before)");
  comm::cli::add_choice(app, "--fusion", o.fusion, nn::kFusionNames,
                        "fused (each residual add inside the next layernorm's pass; with --bias, c_fc's bias "
                        "inside GELU's) or separate (one op each: the speed ladder's rung before)");
  app.add_flag("--bias", o.bias, "biases in the linear layers and layernorms (nanoGPT's bias=True; c_fc's then fuses into GELU)");
  app.add_option("--vocab", o.vocab, "vocabulary size (65 characters; 128 is the ladder's \"nice number\")")
      ->check(comm::cli::whole(1, 1 << 20));
  app.add_flag("--peak", o.peak,
               "also measure the precision's GEMM peak (a 2048³ product) and the step's fraction of it");
  app.add_flag("--json", o.json, "one JSON line instead of the table");
  app.add_flag("--profile", o.profile,
               "then profile one more step: time, share and GFLOP/s or GB/s of every kind of work, forward and "
               "backward, against this CPU's GEMM peak and memory bandwidth (docs/nn.md)");
}

// Per-step seconds of each phase, one entry per timed step; and the memory of the last step.
struct StepTimes {
  std::vector<double> total, forward, backward, update;
  double kept_bytes = 0;  // allocated by forward and still held when it ends: what backward needs
  double peak_bytes = 0;  // the allocator's peak during forward + backward, above the step's start
};

StepTimes time_steps(nn::GPT& model, int64_t B, int64_t T, const BenchOptions& o) {
  nn::AdamW opt(model.parameters(), {0.9f, 0.95f, 1e-8f, 0.1f}, o.adamw);
  nn::Rng rng(7);
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> ids(B * T), targets(B * T);
  StepTimes times;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    for (auto& v : ids) v = static_cast<int32_t>(rng.next_u64() % vocab);
    for (auto& v : targets) v = static_cast<int32_t>(rng.next_u64() % vocab);
    const double start_bytes = static_cast<double>(nn::BufferPool::bytes_in_use());
    nn::BufferPool::reset_peak();
    auto t0 = Clock::now();
    nn::WeightCastCache weights_cast_once;  // this step's bf16 weights (--precision bf16)
    nn::Tensor loss = model.loss(ids, targets, B, T);
    double f = seconds_since(t0);
    times.kept_bytes = static_cast<double>(nn::BufferPool::bytes_in_use()) - start_bytes;
    auto t1 = Clock::now();
    nn::autograd::backward(loss);
    double b = seconds_since(t1);
    times.peak_bytes = static_cast<double>(nn::BufferPool::peak_bytes_in_use()) - start_bytes;
    auto t2 = Clock::now();
    nn::profile::InPass update(nn::profile::Pass::update);
    nn::clip_grad_norm(model.parameters(), 1.0f);
    opt.step(1e-3f);
    opt.zero_grad();
    double u = seconds_since(t2);
    if (s < o.warmup) continue;
    times.total.push_back(seconds_since(t0));
    times.forward.push_back(f);
    times.backward.push_back(b);
    times.update.push_back(u);
  }
  return times;
}

// The memory system's bandwidth as the ops see it: `bytes` copied between two buffers by every
// compute thread at once (each its slice), counted as bytes read plus bytes written per second;
// the best of 20 after a warm-up (a ceiling: what the machine can do; this shared one varies
// 2× between runs).
double copy_bandwidth_gbps(std::size_t bytes) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::vector<double> seconds;
  for (int i = 0; i < 21; ++i) {
    const auto t = Clock::now();
#pragma omp parallel
    {
      const std::size_t threads = static_cast<std::size_t>(omp_get_num_threads()),
                        me = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t begin = bytes * me / threads, end = bytes * (me + 1) / threads;
      std::memcpy(to.data() + begin, from.data() + begin, end - begin);
    }
    if (i > 0) seconds.push_back(seconds_since(t));
  }
  return 2.0 * static_cast<double>(bytes) / *std::min_element(seconds.begin(), seconds.end()) / 1e9;
}

// --profile: one more step with every op's Scope recording (nn/profile.hpp), then the table:
// each kind of work in each pass, slowest first, with what it achieved against the roofline —
// GFLOP/s against the GEMM peak for products, GB/s against the copy bandwidth for the rest.
void profile_one_step(nn::GPT& model, int64_t B, int64_t T, const BenchOptions& o) {
  BenchOptions one = o;
  one.warmup = 0;
  one.steps = 1;
  nn::profile::reset();
  nn::profile::enable(true);
  const StepTimes t = time_steps(model, B, T, one);
  nn::profile::enable(false);
  std::vector<nn::profile::Row> rows = nn::profile::rows();
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  const double step = t.total.at(0), peak = gemm_peak_gflops(o.precision);
  const std::size_t activation = static_cast<std::size_t>(B * T * model.config().n_embd) * 4 * sizeof(float);
  const double bandwidth = copy_bandwidth_gbps(activation);
  fmt::print("\nper-op profile of one step: {:.2f} ms (exclusive times; a Scope inside another is not counted twice)\n",
             step * 1e3);
  fmt::print("roofline: {} GEMM peak {:.0f} GFLOP/s (2048³); copy bandwidth {:.1f} GB/s read + written ({} "
             "threads copying one [B,T,4C] activation, {})\n",
             nn::name_of(o.precision), peak, bandwidth, o.threads, nn::format_bytes(static_cast<double>(activation)));
  fmt::print("{:<26} {:<9} {:>9} {:>6} {:>6} {:>9} {:>8} {:>9}\n", "kind", "pass", "ms", "share", "calls", "GFLOP/s",
             "GB/s", "roofline");
  double counted = 0;
  for (const auto& r : rows) {
    counted += r.seconds;
    const double gflops = r.seconds > 0 ? r.flops / r.seconds / 1e9 : 0, gbps = r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0;
    const std::string fraction = r.flops > 0   ? fmt::format("{:.0f}%", 100 * gflops / peak)
                                 : r.bytes > 0 ? fmt::format("{:.0f}%", 100 * gbps / bandwidth)
                                               : std::string("-");
    fmt::print("{:<26} {:<9} {:>9.3f} {:>5.1f}% {:>6} {:>9} {:>8} {:>9}\n", r.kind, nn::profile::name_of(r.pass),
               r.seconds * 1e3, 100 * r.seconds / step, r.calls, r.flops > 0 ? fmt::format("{:.1f}", gflops) : "-",
               r.bytes > 0 ? fmt::format("{:.1f}", gbps) : "-", fraction);
  }
  fmt::print("{:<26} {:<9} {:>9.3f} {:>5.1f}%   (autograd's bookkeeping, gradient buffers, the loop)\n",
             "outside every op", "", (step - counted) * 1e3, 100 * (step - counted) / step);
}

void report(const BenchOptions& o, const nn::GPT& model, int64_t B, int64_t T, const StepTimes& t) {
  const nn::GPTConfig& c = model.config();
  const double step = median(t.total), best = *std::min_element(t.total.begin(), t.total.end());
  const double tokens = static_cast<double>(B * T), flops = model.flops_per_token(T) * tokens / step;
  const double peak_gflops = o.peak ? gemm_peak_gflops(o.precision) : 0.0;
  const std::string_view precision = nn::name_of(o.precision), attention = nn::name_of(o.attention);
  const std::string_view recompute = nn::name_of(o.recompute);
  const std::string_view adamw = nn::kAdamWKernelNames[static_cast<std::size_t>(o.adamw)];
  const std::string_view fusion = nn::name_of(o.fusion);
  const double formula_bytes = nn::kept_activation_bytes(c, B, T, o.recompute, o.precision);
  if (o.json) {
    fmt::print(
        "{{\"impl\": \"nanodist\", \"preset\": \"{}\", \"batch\": {}, \"parameters\": {}, \"precision\": \"{}\", \"attention\": \"{}\", \"vocab\": {}, "
        "\"recompute\": \"{}\", \"adamw\": \"{}\", \"fusion\": \"{}\", \"bias\": {}, \"threads\": {}, "
        "\"ms_per_step\": {:.2f}, "
        "\"best_ms\": {:.2f}, \"tokens_per_s\": {:.0f}, \"forward_ms\": {:.2f}, \"backward_ms\": {:.2f}, "
        "\"optimizer_ms\": {:.2f}, \"gflops\": {:.1f}, \"peak_gflops\": {:.1f}, \"kept_mib\": {:.2f}, "
        "\"kept_formula_mib\": {:.2f}, \"peak_mib\": {:.2f}}}\n",
        o.preset, B, model.num_params(), precision, attention, c.vocab_size, recompute, adamw, fusion, c.bias, o.threads, step * 1e3, best * 1e3,
        tokens / step, median(t.forward) * 1e3, median(t.backward) * 1e3, median(t.update) * 1e3, flops / 1e9,
        peak_gflops, t.kept_bytes / 1048576, formula_bytes / 1048576, t.peak_bytes / 1048576);
    return;
  }
  fmt::print(
      "preset {}: {} layers, {} heads, n_embd {}, block {}, batch {}, vocab {}; {:.2f}M parameters; "
      "{} threads; {} matrix multiplies on {}; {} attention; recompute {}; {} AdamW; {} elementwise{}\n",
      o.preset, c.n_layer, c.n_head, c.n_embd, T, B, c.vocab_size, model.num_params() / 1e6, o.threads, precision,
      nn::gemm_library(o.precision), attention, recompute, adamw, fusion, c.bias ? "; biases" : "");
  fmt::print(
      "median of {} steps: {:.2f} ms/step (best {:.2f}; {:.2f} forward, {:.2f} backward, {:.2f} clip+AdamW), "
      "{:.0f} tokens/s, {:.1f} GFLOP/s\n",
      o.steps, step * 1e3, best * 1e3, median(t.forward) * 1e3, median(t.backward) * 1e3, median(t.update) * 1e3,
      tokens / step, flops / 1e9);
  fmt::print("memory: forward keeps {} for backward (formula {}, docs/memory.md); step peak {} above its start\n",
             nn::format_bytes(t.kept_bytes), nn::format_bytes(formula_bytes), nn::format_bytes(t.peak_bytes));
  if (o.peak)
    fmt::print("{} GEMM peak (2048³ on {}): {:.0f} GFLOP/s; the step reaches {:.0f}% of it\n", precision,
               nn::gemm_library(o.precision), peak_gflops, 100 * flops / 1e9 / peak_gflops);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT training throughput (forward + backward + AdamW), one process"};
  BenchOptions o;
  add_flags(app, o);
  if (const int status = comm::cli::parse_or_exit_status(app, argc, argv); status >= 0) return status;
  try {
    nn::GPTConfig c;
    int batch = 12;
    if (o.preset == "b") {
      c = {6, 6, 384, 256, 65, 0.0f, false};
      batch = 64;
    }
    if (o.batch > 0) batch = o.batch;
    if (o.steps == 0) o.steps = o.preset == "a" ? 20 : 3;
    nn::set_compute_threads(o.threads);
    nn::use_gemm_engine(nn::parse_gemm_engine(std::getenv("NANODIST_GEMM")));  // the environment, read here
    const nn::ComputeModes modes = nn::resolve_modes(o.precision_setting, o.attention, o.recompute, o.fusion);
    o.precision = modes.precision;
    c.vocab_size = o.vocab;
    c.bias = o.bias;
    nn::GPT model(c, 1337, modes);
    report(o, model, batch, c.block_size, time_steps(model, batch, c.block_size, o));
    if (o.profile) profile_one_step(model, batch, c.block_size, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
