// Weights and checkpoints as safetensors files (fp32 only, spec.md §6).
//
// Layout: an 8-byte little-endian header length N, then N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value"}}) padded with spaces so N is a
// multiple of 8, then the tensors' bytes, offsets relative to the end of the
// header. This is the standard format of the `safetensors` package, so files
// interchange with PyTorch tooling (tests/oracle/llama_ref.py reads and writes
// it by hand).
//
// Writing is atomic: the bytes go to `path + ".tmp"`, which is then renamed
// over `path`, so a crash never leaves a half-written checkpoint under the
// real name. Reading seeks to one tensor at a time; files can be gigabytes.
//
// Every problem with a file (missing, malformed, wrong dtype, a tensor absent
// or of another shape) throws InputError naming the file and what was
// expected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace remat {

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // numel(shape) floats, not owned
};

// Writes `tensors` (in this order) and the optional string metadata. Creates
// the parent directories if needed. Names must be unique and non-empty and
// may not be "__metadata__" (std::invalid_argument: a programming error);
// failing to write throws InputError.
void save_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

class SafetensorsReader {
 public:
  // Reads and validates the header; tensor bytes stay on disk until read().
  static SafetensorsReader open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  std::vector<int64_t> shape(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies the tensor into dst (numel(expected_shape) floats) after checking
  // that it exists and has exactly expected_shape.
  void read(const std::string& name, const std::vector<int64_t>& expected_shape, float* dst) const;

 private:
  struct Info {
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // absolute file offset of the first byte
    uint64_t bytes = 0;
  };
  const Info& info(const std::string& name) const;

  std::string path_;
  std::map<std::string, Info> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace remat
