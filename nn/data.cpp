#include "nn/data.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
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
    if (id < 0)
      fail("the character {:?} (byte {}) is not in the {}-character vocabulary", text.substr(i, 1),
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

TextSource find_shakespeare_text(const fs::path& data_dir, const std::optional<fs::path>& given,
                                 const TextSources& sources) {
  if (given) {
    if (!is_nonempty_file(*given)) fail("--text {}: no such file (or it is empty)", given->string());
    return {*given, "given path"};
  }
  const fs::path local = data_dir / kShakespeareRelative;
  if (is_nonempty_file(local)) return {local, "data folder"};
  if (sources.download && download(kShakespeareUrl, local)) return {local, "downloaded"};
  if (sources.mirror) {
    const fs::path copy = *sources.mirror / kShakespeareRelative;
    if (is_nonempty_file(copy)) return {copy, "mirror"};
  }
  fail(
      "no Shakespeare text: not in {}, {}, and {} {} — put input.txt there, pass --text FILE, "
      "or set {} to a folder holding {}",
      local.string(),
      sources.download ? fmt::format("the download of {} failed", kShakespeareUrl)
                       : std::string("no download tried (NANODIST_NO_DOWNLOAD)"),
      kMirrorVariable,
      sources.mirror ? fmt::format("({}) has no {}", sources.mirror->string(), kShakespeareRelative)
                     : std::string("is not set"),
      kMirrorVariable, kShakespeareRelative);
}

namespace {

void write_tokens(const fs::path& file, std::span<const int32_t> ids) {
  std::vector<uint16_t> packed(ids.begin(), ids.end());  // little-endian on every machine we run on
  write_file_atomically(file, {std::span(reinterpret_cast<const char*>(packed.data()), packed.size() * 2)});
}

}  // namespace

namespace {

// The byte offset of the first byte that breaks UTF-8, or npos. (Vocabularies travel in JSON
// — meta.json, checkpoints — which holds text, not arbitrary bytes.)
std::size_t first_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Removes a folder tree when it goes out of scope unless released (the temporary folder of
// a preparation that failed half-way).
struct RemoveOnFailure {
  fs::path dir;
  ~RemoveOnFailure() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

}  // namespace

PreparedData prepare_char_dataset(const TextSource& source, const fs::path& out_dir) {
  std::vector<char> bytes = read_whole_file(source.path);
  const std::string_view text(bytes.data(), bytes.size());
  if (text.size() < 2) fail("{}: the text is too short to split into train and val", source.path.string());
  if (const auto bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail("{}: not a UTF-8 text file (byte 0x{:02x} at offset {}); nanodist trains on text", source.path.string(),
         static_cast<unsigned char>(text[bad]), bad);
  PreparedData data;
  data.dir = out_dir;
  data.vocabulary = CharVocabulary::from_text(text);
  data.source = source.path.string();
  data.source_how = source.how;
  const std::vector<int32_t> ids = data.vocabulary.encode(text);
  const auto split = static_cast<std::size_t>(static_cast<double>(ids.size()) * 0.9);  // nanoGPT: int(n*0.9)
  data.train_tokens = static_cast<int64_t>(split);
  data.val_tokens = static_cast<int64_t>(ids.size() - split);
  nlohmann::json meta = {{"vocab_size", data.vocabulary.size()},
                         {"chars", data.vocabulary.chars()},
                         {"train_tokens", data.train_tokens},
                         {"val_tokens", data.val_tokens},
                         {"source", data.source},
                         {"source_how", data.source_how},
                         {"source_bytes", text.size()}};

  // The set is written into a temporary folder beside the real one, then renamed into place.
  // A data folder under a file, or on a read-only disk: one line naming the folder and why.
  const fs::path parent = out_dir.has_parent_path() ? out_dir.parent_path() : fs::path(".");
  std::error_code made;
  fs::create_directories(parent, made);
  RemoveOnFailure temporary{parent / fmt::format(".{}.tmp-{}", out_dir.filename().string(), ::getpid())};
  if (!made) {
    fs::remove_all(temporary.dir, made);
    fs::create_directories(temporary.dir, made);
  }
  if (made) fail("--data-dir {}: cannot write the prepared data there ({})", parent.string(), made.message());
  write_tokens(temporary.dir / "train.bin", std::span(ids).first(split));
  write_tokens(temporary.dir / "val.bin", std::span(ids).subspan(split));
  write_file_atomically(temporary.dir / "meta.json", meta.dump(2) + "\n");
  std::error_code ec;
  fs::remove_all(out_dir, ec);  // a stale set is replaced whole
  fs::rename(temporary.dir, out_dir);
  temporary.dir.clear();
  return data;
}

std::optional<PreparedData> read_prepared_data(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::nullopt;
  const std::string rebuild = fmt::format("delete the folder {} and run again to prepare it anew", dir.string());
  const fs::path meta_file = dir / "meta.json";
  if (!fs::is_regular_file(meta_file, ec)) fail("{} is incomplete (no meta.json): {}", dir.string(), rebuild);
  std::vector<char> bytes = read_whole_file(meta_file);
  PreparedData data;
  try {
    nlohmann::json meta = nlohmann::json::parse(bytes.begin(), bytes.end());
    data.dir = dir;
    data.vocabulary = CharVocabulary(meta.at("chars").get<std::string>());
    data.train_tokens = meta.at("train_tokens").get<int64_t>();
    data.val_tokens = meta.at("val_tokens").get<int64_t>();
    data.source = meta.value("source", "");
    data.source_how = meta.value("source_how", "");
    data.reused = true;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a valid meta file ({}): {}", meta_file.string(), e.what(), rebuild);
  } catch (const Error& e) {
    fail("{}: {}: {}", meta_file.string(), e.what(), rebuild);
  }
  for (auto [name, tokens] : {std::pair{"train.bin", data.train_tokens}, std::pair{"val.bin", data.val_tokens}}) {
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file, ec))
      fail("{} is incomplete ({} is missing or not a file): {}", dir.string(), name, rebuild);
    const auto size = fs::file_size(file, ec);
    if (size != static_cast<uintmax_t>(tokens) * 2)
      fail("{} is inconsistent ({} has {} bytes, meta.json says {} tokens = {} bytes): {}", dir.string(), name, size,
           tokens, tokens * 2, rebuild);
  }
  return data;
}

fs::path prepared_dir(const fs::path& data_dir, const std::optional<fs::path>& given) {
  if (!given) return data_dir / "shakespeare_char";
  std::string name;
  for (char c : given->stem().string().substr(0, 40))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  const std::vector<char> bytes = read_whole_file(*given);
  return data_dir / fmt::format("text_{}_{:016x}", name, fnv1a64(bytes));
}

PreparedData prepare_shakespeare(const fs::path& data_dir, const std::optional<fs::path>& given,
                                 const TextSources& sources) {
  if (given && !is_nonempty_file(*given)) fail("--text {}: no such file (or it is empty)", given->string());
  const fs::path out_dir = prepared_dir(data_dir, given);
  if (auto existing = read_prepared_data(out_dir)) return *existing;
  return prepare_char_dataset(find_shakespeare_text(data_dir, given, sources), out_dir);
}

std::vector<int32_t> load_tokens(const fs::path& file, int vocab_size) {
  std::vector<char> bytes = read_whole_file(file);
  if (bytes.size() % 2 != 0) fail("{}: {} bytes is not a whole number of uint16 tokens", file.string(), bytes.size());
  std::vector<int32_t> ids(bytes.size() / 2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, bytes.data() + 2 * i, 2);
    if (v >= vocab_size)
      fail("{}: token {} at position {} is outside the {}-token vocabulary", file.string(), v, i, vocab_size);
    ids[i] = v;
  }
  return ids;
}

}  // namespace nn
