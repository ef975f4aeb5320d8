#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/format.h"
#include "kernels/cpu/kernels.h"
#include "planner/job_options.h"
#include "planner/plan_command.h"
#include "train/checkpoint_folder.h"
#include "train/memory_snapshot.h"
#include "train/numerics.h"
#include "train/resume.h"
#include "train/trainer_parts.h"

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

}  // namespace

namespace trainer_parts {

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
  if (config.checkpoint.enable && config.checkpoint.async_mode != "disabled") {
    // Not under mpirun, even with one rank: the child would hold copies of
    // MPI's connections (the stop snapshots' children close them first).
    if (!comm.launched_by_mpi()) {
      background_ = std::make_unique<BackgroundSave>();
    } else if (leads()) {
      std::printf(
          "note: checkpoint.async_mode = \"%s\" is not built for runs under mpirun: each rank "
          "writes its saves before training on\n",
          config.checkpoint.async_mode.c_str());
    }
  }
  if (config.metrics.sample_freq > 0)
    sample_tokenizer_ = make_tokenizer(config.model.tokenizer, setup.model.summary.vocab_size);
  if (data_parallel_.ranks() > 1 && !sharded_)
    session_.executor.set_step_observer([this](const Step& step) {
      if (reduces_in_this_pass_) data_parallel_.on_step(step);
    });
  // A new event file per run (a resumed run's too), as SummaryWriter opens
  // one; before the metrics file, which a fresh run truncates: an event
  // folder that cannot be made stops the run with the old metrics intact.
  if (writes_tensorboard(config, comm.rank())) {
    tensorboard_ = open_tensorboard(config, comm.rank());
    if (leads()) std::printf("tensorboard: events written to %s\n", tensorboard_.path().c_str());
  }
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
  ++window_.steps;
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
  if (config_.checkpoint.enable && saves_after_step(config_, step)) {
    if (saved_by_snapshots(step)) {
      if (leads()) remove_old_checkpoints(config_, step);
    } else {
      if (!finite_to_save(step)) return StepEnd::kDiverged;
      save_at_interval(step);
    }
  }
  if (background_) background_->poll();  // a save in the background that failed stops the run
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

}  // namespace trainer_parts

namespace {

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
  trainer_parts::Trainer trainer(config, setup, session, *loader, validator.get(), start_step,
                                 threads, comm, sharded.get());
  return trainer.train();
}

}  // namespace remat
