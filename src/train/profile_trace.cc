#include "train/profile_trace.h"

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "io/files.h"

namespace remat {

bool profiling_on(const JobConfig& config) {
  const char* value = std::getenv("REMAT_PROFILE");
  const std::string setting = value == nullptr ? "" : value;
  if (setting != "" && setting != "0" && setting != "1")
    throw InputError("REMAT_PROFILE=\"" + setting +
                     "\": expected 1 (profile the run, as profiling.enable_profiling), 0 or "
                     "unset");
  return config.profiling.enable_profiling || setting == "1";
}

std::string profile_trace_path(const std::string& dump_folder, const std::string& traces_folder,
                               int64_t step, int rank) {
  return (std::filesystem::path(dump_folder) / traces_folder /
          ("iteration_" + std::to_string(step)) / ("rank" + std::to_string(rank) + "_trace.json"))
      .string();
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
  AtomicFile out(path, "profiling.save_traces_folder", /*make_folders=*/true);
  out.write(text.data(), static_cast<int64_t>(text.size()));
  out.commit();
}

}  // namespace remat
