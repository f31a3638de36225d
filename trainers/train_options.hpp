// train_dp's command line: every flag, its default (the main job's recipe) and its checks.
//
// The recipe: nanoGPT's CPU model for this data made shallower (2 blocks instead of 4), a 5×
// larger learning rate with its warm-up + cosine decay, 800 steps of 2 ranks × 12 × 64
// tokens. On 2 cores it reaches val_loss_full ≈ 1.82 in about 18 s from launch to exit;
// nanoGPT's recipe reaches ≈ 1.90 in 2000 steps and 90 s (docs/data_parallel.md has the
// measurements and the runs behind it).
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "comm/cli_forward.hpp"
#include <nlohmann/json.hpp>

#include "nn/adamw.hpp"
#include "nn/compute_modes.hpp"
#include "nn/gpt.hpp"
#include "nn/lr_schedule.hpp"
#include "parallel/dp/gradient_wire.hpp"
#include "trainers/batches.hpp"
#include "parallel/dp/gradient_averaging.hpp"

namespace trainers {

inline nn::GPTConfig main_job_model() {
  nn::GPTConfig c;  // 2 layers, 4 heads, 128 wide, block 64, no dropout, no biases
  c.n_layer = 2;
  return c;
}

struct TrainOptions {
  // data
  std::string data_dir = "data";  // holds tinyshakespeare/input.txt and shakespeare_char/
  std::string text;               // a text file to train on instead (prepared into data_dir)
  // model (a checkpoint's config wins over these unless they were given explicitly)
  nn::GPTConfig model = main_job_model();
  // batch: each rank runs grad_accum micro-batches of batch_size × block_size tokens per step
  int batch_size = 12;
  int grad_accum = 1;
  // optimisation
  int max_iters = 800;
  nn::LrSchedule schedule = {.learning_rate = 5e-3f, .min_lr = 5e-4f, .warmup_iters = 50, .lr_decay_iters = 0};
  nn::AdamWConfig adamw = {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};  // nanoGPT's
  float grad_clip = 1.0f;                                                                       // 0: no clipping
  uint64_t seed = 1337;
  // data parallelism
  Sampling sampling = Sampling::random;  // random | partition (trainers/batches.hpp)
  parallel::DdpKind ddp = parallel::DdpKind::bucketed;       // naive | bucketed (parallel/dp/gradient_averaging.hpp)
  double bucket_mb = 1.0;
  // fp32 | bf16: the gradients' element type in the allreduce / reduce-scatter (parallel/dp/gradient_wire.hpp)
  parallel::GradientWire grad_comm = parallel::GradientWire::fp32;
  int zero = 0;     // ZeRO stage (train_dp --zero): 0 replicated, 1 optimizer, 2 + gradients, 3 + parameters sharded
  int threads = 0;  // 0: cores / ranks on this node
  // fp32 | bf16: the linear layers' products (nn/autocast.hpp) | auto: bf16 where the CPU has
  // bf16 units (not emulated), else fp32 — the main job's setting (scripts/run_main_job.sh)
  nn::PrecisionSetting precision = nn::PrecisionSetting::fp32;
  // fused | naive: eager PyTorch's op-per-step attention (nn/ops/attention_naive.cpp)
  nn::AttentionKernel attention = nn::AttentionKernel::fused;
  // none | selective (the attention core) | full (each block): activations recomputed in
  // backward instead of kept (nn/recompute.hpp)
  nn::Recompute recompute = nn::Recompute::none;
  // fused | separate: each residual add inside the next layernorm's pass (and, with biases,
  // c_fc's bias inside GELU's), or one op each (gpt_bench's speed ladder; the same bits)
  nn::Fusion fusion = nn::Fusion::fused;
  // evaluation, logging, samples
  int eval_interval = 250;
  int eval_iters = 10;
  int log_interval = 50;
  bool final_full_val = true;  // the exact val loss at the end (val_loss_full=…)
  std::string metrics;         // .csv or .jsonl; default <out_dir>/metrics.csv
  std::string prompt = "\n";
  int sample_tokens = 300;
  float temperature = 0.8f;
  int top_k = 0;
  // checkpoints and modes
  std::string out_dir = "out/train_dp";
  int ckpt_interval = 500;  // 0: only at the end
  bool ckpt_background = true;  // a snapshot at the step, written by a thread while training goes on
  bool resume = false;      // continue from <out_dir>/checkpoint
  std::string init_from;    // a checkpoint directory to load
  bool eval_only = false;
  bool sample_only = false;
  // a Chrome-trace / Perfetto timeline of the first trace_steps steps (empty: none)
  std::string trace;
  int trace_steps = 3;
  // fault injection, for the tests and the lecture: rank crash_rank kills itself (SIGKILL)
  int crash_at_step = -1;
  int crash_rank = 1;
  int crash_in_checkpoint = -1;  // the rank writing the checkpoint of this step dies half-way through

  std::string program = "train_dp";               // argv[0], for the commands the program suggests
  bool check = false;  // comm's check mode (--check): the program's entry reads it once and passes it here
  std::string launcher;                           // "mpiexec --oversubscribe -n 4": how it was launched, or ""
  std::set<std::string> explicit_flags;           // every flag the user typed, e.g. "--max-iters"
  std::vector<std::string> explicit_model_flags;  // model flags the user typed, e.g. "n_layer"
  CLI::App* app = nullptr;                        // the parsed command line: its checks apply to loaded values
  // The program's own flags that shape the run (its layout and schedule: train_pp's "--dp",
  // "--schedule", …), kept with the checkpoint and given back by --resume like the settings
  // above: through the flag itself, so its checks and its variable are the command line's.
  std::vector<std::string> layout_flags;
};

// Longest sample a flag may ask for: a bigger one is a typo, not a request to wait hours.
inline constexpr int kMaxSampleTokens = 100000;

void add_train_options(CLI::App& app, TrainOptions& options);
// After parsing: cross-flag checks; throws comm::UsageError with one line naming the flag.
void finish_train_options(CLI::App& app, TrainOptions& options);

// Fails when a checkpoint's model config contradicts a model flag the user gave explicitly.
void check_config_against_flags(const nn::GPTConfig& checkpoint, const TrainOptions& options);

// The settings that shape the run's trajectory (batch, schedule, optimizer, sampling, seed),
// recorded in checkpoints.
nlohmann::json to_json(const TrainOptions& options);

// --resume: takes every recorded setting the user did not type again from the checkpoint's
// options (so a resumed run continues *that* run); returns the ones a typed flag changed,
// as "max_iters 800 → 1000". Each value passes its flag's checks first, or the run ends with
// one line naming `state_file` and the key. With `restored_layout` the layout flags come back
// too (the same program on the same rank count), listed there as typed ("--dp 2").
std::vector<std::string> continue_saved_run(const nlohmann::json& saved_options, TrainOptions& options,
                                            const std::string& state_file,
                                            std::vector<std::string>* restored_layout = nullptr);

// The flags typed for this run that its checkpoint does not keep (--backend shm,
// --log-interval 200, --timeout 60, …), as words to type again: the interrupt note's resume
// command carries them, so the resumed run is launched as this one was.
std::vector<std::string> relaunch_flags(const TrainOptions& options);

// The learning-rate schedule with its defaults resolved (lr_decay_iters 0 → max_iters).
nn::LrSchedule lr_schedule(const TrainOptions& options);

}  // namespace trainers
