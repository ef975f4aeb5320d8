// The Trainer's checkpoints (trainer_parts.h): the interval and final saves,
// the weights-only export, the stop snapshots' share, and the end of a run.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "runtime/backend.h"
#include "train/checkpoint_folder.h"
#include "train/numerics.h"
#include "train/trainer_parts.h"

namespace remat::trainer_parts {

namespace {

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

}  // namespace

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

void Trainer::save_at_interval(int64_t step) {
  auto write = [this, step] {
    save(step);
    if (leads()) remove_old_checkpoints(config_, step);
  };
  if (background_) {
    background_->start(step, write);
  } else {
    write();
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
  // The last save in the background completes (or stops the run with its
  // error) before anything else is written or said.
  if (background_) background_->wait();
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
      !saves_after_step(config_, step)) {
    // The signal may have reached other ranks only, or not yet the watcher.
    if (signal && snapshot_) snapshot_->start();
    const bool snapshots = saved_by_snapshots(step);
    diverged = !snapshots && !finite_to_save(step);
    if (!snapshots && !diverged) save(step);
    if (!diverged && (snapshots || !weights_only_save(step)))  // save() said what it wrote
      std::printf("checkpoint written to %s%s\n",
                  checkpoint_path(config_, step, sharded_checkpoints_).c_str(),
                  snapshots ? " (by the snapshots forked at the signal)" : "");
    if (!diverged && leads()) remove_old_checkpoints(config_, step);
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

}  // namespace remat::trainer_parts
