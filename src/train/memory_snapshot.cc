#include "train/memory_snapshot.h"

#include <filesystem>

#include "io/files.h"

namespace remat {

namespace {

std::string snapshot_folder(const JobConfig& config) {
  return (std::filesystem::path(config.job.dump_folder) /
          config.profiling.save_memory_snapshot_folder)
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
  const char* key = "profiling.save_memory_snapshot_folder";
  create_folders(snapshot_folder(config), key);
  const std::string path =
      (std::filesystem::path(snapshot_folder(config)) / ("step-" + std::to_string(step) + ".svg"))
          .string();
  write_timeline_files(path, {measured}, program, title, key);
  return path;
}

void check_memory_snapshot_folder(const JobConfig& config) {
  check_output_folder(snapshot_folder(config), "profiling.save_memory_snapshot_folder");
}

}  // namespace remat
