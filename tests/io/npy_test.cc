#include "io/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/host_memory.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("remat_npy_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes an .npy file byte by byte, as numpy would, so the reader is tested
  // against the format and not against our own writer.
  std::string write_raw(const std::string& name, const std::string& header_dict,
                        const std::string& data, int major = 1) {
    std::string header = header_dict;
    const size_t prefix = 6 + 2 + (major == 1 ? 2 : 4);
    header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += static_cast<char>(major);
    bytes += '\0';
    const uint32_t n = static_cast<uint32_t>(header.size());
    bytes += static_cast<char>(n & 0xff);
    bytes += static_cast<char>((n >> 8) & 0xff);
    if (major != 1) {
      bytes += static_cast<char>((n >> 16) & 0xff);
      bytes += static_cast<char>((n >> 24) & 0xff);
    }
    bytes += header + data;
    return write_bytes(name, bytes);
  }
  std::string write_bytes(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  fs::path dir_;
};

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

std::string dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

std::string error_of(const std::string& path) {
  try {
    read_npy_tokens(path);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << path;
  return "";
}

const std::vector<int32_t> kExpected = {0, 1, 257, 65535, 7};

TEST_F(NpyTest, ReadsAllDtypesInBothVersions) {
  for (int major : {1, 2}) {
    SCOPED_TRACE(major);
    const std::string v = std::to_string(major);
    EXPECT_EQ(read_npy_tokens(write_raw("u2_" + v + ".npy", dict("<u2", "(5,)"),
                                        raw<uint16_t>({0, 1, 257, 65535, 7}), major)),
              kExpected);
    EXPECT_EQ(read_npy_tokens(write_raw("u4_" + v + ".npy", dict("<u4", "(5,)"),
                                        raw<uint32_t>({0, 1, 257, 65535, 7}), major)),
              kExpected);
    EXPECT_EQ(read_npy_tokens(write_raw("i4_" + v + ".npy", dict("<i4", "(5,)"),
                                        raw<int32_t>({0, 1, 257, 65535, 7}), major)),
              kExpected);
    EXPECT_EQ(read_npy_tokens(write_raw("i8_" + v + ".npy", dict("<i8", "(5,)"),
                                        raw<int64_t>({0, 1, 257, 65535, 7}), major)),
              kExpected);
  }
}

TEST_F(NpyTest, ReadsEmptyArrayAndHeaderVariants) {
  EXPECT_TRUE(read_npy_tokens(write_raw("empty.npy", dict("<i4", "(0,)"), "")).empty());
  // Key order and quoting as other writers produce them.
  const std::string other = "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<u2\"}";
  EXPECT_EQ(read_npy_tokens(write_raw("other.npy", other, raw<uint16_t>({3, 4}))),
            (std::vector<int32_t>{3, 4}));
}

// A file of more ids than half the RAM holds is refused from its header,
// before anything is allocated (a sparse file that large ended in
// bad_alloc); a header claiming that many over a file that ends after it is
// truncated, and said so, not called too large.
TEST_F(NpyTest, MoreTokensThanMemoryHoldsAreRefusedFromTheHeader) {
  const int64_t count = physical_memory_bytes() / 2 / 4 + 1;
  const std::string header = dict("<u2", "(" + std::to_string(count) + ",)");
  const std::string sparse = write_raw("huge.npy", header, "");
  fs::resize_file(sparse, fs::file_size(sparse) + static_cast<uintmax_t>(count) * 2);
  EXPECT_NE(error_of(sparse).find("fit in half of this machine's memory"), std::string::npos)
      << error_of(sparse);
  const std::string claims = write_raw("claims.npy", header, raw<uint16_t>({1, 2, 3}));
  const std::string e = error_of(claims);
  EXPECT_NE(e.find("truncated data: the shape says " + std::to_string(count) + " tokens"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("only 6 bytes follow the header"), std::string::npos) << e;
}

TEST_F(NpyTest, ValuesOutOfRangeNameFileAndIndex) {
  std::string p = write_raw("neg.npy", dict("<i8", "(3,)"), raw<int64_t>({1, 2, -5}));
  std::string e = error_of(p);
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_NE(e.find("index 2"), std::string::npos) << e;
  EXPECT_NE(e.find("-5"), std::string::npos) << e;
  p = write_raw("big.npy", dict("<i8", "(2,)"), raw<int64_t>({int64_t{1} << 40, 0}));
  e = error_of(p);
  EXPECT_NE(e.find("index 0"), std::string::npos) << e;
  p = write_raw("bigu4.npy", dict("<u4", "(2,)"), raw<uint32_t>({0, 0x80000000u}));
  e = error_of(p);
  EXPECT_NE(e.find("index 1"), std::string::npos) << e;
  p = write_raw("negi4.npy", dict("<i4", "(1,)"), raw<int32_t>({-1}));
  EXPECT_NE(error_of(p).find("index 0"), std::string::npos);
}

TEST_F(NpyTest, MalformedFilesNameFileAndExpectation) {
  struct Case {
    std::string path, expected;
  };
  const std::vector<Case> cases = {
      {path("missing.npy"), "no such file"},
      {dir_.string(), "is a directory"},
      {write_bytes("magic.npy", "PK\x03\x04 not numpy at all"), "expected the magic"},
      {write_bytes("short.npy", "\x93NUM"), "expected the magic"},
      {write_bytes("noversion.npy", "\x93NUMPY\x01"), "truncated header"},
      {write_bytes("nolength.npy", std::string("\x93NUMPY\x01\x00\x50", 9)), "truncated header"},
      {write_bytes("cutheader.npy", std::string("\x93NUMPY\x01\x00\x76\x00{'descr'", 18)),
       "truncated header"},
      {write_raw("truncated.npy", dict("<i4", "(10,)"), raw<int32_t>({1, 2, 3})), "truncated data"},
      {write_raw("2d.npy", dict("<i4", "(2, 2)"), raw<int32_t>({1, 2, 3, 4})),
       "expected a 1-D array"},
      {write_raw("0d.npy", dict("<i4", "()"), raw<int32_t>({1})), "expected a 1-D array"},
      {write_raw("float.npy", dict("<f4", "(2,)"), raw<float>({1.f, 2.f})),
       "unsupported dtype '<f4'"},
      {write_raw("bigendian.npy", dict(">i4", "(1,)"), raw<int32_t>({1})),
       "unsupported dtype '>i4'"},
      {write_raw("garbage.npy", "not a dict", ""), "malformed header"},
      {write_raw("v9.npy", dict("<i4", "(1,)"), raw<int32_t>({1}), 9), "format version 9.0"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.path);
    EXPECT_NE(e.find("'" + c.path + "'"), std::string::npos) << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.path << " -> " << e;
  }
}

TEST_F(NpyTest, WritersRoundTripAndLeaveNoTemporary) {
  const std::vector<int32_t> tokens = {5, 0, 2147483647, 12};
  write_npy_int32(path("t.npy"), tokens);
  EXPECT_EQ(read_npy_tokens(path("t.npy")), tokens);
  EXPECT_FALSE(fs::exists(path("t.npy.tmp")));
  // The data starts at a multiple of 64 bytes, as numpy requires.
  EXPECT_EQ(fs::file_size(path("t.npy")) % 64, 4 * tokens.size() % 64);

  const std::vector<float> values = {1.5f, -2.f, 0.f, 3.25f, 4.f, 5.f};
  write_npy_float32(path("f.npy"), values, {2, 3});
  std::ifstream in(path("f.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 10u);
  const size_t data_offset =
      10 + (static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ(data_offset % 64, 0u);
  ASSERT_EQ(bytes.size(), data_offset + 4 * values.size());
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(bytes.substr(10, 59), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  EXPECT_EQ(bytes[data_offset - 1], '\n');
  EXPECT_EQ(std::memcmp(bytes.data() + data_offset, values.data(), 4 * values.size()), 0);
  // Reading a float file as tokens is refused.
  EXPECT_NE(error_of(path("f.npy")).find("unsupported dtype"), std::string::npos);
  // Overwrite replaces the file whole.
  write_npy_int32(path("t.npy"), std::vector<int32_t>{9});
  EXPECT_EQ(read_npy_tokens(path("t.npy")), std::vector<int32_t>{9});
  EXPECT_THROW(write_npy_float32(path("bad.npy"), values, {4}), std::invalid_argument);
}

TEST_F(NpyTest, WriteToMissingFolderIsAnInputError) {
  EXPECT_THROW(write_npy_int32(path("no/such/dir/t.npy"), std::vector<int32_t>{1}), InputError);
}

}  // namespace
}  // namespace remat
