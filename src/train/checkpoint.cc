#include "train/checkpoint.h"

#include <charconv>
#include <map>
#include <stdexcept>

#include "core/dtype.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/safetensors.h"
#include "train/numerics.h"

namespace remat {

namespace {
const char* kExpAvg = "optimizer.exp_avg.";
const char* kExpAvgSq = "optimizer.exp_avg_sq.";
}  // namespace

void save_checkpoint(const std::string& path, const ModelState& state, int64_t step,
                     bool with_optimizer, const std::map<std::string, std::string>& run) {
  // The file is host data: every tensor is read through a host view (its own
  // bytes on the CPU), all alive until the file is written.
  std::vector<SafetensorsEntry> entries;
  std::vector<HostView> views;
  auto add = [&](const std::string& name, const Shape& shape, const Tensor& t) {
    views.emplace_back(*state.backend, t);
    entries.push_back({name, shape, views.back().data()});
  };
  const auto& params = state.program->params;
  for (size_t i = 0; i < params.size(); ++i) add(params[i].fqn, params[i].shape, state.params[i]);
  if (with_optimizer && !state.exp_avg.empty()) {
    for (size_t i = 0; i < params.size(); ++i) {
      add(kExpAvg + params[i].fqn, params[i].shape, state.exp_avg[i]);
      add(kExpAvgSq + params[i].fqn, params[i].shape, state.exp_avg_sq[i]);
    }
  }
  // A checkpoint is the state to go back to: it must never hold NaN or inf.
  for (const SafetensorsEntry& e : entries) {
    if (!all_finite(e.data, numel(e.shape)))
      throw std::runtime_error("refusing to write checkpoint " + path + ": tensor '" + e.name +
                               "' holds non-finite values");
  }
  std::map<std::string, std::string> metadata = run;
  metadata["step"] = std::to_string(step);
  metadata["format"] = "remat";
  save_safetensors(path, entries, metadata, "checkpoint.folder");
}

namespace {

// A metadata value that must be a non-negative decimal integer, all of it
// ("1e3" is not 1, "-5" is nothing); `absent` when the key is missing.
int64_t metadata_integer(const SafetensorsReader& reader, const std::string& key, int64_t absent) {
  auto it = reader.metadata().find(key);
  if (it == reader.metadata().end()) return absent;
  const std::string& text = it->second;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw InputError("checkpoint error: '" + reader.path() + "' has " + key + " metadata \"" +
                     text + "\", expected a non-negative decimal integer");
  return value;
}

// The file is host data: read into the tensor's bytes through the backend.
void read_tensor(const SafetensorsReader& reader, const std::string& name, const Shape& shape,
                 Tensor& t, Backend& backend) {
  write_from_host(backend, t, [&](float* host) { reader.read(name, shape, host); });
}

}  // namespace

int64_t checkpoint_step(const SafetensorsReader& reader) {
  return metadata_integer(reader, "step", 0);
}

std::map<std::string, std::string> RunRecord::metadata() const {
  std::map<std::string, std::string> m;
  auto put = [&](const char* key, int64_t v) {
    if (v >= 0) m[key] = std::to_string(v);
  };
  put("training.steps", steps);
  put("training.local_batch_size", local_batch_size);
  put("training.seq_len", seq_len);
  put("data.windows", windows);
  put("data.next_window", next_window);
  return m;
}

RunRecord RunRecord::read(const SafetensorsReader& reader) {
  RunRecord r;
  r.steps = metadata_integer(reader, "training.steps", -1);
  r.local_batch_size = metadata_integer(reader, "training.local_batch_size", -1);
  r.seq_len = metadata_integer(reader, "training.seq_len", -1);
  r.windows = metadata_integer(reader, "data.windows", -1);
  r.next_window = metadata_integer(reader, "data.next_window", -1);
  return r;
}

int64_t load_checkpoint(const std::string& path, ModelState& state, bool with_optimizer) {
  SafetensorsReader reader = SafetensorsReader::open(path);
  const auto& params = state.program->params;
  const bool moments = with_optimizer && reader.has(kExpAvg + params[0].fqn);
  int64_t total = 0, done = 0;
  for (const Param& p : params) total += bytes_of(numel(p.shape), DType::kF32) * (moments ? 3 : 1);
  Progress progress("loading " + path, total, ProgressUnit::kBytes);
  auto read = [&](const std::string& name, const Shape& shape, Tensor& t) {
    read_tensor(reader, name, shape, t, *state.backend);
    progress.update(done += bytes_of(numel(shape), DType::kF32));
  };
  for (size_t i = 0; i < params.size(); ++i) {
    if (!reader.has(params[i].fqn)) {
      throw InputError("checkpoint error: '" + path + "' has no tensor '" + params[i].fqn +
                       "' (expected the weights of this model: check model.flavor and sizes)");
    }
    read(params[i].fqn, params[i].shape, state.params[i]);
  }
  if (moments) {
    state.ensure_optimizer_state();
    for (size_t i = 0; i < params.size(); ++i) {
      read(kExpAvg + params[i].fqn, params[i].shape, state.exp_avg[i]);
      read(kExpAvgSq + params[i].fqn, params[i].shape, state.exp_avg_sq[i]);
    }
  }
  const int64_t step = checkpoint_step(reader);
  return step;
}

}  // namespace remat
