// What a trainer's main() is made of, and the one function that runs it: comm's and the
// training flags, the start (comm, the GEMM engine, the threads), then --eval-only,
// --sample-only or training — the training loop (trainers/training_loop.hpp) on the
// program's strategy.
//
//   int main(int argc, char** argv) {
//     Program program{"train_xx: …"};
//     program.add_flags = [&](CLI::App& app, TrainOptions& o) { … };
//     program.make_strategy = [&](const RunStart& run, comm::Communicator& world) { … };
//     …
//     return run_trainer(argc, argv, program);
//   }
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/cli_forward.hpp"

#include "comm/communicator.hpp"
#include "trainers/inference_modes.hpp"
#include "trainers/layout_query.hpp"
#include "trainers/run_setup.hpp"
#include "trainers/train_options.hpp"
#include "trainers/training_loop.hpp"

namespace trainers {

struct Program {
  std::string description;  // the --help line
  TrainOptions defaults;    // where they differ from the main job's (--out-dir, --n-layer)
  // The program's own flags, and the ones among them that shape the run (TrainOptions::layout_flags).
  std::function<void(CLI::App&, TrainOptions&)> add_flags = [](CLI::App&, TrainOptions&) {};
  std::vector<std::string> layout_flags;
  // After the start and before any data is read: refuse a layout the world cannot hold.
  std::function<void(const TrainOptions&, comm::Communicator&)> check_world = [](const TrainOptions&,
                                                                                 comm::Communicator&) {};
  // --layout-query FROM:TO (trainers/layout_query.hpp): the layout the flags give on `from` ranks.
  std::function<LayoutQuery(const TrainOptions&, int from)> layout_query;
  // How --eval-only and --sample-only hold the checkpoint's model (inference_modes.hpp).
  LoadModel load_model = load_whole_model;
  // Builds the model on every rank from run (fresh, --init-from or --resume) and returns the
  // strategy the loop trains with. Runs after begin_run: on --resume the layout flags'
  // variables hold the checkpoint's layout.
  std::function<std::unique_ptr<Strategy>(const RunStart&, comm::Communicator&)> make_strategy;
};

int run_trainer(int argc, char** argv, const Program& program);

}  // namespace trainers
