// What every trainer does before step 0 (see run_setup.hpp).
#include "trainers/run_setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <string_view>
#include <vector>
#include <cmath>
#include <cerrno>
#include <cstring>
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

void set_compute_modes(const TrainOptions& o) { nn::set_compute_modes(o.precision, o.attention, o.recompute); }

void say_compute(const comm::Communicator& world) {
  const nn::Precision precision = nn::matmul_precision();
  comm::say("compute: {} ranks × {} thread(s), {} matrix multiplies on {}, {} attention, backend {}", world.size(),
            nn::compute_threads(), nn::name_of(precision), nn::gemm_library(precision),
            nn::name_of(nn::attention_kernel()), world.backend_name());
}

comm::Communicator& start_trainer(comm::Runtime& runtime, const comm::Options& comm_options,
                                  const TrainOptions& options) {
  comm::Communicator& world = runtime.start(comm_options);
  try {
    nn::gemm_library();  // the engine is chosen here: a bad NANODIST_GEMM is one line on every rank
  } catch (const nn::Error& e) {
    throw comm::UsageError(e.what());
  }
  nn::set_compute_threads(options.threads > 0 ? options.threads : nn::default_compute_threads(runtime.local_size()));
  return world;
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
      throw comm::UsageError(
          fmt::format("--block-size {} is longer than the data: the {} split of {} has {} tokens "
                      "(a window needs block_size + 1)",
                      block_size, name, data.dir.string(), split->size()));
}

void check_vocabulary(const nlohmann::json& train_state, const nn::CharVocabulary& data_vocab,
                      const fs::path& data_dir) {
  const nlohmann::json& v = train_state.contains("vocabulary") ? train_state.at("vocabulary") : nlohmann::json("");
  if (!v.is_string()) throw comm::UsageError(fmt::format("the checkpoint's vocabulary is not text: {}", v.dump()));
  const std::string saved = v.get<std::string>();
  if (saved != data_vocab.chars())
    throw comm::UsageError(
        fmt::format("vocabulary mismatch: the checkpoint was trained on {} characters, the data in {} "
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
void check_memory(const nn::GPTConfig& config, int batch_size, bool training, comm::Communicator& world,
                  int zero_stage) {
  nn::MemoryEstimate need = nn::estimate_memory(config, batch_size, training);
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

// Every place the run will write must be writable before step 0, not at the first checkpoint.
void check_writable(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path probe = dir / fmt::format(".write-test-{}", ::getpid());
  std::FILE* file = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (!file)
    throw comm::UsageError(
        fmt::format("{} {}: cannot write there ({})", flag, dir.string(), ec ? ec.message() : std::strerror(errno)));
  std::fclose(file);
  fs::remove(probe, ec);
}

void check_output_file(const fs::path& file, const std::string& flag) {
  if (fs::is_directory(file))
    throw comm::UsageError(fmt::format("{} {}: is a folder, not a file", flag, file.string()));
  check_writable(file.has_parent_path() ? file.parent_path() : fs::path("."), flag);
}

// ---- step 1: the same start on every rank -----------------------------------------------

float mean_over(comm::Communicator& group, float value) {
  std::array<float, 1> mean{value};
  group.allreduce(std::span<float>(mean), comm::ReduceOp::avg);
  return mean[0];
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

namespace {

// An argument as a shell reads it back: as it is when it is plain, else in single quotes.
std::string shell_quoted(const std::string& arg) {
  const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./=:,@%+-").find(c) != std::string_view::npos;
  });
  if (plain) return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string launcher_prefix(const std::string& program) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", static_cast<long>(getppid())), std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  if (args.empty()) return "";
  const std::string launcher = fs::path(args[0]).filename().string();
  if (launcher != "mpiexec" && launcher != "mpirun" && launcher != "orterun") return "";
  // The launcher's own arguments end where the program begins: as typed, or by its name.
  const std::string name = fs::path(program).filename().string();
  for (std::size_t i = 1; i < args.size(); ++i)
    if (args[i] == program || fs::path(args[i]).filename().string() == name) {
      std::string prefix;
      for (std::size_t j = 0; j < i; ++j) prefix += (j ? " " : "") + shell_quoted(args[j]);
      return prefix;
    }
  return "";
}

// The command that continues this run, for the interrupt note: the launcher as the user ran
// it (its flags too: --oversubscribe, --hostfile, -x), else a plain mpiexec.
std::string resume_command(const TrainOptions& o, int N) {
  const std::string launcher = o.launcher.empty() ? fmt::format("mpiexec -n {}", N) : o.launcher;
  std::string command = fmt::format("{} {} --resume", launcher, shell_quoted(o.program));
  if (o.explicit_flags.count("--out-dir")) command += " --out-dir " + shell_quoted(o.out_dir);
  if (o.explicit_flags.count("--data-dir")) command += " --data-dir " + shell_quoted(o.data_dir);
  if (!o.text.empty()) command += " --text " + shell_quoted(o.text);
  for (const std::string& word : relaunch_flags(o)) {
    command += ' ';
    command += shell_quoted(word);
  }
  return command;
}

RunStart begin_run(TrainOptions& o, comm::Communicator& world) {
  RunStart run;
  const int N = world.size();
  run.checkpoint_dir = fs::path(o.out_dir) / "checkpoint";
  if (o.resume && !fs::exists(run.checkpoint_dir) && !fs::exists(run.checkpoint_dir.string() + ".prev"))
    throw comm::UsageError(fmt::format("--resume: there is no checkpoint in {}", run.checkpoint_dir.string()));
  if (o.crash_at_step >= 0 && o.crash_rank >= N)
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
      // Every random stream is a function of the seed and the step: see nn::stream_seed.
      {"rng", {{"seed", o.seed}, {"micro_steps_done", steps_done * o.grad_accum}, {"ranks", world_size}}}};
  if (val_loss) state["val_loss"] = *val_loss;
  return state;
}

}  // namespace trainers
