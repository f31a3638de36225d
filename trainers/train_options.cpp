#include "trainers/train_options.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/cli_checks.hpp"
#include "comm/runtime.hpp"
#include "nn/error.hpp"

namespace trainers {
namespace {

// The model flags, each with the GPTConfig field it sets.
struct ModelFlag {
  const char* flag;
  const char* field;
};
constexpr ModelFlag kModelFlags[] = {{"--n-layer", "n_layer"},
                                     {"--n-head", "n_head"},
                                     {"--n-embd", "n_embd"},
                                     {"--block-size", "block_size"},
                                     {"--dropout", "dropout"},
                                     {"--bias", "bias"},
                                     {"--n-experts", "n_experts"},
                                     {"--experts-per-token", "experts_per_token"},
                                     {"--capacity-factor", "capacity_factor"},
                                     {"--moe-every", "moe_every"},
                                     {"--aux-loss-weight", "aux_loss_weight"}};

template <class... Args>
[[noreturn]] void usage(fmt::format_string<Args...> format, Args&&... args) {
  throw comm::UsageError(fmt::format(format, std::forward<Args>(args)...));
}

using comm::cli::add_choice, comm::cli::positive_real, comm::cli::real, comm::cli::whole;

// Flags of the data and the model.
void add_data_and_model_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--data-dir", o.data_dir, "data folder (tinyshakespeare/input.txt, shakespeare_char/)")
      ->capture_default_str();
  app.add_option("--text", o.text, "train on this text file instead (prepared into its own folder in --data-dir)");
  app.add_option("--n-layer", o.model.n_layer, "transformer blocks")->check(whole(1))->capture_default_str();
  app.add_option("--n-head", o.model.n_head, "attention heads")->check(whole(1))->capture_default_str();
  app.add_option("--n-embd", o.model.n_embd, "embedding width")->check(whole(1))->capture_default_str();
  app.add_option("--block-size", o.model.block_size, "context length T")->check(whole(1))->capture_default_str();
  app.add_option("--dropout", o.model.dropout, "dropout rate")->check(real(0.0, nn::kMaxDropout))->capture_default_str();
  app.add_option("--bias", o.model.bias, "biases in Linear and LayerNorm")->capture_default_str();
  // A mixture of experts (nn/moe_mlp.hpp, docs/expert_parallel.md). --top-k is sampling's.
  app.add_option("--n-experts", o.model.n_experts, "a mixture of E experts in place of the MLP (0: dense)")
      ->check(whole(0))
      ->capture_default_str();
  app.add_option("--experts-per-token", o.model.experts_per_token, "k: the experts each token goes to")
      ->check(whole(1))
      ->capture_default_str();
  app.add_option("--capacity-factor", o.model.capacity_factor,
                 "f: an expert takes at most ceil(f·k·T/E) tokens of a sequence; the rest are dropped")
      ->check(positive_real())
      ->capture_default_str();
  app.add_option("--moe-every", o.model.moe_every, "a mixture in every n-th block (blocks n-1, 2n-1, …)")
      ->check(whole(1))
      ->capture_default_str();
  app.add_option("--aux-loss-weight", o.model.aux_loss_weight, "weight of the load-balancing loss")
      ->check(real(0.0))
      ->capture_default_str();
}

// Flags of the batch, the learning rate, AdamW, gradient averaging.
void add_optimization_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--batch-size", o.batch_size, "micro-batch B per rank")->check(whole(1))->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "micro-steps K per optimizer step")
      ->check(whole(1))
      ->capture_default_str();
  app.add_option("--max-iters", o.max_iters, "optimizer steps")->check(whole(0))->capture_default_str();
  app.add_option("--learning-rate", o.schedule.learning_rate, "peak learning rate")
      ->check(positive_real())
      ->capture_default_str();
  app.add_option("--min-lr", o.schedule.min_lr, "learning rate after the cosine decay")
      ->check(real(0.0))
      ->capture_default_str();
  app.add_option("--warmup-iters", o.schedule.warmup_iters, "linear warm-up steps")
      ->check(whole(0))
      ->capture_default_str();
  app.add_option("--lr-decay-iters", o.schedule.lr_decay_iters, "end of the cosine decay (0: max-iters)")
      ->check(whole(0));
  app.add_flag("--decay-lr,!--no-decay-lr", o.schedule.decay, "cosine decay (default), or a constant learning rate");
  app.add_option("--weight-decay", o.adamw.weight_decay, "AdamW weight decay (≥ 2-D tensors)")
      ->check(real(0.0))
      ->capture_default_str();
  app.add_option("--beta1", o.adamw.beta1, "AdamW β1")->check(real(0.0, 0.9999))->capture_default_str();
  app.add_option("--beta2", o.adamw.beta2, "AdamW β2")->check(real(0.0, 0.9999))->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the global gradient norm (0: off)")
      ->check(real(0.0))
      ->capture_default_str();
}

// Flags of the seed, data order, gradient averaging and threads.
void add_run_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--seed", o.seed, "seed of initialisation, data order, dropout, samples")
      ->check(whole(0, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  add_choice(app, "--sampling", o.sampling, kSamplingNames,
             "the step's global batch: random windows per sample (seed, step, sample), or a shuffled partition");
  add_choice(app, "--ddp", o.ddp, parallel::kDdpKindNames, "gradient averaging: naive or bucketed (overlapped)");
  app.add_option("--bucket-mb", o.bucket_mb, "bucket size for --ddp bucketed, MB")
      ->check(positive_real(1e6))
      ->capture_default_str();
  add_choice(app, "--grad-comm", o.grad_comm, parallel::kGradientWireNames,
             "gradients on the wire: fp32, or bf16 (half the bytes; averaged back into fp32 gradients)");
  add_choice(app, "--precision", o.precision, nn::kPrecisionSettingNames,
             "matrix multiplies: fp32, bf16 (linear layers on bf16 inputs, fp32 sums; weights, AdamW fp32), "
             "or auto (bf16 where the CPU has bf16 units)");
  add_choice(app, "--attention", o.attention, nn::kAttentionKernelNames,
             "fused (one kernel per head) or naive (eager PyTorch's separate ops: the reference, slower)");
  add_choice(app, "--recompute", o.recompute, nn::kRecomputeNames,
             "activations recomputed in backward instead of kept: none, selective (the attention core), "
             "full (all but each block's input)");
  add_choice(app, "--fusion", o.fusion, nn::kFusionNames,
             "fused (each residual add inside the next layernorm's pass; with --bias, c_fc's bias inside GELU's) "
             "or separate (one op each; the same bits, slower)");
  app.add_option("--threads", o.threads, "compute threads per rank (0: cores / ranks on this node)")
      ->check(whole(0, 1024));
}

// Flags of evaluation, logs and samples.
void add_eval_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--eval-interval", o.eval_interval, "evaluate every this many steps (0: only at the end)")
      ->check(whole(0))
      ->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "batches per split per rank in an evaluation")
      ->check(whole(1))
      ->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "a log line every this many steps")
      ->check(whole(1))
      ->capture_default_str();
  app.add_flag("!--no-full-val", o.final_full_val, "skip the exact val loss at the end");
  app.add_option("--metrics", o.metrics, "metrics file, .csv or .jsonl (default <out-dir>/metrics.csv)");
  app.add_option("--prompt", o.prompt, "text the samples start from");
  app.add_option("--sample-tokens", o.sample_tokens, "characters per sample")
      ->check(whole(0, kMaxSampleTokens))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->check(real(1e-3, 100.0))
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k likeliest (0: all)")->check(whole(0))->capture_default_str();
}

// Flags of checkpoints, resuming, the modes, traces and fault injection.
void add_output_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--out-dir", o.out_dir, "checkpoint and metrics folder")->capture_default_str();
  app.add_option("--ckpt-interval", o.ckpt_interval, "checkpoint every this many steps (0: only at the end)")
      ->check(whole(0))
      ->capture_default_str();
  app.add_option("--ckpt-background", o.ckpt_background,
                 "1: a checkpoint is a snapshot in memory, written to disk by a thread while training goes on; "
                 "0: written before the next step (default 1)")
      ->check(whole(0, 1));
  app.add_flag("--resume", o.resume,
               "continue the run in <out-dir>/checkpoint (its settings, unless flags override them)");
  app.add_option(
      "--init-from", o.init_from,
      "start from this checkpoint directory's weights (fine-tuning), or read it with --eval-only / --sample-only");
  app.add_flag("--eval-only", o.eval_only, "print the exact val loss of --init-from and stop");
  app.add_flag("--sample-only", o.sample_only, "print a sample from --init-from and stop");
  app.add_option("--trace", o.trace,
                 "write a timeline of the first --trace-steps steps (Chrome trace JSON; "
                 "scripts/plot_trace.py draws it)");
  app.add_option("--trace-steps", o.trace_steps, "steps in the --trace timeline")
      ->check(whole(1, 1000))
      ->capture_default_str();
  app.add_option("--crash-at-step", o.crash_at_step, "testing: rank --crash-rank kills itself at this step")
      ->check(whole(0));
  app.add_option("--crash-rank", o.crash_rank, "testing: which rank --crash-at-step kills")->check(whole(0));
  app.add_option("--crash-in-checkpoint", o.crash_in_checkpoint,
                 "testing: the rank writing the checkpoint of this step kills itself half-way through the write")
      ->check(whole(1));
}

}  // namespace

void add_train_options(CLI::App& app, TrainOptions& o) {
  app.option_defaults()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides an earlier one
  add_data_and_model_flags(app, o);
  add_optimization_flags(app, o);
  add_run_flags(app, o);
  add_eval_flags(app, o);
  add_output_flags(app, o);
}

void finish_train_options(CLI::App& app, TrainOptions& o) {
  o.app = &app;
  for (const CLI::Option* option : app.get_options())
    if (option->count() > 0 && !option->get_lnames().empty()) o.explicit_flags.insert("--" + option->get_lnames()[0]);
  for (const ModelFlag& f : kModelFlags)
    if (o.explicit_flags.count(f.flag) > 0) o.explicit_model_flags.push_back(f.field);
  // --crash-rank only says which rank a fault hits: alone it would do nothing, silently.
  if (o.explicit_flags.count("--crash-rank") && !o.explicit_flags.count("--crash-at-step") &&
      !o.explicit_flags.count("--skip-send-at-step") && !o.explicit_flags.count("--skip-ring-at-step") &&
      !o.explicit_flags.count("--skip-dispatch-at-step"))
    usage("--crash-rank {} does nothing without --crash-at-step (or train_pp's --skip-send-at-step, train_3d's "
          "--skip-ring-at-step or --skip-dispatch-at-step), which says when",
          o.crash_rank);
  // A mixture's settings without a mixture would do nothing, silently (a resume or --init-from
  // takes the mixture from its checkpoint: there they are compared with it instead).
  if (o.model.n_experts == 0 && !o.resume && o.init_from.empty())
    for (const char* flag : {"--experts-per-token", "--capacity-factor", "--moe-every", "--aux-loss-weight"})
      if (o.explicit_flags.count(flag)) usage("{} sets a mixture of experts: it needs --n-experts E", flag);
  try {
    o.model.validate();
  } catch (const nn::Error& e) {
    usage("{}", e.what());
  }
  if (o.schedule.min_lr > o.schedule.learning_rate)
    usage("--min-lr {} is above --learning-rate {}", o.schedule.min_lr, o.schedule.learning_rate);
  if (o.eval_only && o.sample_only) usage("--eval-only and --sample-only exclude each other");
  if ((o.eval_only || o.sample_only) && o.init_from.empty())
    usage("--{} needs --init-from CHECKPOINT_DIR", o.eval_only ? "eval-only" : "sample-only");
  if (o.resume && !o.init_from.empty()) usage("--resume continues <out-dir>/checkpoint; it excludes --init-from");
  if (o.prompt.empty()) usage("--prompt is empty: samples need at least one character to start from");
  if (o.metrics.empty()) o.metrics = o.out_dir + "/metrics.csv";
  if (const auto ext = std::filesystem::path(o.metrics).extension(); ext != ".csv" && ext != ".jsonl")
    usage("--metrics {}: the file name must end in .csv or .jsonl", o.metrics);
}

void check_config_against_flags(const nn::GPTConfig& saved, const TrainOptions& o) {
  // Every field, the mixture's too (a dense config's JSON leaves them out).
  auto every_field = [](const nn::GPTConfig& c) {
    nlohmann::json j = c.to_json();
    j["n_experts"] = c.n_experts;
    j["experts_per_token"] = c.experts_per_token;
    j["capacity_factor"] = c.capacity_factor;
    j["moe_every"] = c.moe_every;
    j["aux_loss_weight"] = c.aux_loss_weight;
    return j;
  };
  nlohmann::json saved_json = every_field(saved), flags_json = every_field(o.model);
  if (saved.n_experts == 0 && o.model.n_experts == 0)  // dense both: a mixture's settings mean nothing
    for (const char* field : {"experts_per_token", "capacity_factor", "moe_every", "aux_loss_weight"})
      saved_json[field] = flags_json[field];
  for (const std::string& field : o.explicit_model_flags)
    if (saved_json.at(field) != flags_json.at(field))
      usage("the checkpoint has {}={} but the flags ask for {}={}", field, saved_json.at(field).dump(), field,
            flags_json.at(field).dump());
}

namespace {

// The flags that shape a run's trajectory, kept with its checkpoints (under their key:
// "--batch-size" → "batch_size") and given back by --resume unless typed again — together with
// each program's layout flags (TrainOptions::layout_flags), by one mechanism: through the flag
// itself, so a value read back passes the flag's checks and lands in its typed variable.
const std::vector<std::string> kRunSettingFlags = {
    "--batch-size",   "--grad-accum", "--max-iters",    "--learning-rate", "--min-lr",   "--warmup-iters",
    "--lr-decay-iters", "--decay-lr", "--grad-clip",    "--weight-decay",  "--beta1",    "--beta2",
    "--sampling",     "--ddp",        "--bucket-mb",    "--grad-comm",     "--precision", "--seed"};

// "--micro-batches" → "micro_batches": a flag's key in the checkpoint's options.
std::string key_of(const std::string& flag) {
  std::string key = flag.substr(2);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

// A flag's value as it would be typed ("2", "gpipe", "3,1"): what was typed or given back (the
// value in force: the last of a repeated flag), else its default; null when it has neither
// (the program's default then stands).
std::optional<std::string> typed_value(const CLI::App* app, const std::string& flag) {
  const CLI::Option* option = app ? app->get_option_no_throw(flag) : nullptr;
  if (!option) return std::nullopt;
  if (option->count() > 0) return fmt::format("{}", fmt::join(option->reduced_results(), ","));
  if (option->get_default_str().empty()) return std::nullopt;
  return option->get_default_str();
}

// As the checkpoint keeps it: a number or true/false as JSON's own, other text as a string.
nlohmann::json as_saved(const std::optional<std::string>& typed) {
  if (!typed) return nullptr;
  const nlohmann::json parsed = nlohmann::json::parse(*typed, nullptr, false);
  if (parsed.is_number() || parsed.is_boolean()) return parsed;
  return *typed;
}

// Gives a flag its checkpoint value as if it were typed: the flag's checks, then its variable.
void give_back(CLI::App* app, const std::string& flag, const std::string& value, const std::string& state_file) {
  CLI::Option* option = app->get_option(flag);
  option->clear();
  option->add_result(value);
  try {
    option->run_callback();
  } catch (const CLI::ParseError& e) {
    std::string why = comm::cli::readable(e);  // "--batch-size must be …": the flag is named before it
    if (why.starts_with(flag + " ")) why.erase(0, flag.size() + 1);
    usage("{}: options.{} (what {} sets) {}", state_file, key_of(flag), flag, why);
  }
}

// A kept value as the log shows it: "0.005", "gpipe", "(default)".
std::string shown(const nlohmann::json& v) {
  return v.is_null()           ? std::string("(default)")
         : v.is_string()       ? v.get<std::string>()
         : v.is_number_float() ? fmt::format("{:g}", v.get<double>())
                               : v.dump();
}

// Every flag the checkpoint keeps: the run settings, then the program's layout flags.
std::vector<std::string> kept_flags(const TrainOptions& o) {
  std::vector<std::string> flags = kRunSettingFlags;
  flags.insert(flags.end(), o.layout_flags.begin(), o.layout_flags.end());
  return flags;
}

}  // namespace

std::vector<std::string> continue_saved_run(const nlohmann::json& saved, TrainOptions& o, const std::string& state_file,
                                            std::vector<std::string>* restored_layout) {
  std::vector<std::string> changed;
  for (const std::string& flag : kept_flags(o)) {
    const std::string key = key_of(flag);
    if (!o.app || !o.app->get_option_no_throw(flag)) continue;
    const bool layout = std::find(o.layout_flags.begin(), o.layout_flags.end(), flag) != o.layout_flags.end();
    if (layout && !restored_layout) continue;  // another program or rank count: the command line's layout
    if (!saved.contains(key)) {  // an older checkpoint, or an edited one: the flag stands, and the log says so
      if (o.explicit_flags.count(flag) == 0)
        changed.push_back(fmt::format("{} (not in the checkpoint) → {}", key, shown(as_saved(typed_value(o.app, flag)))));
      continue;
    }
    const nlohmann::json& saved_value = saved.at(key);
    if (!saved_value.is_null() && !saved_value.is_string() && !saved_value.is_number() && !saved_value.is_boolean())
      usage("{}: options.{} = {} is not a value {} takes", state_file, key, saved_value.dump(), flag);
    // null: the flag was left at its default; a number or true/false as if typed.
    const std::string was = saved_value.is_null()     ? std::string()
                            : saved_value.is_string() ? saved_value.get<std::string>()
                                                      : saved_value.dump();
    if (o.explicit_flags.count(flag) == 0) {
      if (saved_value.is_null()) continue;  // saved at its default: the default stands
      give_back(o.app, flag, was, state_file);
      if (layout && restored_layout) restored_layout->push_back(flag + " " + was);
    } else if (const std::string now = shown(as_saved(typed_value(o.app, flag))); now != shown(saved_value)) {
      changed.push_back(fmt::format("{} {} → {}", key, shown(saved_value), now));
    }
  }
  if (o.schedule.min_lr > o.schedule.learning_rate)
    usage("--min-lr {} is above the learning rate {}", o.schedule.min_lr, o.schedule.learning_rate);
  return changed;
}

std::vector<std::string> relaunch_flags(const TrainOptions& o) {
  // Given elsewhere: by the checkpoint (its settings and layout), by the command itself, or
  // only for the run that was stopped (faults, modes).
  static const std::set<std::string> not_again = {
      "--resume",        "--out-dir",    "--data-dir",           "--text",      "--init-from",
      "--eval-only",     "--sample-only", "--crash-at-step",     "--crash-rank", "--crash-in-checkpoint",
      "--skip-send-at-step", "--skip-ring-at-step", "--skip-dispatch-at-step", "--trace"};
  const std::vector<std::string> kept = kept_flags(o);
  std::vector<std::string> words;
  for (const std::string& flag : o.explicit_flags) {
    if (not_again.count(flag) || std::find(kept.begin(), kept.end(), flag) != kept.end()) continue;
    if (std::any_of(std::begin(kModelFlags), std::end(kModelFlags), [&](const ModelFlag& f) { return f.flag == flag; }))
      continue;
    const CLI::Option* option = o.app ? o.app->get_option_no_throw(flag) : nullptr;
    if (!option) continue;
    if (option->get_expected_min() == 0) {  // a switch: as it stands (a "--no-…" one holds false when typed)
      const bool on = option->as<bool>();
      if (flag.starts_with("--no-")) {
        if (!on) words.push_back(flag);
      } else {
        words.push_back(on ? flag : flag + "=false");
      }
      continue;
    }
    if (const auto value = typed_value(o.app, flag)) {
      words.push_back(flag);
      words.push_back(*value);
    }
  }
  return words;
}

nn::LrSchedule lr_schedule(const TrainOptions& o) {
  nn::LrSchedule s = o.schedule;
  if (s.lr_decay_iters == 0) s.lr_decay_iters = std::max(o.max_iters, 1);
  return s;
}

nlohmann::json to_json(const TrainOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  for (const std::string& flag : kept_flags(o)) j[key_of(flag)] = as_saved(typed_value(o.app, flag));
  return j;
}

}  // namespace trainers
