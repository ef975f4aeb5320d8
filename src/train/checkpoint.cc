#include "train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "io/half_precision.h"
#include "io/safetensors.h"
#include "train/numerics.h"

namespace remat {

namespace {
const char* kExpAvg = "optimizer.exp_avg.";
const char* kExpAvgSq = "optimizer.exp_avg_sq.";
}  // namespace

std::string checkpoint_name(int64_t step, bool sharded) {
  return "step-" + std::to_string(step) + (sharded ? "" : ".safetensors");
}

std::optional<int64_t> checkpoint_step_of(const std::string& name) {
  // Digits only: from_chars would take "step--1" as step -1.
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || !std::isdigit(name[5]))
    return std::nullopt;
  const char* const digits = name.data() + 5;
  const char* const last = name.data() + name.size();
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits, last, step);
  if (error != std::errc()) return std::nullopt;
  const std::string_view rest(end, static_cast<size_t>(last - end));
  if (rest != "" && rest != ".safetensors" && rest != ".safetensors.tmp") return std::nullopt;
  return step;
}

void require_finite(const float* data, int64_t n, const std::string& path,
                    const std::string& name) {
  if (all_finite(data, n)) return;
  int64_t i = 0;
  while (i < n && std::isfinite(data[i])) ++i;
  throw InputError("checkpoint error: '" + path + "' has tensor '" + name +
                   "' holding a non-finite value (" + std::to_string(data[i]) + " at element " +
                   std::to_string(i) +
                   "); remat never saves one: expected the state of a run that had not diverged");
}

std::string checkpoint_tensor_name(ShardPart part, const std::string& fqn) {
  return part == ShardPart::kParams   ? fqn
         : part == ShardPart::kExpAvg ? kExpAvg + fqn
                                      : kExpAvgSq + fqn;
}

void write_checkpoint_file(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                           int64_t step, const std::map<std::string, std::string>& run,
                           const std::string& key) {
  std::map<std::string, std::string> metadata = run;
  metadata["step"] = std::to_string(step);
  metadata["format"] = "remat";
  save_safetensors(path, entries, metadata, key);
}

void save_checkpoint(const std::string& path, const ModelState& state, int64_t step,
                     bool with_optimizer, const std::map<std::string, std::string>& run,
                     SafetensorsDtype weights_dtype) {
  // The file is host data: every tensor is read through a host view (its own
  // bytes on the CPU), all alive until the file is written.
  std::vector<SafetensorsEntry> entries;
  std::vector<HostView> views;
  auto add = [&](const std::string& name, const Shape& shape, const Tensor& t,
                 SafetensorsDtype dtype) {
    views.emplace_back(*state.backend, t);
    entries.push_back({name, shape, views.back().data(), dtype});
  };
  const auto& params = state.program->params;
  for (size_t i = 0; i < params.size(); ++i)
    add(params[i].fqn, params[i].shape, state.params[i], weights_dtype);
  if (with_optimizer && !state.exp_avg.empty()) {
    for (size_t i = 0; i < params.size(); ++i) {
      add(kExpAvg + params[i].fqn, params[i].shape, state.exp_avg[i], SafetensorsDtype::kF32);
      add(kExpAvgSq + params[i].fqn, params[i].shape, state.exp_avg_sq[i], SafetensorsDtype::kF32);
    }
  }
  // A checkpoint is the state to go back to: it must never hold NaN or inf.
  for (const SafetensorsEntry& e : entries) {
    if (!all_finite(e.data, numel(e.shape)))
      throw std::runtime_error("refusing to write checkpoint " + path + ": tensor '" + e.name +
                               "' holds non-finite values");
  }
  write_checkpoint_file(path, entries, step, run, "checkpoint.folder");
}

std::optional<std::string> weight_beyond_f16(const ModelState& state) {
  const auto& params = state.program->params;
  for (size_t i = 0; i < params.size(); ++i) {
    const HostView view(*state.backend, state.params[i]);
    const float* data = view.data();
    const float* end = data + state.params[i].numel();
    const float* beyond = std::find_if(data, end, [](float x) { return !fits_f16(x); });
    if (beyond != end) {
      char value[32];
      std::snprintf(value, sizeof(value), "%g", static_cast<double>(*beyond));
      return params[i].fqn + " holds " + value;
    }
  }
  return std::nullopt;
}

namespace {

// Copies the part of tensor `t`, laid at element `offset` of its unit, that
// falls in the rank's owned range [begin, end) into `owned` (which starts at
// element `begin`).
void copy_owned_part(Backend& backend, const Tensor& t, int64_t offset, int64_t begin, int64_t end,
                     float* owned) {
  const int64_t lo = std::max(begin, offset);
  const int64_t hi = std::min(end, offset + t.numel());
  if (lo >= hi) return;
  const HostView view(backend, t);
  std::copy(view.data() + (lo - offset), view.data() + (hi - offset), owned + (lo - begin));
}

}  // namespace

ReplicaShards owned_shards_of(const ModelState& state, const ShardLayout& layout, int rank,
                              bool with_optimizer) {
  ReplicaShards out;
  out.shards.program = state.program;
  out.shards.layout = &layout;
  out.shards.rank = rank;
  const bool moments = with_optimizer && !state.exp_avg.empty();
  const std::vector<const std::vector<Tensor>*> sources = {&state.params, &state.exp_avg,
                                                           &state.exp_avg_sq};
  std::vector<std::span<const float>>* spans[] = {&out.shards.params, &out.shards.exp_avg,
                                                  &out.shards.exp_avg_sq};
  out.buffers.reserve(layout.units.size() * sources.size());
  for (size_t s = 0; s < (moments ? sources.size() : 1); ++s) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const ShardUnit& unit = layout.units[u];
      const auto [begin, end] = layout.owned(u, rank);
      std::vector<float>& buffer = out.buffers.emplace_back(static_cast<size_t>(end - begin));
      for (size_t i = 0; i < unit.params.size(); ++i) {
        copy_owned_part(*state.backend, (*sources[s])[unit.params[i]], unit.offsets[i], begin, end,
                        buffer.data());
      }
      spans[s]->push_back(buffer);
    }
  }
  return out;
}

ReplicaShards owned_shards_of(const ShardedState& sharded, const ModelState& buffers,
                              bool with_optimizer) {
  const ShardLayout& layout = sharded.layout();
  ReplicaShards out;
  out.shards.program = buffers.program;
  out.shards.layout = &layout;
  out.shards.rank = sharded.rank();
  const std::vector<const std::vector<Tensor>*> sources = {&sharded.params, &sharded.exp_avg,
                                                           &sharded.exp_avg_sq};
  std::vector<std::span<const float>>* spans[] = {&out.shards.params, &out.shards.exp_avg,
                                                  &out.shards.exp_avg_sq};
  out.buffers.reserve(layout.units.size() * sources.size());
  for (size_t s = 0; s < (with_optimizer ? sources.size() : 1); ++s) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const auto [begin, end] = layout.owned(u, sharded.rank());
      const HostView shard(*buffers.backend, (*sources[s])[u]);  // starts at element begin
      std::vector<float>& buffer =
          out.buffers.emplace_back(shard.data(), shard.data() + (end - begin));
      const ShardUnit& unit = layout.units[u];
      for (size_t i = 0; s == 0 && i < unit.params.size(); ++i) {
        const ParamId p = unit.params[i];
        if (buffers.program->params[p].trainable) continue;
        copy_owned_part(*buffers.backend, buffers.params[p], unit.offsets[i], begin, end,
                        buffer.data());
      }
      spans[s]->push_back(buffer);
    }
  }
  return out;
}

namespace {

// A metadata value that must be a non-negative decimal integer, all of it
// ("1e3" is not 1, "-5" is nothing); `absent` when the key is missing.
// `minimum` is 0 or 1: a count that no run writes as 0 (ranks, batch
// sizes, microbatches, windows) is damage, not a value to resume from.
int64_t metadata_integer(const std::map<std::string, std::string>& metadata,
                         const std::string& path, const std::string& key, int64_t absent,
                         int64_t minimum = 0) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return absent;
  const std::string& text = it->second;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < minimum)
    throw InputError("checkpoint error: '" + path + "' has " + key + " metadata \"" +
                     shortened(text) + "\", expected a " +
                     (minimum > 0 ? "positive" : "non-negative") + " decimal integer");
  return value;
}

// The file is host data: read into the tensor's bytes through the backend.
void read_tensor(const SafetensorsReader& reader, const std::string& name, const Shape& shape,
                 Tensor& t, Backend& backend, const std::string& path) {
  write_from_host(backend, t, [&](float* host) {
    reader.read(name, shape, host);
    require_finite(host, numel(shape), path, name);
  });
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& path) {
  CheckpointInfo info;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError("checkpoint error: '" + path +
                     "': no such file (expected a .safetensors file, or a sharded checkpoint's "
                     "step folder)");
  if (std::filesystem::is_directory(path)) {
    const ShardedCheckpoint checkpoint = ShardedCheckpoint::open(path);
    info.step = checkpoint.index().step;
    info.run = RunRecord::read(checkpoint.index().run, path);
    return info;
  }
  const SafetensorsReader reader = SafetensorsReader::open(path);
  info.step = metadata_integer(reader.metadata(), path, "step", 0);
  info.run = RunRecord::read(reader.metadata(), path);
  return info;
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
  put("data.ranks", ranks);
  put("data.microbatches", microbatches);
  if (!settings_digest.empty()) m[kSettingsDigestKey] = settings_digest;
  return m;
}

RunRecord RunRecord::read(const std::map<std::string, std::string>& metadata,
                          const std::string& path) {
  auto get = [&](const char* key, int64_t minimum) {
    return metadata_integer(metadata, path, key, -1, minimum);
  };
  RunRecord r;
  r.steps = get("training.steps", 0);
  r.local_batch_size = get("training.local_batch_size", 1);
  r.seq_len = get("training.seq_len", 1);
  r.windows = get("data.windows", 1);
  r.next_window = get("data.next_window", 0);
  r.ranks = get("data.ranks", 1);
  r.microbatches = get("data.microbatches", 1);
  if (const auto it = metadata.find(kSettingsDigestKey); it != metadata.end()) {
    const std::string& text = it->second;
    const bool hex = text.size() == 16 && std::all_of(text.begin(), text.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (!hex)
      throw InputError("checkpoint error: '" + path + "' has " + kSettingsDigestKey +
                       " metadata \"" + shortened(text) + "\", expected 16 lowercase hex digits");
    r.settings_digest = text;
  }
  return r;
}

namespace {

// The layer index of "layers.<k>." at the start of a tensor name (after an
// optimizer prefix), or -1.
int64_t layer_of(std::string name) {
  for (const char* prefix : {kExpAvg, kExpAvgSq}) {
    if (name.rfind(prefix, 0) == 0) name.erase(0, std::string(prefix).size());
  }
  const std::string head = "layers.";
  if (name.rfind(head, 0) != 0) return -1;
  int64_t k = -1;
  const char* first = name.data() + head.size();
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, k);
  if (ec != std::errc() || end == first || end == last || *end != '.') return -1;
  return k;
}

// A checkpoint of a deeper model holds every tensor of a shallower one, so
// loading it into the shallower one would silently drop layers: a tensor of
// a layer this model does not have is refused. Other tensors the model does
// not read (a torchtitan file's buffers, say) are left unread.
void refuse_missing_layers(const std::string& path, const std::vector<Param>& params,
                           const std::vector<std::string>& names) {
  std::set<int64_t> layers;
  for (const Param& p : params) {
    if (const int64_t k = layer_of(p.fqn); k >= 0) layers.insert(k);
  }
  int64_t deepest = -1;
  std::string example;
  for (const std::string& name : names) {
    const int64_t k = layer_of(name);
    if (k < 0 || layers.count(k)) continue;
    if (k > deepest) example = name;
    deepest = std::max(deepest, k);
  }
  if (deepest < 0) return;
  throw InputError(
      "checkpoint error: '" + path + "' has tensor '" + example +
      "' of a layer this model does not have (its layers: " + std::to_string(layers.size()) +
      ", the checkpoint's: at least " + std::to_string(deepest + 1) +
      "); expected the weights of this model: check " + "model.flavor and model.n_layers");
}

// A sharded checkpoint's state, part by part and unit by unit in the
// index's order, so each shard tensor is read once.
LoadedCheckpoint load_sharded_checkpoint(const std::string& folder, ModelState& state,
                                         bool with_optimizer) {
  ShardedCheckpoint c = ShardedCheckpoint::open(folder);
  const auto& params = state.program->params;
  std::map<std::string, size_t> id_of_fqn;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!c.has(params[i].fqn))
      throw InputError("checkpoint error: '" + folder + "' has no tensor '" + params[i].fqn +
                       "' (expected the weights of this model: check model.flavor and sizes)");
    id_of_fqn[params[i].fqn] = i;
  }
  std::vector<std::string> names;
  for (const ShardIndex::Unit& unit : c.index().units) {
    for (const ShardIndex::Param& p : unit.params) names.push_back(p.fqn);
  }
  refuse_missing_layers(folder, params, names);
  const bool moments = with_optimizer && c.index().with_optimizer;
  if (moments) state.ensure_optimizer_state();
  std::vector<Tensor>* targets[] = {&state.params, &state.exp_avg, &state.exp_avg_sq};
  int64_t total = 0, done = 0;
  for (const Param& p : params) total += bytes_of(numel(p.shape), DType::kF32) * (moments ? 3 : 1);
  Progress progress("loading " + folder, total, ProgressUnit::kBytes);
  for (int part = 0; part < (moments ? 3 : 1); ++part) {
    for (const ShardIndex::Unit& unit : c.index().units) {
      for (const ShardIndex::Param& p : unit.params) {
        const auto it = id_of_fqn.find(p.fqn);
        if (it == id_of_fqn.end()) continue;  // not this model's (as a file's extra tensors)
        const Param& param = params[it->second];
        write_from_host(*state.backend, (*targets[part])[it->second], [&](float* host) {
          c.read(static_cast<ShardPart>(part), p.fqn, param.shape, 0, numel(param.shape), host);
          require_finite(host, numel(param.shape), folder,
                         checkpoint_tensor_name(static_cast<ShardPart>(part), p.fqn));
        });
        progress.update(done += bytes_of(numel(param.shape), DType::kF32));
      }
    }
  }
  return {c.index().step, moments};
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& path, ModelState& state, bool with_optimizer) {
  if (std::filesystem::is_directory(path))
    return load_sharded_checkpoint(path, state, with_optimizer);
  SafetensorsReader reader = SafetensorsReader::open(path);
  refuse_lone_shard(reader);
  const auto& params = state.program->params;
  refuse_missing_layers(path, params, reader.names());
  const bool moments = with_optimizer && reader.has(kExpAvg + params[0].fqn);
  int64_t total = 0, done = 0;
  for (const Param& p : params) total += bytes_of(numel(p.shape), DType::kF32) * (moments ? 3 : 1);
  Progress progress("loading " + path, total, ProgressUnit::kBytes);
  auto read = [&](const std::string& name, const Shape& shape, Tensor& t) {
    read_tensor(reader, name, shape, t, *state.backend, path);
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
  return {metadata_integer(reader.metadata(), path, "step", 0), moments};
}

}  // namespace remat
