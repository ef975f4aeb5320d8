#include "planner/op_timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <thread>

#include "ac/budget.h"
#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "core/progress.h"
#include "io/files.h"
#include "io/json_error.h"
#include "kernels/cpu/kernels.h"
#include "models/registry.h"
#include "planner/planner.h"
#include "runtime/executor.h"

namespace remat {

namespace {

// Timed passes: at least kLeastPasses and at least kLeastTimedSeconds of
// them, so a small model's ops (a few milliseconds a pass) get as many
// samples as the host's noise needs, at most kMostPasses.
constexpr int kLeastPasses = 5;
constexpr int kMostPasses = 200;
constexpr double kLeastTimedSeconds = 1.0;
constexpr const char* kUpdateKey = "update per parameter";
constexpr const char* kOverheadKey = "step overhead per op";

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

// The config key of the cache: the name its reads and its writes share, so
// the cache protected from the run's other outputs stays writable by itself.
constexpr const char* kCacheKey = "activation_checkpoint.cost_cache";

std::string cache_path(const JobConfig& config) {
  const auto& ac = config.activation_checkpoint;
  if (!ac.cost_cache.empty()) return ac.cost_cache;
  return (std::filesystem::path(config.job.dump_folder) / "op_times.json").string();
}

// The slowest an op's time may read: a cache entry beyond it (or not a
// finite number >= 0) is damaged, and its op is timed again.
constexpr double kMostSecondsPerEntry = 1e6;

// Reads the cache: the entries measured on `machine` (a cache of another
// machine is timed afresh and replaced). A file there that is not an op-time
// cache at all (not JSON, or without remat's "machine" and "ops") is refused:
// writing the cache would destroy it.
std::map<std::string, double> read_cache(const std::string& path, const std::string& machine) {
  std::map<std::string, double> times;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return times;
  nlohmann::json j;
  try {
    const std::string text = read_regular_file(path, kCacheKey, "a JSON file written by remat",
                                               1 << 24, InputUse::kRewritten);
    if (json_text_problem(text).empty()) j = nlohmann::json::parse(text);  // else: not a cache
  } catch (const nlohmann::json::exception&) {
    j = nullptr;
  }
  if (!j.is_object() || !j.contains("machine") || !j["machine"].is_string() || !j.contains("ops") ||
      !j["ops"].is_object()) {
    throw InputError("activation_checkpoint.cost_cache: '" + path + "'" +
                     " exists but is not an op-time cache (expected a JSON object with "
                     "\"machine\" and \"ops\", as remat writes); remat would overwrite it, so "
                     "name another file or move this one");
  }
  if (j["machine"].get<std::string>() != machine) return times;
  for (const auto& [sig, seconds] : j["ops"].items()) {
    if (seconds.is_number() && seconds.get<double>() >= 0 &&
        seconds.get<double>() < kMostSecondsPerEntry)
      times[sig] = seconds.get<double>();
  }
  return times;
}

void write_cache(const std::string& path, const OpTimes& times) {
  nlohmann::json j;
  j["machine"] = times.machine;
  j["ops"] = times.seconds;
  const std::string text = j.dump(1) + "\n";
  AtomicFile out(path, kCacheKey, /*make_folders=*/true);
  out.write(text.data(), static_cast<int64_t>(text.size()));
  out.commit();
  // The run's other outputs (metrics, checkpoints, plan files) may not
  // replace the cache it has just written.
  note_input(path, kCacheKey, InputUse::kRewritten);
}

// The model calibration times: its first two blocks (and the layers around
// them) at the run's batch and seq_len, checked to fit in RAM.
Program calibration_model(const JobConfig& config, const Program& program) {
  JobConfig::Model cut = config.model;
  cut.n_layers = std::min<int64_t>(2, program.n_blocks);
  Program small = build_model(cut, program.batch, program.seq).program;
  // bf16 mixed precision times the bf16 kernels the run will call.
  if (program.compute_dtype != DType::kF32) set_compute_dtype(small, program.compute_dtype);
  // Calibration runs before training, not beside it: it needs the RAM, not
  // the run's memory.limit.
  const int64_t available = physical_memory_bytes();
  const int64_t need = predict(small, make_reference_plan(small), PlannerOptions{}).peak_bytes;
  if (need > available) {
    throw InputError("activation_checkpoint.cost_model = \"measured\": calibrating needs " +
                     format_bytes(need) + " (two blocks at this batch and seq_len) but " +
                     format_bytes(available) + " is available; use cost_model = \"flops\"");
  }
  return small;
}

// Random tokens in the model's vocabulary (the times do not depend on them).
void random_batch(const Program& small, std::vector<int32_t>& inputs,
                  std::vector<int32_t>& targets) {
  const int64_t tokens = small.batch * small.seq;
  inputs.resize(tokens);
  targets.resize(tokens);
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
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What the trainer does per parameter after the backward pass: the norm
// for clipping and AdamW (the update itself is tiny: lr 0). Returns seconds.
double time_update(const Program& small, ModelState& state, int pass) {
  const auto start = std::chrono::steady_clock::now();
  double norm = 0;
  Backend& backend = *state.backend;
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (!small.params[i].trainable) continue;
    norm += backend.sum_squares(state.grads[i]);
    backend.adamw_update(state.params[i], state.grads[i], state.exp_avg[i], state.exp_avg_sq[i],
                         AdamWStep{0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, pass + 1});
  }
  const double seconds = seconds_since(start);
  if (!(norm >= 0)) throw std::logic_error("calibration: non-finite gradients");
  return seconds;
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t m = xs.size() / 2;
  return xs.size() % 2 ? xs[m] : 0.5 * (xs[m - 1] + xs[m]);
}

// Times training steps of the calibration model: every node's forward and
// backward, the parameter update per parameter, and what the ops' own
// times miss (booking buffers, timing itself), charged
// per node. Each is the median over the timed passes, and nodes of equal
// signature pool their samples: a prediction of a typical step, not of the
// luckiest one.
std::map<std::string, double> calibrate(const JobConfig& config, const Program& program) {
  const Program small = calibration_model(config, program);
  cpu::set_num_threads(training_threads(config));
  Allocator allocator;
  ModelState state(small, allocator, /*with_gradients=*/true);
  state.initialize(static_cast<uint64_t>(config.training.seed));
  state.ensure_optimizer_state();
  std::vector<int32_t> inputs, targets;
  random_batch(small, inputs, targets);
  Executor executor(small, make_schedule(small, make_reference_plan(small), true), allocator,
                    state);
  executor.set_profiling(true);
  const size_t n_nodes = small.nodes.size();
  std::map<std::string, std::vector<double>> samples;
  Progress progress("calibrating op times (passes)", 0, ProgressUnit::kItems);
  double timed = 0;
  for (int pass = 0; pass <= kMostPasses; ++pass) {
    if (pass > kLeastPasses && timed >= kLeastTimedSeconds) break;
    progress.update(pass);
    const auto step_start = std::chrono::steady_clock::now();
    executor.run(Batch{inputs.data(), targets.data()});
    const double run_seconds = seconds_since(step_start);
    const double update_seconds = time_update(small, state, pass);
    if (pass == 0) continue;  // warm-up: page faults, caches
    timed += run_seconds + update_seconds;
    const auto& f = executor.counts().forward_seconds_by_node;
    const auto& b = executor.counts().backward_seconds_by_node;
    double ops = 0;
    for (size_t n = 0; n < n_nodes; ++n) {
      const std::string sig = op_signature(small.nodes[n]);
      samples["forward " + sig].push_back(f[n]);
      samples["backward " + sig].push_back(b[n]);
      ops += f[n] + b[n];
    }
    samples[kUpdateKey].push_back(update_seconds / static_cast<double>(small.num_parameters()));
    samples[kOverheadKey].push_back(std::max(0.0, run_seconds - ops) /
                                    static_cast<double>(n_nodes));
  }
  std::map<std::string, double> times;
  for (const auto& [key, xs] : samples) times[key] = median(xs);
  return times;
}

}  // namespace

std::string op_signature(const Node& node) {
  const OpAttrs& a = node.attrs;
  std::string sig = op_info(node.kind).name;
  for (int64_t x : {a.m, a.k, a.n, a.rows, a.dim, a.batch, a.seq, a.heads, a.kv_heads, a.head_dim,
                    a.experts, a.top_k}) {
    sig += ' ' + std::to_string(x);
  }
  if (a.weight_in_out) sig += " in_out";
  if (a.sigmoid) sig += " sigmoid";
  if (a.compute == DType::kBF16) sig += " bf16";  // another kernel, another time
  return sig;
}

OpTimes load_or_measure_op_times(const JobConfig& config, const Program& program) {
  OpTimes t;
  t.path = cache_path(config);
  t.machine = cpu_model_name() + ", " + std::to_string(training_threads(config)) + " threads";
  check_output_file(t.path, kCacheKey);
  t.seconds = read_cache(t.path, t.machine);
  bool complete = t.seconds.count(kUpdateKey) > 0 && t.seconds.count(kOverheadKey) > 0;
  for (const Node& node : program.nodes) {
    complete = complete && t.seconds.count("forward " + op_signature(node)) &&
               t.seconds.count("backward " + op_signature(node));
  }
  if (complete) return t;
  for (const auto& [sig, seconds] : calibrate(config, program)) t.seconds[sig] = seconds;
  t.calibrated_now = true;
  write_cache(t.path, t);
  return t;
}

OpCost measured_op_cost(const OpTimes& times) {
  return [seconds = times.seconds](const Node& node) {
    auto it = seconds.find("forward " + op_signature(node));
    return it == seconds.end() ? 0.0 : it->second;
  };
}

double predicted_step_seconds(const OpTimes& times, const Program& program, const Plan& plan) {
  auto at = [&times](const std::string& key) {
    auto it = times.seconds.find(key);
    if (it == times.seconds.end()) throw std::logic_error("op times: no entry for " + key);
    return it->second;
  };
  double seconds = at(kUpdateKey) * static_cast<double>(program.num_parameters()) +
                   at(kOverheadKey) * static_cast<double>(program.nodes.size());
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    const std::string sig = op_signature(program.nodes[n]);
    seconds += at("forward " + sig) * (plan.recompute[n] ? 2 : 1) + at("backward " + sig);
  }
  return seconds;
}

}  // namespace remat
