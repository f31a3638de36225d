// What the trainer tests share: a synthetic text, a tiny model's flags, running a trainer
// under mpiexec, comparing the checkpoints runs leave, and the checks of a clean failure.
#pragma once
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <thread>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <string>
#include <vector>

#include "nn/atomic_file.hpp"
#include "nn/checkpoint.hpp"
#include "nn/rng.hpp"
#include "run_command.hpp"

namespace fs = std::filesystem;

// The folder of the running test case, emptied when the case first asks for it in this
// process: ctest runs test cases at once, one process each, and a case never meets another's
// files (texts, prepared data, runs) nor a run of an earlier invocation.
inline fs::path work_dir() {
  static std::map<std::string, fs::path> made;  // test case name -> its folder, once emptied
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  auto [at, first] = made.try_emplace(name);
  if (first) {
    std::string slug;  // "bad input: one line" -> "bad_input_one_line", cut short, plus a hash
    for (char c : name.substr(0, 48)) slug += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    at->second = fs::path(TEST_WORK_DIR) / fmt::format("{}-{:08x}", slug, std::hash<std::string>{}(name)&0xffffffffu);
    fs::remove_all(at->second);
    fs::create_directories(at->second);
  }
  return at->second;
}

// A text with a small vocabulary and some structure to learn: words from a list, lines of them.
inline fs::path synthetic_text(const std::string& name, const std::vector<std::string>& words, int n_words) {
  const fs::path file = work_dir() / name;
  if (fs::exists(file)) return file;
  nn::Rng rng(42);
  std::string text;
  for (int i = 0; i < n_words; ++i) {
    text += words[rng.next_u64() % words.size()];
    text += (i % 9 == 8) ? ".\n" : " ";
  }
  std::ofstream(file) << text;
  return file;
}

inline fs::path shakespeareish() {
  return synthetic_text("words.txt",
                        {"the",   "king",  "shall", "speak", "and", "thou", "art",    "my",   "lord",  "what",
                         "noble", "heart", "doth",  "love",  "o",   "come", "hither", "good", "night", "sweet"},
                        6000);
}

// The tiny model and quiet settings every run here uses (the data is prepared into `data`).
inline std::string tiny(const fs::path& text, const std::string& data = "data", int n_layer = 2) {
  return fmt::format(
      "--text {} --data-dir {} --n-layer {} --n-head 2 --n-embd 32 --block-size 16 --eval-interval 0 "
      "--eval-iters 2 --no-full-val --sample-tokens 0 --log-interval 1 --threads 1 --timeout 30 "
      "--learning-rate 1e-3 --warmup-iters 2",
      text.string(), (work_dir() / data).string(), n_layer);
}

// 4 experts, 2 per token, capacity factor 1 (choices are dropped), a mixture in both blocks;
// dropout on and the default random sampling: the global batch and every mask are the same in
// any layout, and so are the sequences each capacity counts over.
inline std::string tiny_moe() {
  return tiny(shakespeareish(), "data") +
         " --dropout 0.1 --n-experts 4 --experts-per-token 2 --capacity-factor 1 --aux-loss-weight 0.1 --max-iters 3";
}

// A --trace file's spans (trainers/trace.hpp): tid is the rank, or 10000 + rank for the
// communication row below it; times in µs.
struct TraceSpan {
  int tid;
  std::string name, cat;
  double start, end;
  bool inside(const TraceSpan& outer) const { return tid == outer.tid && start >= outer.start && end <= outer.end; }
};
inline std::vector<TraceSpan> trace_spans(const fs::path& file) {
  std::vector<TraceSpan> spans;
  const auto trace = nlohmann::json::parse(nn::read_whole_file(file));  // (kept: the loop reads into it)
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X")
      spans.push_back({e.at("tid").get<int>(), e.at("name").get<std::string>(), e.at("cat").get<std::string>(),
                       e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()});
  return spans;
}
// Rank `tid`'s spans of category `cat` whose name starts with `name`, each inside one of its
// `outer` spans (forward, backward): the layers' spans of the training steps.
inline int spans_inside(const std::vector<TraceSpan>& spans, int tid, const std::string& cat, const std::string& name,
                        const std::string& outer) {
  int n = 0;
  for (const auto& s : spans)
    if (s.tid == tid && s.cat == cat && s.name.rfind(name, 0) == 0)
      for (const auto& o : spans)
        if (o.cat == outer && s.inside(o)) {
          ++n;
          break;
        }
  return n;
}

// The first step's routing line: "  experts: tokens per expert and step … dropped, balancing loss …".
inline std::string first_routing_line(const std::string& output) {
  const auto at = output.find("  experts: ");
  REQUIRE(at != std::string::npos);
  return output.substr(at, output.find('\n', at) - at);
}

// Runs a trainer under mpiexec; its command and output go into the failure message.
inline CommandResult run_trainer(const char* program, int ranks, const std::string& args) {
  CommandResult r = run_command(mpirun(ranks, program, args));
  UNSCOPED_INFO("$ mpiexec -n " << ranks << " " << program << " " << args << "\n" << r.output);
  return r;
}

// A run started right after a killed one: the killed job's survivor may still be leaving (its
// failure save) a moment after mpiexec returned, holding the --out-dir lock. Waits for it (60 s
// at most) instead of failing on "in use by another run" — seen once under the sanitizers.
inline CommandResult run_trainer_after_crash(const char* program, int ranks, const std::string& args) {
  for (int attempt = 1;; ++attempt) {
    CommandResult r = run_trainer(program, ranks, args);
    if (attempt == 120 || r.output.find("is in use by another run") == std::string::npos) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

inline std::string out(const std::string& name) { return (work_dir() / "runs" / name).string(); }
inline fs::path checkpoint(const std::string& name) { return work_dir() / "runs" / name / "checkpoint"; }

inline std::vector<std::vector<float>> parameters_of(const fs::path& dir) {
  nn::CheckpointInfo info = nn::read_checkpoint_info(dir);
  nn::GPT model(info.config, 0);
  nn::load_checkpoint(dir, model, nullptr);
  std::vector<std::vector<float>> values;
  for (auto& p : model.parameters()) values.emplace_back(p.tensor.values().begin(), p.tensor.values().end());
  return values;
}

// The mean of |a − b| over every parameter element of two checkpoints.
inline double mean_difference(const fs::path& a, const fs::path& b) {
  auto pa = parameters_of(a), pb = parameters_of(b);
  REQUIRE(pa.size() == pb.size());
  double sum = 0;
  std::size_t count = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].size() == pb[i].size());
    for (std::size_t j = 0; j < pa[i].size(); ++j) sum += std::abs(pa[i][j] - pb[i][j]);
    count += pa[i].size();
  }
  return sum / static_cast<double>(count);
}

inline float max_difference(const fs::path& a, const fs::path& b) {
  auto pa = parameters_of(a), pb = parameters_of(b);
  REQUIRE(pa.size() == pb.size());
  float worst = 0.0f;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].size() == pb[i].size());
    for (std::size_t j = 0; j < pa[i].size(); ++j) worst = std::max(worst, std::abs(pa[i][j] - pb[i][j]));
  }
  return worst;
}

// Two runs that differ only by bf16 rounding (--grad-comm bf16, --precision bf16, or the
// order of fp32 sums flipping a bf16 rounding): bf16 keeps 8 significant bits, so a gradient
// is off by a few 2⁻⁸ of its size. AdamW divides by √v, so a parameter moves ≈ lr per step
// either way; only elements whose gradient is near 0 (where rounding can flip its sign) can
// move up to 2·lr differently. Hence: the mean difference far below one step (< 0.05·lr),
// the largest ≤ 2·lr per step. Returns the mean.
inline double check_within_bf16_rounding(const fs::path& a, const fs::path& b, int steps, double lr) {
  const double mean = mean_difference(a, b);
  const float worst = max_difference(a, b);
  INFO(a.parent_path().filename().string() << " and " << b.parent_path().filename().string() << " differ by " << mean
                                           << " on average, " << worst << " at most");
  CHECK(mean < 0.05 * lr);
  CHECK(worst <= 2 * steps * lr);
  return mean;
}

inline bool same_bytes(const fs::path& a, const fs::path& b) {
  return nn::read_whole_file(a) == nn::read_whole_file(b);
}

// Starts `command` (an mpiexec job), waits for the first state.json in `checkpoint_dir`, then
// presses Ctrl-C (SIGINT to mpiexec). Its output, then "exit=<status>".
inline CommandResult interrupt_after_first_checkpoint(const std::string& command, const fs::path& checkpoint_dir) {
  const fs::path log = checkpoint_dir.parent_path().string() + ".log";
  fs::remove_all(checkpoint_dir.parent_path());
  const std::string script = fmt::format(
      "{} > {} 2>&1 & pid=$!; for i in $(seq 3000); do [ -f {}/state.json ] && break; sleep 0.02; done; "
      "kill -INT $pid; wait $pid; echo exit=$?; cat {}",
      command, log.string(), checkpoint_dir.string(), log.string());
  CommandResult r = run_command("bash -c '" + script + "'");
  UNSCOPED_INFO("$ " << command << " (Ctrl-C after the first checkpoint)\n" << r.output);
  return r;
}

// As above until the interrupt note is printed, at most `attempts` times (each from scratch):
// Open MPI ends a job's ranks with SIGKILL one second after SIGTERM or when one has exited, so
// now and then rank 0 is gone before its handler runs (docs/timeouts.md). The attempt with the
// note, or the last.
inline CommandResult interrupt_until_noted(const std::string& command, const fs::path& checkpoint_dir,
                                           int attempts = 3) {
  CommandResult r;
  for (int i = 0; i < attempts; ++i) {
    r = interrupt_after_first_checkpoint(command, checkpoint_dir);
    if (r.output.find("interrupted at step") != std::string::npos) break;
  }
  return r;
}

// The exact loss over the whole validation split a run printed ("val_loss_full=3.652106"), as
// text: layouts that evaluate the same model print the same digits.
inline std::string printed_val_loss_full(const std::string& output) {
  const std::string marker = "val_loss_full=";
  const auto at = output.find(marker);
  REQUIRE(at != std::string::npos);
  return output.substr(at + marker.size(), 8);
}

// The step an interrupted run's note names: "interrupted at step S; …" → S (-1 if none).
inline long interrupted_step(const std::string& output) {
  const std::string marker = "interrupted at step ";
  const auto at = output.find(marker);
  return at == std::string::npos ? -1 : std::stol(output.substr(at + marker.size()));
}

// The command an interrupted run printed after "resume with: " (empty if it printed none).
inline std::string printed_resume_command(const std::string& output) {
  const std::string marker = "resume with: ";
  const auto at = output.find(marker);
  if (at == std::string::npos) return "";
  const auto end = output.find('\n', at);
  return output.substr(at + marker.size(), end == std::string::npos ? std::string::npos : end - at - marker.size());
}

// Steps a run must last for a Ctrl-C sent after its first checkpoint to land inside it: under
// the sanitizers a step is about 3× slower, so a third of the steps last as long (and the
// [alone] cases that run them twice, with nothing beside them, take a third of the time).
#if defined(__SANITIZE_ADDRESS__)
inline int steps_outlasting_ctrl_c(int release_steps) { return release_steps / 3; }
#else
inline int steps_outlasting_ctrl_c(int release_steps) { return release_steps; }
#endif

// `run` on `ranks` ranks of `program` twice: once to the end (into out(straight)), once
// interrupted with Ctrl-C after its first checkpoint (into out(stopped)) and then continued by
// the resume command it printed, run as it is. Both must end with byte-identical model and
// optimizer files; the resumed run's result is returned for more checks.
inline CommandResult ctrl_c_then_printed_resume(const char* program, int ranks, const std::string& run,
                                                const std::string& straight, const std::string& stopped) {
  REQUIRE(run_trainer(program, ranks, run + " --out-dir " + out(straight)).status == 0);
  auto interrupted =
      // Fewer log lines: after a Ctrl-C mpiexec reads no output until it ends the ranks, and a
      // rank that fills its pipe blocks there instead of saving (docs/trainers.md).
      interrupt_until_noted(mpirun(ranks, program, run + " --log-interval 20 --out-dir " + out(stopped)),
                            checkpoint(stopped));
  REQUIRE_THAT(interrupted.output, Catch::Contains("interrupted at step"));
  // Nothing finished is lost: the ranks saved the step they stopped at, and the resumed run
  // begins with the step after it.
  const long stopped_at = interrupted_step(interrupted.output);
  CHECK_THAT(interrupted.output, Catch::Contains(fmt::format("the last checkpoint (step {})", stopped_at)));
  const std::string command = printed_resume_command(interrupted.output);
  // The launcher as it was run, with its own flags (mpirun() adds --oversubscribe: more ranks
  // than cores here), run as it is — without the variable (scripts/env.sh, the test presets)
  // that would oversubscribe for a command that lost the flag.
  CHECK_THAT(command, Catch::StartsWith(mpirun(ranks, program, "--resume")));
  auto resumed = run_command("env -u OMPI_MCA_rmaps_base_oversubscribe " + command);
  UNSCOPED_INFO("$ " << command << "\n" << resumed.output);
  REQUIRE(resumed.status == 0);
  CHECK_THAT(resumed.output, Catch::Contains(fmt::format("at step {} of", stopped_at)));
  CHECK_THAT(resumed.output, !Catch::Contains("note: flags change"));
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    CHECK(same_bytes(checkpoint(straight) / file, checkpoint(stopped) / file));
  return resumed;
}

// One line saying what was wrong, a non-zero exit, and no crash dump.
inline void clean_failure(const CommandResult& r, const std::string& expected) {
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains(expected));
  CHECK_THAT(r.output, !Catch::Contains("terminate called") && !Catch::Contains("Segmentation") &&
                           !Catch::Contains("MPI_ABORT") && !Catch::Contains("core dumped"));
  std::size_t error_lines = 0;
  for (std::size_t at = r.output.find("error"); at != std::string::npos; at = r.output.find("error", at + 1))
    if (at == 0 || r.output[at - 1] == '\n') ++error_lines;
  CHECK(error_lines == 1);
}

// exit status 2 and one error line: the checks of clean_failure, plus the status.
inline void usage_failure(const CommandResult& r, const std::string& expected) {
  clean_failure(r, expected);
  CHECK(r.status == 2);
}
