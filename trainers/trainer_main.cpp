#include "trainers/trainer_main.hpp"

#include <CLI/CLI.hpp>
#include "comm/runtime.hpp"

namespace trainers {

int run_trainer(int argc, char** argv, const Program& program) {
  comm::Runtime runtime(argc, argv);
  return runtime.run([&] {
    CLI::App app{program.description};
    comm::Options comm_options;
    comm::add_options(app, comm_options);
    TrainOptions options = program.defaults;
    add_train_options(app, options);
    program.add_flags(app, options);
    options.layout_flags = program.layout_flags;
    comm::parse(app, argc, argv);
    finish_train_options(app, options);
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
