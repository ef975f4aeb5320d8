#include "io/safetensors.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <system_error>

#include "core/checksum.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/files.h"
#include "io/half_precision.h"
#include "io/json_error.h"

namespace remat {

// Tensor bytes are copied straight between disk and memory.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Metadata key of a tensor's CRC-32C: "crc32c.<tensor name>" -> 8 hex digits.
const std::string kChecksumPrefix = "crc32c.";

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Product of the dims, or -1 when it would exceed `limit` (a corrupt header
// must not overflow the arithmetic).
int64_t checked_numel(const std::vector<int64_t>& shape, uint64_t limit) {
  for (int64_t d : shape)
    if (d == 0) return 0;
  uint64_t n = 1;
  for (int64_t d : shape) {
    const uint64_t u = static_cast<uint64_t>(d);
    if (n > limit / u) return -1;
    n *= u;
  }
  return static_cast<int64_t>(n);
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InputError("safetensors file " + path + ": " + what);
}

// A JSON number that must be a non-negative integer.
bool as_offset(const json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

const char* to_string(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kBF16:
      return "BF16";
    case SafetensorsDtype::kF16:
      return "F16";
    case SafetensorsDtype::kF32:
      break;
  }
  return "F32";
}

namespace {

uint64_t element_bytes(SafetensorsDtype dtype) { return dtype == SafetensorsDtype::kF32 ? 4 : 2; }

// Passes the stored bytes of tensor t to `sink` (pointer, byte count) a
// block at a time: F32's floats as they are, a half type's narrowed into a
// bounded buffer (a gigabyte embedding needs no second copy of itself). The
// writer runs it twice, for the checksum the header holds and for the data.
template <typename Sink>
void stored_bytes(const SafetensorsEntry& t, int64_t n, Sink sink) {
  if (t.dtype == SafetensorsDtype::kF32) {
    if (n > 0) sink(t.data, static_cast<uint64_t>(n) * 4);
    return;
  }
  constexpr int64_t kBlock = 1 << 16;
  std::vector<uint16_t> block(static_cast<size_t>(std::min(n, kBlock)));
  const bool bf16 = t.dtype == SafetensorsDtype::kBF16;
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    for (int64_t i = 0; i < m; ++i) {
      const float x = t.data[i0 + i];
      if (!bf16 && !fits_f16(x))
        throw std::invalid_argument("save_safetensors: '" + t.name + "' holds " +
                                    std::to_string(x) + ", beyond F16's range");
      block[static_cast<size_t>(i)] = bf16 ? f32_to_bf16(x) : f32_to_f16(x);
    }
    sink(block.data(), static_cast<uint64_t>(m) * 2);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata, const std::string& key,
                      const std::string& tmp_tag) {
  json header = json::object();
  std::map<std::string, std::string> all_metadata = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const SafetensorsEntry& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw std::invalid_argument("save_safetensors: invalid tensor name '" + t.name + "'");
    if (header.contains(t.name))
      throw std::invalid_argument("save_safetensors: duplicate tensor name '" + t.name + "'");
    for (int64_t d : t.shape) {
      if (d < 0)
        throw std::invalid_argument("save_safetensors: negative dim in shape of '" + t.name + "'");
    }
    const int64_t n = checked_numel(t.shape, std::numeric_limits<uint64_t>::max() / 8);
    if (n < 0) throw std::invalid_argument("save_safetensors: shape of '" + t.name + "' overflows");
    if (n > 0 && t.data == nullptr)
      throw std::invalid_argument("save_safetensors: null data for '" + t.name + "'");
    const uint64_t bytes = static_cast<uint64_t>(n) * element_bytes(t.dtype);
    header[t.name] = {{"dtype", to_string(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    uint32_t crc = 0;
    stored_bytes(t, n, [&](const void* data, uint64_t size) { crc = crc32c(data, size, crc); });
    all_metadata[kChecksumPrefix + t.name] = crc32c_hex(crc);
    sizes.push_back(bytes);
    offset += bytes;
  }
  if (!all_metadata.empty()) header["__metadata__"] = all_metadata;

  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(header_len >> (8 * i));

  AtomicFile out(path, key, /*make_folders=*/true, tmp_tag);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<int64_t>(text.size()));
  Progress progress("saving " + path, static_cast<int64_t>(offset), ProgressUnit::kBytes);
  uint64_t written = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t n = static_cast<int64_t>(sizes[i] / element_bytes(tensors[i].dtype));
    stored_bytes(tensors[i], n, [&](const void* data, uint64_t size) {
      out.write(data, static_cast<int64_t>(size));
      progress.update(static_cast<int64_t>(written += size));
    });
  }
  out.commit();
}

namespace {

// The header's JSON object; `header_len` is its length in bytes.
json read_header(const std::string& path, uint64_t* file_size, uint64_t* header_len) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail(path, "no such file (expected a .safetensors file)");
  if (fs::is_directory(status)) fail(path, "is a directory, expected a .safetensors file");
  if (!fs::is_regular_file(status))
    fail(path, "is not a regular file (a device, FIFO or socket), expected a .safetensors file");
  *file_size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot determine its size: " + ec.message());

  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open for reading");
  note_input(path, "safetensors file");
  if (*file_size < 8)
    fail(path,
         "is " + std::to_string(*file_size) +
             " bytes long, shorter than the 8-byte header length a safetensors file starts with");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!in) fail(path, "cannot read the 8-byte header length");
  *header_len = 0;
  for (int i = 0; i < 8; ++i) *header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  if (*header_len > *file_size - 8)
    fail(path, "header length " + std::to_string(*header_len) + " is larger than the " +
                   std::to_string(*file_size - 8) +
                   " bytes that follow it (truncated or not a safetensors file)");

  std::string text(*header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(*header_len));
  if (!in) fail(path, "cannot read the " + std::to_string(*header_len) + "-byte header");
  json header;
  // A tensor named twice: the JSON object would keep only the last entry,
  // and the first one's bytes (which may overlap another tensor's) would
  // escape the checks of the offsets.
  std::set<std::string> names;
  std::string repeated;
  const json::parser_callback_t note_names = [&](int depth, json::parse_event_t event,
                                                 json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && repeated.empty() &&
        !names.insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  if (const std::string problem = json_text_problem(text); !problem.empty())
    fail(path, "header has " + problem);
  try {
    header = json::parse(text, note_names);
  } catch (const json::exception& e) {
    fail(path, "header is not valid JSON: " + json_error_text(e));
  }
  if (!repeated.empty())
    fail(path, "header names tensor '" + repeated +
                   "' twice; expected each tensor once (a damaged or hand-edited file?)");
  if (!header.is_object()) fail(path, "header must be a JSON object of tensor entries");
  return header;
}

}  // namespace

SafetensorsReader::Info SafetensorsReader::parse_entry(const std::string& path,
                                                       const std::string& name, const json& entry,
                                                       uint64_t data_start, uint64_t data_size) {
  const std::string where = "tensor '" + name + "': ";
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets"))
    fail(path, where + "expected an object with dtype, shape and data_offsets");
  const json& dtype = entry["dtype"];
  Info info;
  const std::string type = dtype.is_string() ? dtype.get<std::string>() : std::string();
  const Stored kinds[] = {Stored::kF32, Stored::kBF16, Stored::kF16};
  const Stored* kind = std::find_if(std::begin(kinds), std::end(kinds),
                                    [&](Stored k) { return type == to_string(k); });
  if (kind != std::end(kinds))
    info.stored = *kind;
  else
    fail(path, where + "dtype " + json_excerpt(dtype) +
                   " is not supported, expected \"F32\" (fp32), or \"BF16\" or \"F16\" "
                   "(read as fp32)");
  const uint64_t stored_element_bytes = element_bytes(info.stored);
  if (!entry["shape"].is_array())
    fail(path, where + "shape must be an array of non-negative integers");
  for (const json& d : entry["shape"]) {
    uint64_t u = 0;
    if (!as_offset(d, u) || u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, where + "shape must be an array of non-negative integers, got " +
                     json_excerpt(entry["shape"]));
    info.shape.push_back(static_cast<int64_t>(u));
  }
  const json& offsets = entry["data_offsets"];
  uint64_t begin = 0, end = 0;
  if (!offsets.is_array() || offsets.size() != 2 || !as_offset(offsets[0], begin) ||
      !as_offset(offsets[1], end) || begin > end)
    fail(path, where + "data_offsets must be [begin, end] with 0 <= begin <= end, got " +
                   json_excerpt(offsets));
  if (end > data_size)
    fail(path, where + "data_offsets " + json_excerpt(offsets) + " lie outside the file (" +
                   std::to_string(data_size) + " data bytes after the header)");
  const int64_t n = checked_numel(info.shape, data_size / stored_element_bytes + 1);
  if (n < 0 || static_cast<uint64_t>(n) * stored_element_bytes != end - begin)
    fail(path, where + "data_offsets " + json_excerpt(offsets) + " span " +
                   std::to_string(end - begin) + " bytes, but shape " + shape_string(info.shape) +
                   " of " + type + " needs " +
                   (n < 0 ? std::string("more") : std::to_string(n * stored_element_bytes)));
  info.begin = data_start + begin;
  info.bytes = end - begin;
  return info;
}

SafetensorsReader SafetensorsReader::open(const std::string& path) {
  uint64_t file_size = 0, header_len = 0;
  const json header = read_header(path, &file_size, &header_len);
  SafetensorsReader reader;
  reader.path_ = path;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "\"__metadata__\" must be an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          fail(path, "\"__metadata__\" value for '" + key + "' must be a string, got " +
                         json_excerpt(value));
        reader.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    reader.tensors_.emplace(name, parse_entry(path, name, entry, data_start, data_size));
  }
  check_layout(path, reader.tensors_, data_start, data_size);
  reader.take_checksums();
  return reader;
}

// The safetensors format: tensors tile the data area exactly, in some order,
// with no gap and no overlap (an overlap would alias two tensors; a gap or a
// shift hides bytes no tensor owns, the mark of a corrupt header).
void SafetensorsReader::check_layout(const std::string& path,
                                     const std::map<std::string, Info>& tensors,
                                     uint64_t data_start, uint64_t data_size) {
  std::vector<std::pair<uint64_t, const std::string*>> by_begin;
  for (const auto& [name, info] : tensors) by_begin.push_back({info.begin - data_start, &name});
  std::sort(by_begin.begin(), by_begin.end(), [&](const auto& a, const auto& b) {
    const uint64_t a_end = a.first + tensors.at(*a.second).bytes;
    const uint64_t b_end = b.first + tensors.at(*b.second).bytes;
    return a.first != b.first ? a.first < b.first : a_end < b_end;
  });
  uint64_t expected = 0;
  for (const auto& [begin, name] : by_begin) {
    if (begin != expected)
      fail(path, "tensor '" + *name + "' starts at data offset " + std::to_string(begin) +
                     ", expected " + std::to_string(expected) +
                     (begin < expected ? " (it overlaps the tensor before it)"
                                       : " (a gap no tensor owns)") +
                     ": tensors must tile the data area without gaps or overlaps");
    expected = begin + tensors.at(*name).bytes;
  }
  if (expected != data_size)
    fail(path, std::to_string(data_size - expected) +
                   " bytes after the last tensor belong to "
                   "no tensor (expected the data area to end where the last tensor ends)");
}

// Moves the "crc32c.<name>" metadata entries into the tensors they check.
void SafetensorsReader::take_checksums() {
  for (auto it = metadata_.begin(); it != metadata_.end();) {
    if (!it->first.starts_with(kChecksumPrefix)) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(kChecksumPrefix.size());
    auto tensor = tensors_.find(name);
    if (tensor == tensors_.end())
      fail(path_, "__metadata__ has a checksum for '" + name + "', which is not a tensor here");
    const std::string& hex = it->second;
    uint32_t crc = 0;
    auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), crc, 16);
    if (hex.size() != 8 || ec != std::errc() || end != hex.data() + hex.size())
      fail(path_, "__metadata__ checksum of '" + name + "' is \"" + hex +
                      "\", expected 8 hexadecimal digits");
    tensor->second.crc32c = crc;
    it = metadata_.erase(it);
  }
}

bool SafetensorsReader::has(const std::string& name) const { return tensors_.count(name) != 0; }

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

const SafetensorsReader::Info& SafetensorsReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail(path_,
         "has no tensor '" + name + "' (it holds " + std::to_string(tensors_.size()) + " tensors)");
  return it->second;
}

std::vector<int64_t> SafetensorsReader::shape(const std::string& name) const {
  return info(name).shape;
}

void SafetensorsReader::read(const std::string& name, const std::vector<int64_t>& expected_shape,
                             float* dst) const {
  const Info& t = info(name);
  if (t.shape != expected_shape)
    fail(path_, "tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " +
                    shape_string(expected_shape));
  if (t.bytes == 0) return;
  // Half-precision elements are read into the upper half of dst's bytes and
  // widened forward in place: element i's fp32 ends at byte 4i + 4, at or
  // before where element i + 1's stored bytes begin, so no extra buffer (a
  // model's embedding can be gigabytes).
  const uint64_t n = t.bytes / element_bytes(t.stored);
  unsigned char* stored = reinterpret_cast<unsigned char*>(dst) + (n * 4 - t.bytes);
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail(path_, "cannot open for reading tensor '" + name + "'");
  in.seekg(static_cast<std::streamoff>(t.begin));
  in.read(reinterpret_cast<char*>(stored), static_cast<std::streamsize>(t.bytes));
  if (!in || static_cast<uint64_t>(in.gcount()) != t.bytes)
    fail(path_, "could not read the " + std::to_string(t.bytes) + " bytes of tensor '" + name +
                    "' (file changed or truncated since it was opened?)");
  if (t.crc32c && crc32c(stored, t.bytes) != *t.crc32c)
    fail(path_, "tensor '" + name + "' fails its checksum (stored CRC-32C " +
                    crc32c_hex(*t.crc32c) + ", computed " + crc32c_hex(crc32c(stored, t.bytes)) +
                    "): the file is corrupt");
  if (t.stored == Stored::kF32) return;
  const bool bf16 = t.stored == Stored::kBF16;
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t half = 0;
    std::memcpy(&half, stored + 2 * i, 2);
    dst[i] = bf16 ? bf16_to_f32(half) : f16_to_f32(half);
  }
}

}  // namespace remat
