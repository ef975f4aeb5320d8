// Weights and checkpoints as safetensors files (fp32, spec.md §6).
//
// Layout: an 8-byte little-endian header length N, then N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value"}}) padded with spaces so N is a
// multiple of 8, then the tensors' bytes, offsets relative to the end of the
// header. This is the standard format of the `safetensors` package, so files
// interchange with PyTorch tooling (tests/oracle/llama_ref.py reads and writes
// it by hand).
//
// Writing is atomic and durable (io/files.h AtomicFile): the bytes go to
// `path + ".tmp"`, fsync'ed, renamed over `path`, so a crash never leaves a
// half-written checkpoint under the real name. Reading seeks to one tensor at
// a time; files can be gigabytes.
//
// Element types: remat writes F32, and BF16 or F16 where a tensor asks for
// it (the final weights-only save, checkpoint.export_dtype, as torchtitan's).
// It reads all three (weights exported in half precision by remat or
// torchtitan), widened to fp32 on read: exact, every bf16 and fp16 value is
// an fp32 one.
//
// Integrity: the writer stores each tensor's CRC-32C in the metadata as
// "crc32c.<name>" (8 hex digits); read() checks it when present (files from
// other tools have none). The reader requires what the format requires: the
// tensors tile the data area exactly, without gaps or overlaps.
//
// Every problem with a file (missing, malformed, wrong dtype, a tensor absent
// or of another shape) throws InputError naming the file and what was
// expected.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace remat {

// A tensor's element type in the file (its "dtype").
enum class SafetensorsDtype : uint8_t { kF32, kBF16, kF16 };
const char* to_string(SafetensorsDtype dtype);  // "F32", "BF16", "F16"

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // numel(shape) floats, not owned
  // As stored: F32 is the floats as they are; BF16 and F16 round each to
  // nearest, ties to even (io/half_precision.h). Finite values only: an F16
  // one must fit (|x| < 65520, fits_f16); a value that does not is a
  // std::invalid_argument (a programming error: callers check first).
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
};

// Writes `tensors` (in this order), their checksums and the optional string
// metadata. Creates the parent directories if needed. Names must be unique
// and non-empty and may not be "__metadata__" (std::invalid_argument: a
// programming error); failing to write throws InputError naming `key` (the
// config key or flag the path came from). `tmp_tag`: AtomicFile's tag.
void save_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::string& key = "output", const std::string& tmp_tag = "");

class SafetensorsReader {
 public:
  // Reads and validates the header; tensor bytes stay on disk until read().
  static SafetensorsReader open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  std::vector<int64_t> shape(const std::string& name) const;
  // The string metadata, without the checksums (those are checked by read()).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has_checksum(const std::string& name) const { return info(name).crc32c.has_value(); }

  // Copies the tensor into dst (numel(expected_shape) floats, widened from
  // BF16 or F16 where the file stores those) after checking that it exists
  // and has exactly expected_shape.
  void read(const std::string& name, const std::vector<int64_t>& expected_shape, float* dst) const;

 private:
  using Stored = SafetensorsDtype;
  struct Info {
    std::vector<int64_t> shape;
    Stored stored = Stored::kF32;
    uint64_t begin = 0;              // absolute file offset of the first byte
    uint64_t bytes = 0;              // as stored: 2 per element for BF16 and F16
    std::optional<uint32_t> crc32c;  // from the metadata, if the writer stored one
  };
  const Info& info(const std::string& name) const;
  static void check_layout(const std::string& path, const std::map<std::string, Info>& tensors,
                           uint64_t data_start, uint64_t data_size);
  // One header entry, checked against the data bytes that follow the header.
  static Info parse_entry(const std::string& path, const std::string& name,
                          const nlohmann::json& entry, uint64_t data_start, uint64_t data_size);
  void take_checksums();

  std::string path_;
  std::map<std::string, Info> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace remat
