#include "io/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/checksum.h"

namespace remat {

namespace {

// Protocol buffer wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

uint32_t masked_crc(const std::string& bytes) {
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  // A name is one path component here: a slash (which no host name has)
  // would make a folder of it.
  std::string host = name;
  for (char& ch : host)
    if (ch == '/') ch = '_';
  return host;
}

// SummaryWriter's file name for the file it opens now.
std::string event_file_name() {
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(wall_time_now()));
  return std::string("events.out.tfevents.") + stamp + "." + host_name() + "." +
         std::to_string(::getpid()) + ".0";
}

}  // namespace

std::string tfrecord(const std::string& data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string out = length;
  put_little_endian(out, masked_crc(length), 4);
  out += data;
  put_little_endian(out, masked_crc(data), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string value_message;
  put_bytes(value_message, 1, tag);
  put_float(value_message, 2, value);
  std::string summary;
  put_bytes(summary, 1, value_message);
  std::string event;
  put_double(event, 1, wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  return event;
}

TensorBoardLog::TensorBoardLog(const std::string& folder, const std::string& key)
    : path_((std::filesystem::path(folder) / event_file_name()).string()),
      file_(path_, key, /*append=*/false) {
  file_.write_entry(tfrecord(file_version_event(wall_time_now())));
}

void TensorBoardLog::add_scalars(int64_t step, const std::vector<Scalar>& scalars) {
  const double now = wall_time_now();
  std::string records;
  for (const Scalar& s : scalars)
    records += tfrecord(scalar_event(now, step, s.tag, static_cast<float>(s.value)));
  file_.write_entry(records);
}

}  // namespace remat
