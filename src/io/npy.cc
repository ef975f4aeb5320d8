// .npy reader and writers. Format: "\x93NUMPY", major, minor, a little-endian
// header length (2 bytes in 1.0, 4 bytes in 2.0/3.0), then a Python dict
// literal {'descr': '<u2', 'fortran_order': False, 'shape': (N,), } padded with
// spaces and a newline, then the raw data.
#include "io/npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/progress.h"
#include "io/files.h"

namespace remat {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the .npy code reads and writes little-endian data in place");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InputError("token file error: '" + path + "': " + what);
}

// The header dict's values, as far as a token file needs them.
struct HeaderValue {
  std::string text;            // a string's contents, or a bare word (True, False)
  std::vector<int64_t> tuple;  // a shape
  bool is_tuple = false;
  bool is_word = false;  // unquoted: a Python literal, not a string
};

// A parser for the small Python-literal subset numpy writes in headers.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : s_(text) {}

  // Returns false on anything it does not understand.
  bool parse(std::map<std::string, HeaderValue>& out) {
    skip();
    if (!eat('{')) return false;
    while (true) {
      skip();
      if (eat('}')) return true;
      std::string key;
      if (!string(key)) return false;
      skip();
      if (!eat(':')) return false;
      skip();
      HeaderValue value;
      if (peek() == '(') {
        if (!tuple(value.tuple)) return false;
        value.is_tuple = true;
      } else if (peek() == '\'' || peek() == '"') {
        if (!string(value.text)) return false;
      } else if (word(value.text)) {
        value.is_word = true;
      } else {
        return false;
      }
      out[key] = value;
      skip();
      if (eat(',')) continue;
      skip();
      if (eat('}')) return true;
      return false;
    }
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  bool string(std::string& out) {
    char quote = peek();
    if (quote != '\'' && quote != '"') return false;
    size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return false;
    out = std::string(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return true;
  }
  bool word(std::string& out) {
    size_t start = pos_;
    while (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    out = std::string(s_.substr(start, pos_ - start));
    return !out.empty();
  }
  bool tuple(std::vector<int64_t>& out) {
    eat('(');
    while (true) {
      skip();
      if (eat(')')) return true;
      int64_t v = 0;
      size_t start = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
        v = v * 10 + (s_[pos_++] - '0');
      }
      while (eat('L')) {
      }  // Python 2 longs
      if (pos_ == start) return false;
      out.push_back(v);
      skip();
      if (eat(',')) continue;
      // "(10000)" is a parenthesised number in Python, not a tuple (numpy
      // refuses it): a one-element tuple needs its comma, "(10000,)".
      if (out.size() == 1) return false;
      skip();
      return eat(')');
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename T>
void convert(const std::string& path, const char* bytes, int64_t count, int64_t first_index,
             int32_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    if constexpr (std::numeric_limits<T>::is_signed) {
      if (v < 0)
        fail(path, "token at index " + std::to_string(first_index + i) + " is " +
                       std::to_string(v) + ", expected a token id >= 0");
    }
    if (static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      fail(path, "token at index " + std::to_string(first_index + i) + " is " + std::to_string(v) +
                     ", too large for a token id (expected < 2^31)");
    out[i] = static_cast<int32_t>(v);
  }
}

void write_npy(const std::string& path, const std::string& descr, const void* data, int64_t bytes,
               const std::vector<int64_t>& shape) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // numpy pads magic + version + length + header + '\n' to a multiple of 64.
  const size_t prefix = kMagicSize + 2 + 2;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  if (header.size() > std::numeric_limits<uint16_t>::max())
    throw std::invalid_argument("npy: shape too long for a 1.0 header");

  const uint16_t length = static_cast<uint16_t>(header.size());
  const char version[2] = {1, 0};
  AtomicFile out(path, "npy output");
  out.write(kMagic, kMagicSize);
  out.write(version, 2);
  out.write(&length, 2);
  out.write(header.data(), static_cast<int64_t>(header.size()));
  out.write(data, bytes);
  out.commit();
}

}  // namespace

namespace {

// A regular file opened for reading, and its size.
std::ifstream open_token_file(const std::string& path, int64_t* file_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) fail(path, "no such file");
  if (fs::is_directory(status)) fail(path, "is a directory, expected a .npy token file");
  if (!fs::is_regular_file(status))
    fail(path, "is not a regular file (a device, FIFO or socket), expected a .npy token file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  note_input(path, ".npy token file");
  *file_size = static_cast<int64_t>(fs::file_size(path, ec));
  return in;
}

// The header's raw dict text, after the magic, version and length fields;
// `data_offset` is where the array's bytes start.
std::string read_header_text(std::ifstream& in, const std::string& path, int64_t file_size,
                             int64_t* data_offset) {
  char prefix[kMagicSize + 2] = {};
  in.read(prefix, sizeof prefix);
  if (in.gcount() < static_cast<std::streamsize>(kMagicSize) ||
      std::memcmp(prefix, kMagic, kMagicSize) != 0)
    fail(path, "not a NumPy .npy file (expected the magic bytes \\x93NUMPY at the start)");
  if (in.gcount() < static_cast<std::streamsize>(sizeof prefix))
    fail(path, "truncated header (file ends inside the version field)");
  const int major = static_cast<unsigned char>(prefix[6]);
  const int minor = static_cast<unsigned char>(prefix[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + ", expected 1.0, 2.0 or 3.0");

  const int length_bytes = major == 1 ? 2 : 4;
  unsigned char length_raw[4] = {};
  in.read(reinterpret_cast<char*>(length_raw), length_bytes);
  if (in.gcount() < length_bytes) fail(path, "truncated header (file ends inside its length)");
  uint64_t header_length = 0;
  for (int i = length_bytes - 1; i >= 0; --i) header_length = header_length << 8 | length_raw[i];
  *data_offset = static_cast<int64_t>(kMagicSize + 2 + length_bytes + header_length);
  if (*data_offset > file_size)
    fail(path, "truncated header: it says " + std::to_string(header_length) +
                   " bytes but the file has " + std::to_string(file_size) + " in all");
  std::string header(header_length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_length));
  return header;
}

struct TokenArray {
  std::string descr;
  int item_size = 0;
  int64_t count = 0;
};

// The dtype and length of a 1-D token array, from the header dict.
TokenArray parse_token_header(const std::string& path, const std::string& header) {
  std::map<std::string, HeaderValue> dict;
  if (!HeaderParser(header).parse(dict) || !dict.count("descr") || !dict.count("shape") ||
      !dict["shape"].is_tuple || dict["descr"].is_tuple || dict["descr"].is_word)
    fail(path, "malformed header (expected a dict with 'descr', 'fortran_order' and 'shape'): " +
                   header.substr(0, 120));
  TokenArray a;
  a.descr = dict["descr"].text;
  const std::vector<int64_t> shape = dict["shape"].tuple;
  if (dict.count("fortran_order")) {
    const HeaderValue& order = dict["fortran_order"];
    if (!order.is_word || (order.text != "False" && order.text != "True"))
      fail(path, "malformed header: fortran_order is " +
                     (order.is_word ? order.text : "the string '" + order.text + "'") +
                     ", expected True or False (a Python bool)");
  }
  if (a.descr == "<u2")
    a.item_size = 2;
  else if (a.descr == "<u4" || a.descr == "<i4")
    a.item_size = 4;
  else if (a.descr == "<i8")
    a.item_size = 8;
  else
    fail(path, "unsupported dtype '" + a.descr +
                   "', expected one of '<u2' (uint16), '<u4' (uint32), '<i4' (int32), "
                   "'<i8' (int64)");

  // fortran_order True is accepted: a 1-D array has the same bytes either way.
  if (shape.size() != 1)
    fail(path, "array of shape " + shape_text(shape) + ", expected a 1-D array of token ids");
  a.count = shape[0];
  return a;
}

}  // namespace

std::vector<int32_t> read_npy_tokens(const std::string& path) {
  int64_t file_size = 0, data_offset = 0;
  std::ifstream in = open_token_file(path, &file_size);
  const TokenArray a =
      parse_token_header(path, read_header_text(in, path, file_size, &data_offset));
  const int64_t count = a.count, item_size = a.item_size;
  // First what the file holds: a header claiming more tokens than follow it
  // is a truncated (or damaged) file, whatever their number; a 1 KB file
  // whose header claims 10^11 tokens was called too large for memory.
  const int64_t available = file_size - data_offset;
  if (count > available / item_size)
    fail(path, "truncated data: the shape says " + std::to_string(count) + " tokens of " +
                   std::to_string(item_size) + " bytes but only " + std::to_string(available) +
                   " bytes follow the header");
  // Loaded whole as int32 ids: a file of more than half the RAM's worth is
  // refused here, not by the allocator (a 100 GB sparse file, say).
  const int64_t most = physical_memory_bytes() / 2 / static_cast<int64_t>(sizeof(int32_t));
  if (count > most)
    fail(path, "holds " + std::to_string(count) + " tokens, more than the " + std::to_string(most) +
                   " whose 4-byte ids fit in half of this machine's memory (expected a smaller "
                   "token file)");

  std::vector<int32_t> tokens(static_cast<size_t>(count));
  // Read in chunks so a large token file costs one int32 copy, not two.
  constexpr int64_t kChunkItems = 1 << 18;
  std::vector<char> chunk(static_cast<size_t>(std::min(count, kChunkItems) * item_size));
  Progress progress("reading " + path, count * item_size, ProgressUnit::kBytes);
  for (int64_t first = 0; first < count; first += kChunkItems) {
    const int64_t n = std::min(kChunkItems, count - first);
    progress.update(first * item_size);
    in.read(chunk.data(), n * item_size);
    if (in.gcount() != n * item_size)
      fail(path, "truncated data: read failed at token " + std::to_string(first));
    int32_t* out = tokens.data() + first;
    if (a.descr == "<u2")
      convert<uint16_t>(path, chunk.data(), n, first, out);
    else if (a.descr == "<u4")
      convert<uint32_t>(path, chunk.data(), n, first, out);
    else if (a.descr == "<i4")
      convert<int32_t>(path, chunk.data(), n, first, out);
    else
      convert<int64_t>(path, chunk.data(), n, first, out);
  }
  return tokens;
}

void write_npy_int32(const std::string& path, std::span<const int32_t> values) {
  write_npy(path, "<i4", values.data(), static_cast<int64_t>(values.size_bytes()),
            {static_cast<int64_t>(values.size())});
}

void write_npy_float32(const std::string& path, std::span<const float> data,
                       const std::vector<int64_t>& shape) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                    [](int64_t a, int64_t b) { return a * b; });
  if (n != static_cast<int64_t>(data.size()))
    throw std::invalid_argument("write_npy_float32: shape " + shape_text(shape) + " holds " +
                                std::to_string(n) + " values, data has " +
                                std::to_string(data.size()));
  write_npy(path, "<f4", data.data(), static_cast<int64_t>(data.size_bytes()), shape);
}

}  // namespace remat
