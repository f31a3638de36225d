// The safetensors file format (Hugging Face), which PyTorch reads with
// safetensors.torch.load_file:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][tensor bytes]
//   header = {"name": {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}, …,
//             "__metadata__": {"key": "value", …}}        offsets relative to the data start
//
// The writer writes float32 tensors; the reader also takes F64, I32 and I64 (test fixtures)
// and checks everything a truncated or corrupt file could get wrong.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "nn/tensor.hpp"

namespace nn {

struct TensorRef {
  std::string name;
  Shape shape;
  const float* data;
};

// Written atomically (a temporary file, then rename). Returns the file's size and XXH3 checksum.
struct FileDigest {
  std::size_t bytes = 0;
  uint64_t xxh3 = 0;
};
FileDigest write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path);  // reads and validates the file
  // Parses bytes already in memory; `path` only names them in errors.
  SafetensorsReader(const std::filesystem::path& path, std::vector<char> bytes);

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.contains(name); }
  const Shape& shape(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  std::vector<float> floats(const std::string& name) const;    // F32, or F64 rounded
  std::vector<double> doubles(const std::string& name) const;  // F32 or F64
  std::vector<int64_t> ints(const std::string& name) const;    // I32 or I64
  // Copies a float tensor into `into`, which must have the same shape.
  void read_into(const std::string& name, Tensor& into) const;

 private:
  struct Entry {
    std::string dtype;
    Shape shape;
    std::size_t begin, end;  // absolute offsets in bytes_
  };
  const Entry& entry(const std::string& name) const;
  void parse();
  std::filesystem::path path_;
  std::vector<char> bytes_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace nn
