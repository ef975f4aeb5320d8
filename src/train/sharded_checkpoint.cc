#include "train/sharded_checkpoint.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "core/tensor.h"
#include "io/files.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "train/numerics.h"

namespace remat {

namespace {

constexpr const char* kShardFormat = "remat-shard";
constexpr int64_t kMaxIndexBytes = int64_t{64} << 20;
// A shard file records its save's run (the index's "run") under this prefix.
constexpr std::string_view kRunPrefix = "run.";

std::string part_prefix(ShardPart part) {
  return part == ShardPart::kParams   ? "params."
         : part == ShardPart::kExpAvg ? "exp_avg."
                                      : "exp_avg_sq.";
}

std::string tensor_name(ShardPart part, size_t unit) {
  return part_prefix(part) + std::to_string(unit);
}

std::string join_path(const std::string& folder, const std::string& name) {
  return (std::filesystem::path(folder) / name).string();
}

// The owned spans must be what the layout says: a programming error else.
void check_shards(const OwnedShards& s) {
  const size_t units = s.layout->units.size();
  const bool moments = !s.exp_avg.empty();
  if (s.params.size() != units || (moments && s.exp_avg.size() != units) ||
      s.exp_avg_sq.size() != s.exp_avg.size())
    throw std::logic_error("save_sharded_checkpoint: one span per unit expected");
  for (size_t u = 0; u < units; ++u) {
    const auto [begin, end] = s.layout->owned(u, s.rank);
    const size_t n = static_cast<size_t>(end - begin);
    if (s.params[u].size() != n ||
        (moments && (s.exp_avg[u].size() != n || s.exp_avg_sq[u].size() != n)))
      throw std::logic_error("save_sharded_checkpoint: unit " + std::to_string(u) + " of rank " +
                             std::to_string(s.rank) + " has " + std::to_string(s.params[u].size()) +
                             " elements, the layout owns " + std::to_string(n));
  }
}

// The run record a shard file holds (empty in files written before shards
// recorded it).
std::map<std::string, std::string> recorded_run(const SafetensorsReader& reader) {
  std::map<std::string, std::string> run;
  for (const auto& [key, value] : reader.metadata())
    if (key.starts_with(kRunPrefix)) run[key.substr(kRunPrefix.size())] = value;
  return run;
}

// Whether the shard file is of the save described by `step` and `run`: a
// file of another save of the step folder (another run's, or one cut short)
// is not. Where the save records no settings digest (written before shards
// recorded their run), its shards record no run and pass on their step.
std::optional<std::string> other_save(const SafetensorsReader& reader, int64_t step,
                                      const std::map<std::string, std::string>& run) {
  const auto& m = reader.metadata();
  const auto it = m.find("step");
  const std::string recorded = it == m.end() ? "(none)" : shortened(it->second);
  if (recorded != std::to_string(step))
    return "records step " + recorded + " where its save records step " + std::to_string(step);
  const std::map<std::string, std::string> shard_run = recorded_run(reader);
  if (shard_run == run || (shard_run.empty() && !run.contains(RunRecord::kSettingsDigestKey)))
    return std::nullopt;
  for (const auto& [key, value] : run) {
    const auto other = shard_run.find(key);
    if (other == shard_run.end() || other->second != value)
      return "records " + key + " = " +
             (other == shard_run.end() ? "(none)" : shortened(other->second)) +
             " where its save records " + shortened(value);
  }
  for (const auto& [key, value] : shard_run)
    if (!run.contains(key))
      return "records " + shortened(key) + " = " + shortened(value) +
             ", which its save does not record";
  return std::nullopt;  // unreachable: the records differ
}

}  // namespace

std::string shard_file_name(int rank, int ranks) {
  return "shard-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".safetensors";
}

int64_t write_shard_file(const std::string& folder, const OwnedShards& shards, int64_t step,
                         const std::map<std::string, std::string>& run,
                         const std::string& tmp_tag) {
  check_shards(shards);
  std::vector<SafetensorsEntry> entries;
  auto add = [&](ShardPart part, size_t u, std::span<const float> data) {
    if (data.empty()) return;  // a rank whose share of this unit is padding only
    const std::string name = tensor_name(part, u);
    if (!all_finite(data.data(), static_cast<int64_t>(data.size())))
      throw std::runtime_error("refusing to write checkpoint " + folder + ": rank " +
                               std::to_string(shards.rank) + "'s tensor '" + name +
                               "' holds non-finite values");
    entries.push_back({name, {static_cast<int64_t>(data.size())}, data.data()});
  };
  for (size_t u = 0; u < shards.params.size(); ++u) {
    add(ShardPart::kParams, u, shards.params[u]);
    if (shards.exp_avg.empty()) continue;
    add(ShardPart::kExpAvg, u, shards.exp_avg[u]);
    add(ShardPart::kExpAvgSq, u, shards.exp_avg_sq[u]);
  }
  std::map<std::string, std::string> metadata = {{"format", kShardFormat},
                                                 {"step", std::to_string(step)},
                                                 {"rank", std::to_string(shards.rank)},
                                                 {"ranks", std::to_string(shards.layout->ranks)}};
  for (const auto& [key, value] : run) metadata[std::string(kRunPrefix) + key] = value;
  const std::string path = join_path(folder, shard_file_name(shards.rank, shards.layout->ranks));
  save_safetensors(path, entries, metadata, "checkpoint.folder", tmp_tag);
  return static_cast<int64_t>(std::filesystem::file_size(path));
}

void write_shard_index(const std::string& folder, const Program& program, const ShardLayout& layout,
                       int64_t step, bool with_optimizer,
                       const std::map<std::string, std::string>& run,
                       const std::vector<int64_t>& file_bytes, const std::string& tmp_tag) {
  ShardIndex index;
  index.step = step;
  index.ranks = layout.ranks;
  index.with_optimizer = with_optimizer;
  index.run = run;
  for (const ShardUnit& unit : layout.units) {
    ShardIndex::Unit u{unit.block, unit.numel, unit.chunk, {}};
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const Param& p = program.params[unit.params[i]];
      u.params.push_back({p.fqn, p.shape, unit.offsets[i], unit.params[i]});
    }
    index.units.push_back(std::move(u));
  }
  for (int r = 0; r < layout.ranks; ++r) index.files.push_back(shard_file_name(r, layout.ranks));
  index.file_bytes = file_bytes;
  const std::string text = index.to_json();
  AtomicFile file(join_path(folder, kShardIndexName), "checkpoint.folder", /*make_folders=*/true,
                  tmp_tag);
  file.write(text.data(), static_cast<int64_t>(text.size()));
  file.commit();
}

bool write_shard_and_index_if_complete(const std::string& folder, const OwnedShards& shards,
                                       int64_t step, const std::map<std::string, std::string>& run,
                                       const std::string& tmp_tag) {
  write_shard_file(folder, shards, step, run, tmp_tag);
  const int ranks = shards.layout->ranks;
  std::vector<int64_t> sizes;
  for (int r = 0; r < ranks; ++r) {
    const std::string path = join_path(folder, shard_file_name(r, ranks));
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;  // not yet: its writer looks
    // A file left by another save of this step folder is not this one's.
    if (other_save(SafetensorsReader::open(path), step, run)) return false;
    sizes.push_back(static_cast<int64_t>(std::filesystem::file_size(path)));
  }
  write_shard_index(folder, *shards.program, *shards.layout, step, !shards.exp_avg.empty(), run,
                    sizes, tmp_tag);
  return true;
}

void save_sharded_checkpoint(const std::string& folder, const OwnedShards& shards, int64_t step,
                             const std::map<std::string, std::string>& run, Communicator& comm) {
  if (shards.layout->ranks != comm.size() || shards.rank != comm.rank())
    throw std::logic_error("save_sharded_checkpoint: the shards are not this rank's");
  // An index left by an earlier save of this step would, while the new shard
  // files replace the old ones, describe a mix of two saves.
  if (comm.rank() == 0) {
    std::error_code ec;
    std::filesystem::remove(join_path(folder, kShardIndexName), ec);
  }
  comm.barrier("start of the sharded checkpoint save");
  // Each rank's file size, or why it has none: -1 bad input (an unwritable
  // folder), -3 a write the system refused (disk full), -2 anything else;
  // every rank then fails the same way.
  int64_t bytes = -2;
  std::exception_ptr error;
  try {
    bytes = write_shard_file(folder, shards, step, run);
  } catch (const InputError&) {
    error = std::current_exception();
    bytes = -1;
  } catch (const OutputError&) {
    error = std::current_exception();
    bytes = -3;
  } catch (...) {
    error = std::current_exception();
  }
  const std::vector<int64_t> sizes = comm.all_gather(bytes, "all-gather of the shard file sizes");
  if (error) std::rethrow_exception(error);
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] >= 0) continue;
    const std::string message = "checkpoint " + folder + " is incomplete: rank " +
                                std::to_string(r) +
                                " could not write its shard (its message says why); no index "
                                "written";
    if (sizes[r] == -1) throw InputError(message);
    if (sizes[r] == -3) throw OutputError(message);
    throw std::runtime_error(message);
  }
  int64_t written = 1;
  if (comm.rank() == 0) {
    try {
      write_shard_index(folder, *shards.program, *shards.layout, step, !shards.exp_avg.empty(), run,
                        sizes);
    } catch (...) {
      error = std::current_exception();
      written = 0;
    }
  }
  written = comm.min(written, "agreement on the checkpoint index");
  if (error) std::rethrow_exception(error);
  if (written == 0)
    throw std::runtime_error("checkpoint " + folder +
                             " is incomplete: rank 0 could not write "
                             "its index (its message says why)");
}

namespace {

[[noreturn]] void bad_checkpoint(const std::string& path, const std::string& what) {
  throw InputError("checkpoint error: '" + path + "' " + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

void refuse_lone_shard(const SafetensorsReader& reader) {
  const auto& m = reader.metadata();
  const auto format = m.find("format");
  if (format == m.end() || format->second != kShardFormat) return;
  const auto rank = m.find("rank"), ranks = m.find("ranks");
  throw InputError(
      "checkpoint error: '" + reader.path() + "' is one shard of a sharded checkpoint" +
      (rank != m.end() && ranks != m.end()
           ? " (rank " + shortened(rank->second) + " of " + shortened(ranks->second) + ")"
           : std::string()) +
      ": expected its step folder, the one holding " + kShardIndexName);
}

namespace {

// A shard file must be the one the index names: its rank of this save.
void check_shard_metadata(const SafetensorsReader& reader, const ShardIndex& index, int rank) {
  const auto& m = reader.metadata();
  auto value = [&](const char* key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("(none)") : shortened(it->second);
  };
  if (value("format") != kShardFormat || value("rank") != std::to_string(rank) ||
      value("ranks") != std::to_string(index.ranks) || value("step") != std::to_string(index.step))
    bad_checkpoint(reader.path(), "is the shard of rank " + value("rank") + " of " +
                                      value("ranks") + " at step " + value("step") +
                                      ", the index expects rank " + std::to_string(rank) + " of " +
                                      std::to_string(index.ranks) + " at step " +
                                      std::to_string(index.step) + " (a file of another save?)");
  if (const std::optional<std::string> other = other_save(reader, index.step, index.run))
    bad_checkpoint(reader.path(), *other + " (in " + kShardIndexName +
                                      "): a file of another save, of a run with other settings?");
}

}  // namespace

ShardedCheckpoint ShardedCheckpoint::open(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string index_path = join_path(folder, kShardIndexName);
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    // Shard files without an index: a save cut short. Complete checkpoints
    // named as a run saves them: the run's checkpoint folder, not one of its
    // checkpoints. Neither: any folder.
    bool shards = false;
    std::string step_folder;  // a step folder in it, complete or not
    for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
      const std::string name = entry.path().filename().string();
      shards = shards || (name.starts_with("shard-") && name.ends_with(".safetensors"));
      const std::optional<int64_t> step = checkpoint_step_of(name);
      if (step && name == checkpoint_name(*step, /*sharded=*/true) && entry.is_directory(ec))
        step_folder = name;
    }
    if (const FoundCheckpoint latest = latest_checkpoint_in(folder, /*prefer_sharded=*/true);
        !shards && !latest.path.empty())
      bad_checkpoint(folder,
                     "is a folder of checkpoints, not one (expected one of them, such as "
                     "the latest, '" +
                         latest.path + "')");
    if (!shards && !step_folder.empty())
      bad_checkpoint(folder,
                     "is a folder of checkpoints none of which is complete: its step "
                     "folders (such as '" +
                         step_folder + "') have no " + kShardIndexName +
                         ", their saves did not finish (expected a complete checkpoint)");
    if (!shards)
      bad_checkpoint(folder, std::string("holds neither ") + kShardIndexName +
                                 " nor shard files: not a checkpoint (expected a .safetensors "
                                 "file, or a sharded checkpoint's step folder, the one holding " +
                                 kShardIndexName + ")");
    bad_checkpoint(folder, std::string("has no ") + kShardIndexName +
                               ": an incomplete sharded checkpoint (its save did not finish; "
                               "expected a step folder whose save completed, such as the one "
                               "before it)");
  }
  ShardedCheckpoint c;
  c.folder_ = folder;
  c.index_ =
      ShardIndex::parse(read_regular_file(index_path, "checkpoint index",
                                          "a remat sharded checkpoint index", kMaxIndexBytes),
                        index_path);
  for (size_t r = 0; r < c.index_.files.size(); ++r) {
    const std::string path = join_path(folder, c.index_.files[r]);
    if (!fs::is_regular_file(path, ec))
      bad_checkpoint(
          path, "is missing (expected rank " + std::to_string(r) + "'s shard, named by the index)");
    const int64_t bytes = static_cast<int64_t>(fs::file_size(path, ec));
    if (ec || bytes != c.index_.file_bytes[r])
      bad_checkpoint(path, "has " + std::to_string(bytes) + " bytes, the index records " +
                               std::to_string(c.index_.file_bytes[r]) +
                               " (truncated or replaced?)");
  }
  for (size_t u = 0; u < c.index_.units.size(); ++u)
    for (size_t i = 0; i < c.index_.units[u].params.size(); ++i)
      c.where_[c.index_.units[u].params[i].fqn] = {u, i};
  c.readers_.resize(c.index_.files.size());
  return c;
}

const std::vector<float>& ShardedCheckpoint::source(int rank, const std::string& tensor,
                                                    int64_t length) {
  if (cached_rank_ == rank && cached_tensor_ == tensor) return cached_;
  std::optional<SafetensorsReader>& reader = readers_.at(rank);
  if (!reader) {
    reader = SafetensorsReader::open(join_path(folder_, index_.files[rank]));
    check_shard_metadata(*reader, index_, rank);
  }
  cached_rank_ = -1;  // until the read below succeeds
  cached_.resize(static_cast<size_t>(length));
  reader->read(tensor, {length}, cached_.data());
  cached_rank_ = rank;
  cached_tensor_ = tensor;
  return cached_;
}

void ShardedCheckpoint::read(ShardPart part, const std::string& fqn,
                             const std::vector<int64_t>& shape, int64_t begin, int64_t end,
                             float* dst) {
  const auto it = where_.find(fqn);
  if (it == where_.end())
    bad_checkpoint(folder_, "has no tensor '" + fqn +
                                "' (expected the weights of this model: check model.flavor and "
                                "sizes)");
  const auto [u, i] = it->second;
  const ShardIndex::Unit& unit = index_.units[u];
  const ShardIndex::Param& p = unit.params[i];
  if (p.shape != shape)
    bad_checkpoint(folder_, "has '" + fqn + "' of shape " + shape_text(p.shape) + ", expected " +
                                shape_text(shape) + " (check model.flavor and sizes)");
  if (part != ShardPart::kParams && !index_.with_optimizer)
    bad_checkpoint(folder_, "has no optimizer state (saved weights only)");
  if (begin < 0 || end < begin || end > numel(shape))
    throw std::logic_error("ShardedCheckpoint::read: range outside '" + fqn + "'");
  for (int64_t lo = p.offset + begin, hi = p.offset + end; lo < hi;) {
    const int rank = static_cast<int>(lo / unit.chunk);
    const int64_t first = rank * unit.chunk;
    const int64_t last = std::min(unit.numel, first + unit.chunk);
    const int64_t take = std::min(hi, last);
    const std::vector<float>& src = source(rank, tensor_name(part, u), last - first);
    std::copy(src.begin() + (lo - first), src.begin() + (take - first), dst);
    dst += take - lo;
    lo = take;
  }
}

void ShardedCheckpoint::read_owned(ShardPart part, const Program& program,
                                   const ShardLayout& layout, size_t unit, int rank, float* dst) {
  const auto [begin, end] = layout.owned(unit, rank);
  const ShardUnit& u = layout.units.at(unit);
  for (size_t i = 0; i < u.params.size(); ++i) {
    const Param& p = program.params[u.params[i]];
    const int64_t lo = std::max(begin, u.offsets[i]);
    const int64_t hi = std::min(end, u.offsets[i] + numel(p.shape));
    if (lo < hi) read(part, p.fqn, p.shape, lo - u.offsets[i], hi - u.offsets[i], dst + lo - begin);
  }
}

void convert_sharded_checkpoint(const std::string& folder, const std::string& out) {
  check_output_file(out, "the output file");
  ShardedCheckpoint c = ShardedCheckpoint::open(folder);
  const ShardIndex& index = c.index();
  size_t count = 0;
  for (const ShardIndex::Unit& u : index.units) count += u.params.size();
  // What loading the output would refuse is refused here, before the output
  // is written: an index of no parameters, or a run record a load rejects.
  if (count == 0)
    throw InputError("checkpoint convert: '" + folder + "/" + kShardIndexName +
                     "' lists no parameters: expected the units of a model's weights");
  RunRecord::read(index.run, folder + "/" + kShardIndexName);
  // A resume from the folder takes step-N.safetensors for step N: another
  // step under that name would be resumed as N, or refused there.
  const std::string name = std::filesystem::path(out).filename().string();
  if (const std::optional<int64_t> named = checkpoint_step_of(name);
      named && name == checkpoint_name(*named, /*sharded=*/false) && *named != index.step)
    throw InputError("checkpoint convert: '" + out + "' names step " + std::to_string(*named) +
                     ", but '" + folder + "' holds step " + std::to_string(index.step) +
                     " (expected " + checkpoint_name(index.step, /*sharded=*/false) +
                     ", or a name that is not a checkpoint's)");
  // Tensors in a single-file checkpoint's order (save_checkpoint): the
  // weights by ParamId, then each parameter's two moments.
  const int parts = index.with_optimizer ? 3 : 1;
  std::vector<std::vector<float>> data(count * parts);
  std::vector<SafetensorsEntry> entries(count * parts);
  Progress progress("converting " + folder, static_cast<int64_t>(data.size()),
                    ProgressUnit::kItems);
  int64_t done = 0;
  for (int part = 0; part < parts; ++part) {  // part by part: each shard tensor read once
    for (const ShardIndex::Unit& u : index.units) {
      for (const ShardIndex::Param& p : u.params) {
        const size_t slot = part == 0 ? p.id : count + 2 * p.id + (part - 1);
        data[slot].resize(static_cast<size_t>(numel(p.shape)));
        c.read(static_cast<ShardPart>(part), p.fqn, p.shape, 0, numel(p.shape), data[slot].data());
        require_finite(data[slot].data(), numel(p.shape), folder,
                       checkpoint_tensor_name(static_cast<ShardPart>(part), p.fqn));
        entries[slot] = {checkpoint_tensor_name(static_cast<ShardPart>(part), p.fqn), p.shape,
                         data[slot].data()};
        progress.update(++done);
      }
    }
  }
  write_checkpoint_file(out, entries, index.step, index.run, "the output file");
}

}  // namespace remat
