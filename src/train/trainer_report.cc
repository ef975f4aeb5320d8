// The Trainer's reports (trainer_parts.h): the log line and the metrics
// JSONL of each logged step, validation and sample lines, the divergence
// error, and the memory, communication and profile lines at a run's end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/format.h"
#include "generate/sampler.h"
#include "train/metrics.h"
#include "train/numerics.h"
#include "train/sample.h"
#include "train/trainer_parts.h"

namespace remat::trainer_parts {

// The log line and the metrics JSONL line, averaged over the window.
void Trainer::log_step(int64_t step, double loss, double grad_norm, const MoeLoad& moe) {
  const double seconds = std::chrono::duration<double>(Clock::now() - window_.start).count();
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.grad_norm = grad_norm;
  // Under data parallelism: the largest rank's peak (describe_data_parallel).
  m.peak_bytes = data_parallel_.ranks() > 1 ? comm_.max(window_.peak, "all-reduce of the peaks")
                                            : window_.peak;
  m.device_bytes = physical_memory_bytes();
  m.tokens_per_second = static_cast<double>(window_.tokens) / seconds;
  m.model_flops_per_second = m.tokens_per_second * static_cast<double>(flops_per_token_);
  m.hardware_flops_per_second =
      m.model_flops_per_second + static_cast<double>(window_.recompute_flops) / seconds;
  peak_.raise_to(m.hardware_flops_per_second, step);
  m.peak_flops = peak_.flops;
  m.lr = lr_.at(step);
  m.minor_faults = process_minor_faults() - window_.start_faults;
  std::string extra = format_moe_load(moe);
  if (data_parallel_.ranks() > 1) {
    const double global_tps = m.tokens_per_second * data_parallel_.ranks();
    extra = "global tps: " + with_thousands(static_cast<int64_t>(global_tps + 0.5)) +
            (extra.empty() ? "" : "  " + extra);
  }
  std::printf("%s%s%s\n", format_log_line(m, color_).c_str(), extra.empty() ? "" : "  ",
              extra.c_str());
  std::fflush(stdout);
  if (metrics_log_.is_open()) {
    metrics_log_.write_line(metrics_json(
        m, session_.allocator.at_peak()[MemoryCategory::kActivations], window_.max_activations));
  }
  if (tensorboard_.is_open()) {
    // inputs_ is the global batch: the tokens every rank reads in a pass.
    const auto tokens_per_step = static_cast<int64_t>(inputs_.size()) * microbatches_;
    tensorboard_.add_scalars(step,
                             tensorboard_scalars(m, step * tokens_per_step,
                                                 seconds / std::max<int64_t>(1, window_.steps)));
  }
  window_ = MetricsWindow{};
}

// torchtitan's validation line, and a JSONL record of its own kind. The
// pass's peak counts towards the run's (print_memory); the next step resets
// the allocator's peak, and its time is left out of the metrics window, so
// the training metrics (memory, tps, MFU) never include it.
void Trainer::validate(int64_t step) {
  const Clock::time_point start = Clock::now();
  const double loss = validator_->run();
  window_.start += Clock::now() - start;
  run_peak_ = std::max(run_peak_, session_.allocator.peak());
  std::printf("validate step: %2lld  loss: %7.4f\n", static_cast<long long>(step), loss);
  std::fflush(stdout);
  if (metrics_log_.is_open()) {
    metrics_log_.write_line(validation_json(step, loss));
  }
  if (tensorboard_.is_open()) tensorboard_.add_scalars(step, tensorboard_validation_scalars(loss));
}

// As validate(): the sample's memory counts towards the run's peak, not the
// step's, and its time is left out of the metrics window.
void Trainer::sample(int64_t step) {
  const Clock::time_point start = Clock::now();
  std::string text;
  try {
    text = training_sample(config_, session_.state, session_.allocator, *sample_tokenizer_);
  } catch (const NonFiniteLogits&) {
    // The update overflowed: the next step's loss stops the run, saying so.
    text = "(none: the logits are not finite)";
  }
  window_.start += Clock::now() - start;
  run_peak_ = std::max(run_peak_, session_.allocator.peak());
  std::printf("sample step: %2lld  %s\n", static_cast<long long>(step), text.c_str());
  std::fflush(stdout);
}

void Trainer::report_divergence(int64_t step, double loss, double grad_norm) const {
  std::fflush(stdout);
  std::fprintf(stderr,
               "error: %s; training stopped before this step's optimizer update, and no "
               "checkpoint is written for it (lower optimizer.lr or training.max_norm, or resume "
               "from an earlier "
               "checkpoint)\n",
               non_finite_step_message(step, loss, grad_norm, setup_.program(),
                                       *session_.state.backend, session_.state.grads)
                   .c_str());
}

// What memory.limit bounds (the allocator's books) next to what the
// operating system saw (README "What memory.limit bounds").
void Trainer::print_memory(int64_t step) const {
  if (data_parallel_.ranks() > 1) {
    const std::vector<int64_t> peaks = comm_.all_gather(run_peak_, "all-gather of the peaks");
    std::string text;
    for (size_t r = 0; r < peaks.size(); ++r)
      text += (r ? ", rank " : "rank ") + std::to_string(r) + " " + with_thousands(peaks[r]);
    std::printf("memory per rank: allocator peak bytes %s\n", text.c_str());
    print_parts_per_rank();
  }
  const int64_t rss = process_peak_rss_bytes();
  if (step <= start_step_ || rss <= 0) return;
  // The allocator never returns a freed buffer to malloc (it caches it for
  // the next step), so reserved() now is the most it ever held.
  const int64_t reserved = session_.allocator.reserved();
  std::printf(
      "memory: allocator peak %s (%s bytes; what memory.limit bounds), reserved %s "
      "(%s bytes, with its cache of freed buffers), process peak RSS %s (%s bytes, "
      "VmHWM), %s more than the allocator peak\n",
      format_bytes(run_peak_).c_str(), with_thousands(run_peak_).c_str(),
      format_bytes(reserved).c_str(), with_thousands(reserved).c_str(), format_bytes(rss).c_str(),
      with_thousands(rss).c_str(), format_bytes(rss - run_peak_).c_str());
}

// What each rank held at its training steps' peak, by memory category (the
// parts `remat plan` predicts).
void Trainer::print_parts_per_rank() const {
  std::vector<std::vector<int64_t>> parts;
  for (int c = 0; c < kNumMemoryCategories; ++c)
    parts.push_back(comm_.all_gather(run_at_peak_.bytes[c], "all-gather of the peak's parts"));
  std::string text;
  for (int r = 0; r < comm_.size(); ++r) {
    text += (r ? "; rank " : "rank ") + std::to_string(r);
    for (int c = 0; c < kNumMemoryCategories; ++c)
      text += std::string(c ? ", " : " ") + to_string(static_cast<MemoryCategory>(c)) + " " +
              with_thousands(parts[c][r]);
  }
  std::printf("memory per rank at the step peak: %s\n", text.c_str());
}

// How long each rank waited in collectives: the communication not hidden
// behind compute (bench/data_parallel.py reads this line).
void Trainer::print_communication() const {
  const double seconds = std::chrono::duration<double>(Clock::now() - train_start_).count();
  const std::vector<double> waits =
      comm_.all_gather(comm_.wait_seconds() + (sharded_ ? sharded_->group_wait_seconds() : 0),
                       "all-gather of the wait times");
  std::string text;
  for (size_t r = 0; r < waits.size(); ++r) {
    char part[64];
    std::snprintf(part, sizeof part, "%srank %zu %.3f s (%.1f%%)", r ? ", " : "", r, waits[r],
                  100.0 * waits[r] / seconds);
    text += part;
  }
  std::printf("communication: waited in collectives %s of %.3f s of training\n", text.c_str(),
              seconds);
}

void Trainer::print_profile(int64_t step) const {
  double total = 0;
  for (const auto& [op, seconds] : profile_seconds_) total += seconds;
  std::printf("profile (%lld steps, %.3f s in ops):\n", static_cast<long long>(step - start_step_),
              total);
  for (const auto& [op, seconds] : profile_seconds_) {
    std::printf("  %-28s %9.3f s  %5.1f%%\n", op.c_str(), seconds, 100.0 * seconds / total);
  }
}

}  // namespace remat::trainer_parts
