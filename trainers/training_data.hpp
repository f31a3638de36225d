// The training text's splits on every rank, and the one-line checks a run makes of them.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "nn/data.hpp"
#include "trainers/train_options.hpp"

namespace trainers {

struct Splits {
  nn::CharVocabulary vocabulary;
  std::vector<int32_t> train, val;
  std::filesystem::path dir;
  std::string origin;  // where the text came from, for the log
};

// Rank 0 prepares the data (finding or downloading the text) and says where it is; then
// every rank reads it.
Splits load_data(const TrainOptions& o, comm::Communicator& world);

// One-line errors (comm::UsageError) for a block_size longer than a split, a checkpoint
// trained on another text, a prompt character outside the vocabulary.
void check_fits(const Splits& data, int block_size);
void check_vocabulary(const nlohmann::json& train_state, const nn::CharVocabulary& data_vocab,
                      const std::filesystem::path& data_dir);
void check_prompt(const std::string& prompt, const nn::CharVocabulary& vocabulary);

}  // namespace trainers
