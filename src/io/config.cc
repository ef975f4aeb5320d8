// The job config loader: TOML file -> overrides -> validation, run in that
// order by parse_job_config; each part is a file of its own beside this one
// (io/config_parts.h), this file the entry points io/config.h declares.
#include "io/config.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>

#include "core/error.h"
#include "io/config_parts.h"
#include "io/files.h"

namespace remat {

using config_parts::apply_overrides;
using config_parts::apply_toml;
using config_parts::Field;
using config_parts::fields_of;
using config_parts::join;
using config_parts::parse_size;
using config_parts::Schema;
using config_parts::sets_no_keys;
using config_parts::toml_value;
using config_parts::validate;

double parse_memory_size(const std::string& text) { return parse_size(text); }

bool sharded_checkpoints(const JobConfig& config) {
  return config.checkpoint.format == "sharded" ||
         (config.checkpoint.format == "auto" && config.parallelism.data_parallel_shard_degree > 1);
}

int64_t max_training_threads() {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min<int64_t>(4 * cores, 1024);
}

JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  JobConfig config;
  Schema schema(config);
  apply_toml(schema, toml_text, source_name);
  apply_overrides(schema, overrides);
  validate(config, schema);
  // One process holds every rank there is.
  if (config.parallelism.data_parallel_shard_degree == -1)
    config.parallelism.data_parallel_shard_degree = 1;
  config.ignored_keys = schema.ignored_keys();
  return config;
}

std::string format_ignored_keys(const JobConfig& config) {
  if (config.ignored_keys.empty()) return "";
  return "ignored on this engine: " + join(config.ignored_keys, ", ");
}

std::vector<std::pair<std::string, std::string>> job_config_settings(const JobConfig& config) {
  JobConfig copy = config;  // fields_of points into the config it is given
  std::vector<std::pair<std::string, std::string>> settings;
  for (const Field& f : fields_of(copy))
    if (!f.alias) settings.emplace_back(f.name(), toml_value(f.ref));
  return settings;
}

std::string format_job_config(const JobConfig& config) {
  std::string out, section;
  for (const auto& [name, value] : job_config_settings(config)) {
    const size_t dot = name.find('.');  // section names have none
    if (name.substr(0, dot) != section) {
      section = name.substr(0, dot);
      out += (out.empty() ? "[" : "\n[") + section + "]\n";
    }
    out += name.substr(dot + 1) + " = " + value + "\n";
  }
  return out;
}

void note_job_inputs(const JobConfig& config) {
  auto note = [](const std::string& path, const std::string& what) {
    if (!path.empty()) note_input(path, what);
  };
  note(config.training.dataset_path, "dataset (training.dataset_path)");
  note(config.validation.dataset, "validation dataset (validation.dataset)");
  note(config.model.tokenizer_path, "tokenizer file (model.tokenizer_path)");
  if (config.model.tokenizer != "byte")
    note(config.model.tokenizer, "tokenizer file (model.tokenizer)");
  note(config.checkpoint.load, "checkpoint (checkpoint.load)");
  std::error_code ec;
  if (!config.checkpoint.load.empty() &&
      std::filesystem::is_directory(config.checkpoint.load, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(config.checkpoint.load, ec))
      note(entry.path().string(), "checkpoint file (checkpoint.load)");
  }
}

JobConfig load_job_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  try {
    // A job config is a few kilobytes; 16 MiB bounds what a mistaken path
    // (a dataset, /proc/...) can make remat read.
    text = read_regular_file(path, "config file", "a TOML file", int64_t{16} << 20);
  } catch (const InputError& e) {
    throw InputError(std::string("config error: ") + e.what() +
                     " (a TOML job config, e.g. configs/llama3_debug.toml)");
  }
  JobConfig config = parse_job_config(text, path, overrides);
  if (sets_no_keys(text))
    std::fprintf(stderr,
                 "note: config file '%s' sets no keys: the run uses the built-in defaults "
                 "(and any --section.key overrides)\n",
                 path.c_str());
  return config;
}

}  // namespace remat
