// nanodist: the project's command for what is not a trainer. `nanodist plan` predicts the
// memory and step time of every layout of a model on N devices (docs/planning.md):
//
//   nanodist plan --model main-job --devices 4 --global-batch 48                # this CPU
//   nanodist plan --model gpt-1.7b --machine a100-80gb --devices 32 --global-batch 512
//       --implementation megatron --precision bf16
//   nanodist plan --model gpt-bench-b --devices 8 --global-batch 64 --tp 2 --json
//   nanodist plan --model main-job --block-size 8192 --devices 4 --global-batch 4 --cp 4
//
// Exit status: 0 with the table, 1 when no layout fits (the table shows the closest), 2 for
// bad input (one line).
//
// Written in C++ so that it calls the very functions the trainers' memory lines and tests
// call (nn/memory_estimate, parallel::zero_formula_held), not a port of them.
#include <algorithm>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/cli_checks.hpp"
#include "nn/memory_estimate.hpp"
#include "planning/error.hpp"
#include "planning/plan.hpp"
#include "planning/thresholds.hpp"

namespace {

using namespace planning;
using comm::cli::whole;

struct PlanOptions {
  std::string model = "main-job", machine = "this-cpu", machine_file, backend;
  nn::GPTConfig config;  // the preset's, then each flag given
  int precision = 0;     // by nn::kPrecisionNames
  Implementation implementation = Implementation::nanodist;
  int64_t global_batch = 12;
  int devices = 1;
  LayoutChoices choices;
  int dp = 0, tp = 0, pp = 0, cp = 0, ep = 0, virtual_stages = 0, zero = 0, micro_batch = 0;
  bool expert_tensor_parallel = false;
  bool explain = false;
  Schedule schedule = Schedule::one_f_one_b;
  CpAttention cp_attention = CpAttention::ring;
  nn::Recompute recompute = nn::Recompute::none;
  int sequence_parallel = 0, bias = 0;  // 0 or 1
  int top = 10;
  bool json = false, all = false, print_machine = false;
};

constexpr std::array<std::string_view, 2> kImplementationNames = {"nanodist", "megatron"};

std::string bytes_text(double bytes) { return nn::format_bytes(bytes); }
std::string seconds(double s) {
  if (s == 0) return "0";
  if (s < 1e-3) return fmt::format("{:.0f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

nlohmann::json to_json(const Workload& w, const PlannedLayout& p) {
  const Layout& l = p.layout;
  const RankMemory& m = p.memory;
  const StepTime& t = p.time;
  return {{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"cp", l.cp}, {"ep", l.ep},
          {"expert_tensor_parallel", l.expert_tensor_parallel},
          {"cp_attention", l.cp > 1 ? nlohmann::json(kCpAttentionNames[static_cast<std::size_t>(l.cp_attention)])
                                    : nlohmann::json(nullptr)},
          {"virtual_stages", l.virtual_stages},
          {"schedule", name_of(l.schedule)}, {"sequence_parallel", l.sequence_parallel}, {"zero", l.zero},
          {"recompute", nn::name_of(l.recompute)}, {"micro_batch", l.micro_batch},
          {"micro_batches", l.micro_batches(w)}, {"layout", l.describe(w)}, {"command", l.trainer_command(w)},
          {"fits", p.fits},
          {"memory", {{"stage", m.stage}, {"parameters", m.parameters}, {"gradients", m.gradients},
                      {"optimizer", m.optimizer}, {"activations", m.activations}, {"buffers", m.buffers},
                      {"total", m.total()}}},
          {"time", {{"compute", t.compute}, {"tp", t.tp}, {"cp", t.cp}, {"cp_overlapped", t.cp_overlapped}, {"ep", t.ep},
                    {"pp", t.pp}, {"bubble", t.bubble},
                    {"dp_exposed", t.dp_exposed}, {"dp_overlapped", t.dp_overlapped}, {"optimizer", t.optimizer},
                    {"time_sharing", t.time_sharing}, {"tp_algorithm", t.tp_algorithm}, {"cp_algorithm", t.cp_algorithm}, {"ep_algorithm", t.ep_algorithm}, {"dp_algorithm", t.dp_algorithm}, {"total", t.total()}}},
          {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}};
}

struct Counts {
  std::size_t possible = 0, fit = 0;
};

void print_table(const Workload& w, const Machine& machine, const std::vector<PlannedLayout>& layouts,
                 const Counts& counts, int top) {
  const auto& c = w.model;
  const double parameters = nn::parameter_count(c);
  const std::string experts =
      c.n_experts > 0 ? fmt::format(", {} experts ({} a token) in {} blocks", c.n_experts, c.experts_per_token,
                                    c.n_layer / c.moe_every)
                      : "";
  fmt::print("model: {} layers, {} heads, {} wide, T {}, V {}{}{}: {} parameters; {}, {}'s activations and state\n",
             c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size, c.bias ? ", biases" : "", experts,
             parameters >= 1e9 ? fmt::format("{:.1f}B", parameters / 1e9) : fmt::format("{:.2f}M", parameters / 1e6),
             nn::kPrecisionNames[static_cast<std::size_t>(w.precision)], name_of(w.implementation));
  fmt::print("machine: {} — {} devices a node, {} each ({})\n", machine.name, machine.devices_per_node,
             bytes_text(machine.device_memory_bytes), machine.source);
  fmt::print("global batch {} × T {} on {} devices: {} layouts possible, {} fit; {}\n", w.global_batch, c.block_size,
             w.devices, counts.possible, counts.fit,
             counts.fit == 0 ? std::string("none fits: the smallest first")
             : static_cast<int>(layouts.size()) > top ? fmt::format("the first {} by predicted step time", top)
                                                      : std::string("by predicted step time"));
  fmt::print("{:>3}  {:<60} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>17} {:>8} {:>8} | {:>10} {:>5}\n",
             "#", "layout (dp ep · tp · pp · cp · recompute · micro-batch × M)", "memory", "params", "grads", "optim",
             "activ.", "buffers", "step", "compute", "tp", "cp", "ep", "pp", "bubble", "dp exposed/hidden", "optim", "turns",
             "tokens/s", "MFU");
  int row = 0;
  for (const auto& p : layouts) {
    if (row++ >= top) break;
    const RankMemory& m = p.memory;
    const StepTime& t = p.time;
    fmt::print("{:>3}  {:<60} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>17} {:>8} {:>8} | {:>10.0f} {:>4.0f}%{}\n",
               row, p.layout.describe(w), bytes_text(m.total()), bytes_text(m.parameters), bytes_text(m.gradients),
               bytes_text(m.optimizer), bytes_text(m.activations), bytes_text(m.buffers), seconds(t.total()),
               seconds(t.compute), seconds(t.tp), seconds(t.cp), seconds(t.ep), seconds(t.pp), seconds(t.bubble),
               seconds(t.dp_exposed) + " / " + seconds(t.dp_overlapped), seconds(t.optimizer), seconds(t.time_sharing),
               p.tokens_per_s,
               100 * p.mfu, p.fits ? "" : "  does not fit");
  }
  if (layouts.empty()) return;
  const std::string command = layouts.front().layout.trainer_command(w);
  if (layouts.front().layout.expert_tensor_parallel)
    fmt::print("(experts cut over tp: planned to compare with the folding the trainers run; no command)\n");
  else if (command.empty())
    fmt::print("(nanodist's trainers learn tiny Shakespeare's 65 characters: no command for a vocabulary of {})\n",
               c.vocab_size);
  else
    fmt::print("the first with nanodist's trainers: {}\n", command);
}

void add_flags(CLI::App& app, PlanOptions& o) {
  app.add_option("--model", o.model, "a model preset (main-job, gpt-bench-a, gpt-bench-b, gpt-1.7b … gpt-1t); "
                                     "the model flags change it")->capture_default_str();
  app.add_option("--n-layer", o.config.n_layer, "transformer blocks")->check(whole(1));
  app.add_option("--n-head", o.config.n_head, "attention heads")->check(whole(1));
  app.add_option("--n-embd", o.config.n_embd, "embedding width")->check(whole(1));
  app.add_option("--block-size", o.config.block_size, "sequence length T")->check(whole(1));
  app.add_option("--vocab-size", o.config.vocab_size, "vocabulary")->check(whole(1));
  app.add_option("--bias", o.bias, "biases in Linear and LayerNorm (0 or 1)")->check(whole(0, 1));
  app.add_option("--dropout", o.config.dropout, "dropout rate (it keeps masks' outputs)")->check(comm::cli::real(0, 0.99));
  app.add_option("--n-experts", o.config.n_experts, "a mixture of E experts in place of the MLP (0: dense)")
      ->check(whole(0));
  app.add_option("--experts-per-token", o.config.experts_per_token, "k: the experts each token goes to")->check(whole(1));
  app.add_option("--capacity-factor", o.config.capacity_factor, "f: an expert takes ceil(f·k·T/E) tokens of a sequence")
      ->check(comm::cli::positive_real());
  app.add_option("--moe-every", o.config.moe_every, "a mixture in every n-th block")->check(whole(1));
  comm::cli::add_choice(app, "--precision", o.precision, nn::kPrecisionNames, "fp32 or bf16 matrix products");
  comm::cli::add_choice(app, "--implementation", o.implementation, kImplementationNames,
                        "whose memory to count: nanodist (these trainers) or megatron (Korthikanti et al. 2022)");
  app.add_option("--global-batch", o.global_batch, "sequences per optimizer step")->check(whole(1))->capture_default_str();
  app.add_option("--devices", o.devices, "ranks (GPUs, or processes on a CPU)")->check(whole(1, 1 << 20))->capture_default_str();
  app.add_option("--machine", o.machine, "this-cpu, a100-80gb or h100-80gb")->capture_default_str();
  app.add_option("--machine-file", o.machine_file, "a machine as JSON (--print-machine writes one to start from)");
  app.add_option("--backend", o.backend, "the communication backend inside a node, where the machine has it measured "
                                         "(this-cpu: mpi, ring, naive, shm; default: the trainers' mpi)");
  app.add_flag("--print-machine", o.print_machine, "print the machine as JSON and stop");
  app.add_option("--dp", o.dp, "fix the data-parallel degree")->check(whole(1));
  app.add_option("--tp", o.tp, "fix the tensor-parallel degree")->check(whole(1));
  app.add_option("--pp", o.pp, "fix the pipeline stages")->check(whole(1));
  app.add_option("--cp", o.cp, "fix the context-parallel degree (ranks per sequence)")->check(whole(1));
  app.add_option("--ep", o.ep, "fix the expert-parallel degree (dp ranks sharing a mixture's experts)")->check(whole(1));
  app.add_flag("--expert-tensor-parallel", o.expert_tensor_parallel,
               "plan a mixture's experts cut over tp (Megatron's expert tensor parallelism) instead of the tp ranks "
               "folded into the experts' group, as the trainers run them: to compare the two");
  comm::cli::add_choice(app, "--cp-attention", o.cp_attention, kCpAttentionNames,
                        "fix how attention crosses the cp ranks: ring or ulysses");
  app.add_option("--virtual-stages", o.virtual_stages, "fix the chunks per stage (> 1: interleaved)")->check(whole(1, 64));
  comm::cli::add_choice(app, "--schedule", o.schedule, kScheduleNames, "fix the pipeline schedule");
  app.add_option("--sequence-parallel", o.sequence_parallel, "fix sequence parallelism (0 or 1)")->check(whole(0, 1));
  app.add_option("--zero", o.zero, "fix ZeRO's stage")->check(whole(0, 3));
  comm::cli::add_choice(app, "--recompute", o.recompute, nn::kRecomputeNames, "fix what is recomputed");
  app.add_option("--micro-batch", o.micro_batch, "fix the micro-batch (sequences)")->check(whole(1));
  app.add_option("--top", o.top, "layouts printed")->check(whole(1))->capture_default_str();
  app.add_flag("--explain", o.explain,
               "after the table, the first layout against each dimension's threshold (when its communication "
               "hides or pays, docs/thresholds.md) and the term that bounds its step");
  app.add_flag("--all", o.all, "print every layout, fitting or not");
  app.add_flag("--json", o.json, "one JSON document: the workload, the machine and every layout");
}

int run_plan(CLI::App& plan, PlanOptions& o) {
  Workload w{.precision = static_cast<nn::Precision>(o.precision), .global_batch = o.global_batch,
             .devices = o.devices, .implementation = o.implementation};
  w.model = model_preset(o.model);
  auto given = [&plan](const char* flag) { return plan.get_option(flag)->count() > 0; };
  if (given("--n-layer")) w.model.n_layer = o.config.n_layer;
  if (given("--n-head")) w.model.n_head = o.config.n_head;
  if (given("--n-embd")) w.model.n_embd = o.config.n_embd;
  if (given("--block-size")) w.model.block_size = o.config.block_size;
  if (given("--vocab-size")) w.model.vocab_size = o.config.vocab_size;
  if (given("--bias")) w.model.bias = o.bias == 1;
  if (given("--dropout")) w.model.dropout = o.config.dropout;
  if (given("--n-experts")) w.model.n_experts = o.config.n_experts;
  if (given("--experts-per-token")) w.model.experts_per_token = o.config.experts_per_token;
  if (given("--capacity-factor")) w.model.capacity_factor = o.config.capacity_factor;
  if (given("--moe-every")) w.model.moe_every = o.config.moe_every;
  try {
    w.model.validate();  // k ≤ E, moe_every ≤ n_layer: the trainers' rules
  } catch (const nn::Error& e) {
    throw Error(e.what());
  }
  if (w.model.n_embd % w.model.n_head != 0)
    throw Error(fmt::format("--n-embd {} is not a multiple of --n-head {}", w.model.n_embd, w.model.n_head));
  if (given("--machine") && given("--machine-file")) throw Error("give --machine or --machine-file, not both");
  Machine machine = o.machine_file.empty() ? machine_preset(o.machine) : machine_from_file(o.machine_file);
  if (given("--backend")) machine = machine.with_backend(o.backend);
  if (o.print_machine) {
    fmt::print("{}\n", machine.to_json().dump(2));
    return 0;
  }
  LayoutChoices& ch = o.choices;
  if (given("--dp")) ch.dp = o.dp;
  if (given("--tp")) ch.tp = o.tp;
  if (given("--pp")) ch.pp = o.pp;
  if (given("--cp")) ch.cp = o.cp;
  if (given("--ep")) ch.ep = o.ep;
  ch.expert_tensor_parallel = o.expert_tensor_parallel;
  if (given("--cp-attention")) ch.cp_attention = o.cp_attention;
  if (given("--virtual-stages")) ch.virtual_stages = o.virtual_stages;
  if (given("--schedule")) ch.schedule = o.schedule;
  if (given("--sequence-parallel")) ch.sequence_parallel = o.sequence_parallel == 1;
  if (given("--zero")) ch.zero = o.zero;
  if (given("--recompute")) ch.recompute = o.recompute;
  if (given("--micro-batch")) ch.micro_batch = o.micro_batch;
  std::vector<PlannedLayout> layouts = sweep(w, machine, ch);
  if (layouts.empty()) {
    // Say why, from the layout the fixed flags describe (the sweep's defaults elsewhere).
    const int dp = ch.dp.value_or(1), tp = ch.tp.value_or(1), pp = ch.pp.value_or(1), cp = ch.cp.value_or(1);
    const int64_t tp_pp_cp = static_cast<int64_t>(std::min(tp, w.devices + 1)) * std::min(pp, w.devices + 1) *
                             std::min(cp, w.devices + 1);  // (each at most 2^20 + 1: no overflow)
    if (tp > w.devices || pp > w.devices || cp > w.devices || w.devices % tp_pp_cp != 0)
      throw Error(fmt::format("no layout can run this: tp {} × pp {}{} does not divide the {} devices", tp, pp,
                              cp > 1 ? fmt::format(" × cp {}", cp) : "", w.devices));
    const Layout example{.dp = ch.dp ? dp : static_cast<int>(w.devices / tp_pp_cp), .tp = tp, .pp = pp, .cp = cp,
                         .ep = ch.ep.value_or(1),
                         .expert_tensor_parallel = ch.expert_tensor_parallel,
                         .cp_attention = ch.cp_attention.value_or(CpAttention::ring),
                         .virtual_stages = ch.virtual_stages.value_or(1),
                         .schedule = ch.schedule.value_or(ch.virtual_stages.value_or(1) > 1 ? Schedule::interleaved
                                                                                            : Schedule::one_f_one_b),
                         .sequence_parallel = ch.sequence_parallel.value_or(false), .zero = ch.zero.value_or(0),
                         .micro_batch = ch.micro_batch.value_or(1)};
    const std::string why = example.impossible(w);
    throw Error(fmt::format("no layout can run this: {}", why.empty() ? "the fixed flags exclude every one" : why));
  }
  const Counts counts{.possible = layouts.size(),
                      .fit = static_cast<std::size_t>(std::count_if(layouts.begin(), layouts.end(),
                                                                    [](const PlannedLayout& p) { return p.fits; }))};
  // Without --all: those that fit, or the one closest to fitting when none does.
  if (!o.all) layouts.erase(layouts.begin() + static_cast<std::ptrdiff_t>(std::max<std::size_t>(counts.fit, 1)), layouts.end());
  if (o.json) {
    nlohmann::json out{{"model", w.model.to_json()},
                       {"precision", nn::kPrecisionNames[static_cast<std::size_t>(w.precision)]},
                       {"implementation", name_of(w.implementation)},
                       {"global_batch", w.global_batch},
                       {"devices", w.devices},
                       {"layouts_possible", counts.possible},
                       {"layouts_fit", counts.fit},
                       {"machine", machine.to_json()},
                       {"layouts", nlohmann::json::array()}};
    for (const auto& p : layouts) out["layouts"].push_back(to_json(w, p));
    fmt::print("{}\n", out.dump());
  } else {
    print_table(w, machine, layouts, counts, o.all ? static_cast<int>(layouts.size()) : o.top);
    if (o.explain)  // the first layout against each dimension's threshold (docs/thresholds.md)
      for (const std::string& line : explain(w, layouts.front().layout, machine)) fmt::print("{}\n", line);
  }
  return counts.fit > 0 ? 0 : 1;  // none fits: a result, not an error (as grep finding nothing)
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nanodist: plan a layout (nanodist plan --help)"};
  app.require_subcommand(1);
  PlanOptions o;
  const std::string first = argc > 1 ? argv[1] : "";
  if (first != "plan" && first != "--help" && first != "-h") {
    std::fprintf(stderr, "error: nanodist needs a command: plan (nanodist plan --help)\n");
    return 2;
  }
  CLI::App* plan = app.add_subcommand("plan", "predict the memory and step time of every layout of a model on N devices");
  add_flags(*plan, o);
  if (const int status = comm::cli::parse_or_exit_status(app, argc, argv); status >= 0) return status;
  try {
    return run_plan(*plan, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
