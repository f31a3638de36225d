#include "trainers/training_data.hpp"

#include <optional>

#include <fmt/format.h>

#include "comm/error.hpp"
#include "comm/runtime.hpp"
#include "trainers/rank_agreement.hpp"
#include "trainers/text_sources.hpp"

namespace trainers {
namespace fs = std::filesystem;

// Rank 0 prepares the data (finding or downloading the text) and says where it is; then
// every rank reads it.
Splits load_data(const TrainOptions& o, comm::Communicator& world) {
  const std::optional<fs::path> text = o.text.empty() ? std::nullopt : std::optional<fs::path>(o.text);
  std::string dir, origin;
  on_rank0_then_agree(world, [&] {
    const nn::PreparedData prepared = nn::prepare_shakespeare(o.data_dir, text, text_sources_from_environment());
    dir = prepared.dir.string();
    origin = prepared.reused ? fmt::format("prepared earlier from {}", prepared.source)
                             : fmt::format("prepared now from {} ({})", prepared.source, prepared.source_how);
  });
  broadcast_text(world, dir);
  broadcast_text(world, origin);
  try {
    Splits s;
    const auto prepared = nn::read_prepared_data(dir);
    if (!prepared) nn::fail("{}: the prepared data is gone", dir);
    s.origin = origin;
    s.dir = prepared->dir;
    s.vocabulary = prepared->vocabulary;
    s.train = nn::load_tokens(s.dir / "train.bin", s.vocabulary.size());
    s.val = nn::load_tokens(s.dir / "val.bin", s.vocabulary.size());
    return s;
  } catch (const nn::Error& e) {
    throw comm::UsageError(e.what());  // the same files, the same failure on every rank
  }
}

void check_fits(const Splits& data, int block_size) {
  for (auto [name, split] : {std::pair{"train", &data.train}, std::pair{"val", &data.val}})
    if (static_cast<int64_t>(split->size()) < block_size + 1)
      throw comm::UsageError(
          fmt::format("--block-size {} is longer than the data: the {} split of {} has {} tokens "
                      "(a window needs block_size + 1)",
                      block_size, name, data.dir.string(), split->size()));
}

void check_vocabulary(const nlohmann::json& train_state, const nn::CharVocabulary& data_vocab,
                      const fs::path& data_dir) {
  const nlohmann::json& v = train_state.contains("vocabulary") ? train_state.at("vocabulary") : nlohmann::json("");
  if (!v.is_string()) throw comm::UsageError(fmt::format("the checkpoint's vocabulary is not text: {}", v.dump()));
  const std::string saved = v.get<std::string>();
  if (saved != data_vocab.chars())
    throw comm::UsageError(
        fmt::format("vocabulary mismatch: the checkpoint was trained on {} characters, the data in {} "
                    "has {} — a different text",
                    saved.size(), data_dir.string(), data_vocab.size()));
}

// Samples start from --prompt: every character must be in the vocabulary (checked before
// training, not at the first evaluation).
void check_prompt(const std::string& prompt, const nn::CharVocabulary& vocabulary) {
  try {
    vocabulary.encode(prompt);
  } catch (const nn::Error& e) {
    throw comm::UsageError(fmt::format("--prompt: {}", e.what()));
  }
}

}  // namespace trainers
