#include "io/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace remat {
namespace {

namespace fs = std::filesystem;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out += static_cast<char>(v);
  return out;
}

// The framing of an empty record, byte by byte: a zero length, its masked
// CRC-32C (0x07980329, computed by the Python reader in
// tests/io/test_tensorboard.py), no data, the masked CRC of nothing
// (0xa282ead8: the CRC of nothing is 0).
TEST(TensorBoardTest, EmptyRecordFraming) {
  const std::string expected =
      bytes({0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0x03, 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2});
  EXPECT_EQ(tfrecord(""), expected);
}

// A scalar event assembled by hand from the protocol buffer definitions:
// Event { wall_time = 1.5 (field 1, fixed64), step = 300 (field 2, varint:
// two bytes), summary (field 5) { value (field 1) { tag = "a" (field 1),
// simple_value = 2 (field 2, fixed32) } } }.
TEST(TensorBoardTest, ScalarEventBytes) {
  const std::string value = bytes({0x0a, 0x01, 'a', 0x15, 0x00, 0x00, 0x00, 0x40});
  const std::string summary = bytes({0x0a, 0x08}) + value;
  const std::string expected =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0xac, 0x02, 0x2a, 0x0a}) + summary;
  EXPECT_EQ(scalar_event(1.5, 300, "a", 2.0f), expected);
}

TEST(TensorBoardTest, FileVersionEventBytes) {
  const std::string expected =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x1a, 0x0d}) + "brain.Event:2";
  EXPECT_EQ(file_version_event(1.0), expected);
}

// The file: SummaryWriter's name, the version record first, then a step's
// scalars appended whole, one record each, and nothing else.
TEST(TensorBoardTest, LogFileHoldsTheVersionThenTheScalars) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("remat_tb_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::string path;
  {
    TensorBoardLog log((dir / "run").string(), "metrics.save_tb_folder");
    path = log.path();
    log.add_scalars(7, {{"loss", 1.25}, {"lr", 0.5}});
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(name.substr(name.size() - (std::to_string(getpid()) + ".0").size()),
            std::to_string(getpid()) + ".0");
  std::ifstream in(path, std::ios::binary);
  const std::string content((std::istreambuf_iterator<char>(in)), {});
  // Records framed as tfrecord frames them, events as the encoder encodes
  // them: only the wall times (now) are unknown, so compare the sizes and
  // the parts after each event's wall time.
  const std::string version = tfrecord(file_version_event(0));
  const std::string loss = tfrecord(scalar_event(0, 7, "loss", 1.25f));
  const std::string lr = tfrecord(scalar_event(0, 7, "lr", 0.5f));
  ASSERT_EQ(content.size(), version.size() + loss.size() + lr.size());
  // Each event's bytes after its 9-byte wall-time field, at offset 12 of its record.
  auto tail = [](const std::string& record) { return record.substr(12 + 9, record.size() - 25); };
  EXPECT_EQ(tail(content.substr(0, version.size())), tail(version));
  EXPECT_EQ(tail(content.substr(version.size(), loss.size())), tail(loss));
  EXPECT_EQ(tail(content.substr(version.size() + loss.size())), tail(lr));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace remat
