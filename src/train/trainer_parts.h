// The Trainer: a training run's loop over a session and a data loader that
// run_train (trainer.cc) has built and checked. Its members are defined by
// concern: trainer.cc the loop (a step, the update, the executor's pass),
// trainer_save.cc the checkpoints and the end of the run, trainer_report.cc
// the log lines and what the run prints at its end. Only those three files
// include this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "core/memory.h"
#include "dist/comm.h"
#include "io/config.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "planner/setup.h"
#include "runtime/executor.h"
#include "runtime/model_state.h"
#include "runtime/shard_layout.h"
#include "train/background_save.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/load_balance.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/profile_trace.h"
#include "train/run_start.h"
#include "train/session.h"
#include "train/sharded_training.h"
#include "train/stop_signal.h"
#include "train/stop_snapshot.h"
#include "train/validation.h"

namespace remat::trainer_parts {

using Clock = std::chrono::steady_clock;

// The steps since the last logged one, which the next log line averages over.
struct MetricsWindow {
  Clock::time_point start = Clock::now();
  int64_t start_faults = process_minor_faults();
  int64_t steps = 0, tokens = 0, peak = 0, recompute_flops = 0, max_activations = 0;
};

// A training run over a session and a data loader that run_train has built
// and checked; train() steps from `start_step` to training.steps, validating
// every validation.freq steps when given a validator.
class Trainer {
 public:
  // `loader` reads the global batch (data_parallel.h); this rank trains on
  // its rows.
  // `sharded`: the run's sharded training (null: not sharded).
  Trainer(const JobConfig& config, const Setup& setup, Session& session, BatchLoader& loader,
          Validator* validator, int64_t start_step, int threads, Communicator& comm,
          ShardedTraining* sharded);
  // Returns the exit status: 0, 1 when a step's loss or gradient norm is not
  // finite, 128 + the signal when stopped by SIGINT or SIGTERM.
  int train();

 private:
  // How a step ended: kAbandoned when a stop signal came between two of its
  // microbatches (the state is that of the step before).
  enum class StepEnd { kCompleted, kDiverged, kAbandoned };
  StepEnd train_step(int64_t step, const StopSignals& stop, int& signal);
  void abandon_step(int64_t first_window);
  double run_executor(int64_t step, int64_t microbatch, const Batch& batch);
  void update(int64_t step, float grad_scale);
  void write_snapshot(int64_t step) const;
  bool saved_by_snapshots(int64_t step) const;
  int agreed_stop(const StopSignals& stop) const;
  void record_step(int64_t tokens);
  void log_step(int64_t step, double loss, double grad_norm, const MoeLoad& moe);
  void validate(int64_t step);
  void sample(int64_t step);
  void report_divergence(int64_t step, double loss, double grad_norm) const;
  RunRecord run_record() const;
  void save(int64_t step) const;
  // An interval save: written now, or by a child process (checkpoint.async_mode).
  void save_at_interval(int64_t step);
  // Whether the save of `step` holds the weights only, as export_dtype
  // (checkpoint.last_save_model_weights_only): the run's last step only, so
  // a run stopped earlier saves what it resumes from.
  bool weights_only_save(int64_t step) const {
    return config_.checkpoint.last_save_model_weights_only && step == config_.training.steps;
  }
  SafetensorsDtype export_dtype(const ModelState& state) const;
  // Whether the state a save would write is finite on every rank (a
  // collective); reports the step whose update overflowed when not.
  bool finite_to_save(int64_t step) const;
  int finish(int64_t step, bool diverged, int signal, int64_t abandoned_microbatches) const;
  void print_memory(int64_t step) const;
  void print_communication() const;
  void print_parts_per_rank() const;
  bool leads() const { return comm_.rank() == 0; }  // writes files for the run
  void print_profile(int64_t step) const;

  const JobConfig& config_;
  const Setup& setup_;
  Session& session_;
  BatchLoader& loader_;
  Communicator& comm_;
  DataParallel data_parallel_;
  ShardedTraining* const sharded_;  // null: not sharded
  const bool sharded_checkpoints_;
  const std::string settings_digest_;            // of state_settings(): what its checkpoints record
  const ShardLayout checkpoint_layout_;          // of sharded checkpoints: over this run's ranks
  Validator* const validator_;                   // null: no validation
  std::unique_ptr<Tokenizer> sample_tokenizer_;  // null: metrics.sample_freq = 0
  const int64_t start_step_;
  // Gradient accumulation: forward and backward passes per optimizer step,
  // each on a batch of ranks x local_batch_size (training.global_batch_size).
  const int64_t microbatches_;
  // Whether the data-parallel all-reduces run during this pass: only in a
  // step's last microbatch, once the gradients hold every microbatch's sum.
  bool reduces_in_this_pass_ = true;
  int64_t microbatches_done_ = 0;  // of the step in progress
  DevicePeak peak_;
  const int64_t flops_per_token_;
  // profiling.enable_profiling (or REMAT_PROFILE=1) prints where the steps'
  // time went, per phase and op, at the end.
  const bool profile_ = profiling_on(config_);
  // torchtitan's coloured log line, on a terminal only (under mpirun the
  // rank's stdout is mpirun's pseudo-terminal whatever mpirun writes to).
  const bool color_ =
      !config_.metrics.disable_color_printing && isatty(STDOUT_FILENO) && !comm_.launched_by_mpi();
  const LrSchedule lr_;
  const AdamWConfig adamw_;
  std::vector<int32_t> inputs_, targets_;  // the global batch
  LineLog metrics_log_;
  TensorBoardLog tensorboard_;  // open where this rank writes events (writes_tensorboard)
  MetricsWindow window_;
  int64_t run_peak_ = 0;        // the allocator's peak over all steps
  MemorySnapshot run_at_peak_;  // the training steps' highest peak, by category
  Clock::time_point train_start_;
  std::map<std::string, double> profile_seconds_;
  // Null unless a stop signal forks snapshots (snapshots_on_signal).
  std::unique_ptr<StopSnapshot> snapshot_;
  RunRecord committed_run_;  // run_record() after the last committed step: what a snapshot saves
  // Null unless interval saves are written in the background (checkpoint.async_mode).
  std::unique_ptr<BackgroundSave> background_;
};

}  // namespace remat::trainer_parts
