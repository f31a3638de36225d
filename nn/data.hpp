// The data step: tiny Shakespeare text → a character vocabulary and token files.
//
//   input.txt (1,115,394 chars) ─ sorted distinct chars ─> vocabulary (65 chars, id = position)
//                               ─ encode ─> tokens ─ first 90% ─> train.bin (1,003,854 tokens)
//                                                  └ last 10% ─> val.bin   (111,540 tokens)
//
// train.bin / val.bin hold uint16 little-endian token ids (nanoGPT's format); meta.json holds
// the vocabulary, the token counts and where the text came from. Tiny Shakespeare lands in
// <data_dir>/shakespeare_char/; a text given with --text in its own folder beside it,
// <data_dir>/text_<name>_<hash of its bytes>/, so it never replaces the data other runs read.
// The three files are written as a set: into a temporary folder that is renamed into place,
// so a failed or killed preparation leaves nothing behind.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace nn {

// Characters ↔ token ids: id i is the i-th of the sorted distinct characters (bytes).
class CharVocabulary {
 public:
  CharVocabulary() = default;
  explicit CharVocabulary(std::string chars);  // the sorted distinct characters
  static CharVocabulary from_text(std::string_view text);

  const std::string& chars() const { return chars_; }
  int size() const { return static_cast<int>(chars_.size()); }
  // Throws nn::Error naming the first character that is not in the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  bool operator==(const CharVocabulary& other) const { return chars_ == other.chars_; }

 private:
  std::string chars_;
  std::vector<int16_t> id_of_byte_ = std::vector<int16_t>(256, -1);
};

// Where the text was found (see find_shakespeare_text).
struct TextSource {
  std::filesystem::path path;
  std::string how;  // "given path", "data folder", "downloaded", "mirror"
};

// The canonical address of tiny Shakespeare and where copies live relative to a data folder.
inline constexpr const char* kShakespeareUrl =
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt";
inline constexpr const char* kShakespeareRelative = "tinyshakespeare/input.txt";
inline constexpr const char* kMirrorVariable = "NANODIST_DATA_MIRROR";

// Where else the text may come from, as the program's environment says (the trainers read
// NANODIST_NO_DOWNLOAD=1 and NANODIST_DATA_MIRROR where they start).
struct TextSources {
  bool download = true;                       // false: never try the network
  std::optional<std::filesystem::path> mirror;  // a folder holding tinyshakespeare/input.txt
};

// Finds the text, in this order:
//   1. `given` when the user named a file (it must exist: no fallback hides a typo);
//   2. <data_dir>/tinyshakespeare/input.txt, a copy already there;
//   3. a download of kShakespeareUrl into that place (curl or wget, when sources.download);
//   4. <sources.mirror>/tinyshakespeare/input.txt.
// Throws nn::Error with one line that says what to do when all of them fail.
TextSource find_shakespeare_text(const std::filesystem::path& data_dir,
                                 const std::optional<std::filesystem::path>& given, const TextSources& sources);

struct PreparedData {
  std::filesystem::path dir;  // <data_dir>/shakespeare_char or <data_dir>/text_<name>_<hash>
  CharVocabulary vocabulary;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::string source;      // the text file it was made from
  std::string source_how;  // how that file was found (TextSource::how)
  bool reused = false;     // true: read from an earlier preparation
};

// Encodes `text` and writes train.bin, val.bin, meta.json into `out_dir` as one set
// (replacing what was there). Throws nn::Error for text that is not UTF-8 or too short.
PreparedData prepare_char_dataset(const TextSource& text, const std::filesystem::path& out_dir);

// Reads meta.json of a prepared dataset; std::nullopt when there is none yet. Throws
// nn::Error, saying how to rebuild it, when the folder is incomplete or inconsistent.
std::optional<PreparedData> read_prepared_data(const std::filesystem::path& dir);

// Where the prepared data of a run lives: <data_dir>/shakespeare_char without `given`,
// else <data_dir>/text_<file name>_<16 hex digits of the file's hash>.
std::filesystem::path prepared_dir(const std::filesystem::path& data_dir,
                                   const std::optional<std::filesystem::path>& given);

// The whole data step: reuses the prepared folder when it exists (for --text, the hash in
// its name says the text is the same); otherwise finds the text and prepares it.
PreparedData prepare_shakespeare(const std::filesystem::path& data_dir,
                                 const std::optional<std::filesystem::path>& given, const TextSources& sources);

// Loads a token file (train.bin / val.bin) as int32 ids, checking each is < vocab_size.
std::vector<int32_t> load_tokens(const std::filesystem::path& file, int vocab_size);

}  // namespace nn
