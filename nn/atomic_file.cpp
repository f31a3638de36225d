#include "nn/atomic_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <unistd.h>

#define XXH_INLINE_ALL  // header-only: nothing to link
#include <xxhash.h>

#include "nn/error.hpp"

namespace nn {

void write_file_atomically(const std::filesystem::path& path, const std::vector<std::span<const char>>& pieces) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot write: {}", tmp.string(), std::strerror(errno));
  bool ok = true;
  for (auto piece : pieces) ok = ok && std::fwrite(piece.data(), 1, piece.size(), f) == piece.size();
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("{}: write failed: {}", tmp.string(), std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename into place: {}", path.string(), ec.message());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, {std::span<const char>(text.data(), text.size())});
}

uint64_t fnv1a64(std::span<const char> bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

uint64_t xxh3_64(const std::vector<std::span<const char>>& pieces) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (auto piece : pieces) XXH3_64bits_update(&state, piece.data(), piece.size());
  return XXH3_64bits_digest(&state);
}

std::vector<char> read_whole_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: is a folder, not a file", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::vector<char> bytes(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) fail("{}: read failed", path.string());
  return bytes;
}

}  // namespace nn
