#include "trainers/train_options.hpp"

#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/error.hpp"

namespace trainers {
namespace {

// The model flags, each with the GPTConfig field it sets.
struct ModelFlag {
  const char* flag;
  const char* field;
};
constexpr ModelFlag kModelFlags[] = {{"--n-layer", "n_layer"},       {"--n-head", "n_head"},
                                     {"--n-embd", "n_embd"},         {"--block-size", "block_size"},
                                     {"--dropout", "dropout"},       {"--bias", "bias"}};

template <class... Args> [[noreturn]] void usage(fmt::format_string<Args...> format, Args&&... args) {
  throw comm::UsageError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace

void add_train_options(CLI::App& app, TrainOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides an earlier one
  const auto positive = CLI::PositiveNumber, non_negative = CLI::NonNegativeNumber;
  app.add_option("--data-dir", o.data_dir, "data folder (tinyshakespeare/input.txt, shakespeare_char/)")->capture_default_str();
  app.add_option("--text", o.text, "train on this text file instead of finding tiny Shakespeare");
  app.add_option("--n-layer", o.model.n_layer, "transformer blocks")->check(positive)->capture_default_str();
  app.add_option("--n-head", o.model.n_head, "attention heads")->check(positive)->capture_default_str();
  app.add_option("--n-embd", o.model.n_embd, "embedding width")->check(positive)->capture_default_str();
  app.add_option("--block-size", o.model.block_size, "context length T")->check(positive)->capture_default_str();
  app.add_option("--dropout", o.model.dropout, "dropout rate")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  app.add_option("--bias", o.model.bias, "biases in Linear and LayerNorm")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "micro-batch B per rank")->check(positive)->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "micro-steps K per optimizer step")->check(positive)->capture_default_str();
  app.add_option("--max-iters", o.max_iters, "optimizer steps")->check(non_negative)->capture_default_str();
  app.add_option("--learning-rate", o.schedule.learning_rate, "peak learning rate")->check(positive)->capture_default_str();
  app.add_option("--min-lr", o.schedule.min_lr, "learning rate after the cosine decay")->check(non_negative)->capture_default_str();
  app.add_option("--warmup-iters", o.schedule.warmup_iters, "linear warm-up steps")->check(non_negative)->capture_default_str();
  app.add_option("--lr-decay-iters", o.schedule.lr_decay_iters, "end of the cosine decay (0: max-iters)")->check(non_negative);
  app.add_flag("!--no-decay-lr", o.schedule.decay, "constant learning rate");
  app.add_option("--weight-decay", o.adamw.weight_decay, "AdamW weight decay (≥ 2-D tensors)")->check(non_negative)->capture_default_str();
  app.add_option("--beta1", o.adamw.beta1, "AdamW β1")->check(CLI::Range(0.0, 0.9999))->capture_default_str();
  app.add_option("--beta2", o.adamw.beta2, "AdamW β2")->check(CLI::Range(0.0, 0.9999))->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the global gradient norm (0: off)")->check(non_negative)->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialisation, data order, dropout, samples")->capture_default_str();
  app.add_option("--sampling", o.sampling, "unique data per rank: random streams or a partition")
      ->check(CLI::IsMember({"random", "partition"}))->capture_default_str();
  app.add_option("--ddp", o.ddp, "gradient averaging: naive or bucketed (overlapped)")
      ->check(CLI::IsMember({"naive", "bucketed"}))->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb, "bucket size for --ddp bucketed, MB")->check(positive)->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads per rank (0: cores / ranks on this node)")->check(non_negative);
  app.add_option("--eval-interval", o.eval_interval, "evaluate every this many steps (0: only at the end)")->check(non_negative)->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "batches per split per rank in an evaluation")->check(positive)->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "a log line every this many steps")->check(positive)->capture_default_str();
  app.add_flag("!--no-full-val", o.final_full_val, "skip the exact val loss at the end");
  app.add_option("--metrics", o.metrics, "metrics file, .csv or .jsonl (default <out-dir>/metrics.csv)");
  app.add_option("--prompt", o.prompt, "text the samples start from");
  app.add_option("--sample-tokens", o.sample_tokens, "characters per sample")->check(non_negative)->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature")->check(CLI::Range(1e-3, 100.0))->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k likeliest (0: all)")->check(non_negative)->capture_default_str();
  app.add_option("--out-dir", o.out_dir, "checkpoint and metrics folder")->capture_default_str();
  app.add_option("--ckpt-interval", o.ckpt_interval, "checkpoint every this many steps (0: only at the end)")->check(non_negative)->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from <out-dir>/checkpoint");
  app.add_option("--init-from", o.init_from, "load this checkpoint directory (with --eval-only / --sample-only)");
  app.add_flag("--eval-only", o.eval_only, "print the exact val loss of --init-from and stop");
  app.add_flag("--sample-only", o.sample_only, "print a sample from --init-from and stop");
  app.add_option("--crash-at-step", o.crash_at_step, "testing: rank --crash-rank kills itself at this step");
  app.add_option("--crash-rank", o.crash_rank, "testing: which rank --crash-at-step kills")->check(non_negative);
}

void finish_train_options(const CLI::App& app, TrainOptions& o) {
  for (const ModelFlag& f : kModelFlags)
    if (app.count(f.flag) > 0) o.explicit_model_flags.push_back(f.field);
  try {
    o.model.validate();
  } catch (const nn::Error& e) {
    usage("{}", e.what());
  }
  if (o.schedule.lr_decay_iters == 0) o.schedule.lr_decay_iters = std::max(o.max_iters, 1);
  if (o.schedule.min_lr > o.schedule.learning_rate)
    usage("--min-lr {} is above --learning-rate {}", o.schedule.min_lr, o.schedule.learning_rate);
  if (o.eval_only && o.sample_only) usage("--eval-only and --sample-only exclude each other");
  if ((o.eval_only || o.sample_only) && o.init_from.empty())
    usage("--{} needs --init-from CHECKPOINT_DIR", o.eval_only ? "eval-only" : "sample-only");
  if (o.resume && !o.init_from.empty()) usage("--resume continues <out-dir>/checkpoint; it excludes --init-from");
  if (o.prompt.empty()) usage("--prompt is empty: samples need at least one character to start from");
  if (o.metrics.empty()) o.metrics = o.out_dir + "/metrics.csv";
}

void check_config_against_flags(const nn::GPTConfig& saved, const TrainOptions& o) {
  const nlohmann::json saved_json = saved.to_json(), flags_json = o.model.to_json();
  for (const std::string& field : o.explicit_model_flags)
    if (saved_json.at(field) != flags_json.at(field))
      usage("the checkpoint has {}={} but the flags ask for {}={}", field, saved_json.at(field).dump(), field,
            flags_json.at(field).dump());
}

nlohmann::json to_json(const TrainOptions& o) {
  return {{"batch_size", o.batch_size},
          {"grad_accum", o.grad_accum},
          {"max_iters", o.max_iters},
          {"learning_rate", o.schedule.learning_rate},
          {"min_lr", o.schedule.min_lr},
          {"warmup_iters", o.schedule.warmup_iters},
          {"lr_decay_iters", o.schedule.lr_decay_iters},
          {"decay_lr", o.schedule.decay},
          {"grad_clip", o.grad_clip},
          {"sampling", o.sampling},
          {"ddp", o.ddp},
          {"seed", o.seed}};
}

}  // namespace trainers
