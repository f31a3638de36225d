// train_dp: data-parallel training of a GPT on tiny Shakespeare.
//
//   mpiexec -n 2 build/trainers/train_dp            # the main job: train, evaluate, sample
//
// Data parallelism, the lecture's picture, and where each step happens below:
//
//   1. same start      rank 0 initialises (or loads) the model; broadcast_state() copies
//                      parameters (and optimizer moments) to every rank
//   2. unique data     BatchSampler: every rank a different micro-batch at every step
//   3. average grads   GradientAverager (naive, or bucketed and overlapped with backward)
//   4. same update     every rank clips and steps AdamW on identical averaged gradients,
//                      so the replicas stay identical without ever sending parameters again
//
// Rank 0 prints, writes the metrics file and the checkpoints; every rank computes.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/atomic_file.hpp"
#include "nn/autograd.hpp"
#include "nn/checkpoint.hpp"
#include "nn/data.hpp"
#include "nn/error.hpp"
#include "nn/gemm.hpp"
#include "nn/grad_clip.hpp"
#include "nn/memory_estimate.hpp"
#include "nn/ops.hpp"
#include "nn/threads.hpp"
#include "trainers/batches.hpp"
#include "trainers/evaluation.hpp"
#include "trainers/gradient_averaging.hpp"
#include "trainers/metrics_file.hpp"
#include "trainers/train_options.hpp"

namespace fs = std::filesystem;
using trainers::TrainOptions;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Streams of randomness, each a pure function of (seed, purpose, rank, step): a resumed run
// draws exactly the numbers an uninterrupted one would, and no RNG state needs saving beyond
// the seed and the step.
enum class Stream : uint64_t { init = 1, dropout = 2, eval = 3, sample = 4 };
uint64_t stream_seed(uint64_t seed, Stream s, uint64_t a, uint64_t b = 0) {
  return nn::hash64(nn::hash64(seed ^ (static_cast<uint64_t>(s) * 0x9e3779b97f4a7c15ULL), a), b);
}

// Runs `work` on rank 0. If it throws, every rank stops with rank 0's message (exit 2) —
// instead of the other ranks waiting forever for what rank 0 was about to send them.
void on_rank0_then_agree(comm::Communicator& world, const std::function<void()>& work) {
  std::array<int32_t, 1> failed{0};
  std::string message;
  if (world.rank() == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      failed[0] = 1;
      message = e.what();
    }
  }
  world.broadcast(std::span<int32_t>(failed), 0);
  if (failed[0]) throw comm::UsageError(message);  // printed once, by rank 0
}

// Rank 0's string on every rank (a length, then the bytes as int32s).
void broadcast_text(comm::Communicator& world, std::string& text) {
  std::array<int64_t, 1> size{static_cast<int64_t>(text.size())};
  world.broadcast(std::span<int64_t>(size), 0);
  std::vector<int32_t> chars(text.begin(), text.end());
  chars.resize(static_cast<std::size_t>(size[0]));
  world.broadcast(std::span<int32_t>(chars), 0);
  text.assign(chars.begin(), chars.end());
}

// ---- the data --------------------------------------------------------------------------

struct Splits {
  nn::CharVocabulary vocabulary;
  std::vector<int32_t> train, val;
  fs::path dir;
  std::string origin;  // where the text came from, for the log
};

// Rank 0 prepares the data (finding or downloading the text) and says where it is; then
// every rank reads it.
Splits load_data(const TrainOptions& o, comm::Communicator& world) {
  const std::optional<fs::path> text = o.text.empty() ? std::nullopt : std::optional<fs::path>(o.text);
  std::string dir, origin;
  on_rank0_then_agree(world, [&] {
    const nn::PreparedData prepared = nn::prepare_shakespeare(o.data_dir, text);
    dir = prepared.dir.string();
    origin = prepared.reused ? fmt::format("prepared earlier from {}", prepared.source)
                             : fmt::format("prepared now from {} ({})", prepared.source, prepared.source_how);
  });
  broadcast_text(world, dir);
  broadcast_text(world, origin);
  try {
    Splits s;
    const auto prepared = nn::read_prepared_data(dir);
    if (!prepared) nn::fail("{}: the prepared data is gone", dir);
    s.origin = origin;
    s.dir = prepared->dir;
    s.vocabulary = prepared->vocabulary;
    s.train = nn::load_tokens(s.dir / "train.bin", s.vocabulary.size());
    s.val = nn::load_tokens(s.dir / "val.bin", s.vocabulary.size());
    return s;
  } catch (const nn::Error& e) {
    throw comm::UsageError(e.what());  // the same files, the same failure on every rank
  }
}

void check_fits(const Splits& data, int block_size) {
  for (auto [name, split] : {std::pair{"train", &data.train}, std::pair{"val", &data.val}})
    if (static_cast<int64_t>(split->size()) < block_size + 1)
      throw comm::UsageError(fmt::format("--block-size {} is longer than the data: the {} split of {} has {} tokens "
                                         "(a window needs block_size + 1)",
                                         block_size, name, data.dir.string(), split->size()));
}

void check_vocabulary(const nlohmann::json& train_state, const nn::CharVocabulary& data_vocab, const fs::path& data_dir) {
  const std::string saved = train_state.value("vocabulary", std::string());
  if (saved != data_vocab.chars())
    throw comm::UsageError(fmt::format("vocabulary mismatch: the checkpoint was trained on {} characters, the data in {} "
                                       "has {} — a different text",
                                       saved.size(), data_dir.string(), data_vocab.size()));
}

// Samples start from --prompt: every character must be in the vocabulary (checked before
// training, not at the first evaluation).
void check_prompt(const std::string& prompt, const nn::CharVocabulary& vocabulary) {
  try {
    vocabulary.encode(prompt);
  } catch (const nn::Error& e) {
    throw comm::UsageError(fmt::format("--prompt: {}", e.what()));
  }
}

// Refuses, on every rank alike, a configuration whose estimated memory (nn::estimate_memory)
// times the ranks on a node exceeds what the node has — one line instead of std::bad_alloc
// or the kernel's OOM killer after minutes.
void check_memory(const nn::GPTConfig& config, int batch_size, bool training, comm::Communicator& world) {
  const nn::MemoryEstimate need = nn::estimate_memory(config, batch_size, training);
  const int ranks_here = comm::runtime().local_size();
  std::array<double, 1> budget{comm::available_memory_bytes() / ranks_here};  // this rank's share of its node
  world.allreduce(std::span<double>(budget), comm::ReduceOp::min);
  if (budget[0] > 0 && need.total() > budget[0])
    throw comm::UsageError(fmt::format("this configuration needs about {} per rank, but a rank's share of the "
                                       "available memory is {} ({} rank(s) on a node): make the model, "
                                       "--batch-size or --block-size smaller",
                                       need.describe(), nn::format_bytes(budget[0]), ranks_here));
}

// Every place the run will write must be writable before step 0, not at the first checkpoint.
void check_writable(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path probe = dir / fmt::format(".write-test-{}", ::getpid());
  std::FILE* file = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (!file) throw comm::UsageError(fmt::format("{} {}: cannot write there ({})", flag, dir.string(),
                                                ec ? ec.message() : std::strerror(errno)));
  std::fclose(file);
  fs::remove(probe, ec);
}

// ---- step 1: the same start on every rank -----------------------------------------------

void broadcast_state(nn::GPT& model, nn::AdamW* optimizer, comm::Communicator& world) {
  for (auto& p : model.parameters()) world.broadcast(p.tensor.values(), 0);
  if (!optimizer) return;
  for (auto& m : optimizer->exp_avg()) world.broadcast(m.values(), 0);
  for (auto& v : optimizer->exp_avg_sq()) world.broadcast(v.values(), 0);
  std::array<int64_t, 1> steps{optimizer->steps()};
  world.broadcast(std::span<int64_t>(steps), 0);
  optimizer->set_steps(steps[0]);
}

// Check mode: every rank hashes its parameters and compares with rank 0's.
void verify_identical(const nn::GPT& model, comm::Communicator& world) {
  uint64_t hash = 0;
  for (const auto& p : model.parameters()) {
    auto v = p.tensor.values();
    hash = nn::mix64(hash ^ nn::fnv1a64({reinterpret_cast<const char*>(v.data()), v.size_bytes()}));
  }
  std::vector<int64_t> all(static_cast<std::size_t>(world.size()));
  const std::array<int64_t, 1> mine{static_cast<int64_t>(hash)};
  world.allgather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  std::string differ;
  for (int r = 1; r < world.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ += fmt::format(" {}", r);
  if (!differ.empty()) nn::fail("check: after the broadcast, the parameters of rank(s){} differ from rank 0's", differ);
  comm::say("check: parameters identical on all {} ranks after the broadcast (hash {:016x})", world.size(), hash);
}

// Loads --init-from / --resume on rank 0 (after every rank agreed on the config) and shares it.
struct Start {
  nn::GPTConfig config;
  nlohmann::json train_state;  // empty when starting fresh
};

Start read_start(const TrainOptions& o, const fs::path& checkpoint, comm::Communicator& world) {
  Start start{o.model, nlohmann::json()};
  if (checkpoint.empty()) return start;
  std::string shared;
  on_rank0_then_agree(world, [&] {
    nn::CheckpointInfo info = nn::read_checkpoint_info(checkpoint);
    shared = nlohmann::json{{"config", info.config.to_json()}, {"train_state", info.train_state}}.dump();
  });
  broadcast_text(world, shared);
  const auto j = nlohmann::json::parse(shared);
  start.config = nn::GPTConfig::from_json(j.at("config"));
  start.train_state = j.at("train_state");
  trainers::check_config_against_flags(start.config, o);
  return start;
}

// ---- evaluation and samples -------------------------------------------------------------

struct Evaluation {
  float train_loss, val_loss;
};

Evaluation evaluate(nn::GPT& model, const Splits& data, const TrainOptions& o, int64_t step, comm::Communicator& world) {
  const auto r = static_cast<uint64_t>(world.rank()), s = static_cast<uint64_t>(step);
  return {trainers::estimate_loss(model, data.train, o.batch_size, o.eval_iters, stream_seed(o.seed, Stream::eval, r, 2 * s), world),
          trainers::estimate_loss(model, data.val, o.batch_size, o.eval_iters, stream_seed(o.seed, Stream::eval, r, 2 * s + 1), world)};
}

void print_sample(nn::GPT& model, const nn::CharVocabulary& vocabulary, const TrainOptions& o, int64_t step,
                  comm::Communicator& world) {
  if (world.rank() != 0 || o.sample_tokens == 0) return;  // the other ranks do not wait for it
  const std::string text = trainers::sample_text(model, vocabulary, o.prompt, o.sample_tokens, o.temperature, o.top_k,
                                                 stream_seed(o.seed, Stream::sample, static_cast<uint64_t>(step)));
  comm::say("---- sample at step {} ----\n{}\n----", step, text);
}

// ---- the modes ---------------------------------------------------------------------------

void eval_only(const TrainOptions& o, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  const Splits data = load_data(o, world);
  check_vocabulary(start.train_state, data.vocabulary, data.dir);
  check_fits(data, start.config.block_size);
  check_memory(start.config, 32, /*training=*/false, world);  // full_split_loss runs 32 windows at a time
  nn::GPT model(start.config, 0);
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(o.init_from, model, nullptr); });
  broadcast_state(model, nullptr, world);
  const auto t0 = Clock::now();
  const double loss = trainers::full_split_loss(model, data.val, world);
  if (!std::isfinite(loss))
    throw comm::UsageError(fmt::format("the val loss of {} is {}: the model is diverged", o.init_from, loss));
  comm::say("exact loss over the {} val tokens in windows of {} ({:.1f} s, {} ranks)", data.val.size(),
            start.config.block_size, seconds_since(t0), world.size());
  comm::say("val_loss_full={:.6f}", loss);
}

void sample_only(const TrainOptions& o, comm::Communicator& world) {
  const Start start = read_start(o, o.init_from, world);
  check_memory(start.config, 1, /*training=*/false, world);
  nn::GPT model(start.config, 0);
  on_rank0_then_agree(world, [&] { nn::load_checkpoint(o.init_from, model, nullptr); });
  try {
    const nn::CharVocabulary vocabulary(start.train_state.at("vocabulary").get<std::string>());
    check_prompt(o.prompt, vocabulary);
    if (world.rank() == 0)
      comm::say("{}", trainers::sample_text(model, vocabulary, o.prompt, o.sample_tokens, o.temperature, o.top_k,
                                            stream_seed(o.seed, Stream::sample, 0)));
  } catch (const std::exception& e) {
    throw comm::UsageError(fmt::format("--sample-only: {}", e.what()));
  }
}

// ---- training ----------------------------------------------------------------------------

// Seconds spent in each phase of the steps since the last log line.
struct PhaseTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, total = 0;
  int steps = 0;
};

// The command that continues this run, for the interrupt note.
std::string resume_command(const TrainOptions& o, int N) {
  std::string command = fmt::format("mpiexec -n {} {} --resume", N, o.program);
  if (o.explicit_flags.count("--out-dir")) command += " --out-dir " + o.out_dir;
  if (o.explicit_flags.count("--data-dir")) command += " --data-dir " + o.data_dir;
  if (!o.text.empty()) command += " --text " + o.text;
  return command;
}

void train(const TrainOptions& options, comm::Communicator& world) {
  TrainOptions o = options;  // --resume fills in the checkpoint's settings
  const int rank = world.rank(), N = world.size();
  const fs::path checkpoint_dir = fs::path(o.out_dir) / "checkpoint";
  if (o.resume && !fs::exists(checkpoint_dir) && !fs::exists(checkpoint_dir.string() + ".prev"))
    throw comm::UsageError(fmt::format("--resume: there is no checkpoint in {}", checkpoint_dir.string()));
  if (o.crash_at_step >= 0 && o.crash_rank >= N)
    throw comm::UsageError(fmt::format("--crash-rank {} does not exist: the job has ranks 0 to {}", o.crash_rank, N - 1));
  on_rank0_then_agree(world, [&] {
    check_writable(o.out_dir, "--out-dir");
    check_writable(fs::path(o.metrics).has_parent_path() ? fs::path(o.metrics).parent_path() : fs::path("."), "--metrics");
  });
  const fs::path load_from = o.resume ? checkpoint_dir : fs::path(o.init_from);
  Start start = read_start(o, load_from, world);
  std::vector<std::string> changed;
  if (o.resume) changed = trainers::continue_saved_run(start.train_state.value("options", nlohmann::json::object()), o);
  if (o.schedule.decay && o.max_iters > 0 && o.max_iters <= o.schedule.warmup_iters)
    comm::say("warning: --max-iters {} ≤ --warmup-iters {}: the learning rate never leaves its warm-up", o.max_iters,
              o.schedule.warmup_iters);
  const Splits data = load_data(o, world);
  if (!load_from.empty()) check_vocabulary(start.train_state, data.vocabulary, data.dir);
  start.config.vocab_size = data.vocabulary.size();
  check_fits(data, start.config.block_size);
  check_prompt(o.prompt, data.vocabulary);
  const nn::GPTConfig& config = start.config;
  const int T = config.block_size, B = o.batch_size, K = o.grad_accum;
  check_memory(config, B, /*training=*/true, world);

  // 1. The same start. Every rank builds a model, each from a different seed — so without
  //    the broadcast the replicas would differ — and rank 0's parameters are copied to all.
  nn::GPT model(config, stream_seed(o.seed, Stream::init, static_cast<uint64_t>(rank)));
  nn::AdamW optimizer(model.parameters(), o.adamw);
  int64_t first_step = 0;
  if (!load_from.empty()) {
    on_rank0_then_agree(world, [&] { nn::load_checkpoint(load_from, model, o.resume ? &optimizer : nullptr); });
    if (o.resume) first_step = start.train_state.at("step").get<int64_t>();
  }
  broadcast_state(model, &optimizer, world);
  if (comm::runtime().options().check) verify_identical(model, world);

  trainers::BatchSampler sampler(data.train, T, B, K, o.sampling == "partition" ? trainers::Sampling::partition
                                                                                 : trainers::Sampling::random,
                                 o.seed, rank, N);
  auto averager = trainers::make_gradient_averager(o.ddp, model, world, static_cast<std::size_t>(o.bucket_mb * 1e6));
  std::optional<trainers::MetricsFile> metrics;
  if (rank == 0) metrics.emplace(o.metrics, o.resume ? std::optional<int64_t>(first_step) : std::nullopt);

  const int64_t tokens_per_step = static_cast<int64_t>(N) * B * K * T;
  comm::say("train_dp: {} ranks × {} compute thread(s), GEMM {}, backend {}, {}", N, nn::compute_threads(),
            nn::gemm_library(), world.backend_name(), averager->describe());
  comm::say("model: {} layers, {} heads, {} wide, block {}, vocab {}: {:.2f}M parameters", config.n_layer,
            config.n_head, config.n_embd, T, config.vocab_size, static_cast<double>(model.num_params()) / 1e6);
  comm::say("data: {} train / {} val tokens in {}, {}; {} sampling", data.train.size(), data.val.size(),
            data.dir.string(), data.origin, o.sampling);
  comm::say("global batch: {} ranks × micro-batch {} × {} accumulation step(s) × block {} = {} tokens per step", N, B,
            K, T, tokens_per_step);
  if (o.resume) {
    comm::say("resuming from {} at step {} of {}, with the checkpoint's settings", checkpoint_dir.string(), first_step,
              o.max_iters);
    if (!changed.empty())
      comm::say("note: flags change the run's settings: {}", fmt::join(changed, ", "));
    const int was_world = start.train_state.value("world_size", N);
    if (was_world != N)
      comm::say("note: the checkpoint was written by {} ranks, this job has {}: training continues, but each step "
                "sees {} instead of {} micro-batches",
                was_world, N, N, was_world);
  }

  int64_t last_saved = o.resume ? first_step : -1;  // the step of the checkpoint on disk, -1: none yet
  auto save = [&](int64_t steps_done, const std::optional<Evaluation>& last_eval) {
    if (rank != 0) return;
    nlohmann::json state = {{"step", steps_done},
                            {"world_size", N},
                            {"vocabulary", data.vocabulary.chars()},
                            {"options", trainers::to_json(o)},
                            // Every random stream is a function of (seed, rank, step): see stream_seed.
                            {"rng", {{"seed", o.seed}, {"micro_steps_done", steps_done * K}, {"ranks", N}}}};
    if (last_eval) state["val_loss"] = last_eval->val_loss;
    nn::save_checkpoint(checkpoint_dir, model, optimizer, state);
    last_saved = steps_done;
  };
  // A diverged run stops here, on every rank alike (the values checked are the same on all),
  // before its nan weights could replace a good checkpoint.
  auto check_finite = [&](int64_t step, const char* what, double value) {
    if (std::isfinite(value)) return;
    throw comm::UsageError(fmt::format(
        "training diverged at step {}: the {} is {}; stopped without saving ({}) — lower --learning-rate, or clip "
        "with --grad-clip",
        step, what, std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf",
        last_saved >= 0 ? fmt::format("the checkpoint of step {} in {} is kept", last_saved, checkpoint_dir.string())
                        : std::string("no checkpoint was written")));
  };
  auto record_eval = [&](int64_t step, const Evaluation& e, double elapsed) {
    comm::say("step {}: train loss {:.4f}, val loss {:.4f}", step, e.train_loss, e.val_loss);
    if (metrics)
      metrics->write({{"kind", "eval"}, {"step", step}, {"train_loss", e.train_loss}, {"val_loss", e.val_loss},
                      {"elapsed_s", elapsed}});
  };

  const nn::LrSchedule schedule = trainers::lr_schedule(o);
  // What rank 0 says if the job is interrupted (Ctrl-C): where the last checkpoint is.
  auto update_interrupt_note = [&](int64_t step) {
    if (rank != 0) return;
    const std::string saved =
        last_saved >= 0 ? fmt::format("the last checkpoint (step {}) is in {}; resume with: {}", last_saved,
                                      checkpoint_dir.string(), resume_command(o, N))
                        : std::string("no checkpoint was written yet");
    comm::set_interrupt_note(fmt::format("interrupted at step {}; {}", step, saved));
  };
  update_interrupt_note(first_step);
  trainers::Batch batch;
  PhaseTimes window;
  std::optional<Evaluation> last_eval;
  const auto run_start = Clock::now();
  double eval_seconds = 0;  // kept out of the ETA and the throughput
  for (int64_t step = first_step; step < o.max_iters; ++step) {
    if (step == o.crash_at_step && rank == o.crash_rank) std::raise(SIGKILL);  // as `kill -9` would
    if (o.eval_interval > 0 && step > first_step && step % o.eval_interval == 0) {
      const auto t0 = Clock::now();
      last_eval = evaluate(model, data, o, step, world);
      check_finite(step, "val loss", last_eval->val_loss);
      record_eval(step, *last_eval, seconds_since(run_start));
      print_sample(model, data.vocabulary, o, step, world);
      eval_seconds += seconds_since(t0);
    }
    const float lr = schedule.at(static_cast<int>(step));
    const auto step_start = Clock::now();
    float step_loss = 0.0f;
    for (int micro = 0; micro < K; ++micro) {
      // 2. Unique data: this rank's micro-batch.
      auto t = Clock::now();
      sampler.fill(step, micro, batch);
      model.dropout_rng() = nn::Rng(stream_seed(o.seed, Stream::dropout, static_cast<uint64_t>(rank),
                                                static_cast<uint64_t>(step * K + micro)));
      window.data += seconds_since(t);

      t = Clock::now();
      nn::Tensor loss = model.loss(batch.ids, batch.targets, B, T);
      step_loss += loss.item() / static_cast<float>(K);
      if (K > 1) loss = nn::scale(loss, 1.0f / static_cast<float>(K));  // the step's gradient is the mean over micro-steps
      window.forward += seconds_since(t);

      // 3a. Backward; on the last micro-step the bucketed averager starts allreduces from inside it.
      t = Clock::now();
      averager->before_backward(micro == K - 1);
      nn::autograd::backward(loss);
      window.backward += seconds_since(t);
    }
    // 3b. Every gradient averaged over the ranks (the part of communication not hidden by overlap).
    auto t = Clock::now();
    averager->finish();
    window.comm += seconds_since(t);

    // 4. The same update everywhere.
    t = Clock::now();
    const float norm = o.grad_clip > 0 ? nn::clip_grad_norm(model.parameters(), o.grad_clip) : nn::grad_norm(model.parameters());
    check_finite(step + 1, "gradient norm", norm);  // the same on every rank: computed from averaged gradients
    optimizer.step(lr);
    optimizer.zero_grad();
    window.optimizer += seconds_since(t);
    window.total += seconds_since(step_start);
    ++window.steps;

    const int64_t done = step + 1;
    if (done % o.log_interval == 0 || done == o.max_iters) {
      std::array<float, 1> loss_avg{step_loss};
      world.allreduce(std::span<float>(loss_avg), comm::ReduceOp::avg);  // the logged loss: mean over ranks
      check_finite(done, "loss", loss_avg[0]);
      const double per_step = window.total / window.steps, tokens_per_s = static_cast<double>(tokens_per_step) / per_step;
      const double flops = model.flops_per_token(T) * tokens_per_s;
      const double ms = 1e3 / window.steps;
      const double progress = static_cast<double>(done - first_step) / static_cast<double>(o.max_iters - first_step);
      const double elapsed = seconds_since(run_start) - eval_seconds;
      comm::say("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.1f} ms (data {:.1f} fwd {:.1f} bwd {:.1f} "
                "comm {:.1f} opt {:.1f}) | {:.0f} tok/s ({:.0f}/rank) | {:.1f} GFLOP/s | {:3.0f}% eta {}",
                done, std::to_string(o.max_iters).size(), o.max_iters, loss_avg[0], lr, norm, per_step * 1e3,
                window.data * ms, window.forward * ms, window.backward * ms, window.comm * ms, window.optimizer * ms,
                tokens_per_s, tokens_per_s / N, flops / 1e9, 100.0 * progress,
                trainers::format_duration(elapsed / progress * (1.0 - progress)));
      if (metrics)
        metrics->write({{"kind", "train"},
                        {"step", done},
                        {"loss", loss_avg[0]},
                        {"lr", lr},
                        {"grad_norm", norm},
                        {"step_ms", per_step * 1e3},
                        {"data_ms", window.data * ms},
                        {"forward_ms", window.forward * ms},
                        {"backward_ms", window.backward * ms},
                        {"comm_ms", window.comm * ms},
                        {"optimizer_ms", window.optimizer * ms},
                        {"tokens_per_s", tokens_per_s},
                        {"tokens_per_s_per_rank", tokens_per_s / N},
                        {"model_flops_per_s", flops},
                        {"elapsed_s", seconds_since(run_start)}});
      window = PhaseTimes{};
    }
    if (o.ckpt_interval > 0 && done % o.ckpt_interval == 0 && done != o.max_iters) save(done, last_eval);
    update_interrupt_note(done);
  }

  // The end: evaluate, the exact val loss, a checkpoint, a sample.
  const int64_t end = std::max<int64_t>(o.max_iters, first_step);
  last_eval = evaluate(model, data, o, end, world);
  check_finite(end, "val loss", last_eval->val_loss);
  record_eval(end, *last_eval, seconds_since(run_start));
  save(end, last_eval);
  if (o.final_full_val) {
    const double full = trainers::full_split_loss(model, data.val, world);
    if (metrics) metrics->write({{"kind", "final"}, {"step", end}, {"val_loss_full", full}, {"elapsed_s", seconds_since(run_start)}});
    comm::say("val_loss_full={:.6f}", full);
  }
  comm::say("trained {} steps in {:.1f} s; checkpoint in {}, metrics in {}", end - first_step, seconds_since(run_start),
            checkpoint_dir.string(), o.metrics);
  print_sample(model, data.vocabulary, o, end, world);
}

}  // namespace

int main(int argc, char** argv) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{"train_dp: data-parallel GPT training on tiny Shakespeare (mpiexec -n N train_dp)"};
    comm::Options comm_options;
    comm::add_options(app, comm_options);
    TrainOptions options;
    trainers::add_train_options(app, options);
    comm::parse(app, argc, argv);
    trainers::finish_train_options(app, options);
    options.program = argv[0];
    comm::Communicator& world = runtime.start(comm_options);
    nn::set_compute_threads(options.threads > 0 ? options.threads : nn::default_compute_threads(runtime.local_size()));
    if (options.threads * runtime.local_size() > nn::machine_cores())
      comm::say("warning: --threads {} × {} rank(s) on this node = {} threads on {} cores: they will take turns, "
                "and every step will be slower (0 picks cores / ranks)",
                options.threads, runtime.local_size(), options.threads * runtime.local_size(), nn::machine_cores());
    if (options.eval_only) eval_only(options, world);
    else if (options.sample_only) sample_only(options, world);
    else train(options, world);
  });
}
