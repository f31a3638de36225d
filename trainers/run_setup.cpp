// What every trainer does before step 0 (see run_setup.hpp).
#include "trainers/run_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <array>
#include <vector>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/runtime.hpp"
#include "nn/atomic_file.hpp"
#include "nn/checkpoint.hpp"
#include "nn/error.hpp"
#include "nn/autocast.hpp"
#include "nn/compute_modes.hpp"
#include "nn/gemm.hpp"
#include "nn/ops.hpp"
#include "nn/threads.hpp"
#include "nn/memory_estimate.hpp"
#include "numeric/hash.hpp"
#include "parallel/dp/zero_optimizer.hpp"

namespace trainers {
namespace fs = std::filesystem;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

nn::ComputeModes compute_modes(const TrainOptions& o) {
  return nn::resolve_modes(o.precision, o.attention, o.recompute, o.fusion);
}

void say_compute(const comm::Communicator& world, const nn::ComputeModes& modes) {
  const nn::Precision precision = modes.precision;
  comm::say("compute: {} ranks × {} thread(s), {} matrix multiplies on {}, {} attention, {} elementwise kernels, "
            "backend {}",
            world.size(), nn::compute_threads(), nn::name_of(precision), nn::gemm_library(precision),
            nn::name_of(modes.attention), nn::name_of(modes.fusion), world.backend_name());
}

comm::Communicator& start_trainer(comm::Runtime& runtime, const comm::Options& comm_options,
                                  const TrainOptions& options) {
  comm::Communicator& world = runtime.start(comm_options);
  try {
    // The engine is chosen here, once: a bad NANODIST_GEMM is one line on every rank.
    nn::use_gemm_engine(nn::parse_gemm_engine(std::getenv("NANODIST_GEMM")));
  } catch (const nn::Error& e) {
    throw comm::UsageError(e.what());
  }
  nn::set_compute_threads(options.threads > 0 ? options.threads : nn::default_compute_threads(runtime.local_size()));
  return world;
}

// Refuses, on every rank alike, a configuration whose estimated memory (nn::estimate_memory)
// times the ranks on a node exceeds what the node has — one line instead of std::bad_alloc
// or the kernel's OOM killer after minutes.
void check_memory(const nn::GPTConfig& config, int batch_size, bool training, comm::Communicator& world,
                  int zero_stage, nn::ContextShape context) {
  nn::MemoryEstimate need = nn::estimate_memory(config, batch_size, training, context);
  if (zero_stage > 0) {  // what a rank keeps, by the ZeRO formula
    const double P = nn::parameter_count(config), N = world.size();
    need.parameter_bytes = zero_stage == 3 ? 4 * P / N : 4 * P;
    need.state_bytes = parallel::zero_formula_bytes(zero_stage, P, world.size()) - need.parameter_bytes;
  }
  const int ranks_here = comm::runtime().local_size();
  std::array<double, 1> budget{comm::available_memory_bytes() / ranks_here};  // this rank's share of its node
  world.allreduce(std::span<double>(budget), comm::ReduceOp::min);
  if (budget[0] > 0 && need.total() > budget[0])
    throw comm::UsageError(
        fmt::format("this configuration needs about {} per rank, but a rank's share of the "
                    "available memory is {} ({} rank(s) on a node): make the model, "
                    "--batch-size or --block-size smaller",
                    need.describe(), nn::format_bytes(budget[0]), ranks_here));
}

Start read_start(const TrainOptions& o, const fs::path& checkpoint, comm::Communicator& world) {
  Start start{o.model, nlohmann::json()};
  if (checkpoint.empty()) return start;
  std::string shared;
  on_rank0_then_agree(world, [&] {
    nn::CheckpointInfo info = nn::read_checkpoint_info(checkpoint);
    // A checkpoint saves both counters after the same step: one that disagrees was edited or
    // mixed from two runs, and resuming it would schedule the learning rate from the wrong step.
    if (o.resume && info.train_state.is_object() && info.train_state.contains("step") &&
        info.train_state.at("step").is_number_integer() && info.train_state.at("step").get<int64_t>() >= 0 &&
        info.train_state.at("step") != info.optimizer_steps)
      throw comm::UsageError(fmt::format("{}: train_state.step {} and optimizer.steps {} disagree (a checkpoint saves "
                                         "both after the same step)",
                                         (checkpoint / "state.json").string(), info.train_state.at("step").dump(),
                                         info.optimizer_steps));
    shared = nlohmann::json{{"config", info.config.to_json()}, {"train_state", info.train_state}}.dump();
  });
  broadcast_text(world, shared);
  const auto j = nlohmann::json::parse(shared);
  start.config = nn::GPTConfig::from_json(j.at("config"));
  start.train_state = j.at("train_state");
  trainers::check_config_against_flags(start.config, o);
  return start;
}

void say_sample(int64_t step, const std::string& text, comm::Communicator& world) {
  if (world.rank() == 0) comm::say("---- sample at step {} ----\n{}\n----", step, text);
}

// The step a checkpoint was written after: a whole number a run can reach (--max-iters's range).
void check_saved_step(const nlohmann::json& train_state, const std::string& state_file) {
  const nlohmann::json step =
      train_state.is_object() && train_state.contains("step") ? train_state.at("step") : nlohmann::json();
  if (!step.is_number_integer() || step.get<int64_t>() < 0 || step.get<int64_t>() > std::numeric_limits<int>::max())
    throw comm::UsageError(fmt::format("{}: step must be a whole number from 0 to {}, got {}", state_file,
                                       std::numeric_limits<int>::max(), step.dump()));
}

RunStart begin_run(TrainOptions& o, comm::Communicator& world) {
  RunStart run;
  const int N = world.size();
  run.checkpoint_dir = fs::path(o.out_dir) / "checkpoint";
  if (o.resume && !fs::exists(run.checkpoint_dir) && !fs::exists(run.checkpoint_dir.string() + ".prev"))
    throw comm::UsageError(fmt::format("--resume: there is no checkpoint in {}", run.checkpoint_dir.string()));
  if (o.explicit_flags.count("--crash-rank") && o.crash_rank >= N)  // (with --crash-at-step or a skip-at-step)
    throw comm::UsageError(
        fmt::format("--crash-rank {} does not exist: the job has ranks 0 to {}", o.crash_rank, N - 1));
  on_rank0_then_agree(world, [&] {
    check_writable(o.out_dir, "--out-dir");
    char host[256] = "";
    ::gethostname(host, sizeof host - 1);
    run.out_dir_lock = std::make_shared<OutDirLock>(
        o.out_dir, fmt::format("{}, pid {} on {}", fs::path(o.program).filename().string(), ::getpid(), host));
    // A checkpoint being written when the last run in this folder was interrupted, never
    // swapped in: nothing to keep while a complete checkpoint/ stands (without one, the
    // interrupt came inside nn::save_checkpoint's swap and the .tmp may be the newest: kept).
    // This run holds the folder now.
    std::error_code ignored;
    if (fs::exists(run.checkpoint_dir / "state.json")) fs::remove_all(fs::path(o.out_dir) / "checkpoint.tmp", ignored);
    check_output_file(o.metrics, "--metrics");
    if (!o.trace.empty()) check_output_file(o.trace, "--trace");
  });
  run.load_from = o.resume ? run.checkpoint_dir : fs::path(o.init_from);
  run.start = read_start(o, run.load_from, world);
  if (o.resume) {
    const std::string state_file = (run.checkpoint_dir / "state.json").string();
    check_saved_step(run.start.train_state, state_file);
    // The layout comes back only to the program that wrote it, on as many ranks: elsewhere a
    // layout must change anyway, and the command line gives it.
    const nlohmann::json& saved = run.start.train_state;
    const nlohmann::json writer = saved.contains("program") ? saved.at("program") : nlohmann::json();
    const nlohmann::json ranks = saved.contains("world_size") ? saved.at("world_size") : nlohmann::json();
    const bool same_job = writer == fs::path(o.program).filename().string() && ranks == world.size();
    if (saved.contains("options") && !saved.at("options").is_object())
      throw comm::UsageError(fmt::format("{}: train_state.options must be an object of settings, got {}", state_file,
                                         saved.at("options").dump()));
    run.changed = continue_saved_run(saved.value("options", nlohmann::json::object()), o, state_file,
                                     same_job ? &run.restored_layout : nullptr);
    if (!same_job && !o.layout_flags.empty() && writer.is_string())
      run.layout_note = fmt::format("the layout comes from this command line: the checkpoint's was for {} on {} ranks",
                                    writer.get<std::string>(), ranks.dump());
  }
  run.options = o;  // the run's settings are final from here (--resume may have set --precision)
  run.data = load_data(o, world);
  if (!run.load_from.empty()) check_vocabulary(run.start.train_state, run.data.vocabulary, run.data.dir);
  run.start.config.vocab_size = run.data.vocabulary.size();
  check_fits(run.data, run.start.config.block_size);
  check_prompt(o.prompt, run.data.vocabulary);
  return run;
}

void check_layout(const RunStart& run, const std::function<void()>& check) {
  try {
    check();
  } catch (const comm::UsageError& e) {
    if (!run.restored_layout.empty())
      throw comm::UsageError(fmt::format("{} (from the checkpoint: {}; a flag typed again changes it)", e.what(),
                                         fmt::join(run.restored_layout, " ")));
    if (!run.layout_note.empty()) throw comm::UsageError(fmt::format("{}; {}", e.what(), run.layout_note));
    throw;
  }
}

void say_run_notes(const RunStart& run, int world_size, const StepBatch& now) {
  const TrainOptions& o = run.options;
  const int local_ranks = comm::runtime().local_size();
  if (o.threads * local_ranks > nn::machine_cores())
    comm::say(
        "warning: --threads {} × {} rank(s) on this node = {} threads on {} cores: they will take turns, "
        "and every step will be slower (0 picks cores / ranks)",
        o.threads, local_ranks, o.threads * local_ranks, nn::machine_cores());
  if (o.schedule.decay && o.max_iters > 0 && o.max_iters <= o.schedule.warmup_iters)
    comm::say("warning: --max-iters {} ≤ --warmup-iters {}: the learning rate never leaves its warm-up", o.max_iters,
              o.schedule.warmup_iters);
  if (!o.init_from.empty()) comm::say("fine-tuning from {}: its weights, a fresh optimizer, from step 0", o.init_from);
  if (!o.resume) return;
  comm::say("resuming from {} at step {} of {}, with the checkpoint's settings", run.checkpoint_dir.string(),
            run.first_step(), run.options.max_iters);
  if (!run.changed.empty()) comm::say("note: flags change the run's settings: {}", fmt::join(run.changed, ", "));
  if (!run.layout_note.empty()) comm::say("note: {}", run.layout_note);
  const nlohmann::json& saved = run.start.train_state;
  auto whole = [&saved](const char* key) { return saved.contains(key) && saved.at(key).is_number_integer(); };
  if (!whole("global_batch") || !whole("replicas")) {  // an older checkpoint: only its rank count is known
    if (whole("world_size") && saved.at("world_size").get<int64_t>() != world_size)
      comm::say("note: the checkpoint was written by {} ranks, this job has {}", saved.at("world_size").dump(),
                world_size);
    return;
  }
  const StepBatch was{saved.at("replicas").get<int>(), saved.at("global_batch").get<int64_t>()};
  auto replicas = [](int n) { return fmt::format("{} data-parallel replica{}", n, n == 1 ? "" : "s"); };
  if (was.sequences != now.sequences)
    comm::say(
        "note: the checkpoint's steps took {} sequences ({}), this job's take {} ({}): training continues "
        "with the new global batch",
        was.sequences, replicas(was.replicas), now.sequences, replicas(now.replicas));
  else if (was.replicas != now.replicas)
    comm::say("note: the checkpoint was trained by {}, this job has {}: the same {} sequences per step",
              replicas(was.replicas), replicas(now.replicas), now.sequences);
}

nlohmann::json train_state(const RunStart& run, int64_t steps_done, int world_size, const StepBatch& batch,
                           const std::optional<float>& val_loss) {
  const TrainOptions& o = run.options;
  nlohmann::json state = {
      {"step", steps_done},
      {"program", fs::path(o.program).filename().string()},
      {"world_size", world_size},
      {"replicas", batch.replicas},
      {"global_batch", batch.sequences},
      {"vocabulary", run.data.vocabulary.chars()},
      {"options", to_json(o)},
      // Every random stream is a function of the seed and the step (nn::stream_seed); the
      // samples and masks of a step are the global batch's, whatever the ranks.
      {"rng", {{"seed", o.seed}, {"micro_steps_done", steps_done * o.grad_accum}}}};
  if (val_loss) state["val_loss"] = *val_loss;
  return state;
}

}  // namespace trainers
