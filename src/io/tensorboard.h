// TensorBoard event files, as torch.utils.tensorboard's SummaryWriter writes
// them for torchtitan's metrics.enable_tensorboard: a sequence of TFRecord
// records, each holding one Event protocol buffer. remat logs scalars only,
// so the handful of fields they use are encoded here directly; Debian ships
// neither TensorBoard's .proto files nor a library that writes these files.
//
// A record (TFRecord framing), little-endian: uint64 length, uint32 masked
// CRC-32C of those 8 bytes, the data, uint32 masked CRC-32C of the data,
// where a masked CRC is ((crc >> 15) | (crc << 17)) + 0xa282ead8.
// The fields written (tensorflow/core/util/event.proto, summary.proto):
//   Event         { double wall_time = 1; int64 step = 2;
//                   string file_version = 3; Summary summary = 5; }
//   Summary       { repeated Value value = 1; }
//   Summary.Value { string tag = 1; float simple_value = 2; }
// A file starts with an event holding file_version "brain.Event:2"; each
// scalar is then an event of its own, as SummaryWriter.add_scalar writes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/files.h"

namespace remat {

// One TFRecord record holding `data`.
std::string tfrecord(const std::string& data);

// The serialized Event a file starts with.
std::string file_version_event(double wall_time);

// The serialized Event of one scalar at `step`.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

struct Scalar {
  std::string tag;
  double value;  // stored as float, as simple_value is
};

// An event file in `folder` (created with its missing parents), named as
// SummaryWriter names one: events.out.tfevents.<unix seconds, 10 digits>.
// <host name>.<pid>.0. A log step's scalars are appended together, in one
// write(2) (LineLog::write_entry), so a killed run keeps every step it logged
// whole; a write the system refuses is an OutputError naming the file.
class TensorBoardLog {
 public:
  TensorBoardLog() = default;
  // `key` names the setting in messages (metrics.save_tb_folder).
  TensorBoardLog(const std::string& folder, const std::string& key);
  bool is_open() const { return file_.is_open(); }
  const std::string& path() const { return path_; }
  // One event per scalar, at `step`, with the wall time now.
  void add_scalars(int64_t step, const std::vector<Scalar>& scalars);

 private:
  std::string path_;
  LineLog file_;
};

}  // namespace remat
