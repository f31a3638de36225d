// A checkpoint is a directory:
//
//   <dir>/model.safetensors      the model under nanoGPT's state_dict names (PyTorch:
//                                model.load_state_dict(safetensors.torch.load_file(...)))
//   <dir>/optimizer.safetensors  AdamW's moments: exp_avg.<name>, exp_avg_sq.<name>
//   <dir>/state.json             GPT config, optimizer settings and step, the trainer's
//                                state (step, RNG states, …), and each file's size and checksum
//
// Saving never destroys the previous checkpoint before the new one is complete: everything
// is written into <dir>.tmp, then <dir> is renamed to <dir>.prev, <dir>.tmp to <dir>, and
// <dir>.prev removed. If a crash falls between the two renames, loading uses <dir>.prev.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/adamw.hpp"
#include "nn/gpt.hpp"

namespace nn {

void save_checkpoint(const std::filesystem::path& dir, const GPT& model, const AdamW& optimizer,
                     const nlohmann::json& train_state);

// save_checkpoint in two halves, so that the writing can happen later, on another thread
// (nn/checkpoint_writer.hpp): a copy of everything a checkpoint holds, taken now (the model,
// AdamW's two moments: 3 floats a parameter), then written as save_checkpoint writes.
struct CheckpointSnapshot {
  struct Named {
    std::string name;
    Shape shape;
    std::vector<float> values;
  };
  std::vector<Named> model;    // state_dict order
  std::vector<Named> moments;  // exp_avg.<name>, exp_avg_sq.<name>
  nlohmann::json state;        // state.json but its "files" entry
};
// Refuses (nn::Error) a model with non-finite values: a diverged run never overwrites a good checkpoint.
CheckpointSnapshot snapshot_checkpoint(const GPT& model, const AdamW& optimizer, const nlohmann::json& train_state);
// `before_swap` runs once every file is in <dir>.tmp, before the renames (a test's kill).
void write_checkpoint(const std::filesystem::path& dir, const CheckpointSnapshot& snapshot,
                      const std::function<void()>& before_swap = {});

struct CheckpointInfo {
  std::filesystem::path dir;  // where it was found (<dir> or <dir>.prev)
  GPTConfig config;
  AdamWConfig optimizer_config;
  int64_t optimizer_steps = 0;
  nlohmann::json train_state;
};

// Reads and checks state.json (not the tensors). Throws nn::Error naming the file and problem.
CheckpointInfo read_checkpoint_info(const std::filesystem::path& dir);

// Loads the tensors into `model` (whose config must equal the checkpoint's) and, when given,
// `optimizer`. Checks sizes and checksums of both files first.
CheckpointInfo load_checkpoint(const std::filesystem::path& dir, GPT& model, AdamW* optimizer);

}  // namespace nn
