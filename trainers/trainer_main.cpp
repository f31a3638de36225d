#include "trainers/trainer_main.hpp"

#include <filesystem>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/runtime.hpp"
#include "nn/checkpoint.hpp"

namespace trainers {

namespace {

// Every flag of the program, parsed by `app` into `options` (comm's into `comm_options`).
void parse_flags(CLI::App& app, const Program& program, int argc, char** argv, comm::Options& comm_options,
                 TrainOptions& options, std::string& layout_query) {
  comm::add_options(app, comm_options);
  add_train_options(app, options);
  program.add_flags(app, options);
  app.add_option("--layout-query", layout_query,
                 "for nanodist-run: print, as one line of JSON, the layout these flags give on FROM ranks moved to "
                 "TO ranks with the global batch kept, or why it cannot run; then exit")
      ->type_name("FROM:TO");
  options.layout_flags = program.layout_flags;
  comm::parse(app, argc, argv);
  finish_train_options(app, options);
}

// --resume: the layout and model the checkpoint in --out-dir continues with, when the same
// program on as many ranks wrote it (as begin_run restores them); none there: the flags stand.
void resumed_layout(TrainOptions& options, int ranks) {
  const std::filesystem::path dir = std::filesystem::path(options.out_dir) / "checkpoint";
  if (!std::filesystem::exists(dir) && !std::filesystem::exists(dir.string() + ".prev")) return;
  const nn::CheckpointInfo info = nn::read_checkpoint_info(dir);
  options.model = info.config;
  const nlohmann::json& saved = info.train_state;
  const bool same_job = saved.is_object() && saved.value("program", "") == std::filesystem::path(options.program).filename().string() &&
                        saved.value("world_size", -1) == ranks;
  std::vector<std::string> restored;
  if (saved.is_object() && saved.contains("options") && saved.at("options").is_object())
    continue_saved_run(saved.at("options"), options, (info.dir / "state.json").string(), same_job ? &restored : nullptr);
}

// --layout-query: answered before MPI starts (the launcher runs it as a plain process).
int answer_query(const Program& program, int argc, char** argv) {
  try {
    comm::Options comm_options;
    TrainOptions options = program.defaults;
    std::string query;
    CLI::App app{program.description};
    parse_flags(app, program, argc, argv, comm_options, options, query);
    options.program = argv[0];
    const auto [from, to] = parse_layout_query(query);
    if (options.resume) resumed_layout(options, from);
    else if (!options.init_from.empty())  // the model the trainer will build: the checkpoint's
      options.model = nn::read_checkpoint_info(options.init_from).config;
    fmt::print("{}\n", answer_layout_query(program.layout_query(options, from), options, from, to).dump());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (...) {  // a bad flag: comm::parse said so
    return 2;
  }
}

}  // namespace

int run_trainer(int argc, char** argv, const Program& program) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with("--layout-query") && program.layout_query)
      return answer_query(program, argc, argv);
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    comm::Options comm_options;
    TrainOptions options = program.defaults;
    std::string layout_query;  // (answered above)
    CLI::App app{program.description};
    parse_flags(app, program, argc, argv, comm_options, options, layout_query);
    options.program = argv[0];
    options.launcher = launcher_prefix(options.program, std::getenv("NANODIST_RUN_LAUNCHER"));  // the environment, read here
    comm::Communicator& world = start_trainer(runtime, comm_options, options);
    options.check = runtime.options().check;  // the strategies' consistency checks follow it
    if (!options.resume) program.check_world(options, world);  // a resumed run's layout comes from its checkpoint
    if (options.eval_only || options.sample_only) {
      // The model computes as --precision, --attention and --fusion ask, as in training.
      if (options.eval_only) {
        say_compute(world, compute_modes(options));
        eval_only(options, world, program.load_model);
      } else {
        sample_only(options, world, program.load_model);  // prints the text alone, for a pipe
      }
    } else {
      const RunStart run = begin_run(options, world);
      const std::unique_ptr<Strategy> strategy = program.make_strategy(run, world);
      training_loop(run, *strategy, world);
    }
  });
}

}  // namespace trainers
