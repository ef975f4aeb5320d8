#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "ac/policy.h"
#include "ac/report.h"
#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "kernels/cpu/kernels.h"
#include "models/registry.h"
#include "planner/budget_plan.h"
#include "planner/plan_command.h"
#include "runtime/executor.h"
#include "train/checkpoint.h"
#include "train/load_balance.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/numerics.h"
#include "train/optimizer.h"
#include "train/stop_signal.h"

namespace remat {

namespace {

int configure_threads(const JobConfig& config) {
  int threads = static_cast<int>(config.training.threads);
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu::set_num_threads(threads);
  return threads;
}

std::string checkpoint_folder(const JobConfig& config) {
  return (std::filesystem::path(config.job.dump_folder) / config.checkpoint.folder).string();
}

std::string checkpoint_path(const JobConfig& config, int64_t step) {
  return (std::filesystem::path(checkpoint_folder(config)) /
          ("step-" + std::to_string(step) + ".safetensors"))
      .string();
}

// Every place the run will write is checked before training starts, so an
// unwritable folder or a metrics path naming a device fails in a second
// (exit 2), not after hours of training. Nothing is created here.
void check_output_places(const JobConfig& config, bool writes_checkpoints) {
  if (!config.metrics.jsonl_path.empty())
    check_output_file(config.metrics.jsonl_path, "metrics.jsonl_path");
  if (writes_checkpoints) {
    check_output_folder(config.job.dump_folder, "job.dump_folder");
    check_output_folder(checkpoint_folder(config), "checkpoint.folder");
  }
}

// A save killed before its rename leaves "step-N.safetensors.tmp" (as large
// as a checkpoint); the next run removes them.
void remove_stale_checkpoint_temporaries(const JobConfig& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_folder(config), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("step-") || !name.ends_with(".safetensors.tmp")) continue;
    const std::string target = entry.path().string();
    if (remove_stale_temporary(target.substr(0, target.size() - 4)))
      std::printf("removed %s, left by an interrupted save\n", target.c_str());
  }
}

// Where a resumed run's data continues, and what it warns about when the run
// differs from the one that saved (README "Resuming a run"): the learning-rate
// schedule is laid over this run's training.steps; the data continues at the
// window the saving run would have read next when seq_len and the dataset are
// the same, whatever the batch size; else (or for a checkpoint without that
// record) at (step x batch) mod windows.
int64_t resume_data_position(const JobConfig& config, const RunRecord& saved, int64_t start_step,
                             int64_t windows) {
  const auto& t = config.training;
  auto warn = [](const std::string& text) { std::printf("warning: %s\n", text.c_str()); };
  const std::string from =
      "the checkpoint (step " + std::to_string(start_step) + ") was saved by a run with ";
  if (saved.steps >= 0 && saved.steps != t.steps)
    warn(from + "training.steps = " + std::to_string(saved.steps) + ", this run has " +
         std::to_string(t.steps) + ": the learning-rate schedule (warmup, decay) is laid over " +
         std::to_string(t.steps) + " steps, so the learning rate after step " +
         std::to_string(start_step) + " is not the one the original run would have used");
  if (saved.local_batch_size >= 0 && saved.local_batch_size != t.local_batch_size)
    warn(from + "training.local_batch_size = " + std::to_string(saved.local_batch_size) +
         ", this run has " + std::to_string(t.local_batch_size) +
         ": steps from here on see a different number of tokens" +
         (saved.next_window >= 0 && saved.seq_len == t.seq_len
              ? " (the data continues where that run stopped)"
              : ""));
  if (saved.seq_len >= 0 && saved.seq_len != t.seq_len)
    warn(from + "training.seq_len = " + std::to_string(saved.seq_len) + ", this run has " +
         std::to_string(t.seq_len) + ": its data windows are not this run's, so the data "
         "continues at window (step x batch) mod " + std::to_string(windows) +
         ", not where that run stopped");
  else if (saved.windows >= 0 && saved.windows != windows)
    warn(from + "a dataset of " + std::to_string(saved.windows) + " windows of seq_len + 1 "
         "tokens, this run's has " + std::to_string(windows) +
         " (another dataset?): the data continues at that run's next window mod " +
         std::to_string(windows));
  if (saved.next_window >= 0 && saved.seq_len == t.seq_len)
    return saved.next_window % windows;
  // (step x batch) mod windows, without forming the product of two large numbers.
  return (start_step % windows) * (t.local_batch_size % windows) % windows;
}

void print_model(const ModelSummary& s, const Program& program) {
  std::printf("model: %s %s, %s parameters (%s without the embedding), %d layers, vocab %lld\n",
              s.family.c_str(), s.flavor.c_str(), with_thousands(s.params).c_str(),
              with_thousands(s.params - s.embedding_params).c_str(),
              static_cast<int>(s.n_layers), static_cast<long long>(s.vocab_size));
  if (s.active_params != s.params) {
    std::printf("model: %s active parameters per token\n", with_thousands(s.active_params).c_str());
  }
  std::printf("program: %zu ops, %zu values, batch %lld x seq %lld\n", program.nodes.size(),
              program.values.size(), static_cast<long long>(program.batch),
              static_cast<long long>(program.seq));
}

}  // namespace

int run_train(const JobConfig& config) {
  const auto& t = config.training;
  BuiltModel model = build_model(config.model, t.local_batch_size, t.seq_len);
  const Program& program = model.program;
  const Plan plan = plan_for_config(config, program, PlannerOptions{});
  print_model(model.summary, program);
  std::printf("activation checkpointing: %s\n", plan.description.c_str());
  for (const std::string& w : plan.warnings) std::printf("warning: %s\n", w.c_str());
  if (config.activation_checkpoint.log_mm_flops) {
    std::fputs(format_matmul_table(program, plan).c_str(), stdout);
  }
  const bool seed_only = config.checkpoint.create_seed_checkpoint;
  if (t.steps == 0 && !seed_only) {
    std::printf("training.steps = 0: nothing to train\n");
    return 0;
  }

  // Everything the user gave is checked before anything is allocated or written.
  TokenDataset data;
  if (!seed_only) {
    try {
      data = load_training_tokens(config, model.summary.vocab_size);
    } catch (const InputError& e) {
      const std::string key = t.dataset_path.empty() ? "training.dataset" : "training.dataset_path";
      throw InputError(key + ": " + e.what() +
                       " (expected a readable .txt, .jsonl or .npy token file, or the built-in "
                       "dataset \"fortunes\")");
    }
  }
  RunRecord saved_run;
  if (!config.checkpoint.load.empty()) {
    const SafetensorsReader reader = SafetensorsReader::open(config.checkpoint.load);
    checkpoint_step(reader);
    saved_run = RunRecord::read(reader);
  }
  check_output_places(config, seed_only || config.checkpoint.enable);
  if (!seed_only) check_run_fits(config);
  const int threads = configure_threads(config);
  if (seed_only || config.checkpoint.enable) {
    create_folders(checkpoint_folder(config), "checkpoint.folder");
    remove_stale_checkpoint_temporaries(config);
  }

  Allocator allocator;
  ModelState state(program, allocator, /*with_gradients=*/!seed_only);
  state.initialize(static_cast<uint64_t>(t.seed));
  // The optimizer's moments exist from the start, so every step (the first
  // included) has the same memory profile, the one the planner predicts.
  if (!seed_only) state.ensure_optimizer_state();
  int64_t start_step = 0;
  if (!config.checkpoint.load.empty()) {
    start_step = load_checkpoint(config.checkpoint.load, state, /*with_optimizer=*/true);
    std::printf("loaded %s (step %lld)\n", config.checkpoint.load.c_str(),
                static_cast<long long>(start_step));
  }
  if (seed_only) {
    const std::string path = checkpoint_path(config, 0);
    save_checkpoint(path, state, 0, /*with_optimizer=*/false);
    std::printf("seed checkpoint written to %s\n", path.c_str());
    return 0;
  }
  std::printf("dataset: %s\n", data.description.c_str());
  BatchLoader loader(std::move(data.tokens), t.local_batch_size, t.seq_len,
                     t.dataset_path.empty() ? t.dataset : t.dataset_path);
  const int64_t windows = loader.num_windows();
  if (start_step > 0)
    loader.set_position(resume_data_position(config, saved_run, start_step, windows));
  // What each checkpoint records about this run (RunRecord).
  auto run_record = [&] {
    RunRecord r;
    r.steps = t.steps;
    r.local_batch_size = t.local_batch_size;
    r.seq_len = t.seq_len;
    r.windows = windows;
    r.next_window = loader.position();
    return r.metadata();
  };

  const bool peak_from_config = config.metrics.peak_flops > 0;
  double peak_flops = peak_from_config ? config.metrics.peak_flops : cpu::best_peak_flops(threads);
  std::string peak_source =
      peak_from_config ? "metrics.peak_flops"
                       : "measured: fp32 FMA on these threads, best of 5 runs of 0.05 s";
  std::printf("device: CPU, %d threads, peak %.1f GFLOP/s fp32 (%s), memory %s\n", threads,
              peak_flops / 1e9, peak_source.c_str(), format_bytes(physical_memory_bytes()).c_str());
  const int64_t flops_per_token = model_flops_per_token(model.summary, t.seq_len);

  Executor executor(program, make_schedule(program, plan, /*with_backward=*/true), allocator,
                    state);
  // REMAT_PROFILE=1 prints where each step's time goes, per phase and op.
  const bool profile = std::getenv("REMAT_PROFILE") != nullptr;
  executor.set_profiling(profile);
  std::map<std::string, double> profile_seconds;
  const LrSchedule lr{config.optimizer.lr, config.lr_scheduler.warmup_steps,
                      config.lr_scheduler.decay_ratio, config.lr_scheduler.decay_type,
                      config.lr_scheduler.lr_min, t.steps};
  const AdamWConfig adamw{config.optimizer.beta1, config.optimizer.beta2, config.optimizer.eps,
                          config.optimizer.weight_decay};
  std::vector<int32_t> inputs(t.local_batch_size * t.seq_len), targets(inputs.size());

  // Metrics go straight to their final path, one flushed line per logged
  // step, so a killed run keeps what it logged; a resumed run appends.
  LineLog metrics_log;
  if (!config.metrics.jsonl_path.empty())
    metrics_log = LineLog(config.metrics.jsonl_path, "metrics.jsonl_path",
                          /*append=*/!config.checkpoint.load.empty());

  StopSignals stop;
  bool diverged = false;
  using Clock = std::chrono::steady_clock;
  auto window_start = Clock::now();
  int64_t window_tokens = 0, window_peak = 0, window_recompute_flops = 0;
  int64_t window_max_activations = 0;
  int64_t run_peak = 0;  // the allocator's peak over all steps
  int64_t step = start_step;
  while (step < t.steps && !stop.received()) {
    ++step;
    loader.next(inputs, targets);
    state.zero_gradients();
    allocator.reset_peak();
    const double loss = executor.run(Batch{inputs.data(), targets.data()});
    const double grad_norm = clip_grad_norm(state, t.max_norm);
    // Checked before the optimizer, so the weights stay those of the last
    // good step and no NaN reaches a checkpoint.
    diverged = !std::isfinite(loss) || !std::isfinite(grad_norm);
    const MoeLoad moe = moe_load(state);  // read before the counts reset
    if (!diverged) {
      update_expert_bias(state);
      adamw_step(state, adamw, lr.at(step), step);
    }
    window_tokens += static_cast<int64_t>(inputs.size());
    window_peak = std::max(window_peak, allocator.peak());
    run_peak = std::max(run_peak, allocator.peak());
    window_max_activations = std::max(
        window_max_activations, allocator.category_peaks()[MemoryCategory::kActivations]);
    window_recompute_flops += executor.counts().recompute_flops;
    for (const auto& [op, seconds] : executor.counts().seconds_by_op) profile_seconds[op] += seconds;

    if (diverged || step % config.metrics.log_freq == 0 || step == start_step + 1 ||
        step == t.steps) {
      const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
      StepMetrics m;
      m.step = step;
      m.loss = loss;
      m.grad_norm = grad_norm;
      m.peak_bytes = window_peak;
      m.device_bytes = physical_memory_bytes();
      m.tokens_per_second = static_cast<double>(window_tokens) / seconds;
      m.model_flops_per_second = m.tokens_per_second * static_cast<double>(flops_per_token);
      m.hardware_flops_per_second =
          m.model_flops_per_second + static_cast<double>(window_recompute_flops) / seconds;
      // No run can beat the device's peak: if one does, the peak was under-
      // measured (or set too low) and the achieved rate is the better bound,
      // so MFU and HFU never pass 100%.
      if (m.hardware_flops_per_second > peak_flops) {
        std::printf("note: achieved %.1f GFLOP/s, above the peak of %.1f GFLOP/s (%s); "
                    "using the achieved rate as the peak from now on\n",
                    m.hardware_flops_per_second / 1e9, peak_flops / 1e9, peak_source.c_str());
        peak_flops = m.hardware_flops_per_second;
        peak_source = "achieved at step " + std::to_string(step);
      }
      m.peak_flops = peak_flops;
      m.lr = lr.at(step);
      const std::string moe_text = format_moe_load(moe);
      std::printf("%s%s%s\n", format_log_line(m).c_str(), moe_text.empty() ? "" : "  ",
                  moe_text.c_str());
      std::fflush(stdout);
      if (metrics_log.is_open()) {
        metrics_log.write_line(metrics_json(m, allocator.at_peak()[MemoryCategory::kActivations],
                                            window_max_activations));
      }
      window_start = Clock::now();
      window_tokens = window_peak = window_recompute_flops = window_max_activations = 0;
    }
    if (diverged) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "error: %s; training stopped before this step's optimizer update, and no "
                   "checkpoint is written for it (lower optimizer.lr or training.max_norm, or resume from an earlier "
                   "checkpoint)\n",
                   non_finite_step_message(step, loss, grad_norm, program, state.grads).c_str());
      break;
    }
    if (config.checkpoint.enable && step % config.checkpoint.interval == 0) {
      save_checkpoint(checkpoint_path(config, step), state, step, true, run_record());
    }
  }
  const int signal = stop.received();
  if (signal) {
    std::printf("interrupted by %s: stopping after step %lld\n", StopSignals::name(signal),
                static_cast<long long>(step));
  }
  // The final save runs with the handlers still installed: a second Ctrl-C
  // cannot cut it short.
  if (!diverged && config.checkpoint.enable && step > start_step &&
      step % config.checkpoint.interval != 0) {
    const std::string path = checkpoint_path(config, step);
    save_checkpoint(path, state, step, true, run_record());
    std::printf("checkpoint written to %s\n", path.c_str());
  }
  // What memory.limit bounds (the allocator's books) next to what the
  // operating system saw (README "What memory.limit bounds").
  const int64_t rss = process_peak_rss_bytes();
  if (step > start_step && rss > 0) {
    // The allocator never returns a freed buffer to malloc (it caches it for
    // the next step), so reserved() now is the most it ever held.
    const int64_t reserved = allocator.reserved();
    std::printf("memory: allocator peak %s (%s bytes; what memory.limit bounds), reserved %s "
                "(%s bytes, with its cache of freed buffers), process peak RSS %s (%s bytes, "
                "VmHWM), %s more than the allocator peak\n",
                format_bytes(run_peak).c_str(), with_thousands(run_peak).c_str(),
                format_bytes(reserved).c_str(), with_thousands(reserved).c_str(),
                format_bytes(rss).c_str(), with_thousands(rss).c_str(),
                format_bytes(rss - run_peak).c_str());
  }
  if (profile) {
    double total = 0;
    for (const auto& [op, seconds] : profile_seconds) total += seconds;
    std::printf("profile (%lld steps, %.3f s in ops):\n", static_cast<long long>(step - start_step), total);
    for (const auto& [op, seconds] : profile_seconds) {
      std::printf("  %-28s %9.3f s  %5.1f%%\n", op.c_str(), seconds, 100.0 * seconds / total);
    }
  }
  if (diverged) return 1;
  if (signal) {
    std::printf("exit status %d: interrupted run (128 + %s)\n", stop.exit_status(),
                StopSignals::name(signal));
    return stop.exit_status();
  }
  return 0;
}

int run_eval(const JobConfig& config) {
  if (config.checkpoint.load.empty()) {
    throw InputError("eval needs weights: pass --checkpoint.load FILE.safetensors");
  }
  if (config.validation.dataset.empty()) {
    throw InputError("eval needs data: pass --validation.dataset FILE (.npy token ids or text)");
  }
  const int64_t seq = config.training.seq_len;
  BuiltModel model = build_model(config.model, 1, seq);
  TokenDataset data = load_token_file(config.validation.dataset, config.model.tokenizer,
                                      model.summary.vocab_size);
  int64_t rows = count_eval_rows(static_cast<int64_t>(data.tokens.size()), seq);
  if (config.validation.steps > 0) rows = std::min(rows, config.validation.steps);
  if (rows == 0) {
    throw InputError("eval: '" + config.validation.dataset + "' has " +
                     std::to_string(data.tokens.size()) + " tokens, expected at least seq_len + 1 = " +
                     std::to_string(seq + 1));
  }
  SafetensorsReader::open(config.checkpoint.load);
  configure_threads(config);
  Allocator allocator;
  ModelState state(model.program, allocator, /*with_gradients=*/false);
  load_checkpoint(config.checkpoint.load, state, /*with_optimizer=*/false);
  const Plan plan = make_inference_plan(model.program);
  Executor executor(model.program, make_schedule(model.program, plan, false), allocator, state);
  std::vector<int32_t> inputs(seq), targets(seq);
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    fill_eval_rows(data.tokens, seq, r, 1, inputs, targets);
    sum += executor.run(Batch{inputs.data(), targets.data()});
  }
  const double mean = sum / static_cast<double>(rows);
  if (!std::isfinite(mean)) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: validation loss is not finite (%g): the weights in %s give "
                 "NaN or infinite logits\n", mean, config.checkpoint.load.c_str());
    return 1;
  }
  std::printf("validation loss: %.9g\n", mean);
  std::printf("(%lld rows of %lld tokens from %s)\n", static_cast<long long>(rows),
              static_cast<long long>(seq), config.validation.dataset.c_str());
  return 0;
}

int run_dump_gradients(const JobConfig& config, const std::string& tokens_path,
                       const std::string& out_path) {
  const int64_t batch = config.training.local_batch_size, seq = config.training.seq_len;
  BuiltModel model = build_model(config.model, batch, seq);
  TokenDataset data = load_token_file(tokens_path, "byte", model.summary.vocab_size);
  if (count_eval_rows(static_cast<int64_t>(data.tokens.size()), seq) < batch) {
    throw InputError("grads: '" + tokens_path + "' has too few tokens for " +
                     std::to_string(batch) + " rows of seq_len + 1");
  }
  if (config.checkpoint.load.empty()) throw InputError("grads needs --checkpoint.load FILE");
  SafetensorsReader::open(config.checkpoint.load);
  check_output_file(out_path, "--out");
  configure_threads(config);
  Allocator allocator;
  ModelState state(model.program, allocator, true);
  load_checkpoint(config.checkpoint.load, state, false);
  const Plan plan = plan_for_config(config, model.program, PlannerOptions{});
  Executor executor(model.program, make_schedule(model.program, plan, true), allocator, state);
  std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
  fill_eval_rows(data.tokens, seq, 0, batch, inputs, targets);
  const double loss = executor.run(Batch{inputs.data(), targets.data()});
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < model.program.params.size(); ++i) {
    entries.push_back({model.program.params[i].fqn, model.program.params[i].shape,
                       state.grads[i].data()});
  }
  save_safetensors(out_path, entries, {}, "--out");
  std::printf("loss: %.9g\n", loss);
  return 0;
}

}  // namespace remat
