#include "planner/op_timing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "io/files.h"
#include "kernels/cpu/kernels.h"
#include "models/registry.h"
#include "planner/planner.h"
#include "runtime/executor.h"
#include "train/metrics.h"

namespace remat {

namespace {

constexpr int kTimedPasses = 5;

int training_threads(const JobConfig& config) {
  const auto t = static_cast<int>(config.training.threads);
  return t > 0 ? t : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string cache_path(const JobConfig& config) {
  const auto& ac = config.activation_checkpoint;
  if (!ac.cost_cache.empty()) return ac.cost_cache;
  return (std::filesystem::path(config.job.dump_folder) / "op_times.json").string();
}

// Reads the cache; an unreadable or foreign one is simply not used.
std::map<std::string, double> read_cache(const std::string& path, const std::string& machine) {
  std::map<std::string, double> times;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return times;
  try {
    const nlohmann::json j = nlohmann::json::parse(
        read_regular_file(path, "op time cache", "a JSON file written by remat", 1 << 24));
    if (j.value("machine", "") != machine) return times;
    for (const auto& [sig, seconds] : j.at("ops").items()) {
      if (seconds.is_number() && seconds.get<double>() >= 0) times[sig] = seconds.get<double>();
    }
  } catch (const std::exception&) {
    times.clear();  // a damaged cache is re-measured, never trusted
  }
  return times;
}

void write_cache(const std::string& path, const OpTimes& times) {
  nlohmann::json j;
  j["machine"] = times.machine;
  j["ops"] = times.seconds;
  const std::string text = j.dump(1) + "\n";
  AtomicFile out(path, "activation_checkpoint.cost_cache", /*make_folders=*/true);
  out.write(text.data(), static_cast<int64_t>(text.size()));
  out.commit();
}

// Times the forward of every node of the first blocks of the model.
std::map<std::string, double> calibrate(const JobConfig& config, const Program& program) {
  JobConfig::Model cut = config.model;
  cut.n_layers = std::min<int64_t>(2, program.n_blocks);
  const Program small = build_model(cut, program.batch, program.seq).program;
  const Plan plan = make_inference_plan(small);
  const int64_t available = config.memory.limit.empty()
                                ? physical_memory_bytes()
                                : static_cast<int64_t>(parse_memory_size(config.memory.limit));
  int64_t need = 0;
  {
    // A forward-only replay on a counting allocator: what calibrating holds.
    Allocator counting(/*counting_only=*/true);
    ModelState books(small, counting, /*with_gradients=*/false);
    Executor dry(small, make_schedule(small, plan, /*with_backward=*/false), counting, books);
    dry.run(Batch{nullptr, nullptr});
    need = counting.peak();
  }
  if (need > available) {
    throw InputError("activation_checkpoint.cost_model = \"measured\": calibrating needs " +
                     format_bytes(need) + " (two blocks at this batch and seq_len) but " +
                     format_bytes(available) + " is available; use cost_model = \"flops\"");
  }
  cpu::set_num_threads(training_threads(config));
  Allocator allocator;
  ModelState state(small, allocator, /*with_gradients=*/false);
  state.initialize(static_cast<uint64_t>(config.training.seed));
  const int64_t tokens = small.batch * small.seq;
  std::vector<int32_t> inputs(tokens), targets(tokens);
  std::mt19937 rng(1234);
  int64_t vocab = 2;
  for (const Param& p : small.params) {
    if (p.fqn == "tok_embeddings.weight") vocab = p.shape[0];
  }
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  for (int64_t i = 0; i < tokens; ++i) {
    inputs[i] = token(rng);
    targets[i] = token(rng);
  }
  Executor executor(small, make_schedule(small, plan, /*with_backward=*/false), allocator, state);
  executor.set_profiling(true);
  std::vector<double> best(small.nodes.size(), std::numeric_limits<double>::infinity());
  for (int pass = 0; pass <= kTimedPasses; ++pass) {
    executor.run(Batch{inputs.data(), targets.data()});
    if (pass == 0) continue;  // warm-up: page faults, caches
    const auto& s = executor.counts().forward_seconds_by_node;
    for (size_t n = 0; n < s.size(); ++n) best[n] = std::min(best[n], s[n]);
  }
  std::map<std::string, double> times;
  for (size_t n = 0; n < small.nodes.size(); ++n) {
    if (small.nodes[n].block < 0) continue;
    const std::string sig = op_signature(small.nodes[n]);
    auto it = times.find(sig);
    times[sig] = it == times.end() ? best[n] : std::min(it->second, best[n]);
  }
  return times;
}

}  // namespace

std::string op_signature(const Node& node) {
  const OpAttrs& a = node.attrs;
  std::string sig = op_info(node.kind).name;
  for (int64_t x : {a.m, a.k, a.n, a.rows, a.dim, a.batch, a.seq, a.heads, a.kv_heads,
                    a.head_dim, a.experts, a.top_k}) {
    sig += ' ' + std::to_string(x);
  }
  if (a.weight_in_out) sig += " in_out";
  if (a.sigmoid) sig += " sigmoid";
  return sig;
}

OpTimes load_or_measure_op_times(const JobConfig& config, const Program& program) {
  OpTimes t;
  t.path = cache_path(config);
  t.machine = cpu_model_name() + ", " + std::to_string(training_threads(config)) + " threads";
  check_output_file(t.path, "activation_checkpoint.cost_cache");
  t.seconds = read_cache(t.path, t.machine);
  bool complete = true;
  for (const Node& node : program.nodes) {
    if (node.block >= 0 && !t.seconds.count(op_signature(node))) complete = false;
  }
  if (complete) return t;
  for (const auto& [sig, seconds] : calibrate(config, program)) t.seconds[sig] = seconds;
  t.calibrated_now = true;
  write_cache(t.path, t);
  return t;
}

OpCost measured_op_cost(const OpTimes& times) {
  return [seconds = times.seconds](const Node& node) {
    auto it = seconds.find(op_signature(node));
    return it == seconds.end() ? 0.0 : it->second;
  };
}

}  // namespace remat
