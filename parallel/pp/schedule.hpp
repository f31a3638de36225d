// Pipeline schedules: the order in which a stage runs the forwards and backwards of a step's
// M micro-batches and exchanges activations. They know nothing of the model: they drive a
// StageSteps (parallel/pp/stage.hpp: a PipelineStage, or a test's recorder). p stages, this one is stage r.
//
//   gpipe  all forwards, then all backwards (pp/schedule_gpipe.cpp). The naive baseline: simple, but
//          a stage holds the activations of all M micro-batches at once.
//   1f1b   p − r − 1 warm-up forwards, then one forward, one backward, …, then the remaining
//          backwards (pp/schedule_1f1b.cpp). The same bubble, but at most p − r micro-batches in flight.
//
// With V chunks per stage (--virtual-stages V > 1), 1f1b is Megatron's interleaved 1F1B and
// gpipe all forwards then all backwards over the P·V virtual stages (pp/schedule_interleaved.cpp).
//
// Both give bit-identical gradients: each micro-batch's forward and backward is the same
// computation, and both run the backwards in the order 0, 1, …, M−1, so every parameter's
// gradient sums the micro-batches in the same order (the tests check it bit for bit).
#pragma once
#include <array>
#include <string_view>

#include "parallel/pp/stage.hpp"

namespace parallel {

void run_gpipe(StageSteps& stage);
void run_1f1b(StageSteps& stage);
void run_interleaved(StageSteps& stage, bool all_forwards_first);

// --schedule, and its names on the command line and in the checkpoint.
enum class Schedule { gpipe, one_f_one_b };
inline constexpr std::array<std::string_view, 2> kScheduleNames = {"gpipe", "1f1b"};
constexpr std::string_view name_of(Schedule s) { return kScheduleNames[static_cast<std::size_t>(s)]; }

void run_schedule(Schedule schedule, StageSteps& stage);

}  // namespace parallel
