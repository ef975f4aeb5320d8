#include "train/memory_snapshot.h"

#include <filesystem>

#include "core/error.h"
#include "io/files.h"

namespace remat {

namespace {

std::string snapshot_folder(const JobConfig& config) {
  return (std::filesystem::path(config.job.dump_folder) /
          config.profiling.save_memory_snapshot_folder)
      .string();
}

constexpr const char* kSnapshotKey = "profiling.save_memory_snapshot_folder";

std::string snapshot_svg(const JobConfig& config, int64_t step) {
  return (std::filesystem::path(snapshot_folder(config)) /
          ("step-" + std::to_string(step) + ".svg"))
      .string();
}

// Clears both hooks when the step ends, however it ends.
struct Hooks {
  Allocator& allocator;
  Executor& executor;
  ~Hooks() {
    allocator.set_listener(nullptr);
    executor.set_step_observer(nullptr);
  }
};

}  // namespace

// The same bookkeeping as the planner's replay_timeline: a sample opens
// before each schedule step at the current level, rises with every higher
// level (strictly, as the allocator's own peak does), and closes with the
// level once the step has ended.
std::vector<TimelineSample> measure_timeline(Allocator& allocator, Executor& executor,
                                             const std::function<void()>& step) {
  std::vector<TimelineSample> samples;
  auto close = [&] {
    if (!samples.empty()) samples.back().after = allocator.current();
  };
  Hooks hooks{allocator, executor};
  allocator.set_listener([&](const MemorySnapshot& now) {
    if (!samples.empty() && now.total() > samples.back().peak.total()) samples.back().peak = now;
  });
  executor.set_step_observer([&](const Step& s) {
    close();
    samples.push_back({s.kind, s.node, {}, allocator.current()});
  });
  step();
  close();
  return samples;
}

std::string write_memory_snapshot(const JobConfig& config, int64_t step, const Program& program,
                                  const std::string& title, const TimelineSeries& measured) {
  create_folders(snapshot_folder(config), kSnapshotKey);
  const std::string path = snapshot_svg(config, step);
  write_timeline_files(path, {measured}, program, title, kSnapshotKey);
  return path;
}

void check_memory_snapshot_folder(const JobConfig& config) {
  check_output_folder(snapshot_folder(config), kSnapshotKey);
}

void create_memory_snapshot_folder(const JobConfig& config) {
  create_folders(snapshot_folder(config), kSnapshotKey);
}

void check_memory_snapshot_files(const JobConfig& config, int64_t step) {
  const std::string svg = snapshot_svg(config, step);
  for (const std::string& path : {svg, json_path_of(svg)}) {
    check_output_file(path, kSnapshotKey);
    // The metrics file stays open all run: a snapshot renamed over it
    // would take its name, and its later lines would go nowhere.
    const std::string& metrics = config.metrics.jsonl_path;
    if (!metrics.empty() && same_place(path, metrics))
      throw InputError("metrics.jsonl_path: '" + metrics +
                       "' is where the memory snapshot of step " + std::to_string(step) +
                       " goes (profiling.enable_memory_snapshot); expected another file name");
  }
}

}  // namespace remat
