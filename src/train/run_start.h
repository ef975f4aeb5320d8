// What run_train (train/trainer.h) does before its first step: the settings
// the ranks agree on and the checkpoints record, every place the run will
// write checked (nothing created) and then the folders made, the setup
// printed, the data loaded, the state initialized or loaded, and the
// device's peak measured. Each a function of the config and what it built,
// apart from the training loop.
#pragma once

#include <cstdint>
#include <string>

#include "dist/comm.h"
#include "io/config.h"
#include "io/dataset.h"
#include "planner/setup.h"
#include "runtime/model_state.h"
#include "train/checkpoint.h"
#include "train/session.h"

namespace remat {

// The digest of the settings the trained state is a function of (16 hex
// digits, RunRecord::settings_digest): a run's saves record it.
std::string state_settings_digest(const JobConfig& config);

// Every rank runs one job: InputError unless the ranks' settings (but the
// thread count) agree.
void agree_on_config(Communicator& comm, const JobConfig& config);

// The files the steps after `start_step` write, where their names depend on
// the step: checked now (checkpoints a save would replace are named).
void check_run_targets(const JobConfig& config, int64_t start_step, int rank);
// The folders the steps write into (traces, memory snapshots), made before
// the metrics file is opened.
void create_run_folders(const JobConfig& config, int64_t start_step, int rank);
// Every place the run will write, checked before training starts (exit 2
// for an unwritable one); nothing is created.
void check_output_places(const JobConfig& config, bool writes_checkpoints);

// The model, its program and the AC plan, as a training run announces them.
void print_setup(const JobConfig& config, const Setup& setup);

// The training tokens; InputError naming the config key that chose them.
TokenDataset load_data(const JobConfig& config, int64_t vocab_size);
// What checkpoint.load records about the run that saved it (nothing
// without checkpoint.load).
RunRecord read_saved_run(const JobConfig& config);
// Fresh weights from training.seed, replaced by checkpoint.load's when
// given; returns the step the run continues from.
int64_t initialize_state(const JobConfig& config, Session& session, bool with_optimizer);
// checkpoint.create_seed_checkpoint: the step-0 weights, one file.
int write_seed_checkpoint(const JobConfig& config, const ModelState& state);

// The device's peak FLOP rate, which MFU and HFU divide by, and its source.
struct DevicePeak {
  double flops;
  std::string source;

  // No run can beat the device's peak: if one does, the peak was under-
  // measured (or set too low) and the achieved rate is the better bound,
  // so MFU and HFU never pass 100%.
  void raise_to(double achieved, int64_t step);
};
// metrics.peak_flops, or measured on `threads` threads with the instruction
// the matmuls run on; prints the device line.
DevicePeak device_peak(const JobConfig& config, int threads, bool bf16);

}  // namespace remat
