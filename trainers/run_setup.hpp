// What every trainer does before step 0 — the same in train_dp, train_pp and the ones after:
// starting comm and the compute threads, reading the checkpoint to start from, the memory
// check, the run's notes. Its parts of their own: rank_agreement (rank 0 then everyone),
// training_data (the splits and their checks), output_checks, resume_command.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "comm/runtime.hpp"
#include "nn/adamw.hpp"
#include "nn/data.hpp"
#include "nn/gpt.hpp"
#include "nn/memory_estimate.hpp"  // ContextShape
#include "trainers/out_dir_lock.hpp"
#include "trainers/output_checks.hpp"
#include "trainers/rank_agreement.hpp"
#include "trainers/resume_command.hpp"
#include "trainers/train_options.hpp"
#include "trainers/training_data.hpp"

namespace trainers {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start);

// Streams of randomness: nn::stream_seed (nn/rng.hpp), one function for every stream.
using nn::Stream;
using nn::stream_seed;

// After the flags are parsed, what every trainer's main() does first: starts comm (the
// world), the GEMM engine (a bad NANODIST_GEMM is one line on every rank) and the compute
// threads (--threads, or cores / ranks on this node; a warning when they oversubscribe).
comm::Communicator& start_trainer(comm::Runtime& runtime, const comm::Options& comm_options,
                                  const TrainOptions& options);

// Refuses, on every rank alike, a configuration whose estimated memory (nn::estimate_memory)
// times the ranks on a node exceeds what the node has. With ZeRO (zero_stage 1-3) the
// parameters and training state are those of the stage's formula over world's ranks; under
// context parallelism (`context`) the activations those of a rank's positions.
void check_memory(const nn::GPTConfig& config, int batch_size, bool training, comm::Communicator& world,
                  int zero_stage = 0, nn::ContextShape context = {});

// The same start on every replica: parallel/dp/replicas.hpp.

// Loads --init-from / --resume's config and training state on rank 0 (after every rank
// agreed on the flags) and shares it.
struct Start {
  nn::GPTConfig config;
  nlohmann::json train_state;  // empty when starting fresh
};
Start read_start(const TrainOptions& o, const std::filesystem::path& checkpoint, comm::Communicator& world);

// "---- sample at step S ----", on rank 0.
void say_sample(int64_t step, const std::string& text, comm::Communicator& world);

// ---- the start of a training run -----------------------------------------------------------

// What every trainer checks and loads before it builds its model: outputs writable, the
// crash rank in range, the checkpoint to load (with --resume, the checkpoint's settings unless
// a flag overrides them), the data and its checks against the checkpoint and the prompt.
struct RunStart {
  TrainOptions options;                  // the options in force (with --resume: the checkpoint's settings filled in)
  std::filesystem::path checkpoint_dir;  // <out-dir>/checkpoint
  std::filesystem::path load_from;       // --resume: checkpoint_dir; --init-from; or empty
  Start start;                           // start.config.vocab_size is the data's
  Splits data;
  std::vector<std::string> changed;          // settings a flag changed on --resume ("max_iters 800 → 1000")
  std::vector<std::string> restored_layout;  // layout flags given back by --resume, as typed ("--dp 2")
  std::string layout_note;                   // why a resume's layout came from the command line instead
  std::shared_ptr<OutDirLock> out_dir_lock;  // on rank 0: this run's hold on --out-dir, to its end
  int64_t first_step() const { return options.resume ? start.train_state.at("step").get<int64_t>() : 0; }
};
// On --resume it first completes `options` with the checkpoint's settings, and the layout
// flags' variables with its layout (TrainOptions::layout_flags); run.options is the result.
RunStart begin_run(TrainOptions& options, comm::Communicator& world);

// The compute modes the options ask for (--precision with auto resolved, --attention,
// --recompute, --fusion: nn/compute_modes.hpp), for the model this rank builds — from the
// options in force: training's after begin_run (--resume may set --precision), --eval-only's
// and --sample-only's from the flags. say_compute prints the "compute:" line.
nn::ComputeModes compute_modes(const TrainOptions& options);
void say_compute(const comm::Communicator& world, const nn::ComputeModes& modes);

// What one optimizer step consumes: the data-parallel width (replicas, each seeing its own
// data) and the sequences all of them take together (the global batch).
struct StepBatch {
  int replicas = 1;
  int64_t sequences = 1;
};

// Runs a check of the layout (the grid, the replicas) after begin_run: on --resume its error
// also says where the layout came from — the flags the checkpoint gave back, or why not.
void check_layout(const RunStart& run, const std::function<void()>& check);

// The notes before step 0, once every check has passed (a refused run prints only its error):
// a warm-up longer than the run, "fine-tuning from …" (--init-from), and on --resume "resuming
// from … at step S of M, with the checkpoint's settings" with what differs: flags that change
// settings, a step that takes another number of sequences or replicas.
void say_run_notes(const RunStart& run, int world_size, const StepBatch& now);

nlohmann::json train_state(const RunStart& run, int64_t steps_done, int world_size, const StepBatch& batch,
                           const std::optional<float>& val_loss);

}  // namespace trainers
