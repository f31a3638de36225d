#include "nn/data.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/atomic_file.hpp"
#include "nn/error.hpp"

namespace nn {
namespace fs = std::filesystem;

CharVocabulary::CharVocabulary(std::string chars) : chars_(std::move(chars)) {
  for (std::size_t i = 0; i < chars_.size(); ++i) {
    auto byte = static_cast<unsigned char>(chars_[i]);
    if (id_of_byte_[byte] >= 0) fail("vocabulary: character {:?} appears twice", chars_.substr(i, 1));
    id_of_byte_[byte] = static_cast<int16_t>(i);
  }
}

CharVocabulary CharVocabulary::from_text(std::string_view text) {
  std::vector<bool> seen(256, false);
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string chars;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) chars.push_back(static_cast<char>(b));
  return CharVocabulary(std::move(chars));  // sorted by byte value, as Python's sorted(set(text))
}

std::vector<int32_t> CharVocabulary::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    int16_t id = id_of_byte_[static_cast<unsigned char>(text[i])];
    if (id < 0) fail("the character {:?} (byte {}) is not in the {}-character vocabulary", text.substr(i, 1),
                     static_cast<unsigned char>(text[i]), size());
    ids[i] = id;
  }
  return ids;
}

std::string CharVocabulary::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= size()) fail("token id {} is outside the {}-character vocabulary", id, size());
    text.push_back(chars_[static_cast<std::size_t>(id)]);
  }
  return text;
}

namespace {

bool is_nonempty_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) > 0;
}

std::string quoted(const fs::path& p) {  // for the shell: '...' with ' escaped
  std::string s = "'";
  for (char c : p.string()) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return s + "'";
}

// Downloads url to `target` with curl or wget; false when neither works (no network, ...).
bool download(const std::string& url, const fs::path& target) {
  const char* off = std::getenv("NANODIST_NO_DOWNLOAD");
  if (off && std::string(off) == "1") return false;
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  const fs::path partial = target.string() + ".part";
  const std::string commands[] = {
      fmt::format("curl -fsSL --connect-timeout 10 --max-time 120 -o {} '{}' >/dev/null 2>&1", quoted(partial), url),
      fmt::format("wget -q --timeout=10 -O {} '{}' >/dev/null 2>&1", quoted(partial), url),
  };
  for (const std::string& command : commands) {
    if (std::system(command.c_str()) == 0 && is_nonempty_file(partial)) {
      fs::rename(partial, target, ec);
      if (!ec) return true;
    }
  }
  fs::remove(partial, ec);
  return false;
}

}  // namespace

TextSource find_shakespeare_text(const fs::path& data_dir, const std::optional<fs::path>& given) {
  if (given) {
    if (!is_nonempty_file(*given)) fail("--text {}: no such file (or it is empty)", given->string());
    return {*given, "given path"};
  }
  const fs::path local = data_dir / kShakespeareRelative;
  if (is_nonempty_file(local)) return {local, "data folder"};
  if (download(kShakespeareUrl, local)) return {local, "downloaded"};
  const char* mirror = std::getenv(kMirrorVariable);
  if (mirror && *mirror) {
    const fs::path copy = fs::path(mirror) / kShakespeareRelative;
    if (is_nonempty_file(copy)) return {copy, "mirror"};
  }
  fail("no Shakespeare text: not in {}, the download of {} failed, and {} {} — put input.txt there, pass --text FILE, "
       "or set {} to a folder holding {}",
       local.string(), kShakespeareUrl, kMirrorVariable,
       mirror && *mirror ? fmt::format("({}) has no {}", mirror, kShakespeareRelative) : std::string("is not set"),
       kMirrorVariable, kShakespeareRelative);
}

namespace {

void write_tokens(const fs::path& file, std::span<const int32_t> ids) {
  std::vector<uint16_t> packed(ids.begin(), ids.end());  // little-endian on every machine we run on
  write_file_atomically(file, {std::span(reinterpret_cast<const char*>(packed.data()), packed.size() * 2)});
}

}  // namespace

PreparedData prepare_char_dataset(const fs::path& text_file, const fs::path& out_dir) {
  std::vector<char> bytes = read_whole_file(text_file);
  const std::string_view text(bytes.data(), bytes.size());
  if (text.size() < 2) fail("{}: the text is too short to split into train and val", text_file.string());
  PreparedData data;
  data.dir = out_dir;
  data.vocabulary = CharVocabulary::from_text(text);
  data.source = text_file.string();
  const std::vector<int32_t> ids = data.vocabulary.encode(text);
  const auto split = static_cast<std::size_t>(static_cast<double>(ids.size()) * 0.9);  // nanoGPT: int(n*0.9)
  data.train_tokens = static_cast<int64_t>(split);
  data.val_tokens = static_cast<int64_t>(ids.size() - split);
  fs::create_directories(out_dir);
  write_tokens(out_dir / "train.bin", std::span(ids).first(split));
  write_tokens(out_dir / "val.bin", std::span(ids).subspan(split));
  nlohmann::json meta = {{"vocab_size", data.vocabulary.size()}, {"chars", data.vocabulary.chars()},
                         {"train_tokens", data.train_tokens},    {"val_tokens", data.val_tokens},
                         {"source", data.source},                {"source_bytes", text.size()}};
  write_file_atomically(out_dir / "meta.json", meta.dump(2) + "\n");  // last: its presence means "complete"
  return data;
}

std::optional<PreparedData> read_prepared_data(const fs::path& dir) {
  const fs::path meta_file = dir / "meta.json";
  if (!fs::exists(meta_file)) return std::nullopt;
  std::vector<char> bytes = read_whole_file(meta_file);
  try {
    nlohmann::json meta = nlohmann::json::parse(bytes.begin(), bytes.end());
    PreparedData data;
    data.dir = dir;
    data.vocabulary = CharVocabulary(meta.at("chars").get<std::string>());
    data.train_tokens = meta.at("train_tokens").get<int64_t>();
    data.val_tokens = meta.at("val_tokens").get<int64_t>();
    data.source = meta.value("source", "");
    return data;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a valid meta file ({})", meta_file.string(), e.what());
  }
}

PreparedData prepare_shakespeare(const fs::path& data_dir, const std::optional<fs::path>& given) {
  const fs::path out_dir = data_dir / "shakespeare_char";
  if (!given)
    if (auto existing = read_prepared_data(out_dir)) return *existing;
  return prepare_char_dataset(find_shakespeare_text(data_dir, given).path, out_dir);
}

std::vector<int32_t> load_tokens(const fs::path& file, int vocab_size) {
  std::vector<char> bytes = read_whole_file(file);
  if (bytes.size() % 2 != 0) fail("{}: {} bytes is not a whole number of uint16 tokens", file.string(), bytes.size());
  std::vector<int32_t> ids(bytes.size() / 2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, bytes.data() + 2 * i, 2);
    if (v >= vocab_size) fail("{}: token {} at position {} is outside the {}-token vocabulary", file.string(), v, i, vocab_size);
    ids[i] = v;
  }
  return ids;
}

}  // namespace nn
