#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "generate/sampler.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/kernels.h"
#include "planner/job_options.h"
#include "planner/plan_command.h"
#include "planner/setup.h"
#include "runtime/shard_layout.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "train/data_parallel.h"
#include "train/load_balance.h"
#include "train/lr_schedule.h"
#include "train/memory_snapshot.h"
#include "train/metrics.h"
#include "train/numerics.h"
#include "train/optimizer.h"
#include "train/profile_trace.h"
#include "train/resume.h"
#include "train/run_start.h"
#include "train/sample.h"
#include "train/session.h"
#include "train/sharded_training.h"
#include "train/stop_signal.h"
#include "train/stop_snapshot.h"
#include "train/validation.h"

namespace remat {

namespace {

// Whether a stop signal forks checkpoint snapshots (train/stop_snapshot.h):
// under mpirun, with sharded checkpoints whose layout is the run's own (each
// rank writes what it holds, without talking to the others). HSDP, whose
// shards follow its smaller groups, and single-file saves gather first.
bool own_shard_layout(const Communicator& comm, const Session& session) {
  return !session.sharded || session.sharded->layout().ranks == comm.size();
}

bool snapshots_on_signal(const JobConfig& config, const Communicator& comm,
                         const Session& session) {
  return comm.size() > 1 && config.checkpoint.enable && sharded_checkpoints(config) &&
         own_shard_layout(comm, session);
}

// checkpoint.export_dtype's names (PyTorch's) of the file's element types.
constexpr std::pair<const char*, SafetensorsDtype> kExportDtypes[] = {
    {"float32", SafetensorsDtype::kF32},
    {"bfloat16", SafetensorsDtype::kBF16},
    {"float16", SafetensorsDtype::kF16}};

SafetensorsDtype export_dtype_named(const std::string& name) {
  for (const auto& [known, dtype] : kExportDtypes)
    if (name == known) return dtype;
  return SafetensorsDtype::kF32;  // validated at start-up: not reached
}

const char* export_dtype_name(SafetensorsDtype dtype) {
  for (const auto& [name, known] : kExportDtypes)
    if (dtype == known) return name;
  return "float32";
}

using Clock = std::chrono::steady_clock;

// The steps since the last logged one, which the next log line averages over.
struct MetricsWindow {
  Clock::time_point start = Clock::now();
  int64_t start_faults = process_minor_faults();
  int64_t tokens = 0, peak = 0, recompute_flops = 0, max_activations = 0;
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
  MetricsWindow window_;
  int64_t run_peak_ = 0;        // the allocator's peak over all steps
  MemorySnapshot run_at_peak_;  // the training steps' highest peak, by category
  Clock::time_point train_start_;
  std::map<std::string, double> profile_seconds_;
  // Null unless a stop signal forks snapshots (snapshots_on_signal).
  std::unique_ptr<StopSnapshot> snapshot_;
  RunRecord committed_run_;  // run_record() after the last committed step: what a snapshot saves
};

Trainer::Trainer(const JobConfig& config, const Setup& setup, Session& session, BatchLoader& loader,
                 Validator* validator, int64_t start_step, int threads, Communicator& comm,
                 ShardedTraining* sharded)
    : config_(config),
      setup_(setup),
      session_(session),
      loader_(loader),
      comm_(comm),
      data_parallel_(comm, session.state),
      sharded_(sharded),
      sharded_checkpoints_(sharded_checkpoints(config)),
      settings_digest_(state_settings_digest(config)),
      checkpoint_layout_(make_shard_layout(setup.program(), comm.size())),
      validator_(validator),
      start_step_(start_step),
      microbatches_(gradient_accumulation_steps(config, comm.size())),
      peak_(device_peak(config, threads, setup.program().compute_dtype == DType::kBF16)),
      flops_per_token_(model_flops_per_token(setup.model.summary, config.training.seq_len)),
      lr_{config.optimizer.lr,
          config.lr_scheduler.warmup_steps,
          config.lr_scheduler.decay_ratio,
          config.lr_scheduler.decay_type,
          config.lr_scheduler.lr_min,
          config.training.steps},
      adamw_{config.optimizer.beta1, config.optimizer.beta2, config.optimizer.eps,
             config.optimizer.weight_decay},
      inputs_(loader.batch_size() * config.training.seq_len),
      targets_(inputs_.size()) {
  session_.executor.set_profiling(profile_);
  if (snapshots_on_signal(config, comm, session))
    snapshot_ =
        std::make_unique<StopSnapshot>([this](int64_t step) { write_snapshot(step); }, start_step);
  if (config.metrics.sample_freq > 0)
    sample_tokenizer_ = make_tokenizer(config.model.tokenizer, setup.model.summary.vocab_size);
  if (data_parallel_.ranks() > 1 && !sharded_)
    session_.executor.set_step_observer([this](const Step& step) {
      if (reduces_in_this_pass_) data_parallel_.on_step(step);
    });
  // Metrics go straight to their final path, one flushed line per logged
  // step, so a killed run keeps what it logged; a resumed run appends.
  if (!config.metrics.jsonl_path.empty() && leads())
    metrics_log_ = LineLog(config.metrics.jsonl_path, "metrics.jsonl_path",
                           /*append=*/!config.checkpoint.load.empty());
}

int Trainer::train() {
  if (start_step_ >= config_.training.steps)
    std::printf(
        "training.steps = %lld: the loaded checkpoint is at step %lld already, nothing to train "
        "(raise training.steps to train on)\n",
        static_cast<long long>(config_.training.steps), static_cast<long long>(start_step_));
  StopSignals stop(snapshot_ ? std::function<void(int)>([this](int) { snapshot_->start(); })
                             : nullptr);
  window_ = MetricsWindow{};  // the first window starts with the first step
  train_start_ = window_.start;
  int64_t step = start_step_;
  bool diverged = false;
  int signal = 0;
  // Step 1 makes every buffer, and step 2 still meets a few new GEMM
  // temporaries: the heap is touched through by the end of step 2.
  constexpr int64_t kMallocWarmUpSteps = 2;
  // Twice the furthest a heap's high-water mark was seen to move after
  // warm-up (2 MiB, host_memory.h).
  constexpr int64_t kMallocHeadroomBytes = 4 << 20;
  int64_t abandoned_microbatches = 0;  // of the step a signal cut short
  while (step < config_.training.steps && !(signal = agreed_stop(stop)) && !diverged) {
    const StepEnd end = train_step(step + 1, stop, signal);
    if (end == StepEnd::kAbandoned) {
      abandoned_microbatches = microbatches_done_;
      break;
    }
    diverged = end == StepEnd::kDiverged;
    ++step;
    if (step == start_step_ + kMallocWarmUpSteps) {
      end_malloc_warm_up();
      cpu::run_on_every_thread([] { touch_malloc_headroom(kMallocHeadroomBytes); });
    }
  }
  end_malloc_warm_up();
  return finish(step, diverged, signal, abandoned_microbatches);
}

// One step, as llm.c and torchtitan write it. Ends kDiverged when the loss or
// the gradient norm is not finite: the run stops there. A stop signal between
// two microbatches abandons the step (`signal` set): a step of many
// microbatches can outlast a scheduler's grace period between SIGTERM and
// SIGKILL, and nothing of it is in the weights before its update.
Trainer::StepEnd Trainer::train_step(int64_t step, const StopSignals& stop, int& signal) {
  ModelState& state = session_.state;
  session_.allocator.reset_peak();
  // Each microbatch's gradients are those of its mean loss: the first pass
  // writes them, the later ones add theirs, and the sum is divided by the
  // count below, giving the gradient of the mean loss over the step's
  // batches (each as many tokens), as torchtitan's scaled losses do.
  double loss = 0;
  const int64_t first_window = loader_.position();
  for (int64_t micro = 0; micro < microbatches_; ++micro) {
    microbatches_done_ = micro;
    if (micro > 0 && (signal = agreed_stop(stop))) {
      abandon_step(first_window);
      return StepEnd::kAbandoned;
    }
    loader_.next(inputs_, targets_);
    const std::span<const int32_t> inputs = data_parallel_.local_rows(inputs_);
    reduces_in_this_pass_ = micro + 1 == microbatches_;
    if (sharded_) sharded_->set_accumulating(micro > 0);
    loss +=
        run_executor(step, micro, Batch{inputs.data(), data_parallel_.local_rows(targets_).data()});
    record_step(static_cast<int64_t>(inputs.size()));
  }
  if (sharded_) sharded_->set_accumulating(false);
  loss /= static_cast<double>(microbatches_);
  if (sharded_)
    loss = sharded_->reduce(loss);
  else if (data_parallel_.ranks() > 1)
    loss = data_parallel_.reduce(loss);
  if (microbatches_ > 1) {
    const float mean = 1.0f / static_cast<float>(microbatches_);
    if (sharded_) {
      sharded_->scale_gradients(mean);
    } else {
      for (size_t i = 0; i < state.grads.size(); ++i)
        if (setup_.program().params[i].trainable) state.backend->scale(state.grads[i], mean);
    }
  }
  if (profile_ && step % config_.profiling.profile_freq == 0) {
    write_profile_trace(
        profile_trace_path(config_.job.dump_folder, config_.profiling.save_traces_folder, step,
                           comm_.rank()),
        setup_.program(), session_.executor, step);
  }
  const double max_norm = config_.training.max_norm;
  const GradClip clip =
      sharded_ ? sharded_->clip_grad_norm(max_norm) : clip_grad_norm(state, max_norm);
  const double grad_norm = clip.norm;
  // Checked before the optimizer, so the weights stay those of the last
  // good step and no NaN reaches a checkpoint.
  const bool diverged = !std::isfinite(loss) || !std::isfinite(grad_norm);
  const MoeLoad moe = moe_load(state);  // read before the counts reset
  if (!diverged) update(step, clip.scale);
  if (diverged || step % config_.metrics.log_freq == 0 || step == start_step_ + 1 ||
      step == config_.training.steps) {
    log_step(step, loss, grad_norm, moe);
  }
  if (diverged) {
    report_divergence(step, loss, grad_norm);
    return StepEnd::kDiverged;
  }
  if (validator_ && step % config_.validation.freq == 0) validate(step);
  if (sample_tokenizer_ && step % config_.metrics.sample_freq == 0) sample(step);
  if (config_.checkpoint.enable && step % config_.checkpoint.interval == 0 &&
      !saved_by_snapshots(step)) {
    if (!finite_to_save(step)) return StepEnd::kDiverged;
    save(step);
  }
  return StepEnd::kCompleted;
}

// Leaves the state as the step before left it, so that the final checkpoint
// resumes as if the abandoned step had never started: the data position goes
// back to the step's first batch, and the MoE token counts (zero after every
// update) are cleared. The gradients are left as they are: the next pass
// overwrites them, and no checkpoint holds them.
void Trainer::abandon_step(int64_t first_window) {
  loader_.set_position(first_window);
  reset_expert_counts(session_.state);
  if (sharded_) sharded_->set_accumulating(false);
}

// What turns the state after step - 1 into the state after `step`: the
// expert bias and the optimizer's update (the data position moved at the
// step's start). A snapshot is forked only outside it (StopSnapshot).
void Trainer::update(int64_t step, float grad_scale) {
  std::unique_lock<std::mutex> hold;
  if (snapshot_) hold = snapshot_->hold();
  update_expert_bias(session_.state);
  if (sharded_)
    sharded_->adamw_step(adamw_, lr_.at(step), step, grad_scale);
  else
    adamw_step(session_.state, adamw_, lr_.at(step), step, grad_scale);
  if (!snapshot_) return;
  committed_run_ = run_record();
  snapshot_->committed(step);
}

// Runs in a snapshot's child (StopSnapshot): this rank's shard of the state
// after `step`, what save() writes at a boundary, under a temporary name of
// its own (the rank's save of the same step may be writing too).
void Trainer::write_snapshot(int64_t step) const {
  const ReplicaShards mine =
      session_.sharded ? owned_shards_of(*session_.sharded, session_.state, /*with_optimizer=*/true)
                       : owned_shards_of(session_.state, checkpoint_layout_, comm_.rank(),
                                         /*with_optimizer=*/true);
  write_shard_and_index_if_complete(checkpoint_path(config_, step, /*sharded=*/true), mine.shards,
                                    step, committed_run_.metadata(),
                                    "snapshot-" + std::to_string(::getpid()));
}

// Forward and backward on this step's batch. With
// profiling.enable_memory_snapshot the run's first step is measured as it
// runs and written as a memory timeline (by rank 0 under mpirun).
double Trainer::run_executor(int64_t step, int64_t microbatch, const Batch& batch) {
  // A sharded run's gradient buffers are its parameter source's, rebuilt
  // every pass: its shards accumulate instead (ShardedTraining).
  const ParamGradients gradients =
      microbatch == 0 || sharded_ ? ParamGradients::kOverwrite : ParamGradients::kAccumulate;
  if (!config_.profiling.enable_memory_snapshot || step != start_step_ + 1 || microbatch != 0 ||
      !leads())
    return session_.executor.run(batch, gradients);
  double loss = 0;
  const TimelineSeries measured{"measured", setup_.ac.plan.description,
                                measure_timeline(session_.allocator, session_.executor, [&] {
                                  loss = session_.executor.run(batch, gradients);
                                })};
  const ModelSummary& s = setup_.model.summary;
  const std::string path = write_memory_snapshot(
      config_, step, setup_.program(),
      s.family + " " + s.flavor + ", measured at step " + std::to_string(step), measured);
  std::printf("memory snapshot of step %lld written to %s\n", static_cast<long long>(step),
              path.c_str());
  return loss;
}

// The signal that stops the run at this step boundary, or 0. Every rank
// stops at the same boundary: a signal one rank received stops them all
// (ranks > 1: one small collective per step).
int Trainer::agreed_stop(const StopSignals& stop) const {
  if (data_parallel_.ranks() == 1) return stop.received();
  return static_cast<int>(comm_.max(stop.received(), "agreement on stopping"));
}

void Trainer::record_step(int64_t tokens) {
  const Allocator& allocator = session_.allocator;
  const ExecutionCounts& counts = session_.executor.counts();
  window_.tokens += tokens;
  window_.peak = std::max(window_.peak, allocator.peak());
  run_peak_ = std::max(run_peak_, allocator.peak());
  if (allocator.peak() > run_at_peak_.total()) run_at_peak_ = allocator.at_peak();
  window_.max_activations =
      std::max(window_.max_activations, allocator.category_peaks()[MemoryCategory::kActivations]);
  window_.recompute_flops += counts.recompute_flops;
  for (const auto& [op, seconds] : counts.seconds_by_op) profile_seconds_[op] += seconds;
}

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

// What a checkpoint records about this run, as it stands now.
RunRecord Trainer::run_record() const {
  const auto& t = config_.training;
  RunRecord r;
  r.steps = t.steps;
  r.local_batch_size = t.local_batch_size;
  r.seq_len = t.seq_len;
  r.windows = loader_.num_windows();
  r.next_window = loader_.position();
  r.ranks = data_parallel_.ranks();
  r.microbatches = microbatches_;
  r.settings_digest = settings_digest_;
  return r;
}

// A resumable checkpoint, with what it records about this run (RunRecord).
// The ranks wait for each other's writes under the start-up bound: writing a
// large checkpoint may take longer than a step's collectives may wait.
void Trainer::save(int64_t step) const {
  const std::string path = checkpoint_path(config_, step, sharded_checkpoints_);
  const bool with_optimizer = !weights_only_save(step);
  SafetensorsDtype stored = SafetensorsDtype::kF32;  // the weights' type in the file
  comm_.set_timeout(config_.comm.init_timeout_seconds);
  if (sharded_checkpoints_ && session_.sharded &&
      session_.sharded->layout().ranks == checkpoint_layout_.ranks) {
    // Sharded over every rank: each rank writes the shards it holds, no gather.
    const ReplicaShards mine = owned_shards_of(*session_.sharded, session_.state, with_optimizer);
    save_sharded_checkpoint(path, mine.shards, step, run_record().metadata(), comm_);
  } else {
    // A sharded run (HSDP's shards follow its smaller groups, or a
    // single-file save) gathers its state first, every rank taking part,
    // outside the run's books.
    Allocator gathered_books;
    std::optional<ModelState> gathered;
    if (sharded_) {
      gathered.emplace(setup_.program(), gathered_books, /*with_gradients=*/false);
      sharded_->gather_full(*gathered, with_optimizer);
    }
    const ModelState& state = gathered ? *gathered : session_.state;
    if (sharded_checkpoints_) {  // every rank writes the range it owns
      const ReplicaShards mine =
          owned_shards_of(state, checkpoint_layout_, comm_.rank(), with_optimizer);
      save_sharded_checkpoint(path, mine.shards, step, run_record().metadata(), comm_);
    } else {
      // The replicas hold the same state: rank 0 writes it.
      if (leads()) {
        if (!with_optimizer) stored = export_dtype(state);
        save_checkpoint(path, state, step, with_optimizer, run_record().metadata(), stored);
      }
      if (data_parallel_.ranks() > 1) comm_.barrier("wait for rank 0's checkpoint save");
    }
  }
  comm_.set_timeout(config_.comm.train_timeout_seconds);
  if (!with_optimizer && leads()) {
    std::printf(
        "model weights written to %s as %s, without the optimizer state "
        "(checkpoint.last_save_model_weights_only)\n",
        path.c_str(), export_dtype_name(stored));
  }
}

// checkpoint.export_dtype as the file's element type. fp16 tops out at
// 65504: a weight beyond it would be written as infinity, a file no load
// accepts, so the weights go out in fp32 instead, and the run says why.
SafetensorsDtype Trainer::export_dtype(const ModelState& state) const {
  const SafetensorsDtype dtype = export_dtype_named(config_.checkpoint.export_dtype);
  if (dtype != SafetensorsDtype::kF16) return dtype;
  if (const std::optional<std::string> beyond = weight_beyond_f16(state)) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "warning: checkpoint.export_dtype = \"float16\": %s, beyond float16's range "
                 "(65504); the final weights are written in float32 instead\n",
                 beyond->c_str());
    return SafetensorsDtype::kF32;
  }
  return SafetensorsDtype::kF16;
}

// An update that overflowed (an absurd optimizer.lr) leaves inf in the
// weights a step before any loss shows it, and no checkpoint may hold one.
// Checked where a save would write, not after every update: a scan of the
// whole state each step would cost a pass over it.
bool Trainer::finite_to_save(int64_t step) const {
  bool finite = true;
  auto scan = [&](std::span<const float> values) {
    finite = finite && all_finite(values.data(), std::ssize(values));
  };
  if (session_.sharded) {
    const ReplicaShards mine =
        owned_shards_of(*session_.sharded, session_.state, /*with_optimizer=*/true);
    for (const auto* part : {&mine.shards.params, &mine.shards.exp_avg, &mine.shards.exp_avg_sq})
      for (std::span<const float> values : *part) scan(values);
  } else {
    const ModelState& state = session_.state;
    for (const auto* part : {&state.params, &state.exp_avg, &state.exp_avg_sq})
      for (const Tensor& t : *part)
        if (t.defined()) scan({HostView(*state.backend, t).data(), static_cast<size_t>(t.numel())});
  }
  if (comm_.size() > 1) finite = comm_.min(finite ? 1 : 0, "agreement on a finite state") == 1;
  if (finite) return true;
  std::fflush(stdout);
  std::fprintf(stderr,
               "error: step %lld's optimizer update (optimizer.lr %g) left NaN or inf in the "
               "weights or AdamW moments; training stopped and no checkpoint is written for it "
               "(lower optimizer.lr, or resume from an earlier checkpoint)\n",
               static_cast<long long>(step), lr_.at(step));
  return false;
}

// After a stop signal every rank forks a snapshot of each step it completes
// (StopSnapshot): when every rank's child of this step wrote its shard, the
// last of them wrote the index, and a save would only write the same bytes
// again, first removing that index (save_sharded_checkpoint), which a
// SIGKILL during the save would then lose. A collective: the ranks agree.
bool Trainer::saved_by_snapshots(int64_t step) const {
  if (!snapshot_) return false;
  comm_.set_timeout(config_.comm.init_timeout_seconds);  // the wait includes the child's write
  const bool saved = comm_.min(snapshot_->wait(step) ? 1 : 0, "agreement on the stop snapshots");
  comm_.set_timeout(config_.comm.train_timeout_seconds);
  return saved;
}

int Trainer::finish(int64_t step, bool diverged, int signal, int64_t abandoned_microbatches) const {
  if (signal && abandoned_microbatches > 0) {
    std::printf(
        "interrupted by %s during step %lld, after %lld of its %lld microbatches: the step is "
        "dropped (a resumed run reads its batches again); stopping after step %lld\n",
        StopSignals::name(signal), static_cast<long long>(step + 1),
        static_cast<long long>(abandoned_microbatches), static_cast<long long>(microbatches_),
        static_cast<long long>(step));
  } else if (signal) {
    std::printf("interrupted by %s: stopping after step %lld\n", StopSignals::name(signal),
                static_cast<long long>(step));
  }
  // The final save runs with the handlers still installed: a second Ctrl-C
  // cannot cut it short.
  if (!diverged && config_.checkpoint.enable && step > start_step_ &&
      step % config_.checkpoint.interval != 0) {
    // The signal may have reached other ranks only, or not yet the watcher.
    if (signal && snapshot_) snapshot_->start();
    const bool snapshots = saved_by_snapshots(step);
    diverged = !snapshots && !finite_to_save(step);
    if (!snapshots && !diverged) save(step);
    if (!diverged && (snapshots || !weights_only_save(step)))  // save() said what it wrote
      std::printf("checkpoint written to %s%s\n",
                  checkpoint_path(config_, step, sharded_checkpoints_).c_str(),
                  snapshots ? " (by the snapshots forked at the signal)" : "");
  }
  if (data_parallel_.ranks() > 1) {
    data_parallel_.check_replicas("at the end");
    print_communication();
  }
  print_memory(step);
  if (profile_) print_profile(step);
  if (diverged) return 1;
  if (signal) {
    std::printf("exit status %d: interrupted run (128 + %s)\n", 128 + signal,
                StopSignals::name(signal));
    return 128 + signal;
  }
  return 0;
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

// Ctrl-C on mpirun reaches the ranks as Open MPI's SIGTERM, followed by
// SIGKILL odls_base_sigkill_timeout seconds later (1 unless set; mpirun
// passes --mca settings to the ranks' environment): often too little to
// finish the step and save, and only a run whose checkpoints are sharded
// its own way saves without waiting (README "Data parallelism over MPI").
void note_mpirun_interrupts(const JobConfig& config, const Communicator& comm,
                            const Session& session) {
  if (comm.size() == 1 || !config.checkpoint.enable || snapshots_on_signal(config, comm, session) ||
      std::getenv("OMPI_MCA_odls_base_sigkill_timeout") != nullptr)
    return;
  std::printf(
      "note: Ctrl-C on mpirun leaves the ranks 1 s between Open MPI's SIGTERM and SIGKILL to "
      "finish the step and save; for the final checkpoint, run mpirun with --mca "
      "odls_base_sigkill_timeout S, S seconds above a step and a save%s\n",
      own_shard_layout(comm, session)
          ? " (or save with checkpoint.format = \"sharded\", which does not wait)"
          : "");
}

// What validation reads and when, and its predicted peak next to the training
// step's: the forward-only pass at batch 1 stays below it (its live values
// are a subset of the training forward's, at a smaller batch).
void print_validation(const JobConfig& config, const Setup& setup, const Validator& validator) {
  const int64_t training_peak =
      predict(setup.program(), setup.ac.plan, PlannerOptions{}).peak_bytes;
  std::printf(
      "validation: every %lld steps, %s; predicted peak %s (%lld bytes), training "
      "step %s (%lld bytes)\n",
      static_cast<long long>(config.validation.freq), validator.describe().c_str(),
      format_bytes(validator.predicted_peak()).c_str(),
      static_cast<long long>(validator.predicted_peak()), format_bytes(training_peak).c_str(),
      static_cast<long long>(training_peak));
  if (validator.predicted_peak() > training_peak)
    std::printf("warning: validation raises the run's peak to %s\n",
                format_bytes(validator.predicted_peak()).c_str());
}

}  // namespace

int run_train(const JobConfig& config, Communicator& comm) {
  const auto& t = config.training;
  agree_on_config(comm, config);  // before anything is planned or written
  check_data_parallel_degrees(config, comm);
  const bool leads = comm.rank() == 0;  // the rank that writes files
  // The CPU engine: one process, or the ranks it shards over (a budget plan
  // is solved for what each rank holds, as `remat plan` solves it).
  PlannerOptions engine;
  engine.shard_degree = config.parallelism.data_parallel_shard_degree;
  const Setup setup = make_setup(config, t.local_batch_size, Pass::kTraining, engine);
  print_setup(config, setup);
  const bool seed_only = config.checkpoint.create_seed_checkpoint;
  if (t.steps == 0 && !seed_only) {
    std::printf("training.steps = 0: nothing to train\n");
    return 0;
  }

  // Everything the user gave is checked before anything is allocated or written.
  TokenDataset data, validation_data;
  if (!seed_only) data = load_data(config, setup.model.summary.vocab_size);
  const bool validates = !seed_only && config.validation.enabled;
  if (validates) validation_data = validation_tokens(config, data, setup.model.summary.vocab_size);
  std::optional<BatchLoader> loader;  // made here: it refuses too short a dataset
  if (!seed_only)
    loader.emplace(std::move(data.tokens), t.local_batch_size * comm.size(), t.seq_len,
                   t.dataset_path.empty() ? t.dataset : t.dataset_path);
  const RunRecord saved_run = read_saved_run(config);
  const bool writes_checkpoints = seed_only || config.checkpoint.enable;
  check_output_places(config, writes_checkpoints);
  if (!seed_only) check_run_fits(config, setup);
  std::optional<ValidationPlan> validation_plan;
  if (validates) validation_plan = plan_validation(config);
  const int threads = configure_threads(config);

  // Rank r holds chunk r % S of every unit (S the shard degree; HSDP's
  // groups are consecutive ranks).
  const auto shard_ranks = static_cast<int>(config.parallelism.data_parallel_shard_degree);
  Session session(setup, /*with_gradients=*/!seed_only, shard_ranks, comm.rank() % shard_ranks);
  const int64_t start_step = initialize_state(config, session, /*with_optimizer=*/!seed_only);
  if (!seed_only) check_run_targets(config, start_step, comm.rank());
  // The first things written, once every check has passed.
  std::optional<CheckpointFolderLock> folder_lock;
  if (writes_checkpoints && leads) {
    create_folders(checkpoint_folder(config), "checkpoint.folder");
    folder_lock.emplace(checkpoint_folder(config));
    remove_stale_checkpoint_temporaries(checkpoint_folder(config));
  }
  if (!seed_only) create_run_folders(config, start_step, comm.rank());
  confirm_inputs(comm);
  comm.set_timeout(config.comm.train_timeout_seconds);
  std::unique_ptr<ShardedTraining> sharded;  // splits HSDP's groups: after the agreement
  if (session.sharded)
    sharded = std::make_unique<ShardedTraining>(comm, shard_ranks, session.state, *session.sharded);
  if (seed_only) return leads ? write_seed_checkpoint(config, session.state) : 0;
  std::printf("dataset: %s\n", data.description.c_str());
  if (comm.size() > 1) std::printf("%s\n", describe_data_parallel(config, comm).c_str());
  if (const int64_t micro = gradient_accumulation_steps(config, comm.size()); micro > 1) {
    std::printf(
        "gradient accumulation: %lld microbatches of %lld sequence%s per optimizer step "
        "(training.global_batch_size %lld); memory is one microbatch's, the log line's "
        "loss is their mean and tps counts all of them\n",
        static_cast<long long>(micro), static_cast<long long>(t.local_batch_size * comm.size()),
        t.local_batch_size * comm.size() == 1 ? "" : "s",
        static_cast<long long>(t.global_batch_size));
  }
  note_mpirun_interrupts(config, comm, session);
  if (start_step > 0) {
    loader->set_position(
        resume_data_position(config, saved_run, start_step, loader->num_windows(), comm.size()));
  }
  std::unique_ptr<Validator> validator;
  if (validates) {
    validator = std::make_unique<Validator>(config, session, std::move(*validation_plan),
                                            std::move(validation_data));
    print_validation(config, setup, *validator);
  }
  Trainer trainer(config, setup, session, *loader, validator.get(), start_step, threads, comm,
                  sharded.get());
  return trainer.train();
}

}  // namespace remat
