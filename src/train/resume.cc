#include "train/resume.h"

#include <cstdio>
#include <string>

#include "planner/job_options.h"

namespace remat {

namespace {

// A resume with other data-parallel ranks than the save's: the model and
// optimizer state are resharded; the global batch (ranks x local) is this
// run's, the same only when ranks x training.local_batch_size is.
void warn_resharded(const RunRecord& saved, int64_t local, int ranks, int64_t start_step) {
  const int64_t before = saved.ranks * saved.local_batch_size, now = ranks * local;
  std::printf(
      "%s: the checkpoint (step %lld) was saved by %lld ranks x local_batch_size %lld "
      "= global batch %lld, this run has %d x %lld = %lld%s\n",
      before == now ? "resharded" : "warning", static_cast<long long>(start_step),
      static_cast<long long>(saved.ranks), static_cast<long long>(saved.local_batch_size),
      static_cast<long long>(before), ranks, static_cast<long long>(local),
      static_cast<long long>(now),
      before == now ? ""
                    : ": steps from here on see a different number of tokens (keep "
                      "ranks x training.local_batch_size to continue the same run)");
}

}  // namespace

int64_t resume_data_position(const JobConfig& config, const RunRecord& saved, int64_t start_step,
                             int64_t windows, int ranks) {
  const auto& t = config.training;
  const int64_t microbatches = gradient_accumulation_steps(config, ranks);
  auto warn = [](const std::string& text) { std::printf("warning: %s\n", text.c_str()); };
  const std::string from =
      "the checkpoint (step " + std::to_string(start_step) + ") was saved by a run with ";
  if (saved.steps >= 0 && saved.steps != t.steps)
    warn(from + "training.steps = " + std::to_string(saved.steps) + ", this run has " +
         std::to_string(t.steps) + ": the learning-rate schedule (warmup, decay) is laid over " +
         std::to_string(t.steps) + " steps, so the learning rate after step " +
         std::to_string(start_step) + " is not the one the original run would have used");
  if (saved.ranks >= 0 && saved.ranks != ranks && saved.local_batch_size >= 0)
    warn_resharded(saved, t.local_batch_size, ranks, start_step);
  else if (saved.local_batch_size >= 0 && saved.local_batch_size != t.local_batch_size)
    warn(from + "training.local_batch_size = " + std::to_string(saved.local_batch_size) +
         ", this run has " + std::to_string(t.local_batch_size) +
         ": steps from here on see a different number of tokens" +
         (saved.next_window >= 0 && saved.seq_len == t.seq_len
              ? " (the data continues where that run stopped)"
              : ""));
  // A checkpoint from before accumulation existed ran one microbatch a step.
  const int64_t saved_microbatches = saved.microbatches >= 0 ? saved.microbatches : 1;
  if (saved_microbatches != microbatches)
    warn(from + std::to_string(saved_microbatches) +
         " microbatches per step (training.global_batch_size), this run has " +
         std::to_string(microbatches) + ": steps from here on see a different number of tokens");
  if (saved.seq_len >= 0 && saved.seq_len != t.seq_len)
    warn(from + "training.seq_len = " + std::to_string(saved.seq_len) + ", this run has " +
         std::to_string(t.seq_len) +
         ": its data windows are not this run's, so the data "
         "continues at window (step x batch) mod " +
         std::to_string(windows) + ", not where that run stopped");
  else if (saved.windows >= 0 && saved.windows != windows)
    warn(from + "a dataset of " + std::to_string(saved.windows) +
         " windows of seq_len + 1 "
         "tokens, this run's has " +
         std::to_string(windows) +
         " (another dataset?): the data continues at that run's next window mod " +
         std::to_string(windows));
  if (saved.next_window >= 0 && saved.seq_len == t.seq_len) return saved.next_window % windows;
  // (step x batch) mod windows, the batch being every window a step reads
  // (ranks x local_batch_size x microbatches, each at most 2^24), without
  // forming the product of two large numbers.
  const int64_t batch = t.local_batch_size * ranks % windows * microbatches % windows;
  return (start_step % windows) * batch % windows;
}

}  // namespace remat
