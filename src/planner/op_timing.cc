#include "planner/op_timing.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "io/files.h"
#include "kernels/cpu/kernels.h"
#include "models/registry.h"
#include "ac/budget.h"
#include "planner/planner.h"
#include "runtime/executor.h"

namespace remat {

namespace {

constexpr int kTimedPasses = 5;
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

// Times a training step of the first blocks of the model: every node's
// forward and backward, and the parameter update per parameter.
std::map<std::string, double> calibrate(const JobConfig& config, const Program& program) {
  JobConfig::Model cut = config.model;
  cut.n_layers = std::min<int64_t>(2, program.n_blocks);
  const Program small = build_model(cut, program.batch, program.seq).program;
  const Plan plan = make_reference_plan(small);
  // Calibration runs before training, not beside it: it needs the RAM, not
  // the run's memory.limit.
  const int64_t available = physical_memory_bytes();
  const int64_t need = predict(small, plan, PlannerOptions{}).peak_bytes;
  if (need > available) {
    throw InputError("activation_checkpoint.cost_model = \"measured\": calibrating needs " +
                     format_bytes(need) + " (two blocks at this batch and seq_len) but " +
                     format_bytes(available) + " is available; use cost_model = \"flops\"");
  }
  cpu::set_num_threads(training_threads(config));
  Allocator allocator;
  ModelState state(small, allocator, /*with_gradients=*/true);
  state.initialize(static_cast<uint64_t>(config.training.seed));
  state.ensure_optimizer_state();
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
  Executor executor(small, make_schedule(small, plan, /*with_backward=*/true), allocator, state);
  executor.set_profiling(true);
  const size_t n_nodes = small.nodes.size();
  std::vector<double> forward(n_nodes, std::numeric_limits<double>::infinity());
  std::vector<double> backward = forward;
  double update = std::numeric_limits<double>::infinity();
  double overhead = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass <= kTimedPasses; ++pass) {
    const auto step_start = std::chrono::steady_clock::now();
    state.zero_gradients();
    executor.run(Batch{inputs.data(), targets.data()});
    const double run_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    // What the trainer does per parameter besides: the norm for clipping
    // and AdamW (the update itself is tiny: lr 0).
    const auto start = std::chrono::steady_clock::now();
    double norm = 0;
    for (size_t i = 0; i < state.params.size(); ++i) {
      if (!small.params[i].trainable) continue;
      const Tensor& g = state.grads[i];
      for (int64_t k = 0; k < g.numel(); ++k) norm += static_cast<double>(g.data()[k]) * g.data()[k];
      cpu::adamw_update(state.params[i].data(), g.data(), state.exp_avg[i].data(),
                        state.exp_avg_sq[i].data(), state.params[i].numel(), 0.0f, 0.9f, 0.95f,
                        1e-8f, 0.0f, pass + 1);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!(norm >= 0)) throw std::logic_error("calibration: non-finite gradients");
    if (pass == 0) continue;  // warm-up: page faults, caches
    update = std::min(update, seconds);
    const auto& f = executor.counts().forward_seconds_by_node;
    const auto& b = executor.counts().backward_seconds_by_node;
    // What the ops' own times miss: zeroing gradients, booking buffers,
    // zeroing activation gradients, timing itself; charged per node.
    double ops = 0;
    for (size_t n = 0; n < n_nodes; ++n) ops += f[n] + b[n];
    overhead = std::min(overhead, std::max(0.0, run_seconds - ops));
    for (size_t n = 0; n < n_nodes; ++n) {
      forward[n] = std::min(forward[n], f[n]);
      backward[n] = std::min(backward[n], b[n]);
    }
  }
  std::map<std::string, double> times;
  auto keep_min = [&times](const std::string& key, double seconds) {
    auto it = times.find(key);
    times[key] = it == times.end() ? seconds : std::min(it->second, seconds);
  };
  for (size_t n = 0; n < n_nodes; ++n) {
    const std::string sig = op_signature(small.nodes[n]);
    keep_min("forward " + sig, forward[n]);
    keep_min("backward " + sig, backward[n]);
  }
  times[kUpdateKey] = update / static_cast<double>(small.num_parameters());
  times[kOverheadKey] = overhead / static_cast<double>(n_nodes);
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
