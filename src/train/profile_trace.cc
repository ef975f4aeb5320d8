#include "train/profile_trace.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/error.h"
#include "io/files.h"

namespace remat {

bool profiling_asked_by_environment() {
  const char* value = std::getenv("REMAT_PROFILE");
  const std::string setting = value == nullptr ? "" : value;
  if (setting != "" && setting != "0" && setting != "1")
    throw InputError("REMAT_PROFILE=\"" + setting +
                     "\": expected 1 (profile the run, as profiling.enable_profiling), 0 or "
                     "unset");
  return setting == "1";
}

bool profiling_on(const JobConfig& config) {
  return profiling_asked_by_environment() || config.profiling.enable_profiling;
}

std::string profile_trace_path(const std::string& dump_folder, const std::string& traces_folder,
                               int64_t step, int rank) {
  return (std::filesystem::path(dump_folder) / traces_folder /
          ("iteration_" + std::to_string(step)) / ("rank" + std::to_string(rank) + "_trace.json"))
      .string();
}

namespace {

constexpr const char* kTracesKey = "profiling.save_traces_folder";

// N of "<prefix>N<suffix>" (N digits only), else nullopt.
std::optional<int64_t> number_in(std::string_view name, std::string_view prefix,
                                 std::string_view suffix) {
  if (!name.starts_with(prefix) || !name.ends_with(suffix) ||
      name.size() == prefix.size() + suffix.size())
    return std::nullopt;
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  int64_t n = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (error != std::errc() || end != digits.data() + digits.size() || digits[0] == '-')
    return std::nullopt;
  return n;
}

}  // namespace

std::string profile_traces_folder(const JobConfig& config) {
  return (std::filesystem::path(config.job.dump_folder) / config.profiling.save_traces_folder)
      .string();
}

void create_profile_traces_folder(const JobConfig& config) {
  create_folders(profile_traces_folder(config), kTracesKey);
}

void check_profile_trace_targets(const JobConfig& config, int64_t start_step, int rank) {
  namespace fs = std::filesystem;
  const std::string folder = profile_traces_folder(config);
  const int64_t freq = config.profiling.profile_freq;
  auto traced = [&](std::optional<int64_t> step) {
    return step && *step > start_step && *step <= config.training.steps && *step % freq == 0;
  };
  // The metrics file stays open all run: a trace renamed over it would take
  // its name, and its later lines would go nowhere. Its path is resolved
  // first ("iteration_1/./rank0_trace.json", a linked iteration folder).
  const std::string& metrics = config.metrics.jsonl_path;
  if (!metrics.empty()) {
    std::error_code resolve_error;
    fs::path resolved = fs::weakly_canonical(fs::absolute(metrics), resolve_error);
    if (resolve_error) resolved = fs::path(metrics).lexically_normal();
    const fs::path m = resolved.filename();
    const fs::path iteration = resolved.parent_path();
    if (number_in(m.string(), "rank", "_trace.json") &&
        traced(number_in(iteration.filename().string(), "iteration_", "")) &&
        same_place(iteration.parent_path().string(), folder))
      throw InputError("metrics.jsonl_path: '" + metrics + "' is a name the profile traces in '" +
                       folder +
                       "' take (iteration_N/rankR_trace.json); expected another file name");
  }
  // What is already there: found now, not after the steps before it.
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = number_in(name, "iteration_", "");
    // The folder a trace of that step takes: iteration_7, not iteration_07.
    if (!traced(step) || name != "iteration_" + std::to_string(*step)) continue;
    check_output_folder(entry.path().string(), kTracesKey);
    check_output_file(profile_trace_path(config.job.dump_folder,
                                         config.profiling.save_traces_folder, *step, rank),
                      kTracesKey);
  }
}

void write_profile_trace(const std::string& path, const Program& program, const Executor& executor,
                         int64_t step) {
  const std::vector<Step>& steps = executor.schedule().steps;
  const auto& times = executor.counts().step_times;
  if (times.size() != steps.size()) {
    throw std::logic_error("profile trace: the last run was not profiled");
  }
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args", {{"name", "remat training step " + std::to_string(step)}}}});
  for (size_t i = 0; i < steps.size(); ++i) {
    const Node& node = program.nodes[steps[i].node];
    // Trace times are in microseconds.
    events.push_back(
        {{"name", node.fqn},
         {"cat", to_string(steps[i].kind)},
         {"ph", "X"},
         {"ts", times[i].start * 1e6},
         {"dur", times[i].seconds * 1e6},
         {"pid", 0},
         {"tid", 0},
         {"args", {{"op", op_info(node.kind).name}, {"phase", to_string(steps[i].kind)}}}});
  }
  const nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  const std::string text = trace.dump() + "\n";
  AtomicFile out(path, kTracesKey, /*make_folders=*/true);
  out.write(text.data(), static_cast<int64_t>(text.size()));
  out.commit();
}

}  // namespace remat
