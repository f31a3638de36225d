#include "nn/safetensors.hpp"

#include <cstring>

#include <nlohmann/json.hpp>

#include "nn/atomic_file.hpp"
#include "nn/error.hpp"

namespace nn {
namespace {

std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  return 0;  // not a type this reader knows
}

template <typename T>
T load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace

FileDigest write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    std::size_t bytes = static_cast<std::size_t>(numel_of(t.shape)) * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  const uint64_t header_size = text.size();     // this machine is little-endian, as the format
  std::vector<std::span<const char>> pieces{{reinterpret_cast<const char*>(&header_size), 8},
                                            {text.data(), text.size()}};
  for (const auto& t : tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.data), numel_of(t.shape) * sizeof(float));
  write_file_atomically(path, pieces);
  FileDigest digest{.bytes = 0, .xxh3 = xxh3_64(pieces)};
  for (auto piece : pieces) digest.bytes += piece.size();
  return digest;
}

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path)
    : SafetensorsReader(path, read_whole_file(path)) {}

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path, std::vector<char> bytes)
    : path_(path), bytes_(std::move(bytes)) {
  parse();
}

void SafetensorsReader::parse() {
  const std::string where = path_.string();
  if (bytes_.size() < 8) fail("{}: truncated: {} bytes, too short for a safetensors header", where, bytes_.size());
  const uint64_t header_size = load<uint64_t>(bytes_.data());
  if (header_size > bytes_.size() - 8)
    fail("{}: truncated or corrupt: header claims {} bytes, the file has {}", where, header_size, bytes_.size() - 8);
  const std::size_t data_start = 8 + header_size;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes_.begin() + 8, bytes_.begin() + static_cast<std::ptrdiff_t>(data_start));
  } catch (const nlohmann::json::exception&) {
    fail("{}: corrupt: the header is not valid JSON", where);
  }
  if (!header.is_object()) fail("{}: corrupt: the header is not a JSON object", where);
  const std::size_t data_size = bytes_.size() - data_start;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      try {
        metadata_ = info.get<std::map<std::string, std::string>>();
      } catch (const nlohmann::json::exception&) {
        fail("{}: corrupt: __metadata__ is not a map of strings", where);
      }
      continue;
    }
    Entry e;
    try {
      e.dtype = info.at("dtype").get<std::string>();
      e.shape = info.at("shape").get<Shape>();
      auto offsets = info.at("data_offsets").get<std::vector<std::size_t>>();
      if (offsets.size() != 2) throw std::out_of_range("data_offsets");
      e.begin = offsets[0];
      e.end = offsets[1];
    } catch (const std::exception&) {
      fail("{}: corrupt: tensor '{}' lacks a valid dtype, shape or data_offsets", where, name);
    }
    const std::size_t width = dtype_bytes(e.dtype);
    if (width == 0) fail("{}: tensor '{}' has dtype {}, which nanodist does not read", where, name, e.dtype);
    for (int64_t d : e.shape)
      if (d < 0) fail("{}: corrupt: tensor '{}' has a negative dimension", where, name);
    if (e.end > data_size)
      fail("{}: truncated: tensor '{}' ends at byte {} of the data, which has only {}", where, name, e.end, data_size);
    if (e.begin > e.end || e.end - e.begin != static_cast<std::size_t>(numel_of(e.shape)) * width)
      fail("{}: corrupt: tensor '{}' has {} bytes for shape {} of {}", where, name, e.end - e.begin,
           shape_string(e.shape), e.dtype);
    e.begin += data_start;
    e.end += data_start;
    entries_.emplace(name, std::move(e));
  }
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("{}: has no tensor named '{}'", path_.string(), name);
  return it->second;
}

const Shape& SafetensorsReader::shape(const std::string& name) const { return entry(name).shape; }

std::vector<double> SafetensorsReader::doubles(const std::string& name) const {
  const Entry& e = entry(name);
  const char* p = bytes_.data() + e.begin;
  const std::size_t n = static_cast<std::size_t>(numel_of(e.shape));
  std::vector<double> out(n);
  if (e.dtype == "F32") {
    for (std::size_t i = 0; i < n; ++i) out[i] = load<float>(p + 4 * i);
  } else if (e.dtype == "F64") {
    for (std::size_t i = 0; i < n; ++i) out[i] = load<double>(p + 8 * i);
  } else {
    fail("{}: tensor '{}' is {}, not a float type", path_.string(), name, e.dtype);
  }
  return out;
}

std::vector<float> SafetensorsReader::floats(const std::string& name) const {
  std::vector<double> d = doubles(name);
  return {d.begin(), d.end()};
}

std::vector<int64_t> SafetensorsReader::ints(const std::string& name) const {
  const Entry& e = entry(name);
  const char* p = bytes_.data() + e.begin;
  const std::size_t n = static_cast<std::size_t>(numel_of(e.shape));
  std::vector<int64_t> out(n);
  if (e.dtype == "I32") {
    for (std::size_t i = 0; i < n; ++i) out[i] = load<int32_t>(p + 4 * i);
  } else if (e.dtype == "I64") {
    for (std::size_t i = 0; i < n; ++i) out[i] = load<int64_t>(p + 8 * i);
  } else {
    fail("{}: tensor '{}' is {}, not an integer type", path_.string(), name, e.dtype);
  }
  return out;
}

void SafetensorsReader::read_into(const std::string& name, Tensor& into) const {
  const Entry& e = entry(name);
  if (e.shape != into.shape())
    fail("{}: tensor '{}' has shape {}, expected {}", path_.string(), name, shape_string(e.shape),
         shape_string(into.shape()));
  if (e.dtype != "F32") fail("{}: tensor '{}' is {}, expected F32", path_.string(), name, e.dtype);
  std::memcpy(into.data(), bytes_.data() + e.begin, e.end - e.begin);
}

}  // namespace nn
