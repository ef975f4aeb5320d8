// What run_train does before its first step (train/run_start.h).
#include "train/run_start.h"

#include <cstdio>
#include <string>
#include <vector>

#include "ac/report.h"
#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/tokenizer.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/kernels.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "train/memory_snapshot.h"
#include "train/metrics.h"
#include "train/profile_trace.h"
#include "train/resume.h"

namespace remat {

namespace {

// Whether this rank writes a memory snapshot: of the run's first step, by
// rank 0.
bool takes_memory_snapshot(const JobConfig& config, int64_t start_step, int rank) {
  return config.profiling.enable_memory_snapshot && rank == 0 && start_step < config.training.steps;
}

}  // namespace

// The files the steps after `start_step` write, where their names depend on
// the step: found in the way now, not once the steps before them have run.
void check_run_targets(const JobConfig& config, int64_t start_step, int rank) {
  if (config.checkpoint.enable) {
    // As torchtitan does, a save replaces what is there; said now, not
    // found out afterwards.
    const std::vector<int64_t> replaced = check_checkpoint_targets(config, start_step);
    if (!replaced.empty() && rank == 0) {
      std::string steps;
      for (const int64_t s : replaced) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
      std::printf(
          "warning: checkpoint.folder '%s' holds the checkpoint%s of step%s %s, later than "
          "this run's start (step %lld); its saves will replace %s\n",
          checkpoint_folder(config).c_str(), replaced.size() > 1 ? "s" : "",
          replaced.size() > 1 ? "s" : "", steps.c_str(), static_cast<long long>(start_step),
          replaced.size() > 1 ? "them" : "it");
    }
  }
  if (profiling_on(config)) check_profile_trace_targets(config, start_step, rank);
  if (takes_memory_snapshot(config, start_step, rank))
    check_memory_snapshot_files(config, start_step + 1);
}

namespace {

// What makes a job: its settings, all but the thread count (which changes
// no bit). The ranks agree on them, and its checkpoints record their digest.
RankSettings job_settings(const JobConfig& config) {
  RankSettings settings;
  for (auto& setting : job_config_settings(config))
    if (setting.first != "training.threads") settings.push_back(std::move(setting));
  return settings;
}

// The settings the trained state is a function of: the job's, but those
// that only say where and how it writes, logs, checks and waits, and the AC
// settings (every AC mode computes the same bits). Their digest names a
// run's saves (RunRecord::settings_digest): a run saving sharded or to one
// file, or into another folder, saves the same state under the same digest;
// a run of another seed, model or schedule under another.
RankSettings state_settings(const JobConfig& config) {
  RankSettings settings;
  for (auto& setting : job_settings(config)) {
    const std::string section = setting.first.substr(0, setting.first.find('.'));
    const bool shapes_state =
        section == "checkpoint"
            ? setting.first == "checkpoint.load" ||
                  setting.first == "checkpoint.initial_load_model_weights_only"
            : !(section == "job" || section == "metrics" || section == "validation" ||
                section == "comm" || section == "memory" || section == "profiling" ||
                section == "activation_checkpoint");
    if (shapes_state) settings.push_back(std::move(setting));
  }
  return settings;
}

}  // namespace

// Their digest as a checkpoint records it: 16 hex digits.
std::string state_settings_digest(const JobConfig& config) {
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx",
                static_cast<unsigned long long>(settings_digest(state_settings(config))));
  return digest;
}

// Every rank runs one job: given another config, a rank's collectives
// stopped matching its peers': crashes, a silent exit, or a model mixed of
// two inits saved as if nothing were wrong.
void agree_on_config(Communicator& comm, const JobConfig& config) {
  try {
    agree_on_settings(comm, job_settings(config));
  } catch (const RanksDisagree& e) {
    throw InputError(e.what());
  }
}

// The folders the steps write into (traces, memory snapshots), made before
// the metrics file is opened (and truncated): a folder the checks cannot
// foresee failing (one under /proc) then costs no earlier run's metrics.
void create_run_folders(const JobConfig& config, int64_t start_step, int rank) {
  if (profiling_on(config)) create_profile_traces_folder(config);
  if (takes_memory_snapshot(config, start_step, rank)) create_memory_snapshot_folder(config);
}

// Every place the run will write is checked before training starts, so an
// unwritable folder or a metrics path naming a device fails in a second
// (exit 2), not after hours of training. Nothing is created here.
void check_output_places(const JobConfig& config, bool writes_checkpoints) {
  const std::string& metrics = config.metrics.jsonl_path;
  if (!metrics.empty()) check_output_file(metrics, "metrics.jsonl_path");
  if (config.metrics.enable_tensorboard)
    check_output_folder(tensorboard_root(config), "metrics.save_tb_folder");
  if (config.profiling.enable_memory_snapshot) check_memory_snapshot_folder(config);
  if (writes_checkpoints) {
    check_output_folder(config.job.dump_folder, "job.dump_folder");
    check_output_folder(checkpoint_folder(config), "checkpoint.folder");
    // A save would rename a checkpoint over the open metrics file, whose
    // later lines would go to a file no longer in any folder.
    if (!metrics.empty() && checkpoint_name_in(metrics, checkpoint_folder(config)))
      throw InputError("metrics.jsonl_path: '" + metrics + "' is a name the checkpoints in '" +
                       checkpoint_folder(config) +
                       "' take (step-N.safetensors, step-N/); expected another file name");
  }
  if (config.checkpoint.create_seed_checkpoint) check_no_seed_checkpoint(config);
  if (profiling_on(config)) {
    check_output_folder(config.job.dump_folder, "job.dump_folder");
    check_output_folder(profile_traces_folder(config), "profiling.save_traces_folder");
  }
}

namespace {

void print_model(const ModelSummary& s, const Program& program) {
  std::printf("model: %s %s, %s parameters (%s without the embedding), %d layers, vocab %lld\n",
              s.family.c_str(), s.flavor.c_str(), with_thousands(s.params).c_str(),
              with_thousands(s.params - s.embedding_params).c_str(), static_cast<int>(s.n_layers),
              static_cast<long long>(s.vocab_size));
  if (s.active_params != s.params) {
    std::printf("model: %s active parameters per token\n", with_thousands(s.active_params).c_str());
  }
  std::printf("program: %zu ops, %zu values, batch %lld x seq %lld\n", program.nodes.size(),
              program.values.size(), static_cast<long long>(program.batch),
              static_cast<long long>(program.seq));
}

}  // namespace

// The setup as a training run announces it: the model, its program and the
// AC plan, with the plan's warnings (and its matmul table when asked).
void print_setup(const JobConfig& config, const Setup& setup) {
  print_model(setup.model.summary, setup.program());
  if (!setup.loss_head_why.empty()) std::printf("loss head: %s\n", setup.loss_head_why.c_str());
  std::printf("activation checkpointing: %s\n", setup.ac.plan.description.c_str());
  for (const std::string& w : setup.ac.plan.warnings) std::printf("warning: %s\n", w.c_str());
  if (config.activation_checkpoint.log_mm_flops) {
    std::fputs(format_matmul_table(setup.program(), setup.ac.plan).c_str(), stdout);
  }
}

// The training tokens; InputError naming the config key that chose them.
TokenDataset load_data(const JobConfig& config, int64_t vocab_size) {
  try {
    return load_training_tokens(config, vocab_size);
  } catch (const TokenizerMismatch&) {
    throw;  // the model's settings, not the dataset
  } catch (const InputError& e) {
    const std::string key =
        config.training.dataset_path.empty() ? "training.dataset" : "training.dataset_path";
    throw InputError(key + ": " + e.what() +
                     " (expected a readable .txt, .jsonl or .npy token file, or the built-in "
                     "dataset \"fortunes\")");
  }
}

// What checkpoint.load records about the run that saved it (nothing without
// checkpoint.load); InputError for a file that is not a valid checkpoint.
RunRecord read_saved_run(const JobConfig& config) {
  if (config.checkpoint.load.empty()) return RunRecord{};
  const RunRecord saved = read_checkpoint_info(config.checkpoint.load).run;
  // Weights only: the run is a new one, whatever the saving run did.
  return config.checkpoint.load_weights_only ? RunRecord{} : saved;
}

// Fresh weights from training.seed, replaced by checkpoint.load's when given;
// returns the step the run continues from. A sharded run keeps its shards
// of them.
int64_t initialize_state(const JobConfig& config, Session& session, bool with_optimizer) {
  ModelState& state = session.state;
  const auto seed = static_cast<uint64_t>(config.training.seed);
  state.initialize(seed);
  if (session.sharded) session.sharded->initialize(seed);
  // The optimizer's moments exist from the start, so every step (the first
  // included) has the same memory profile, the one the planner predicts.
  if (with_optimizer) state.ensure_optimizer_state();
  if (config.checkpoint.load.empty()) return 0;
  const bool moments = !config.checkpoint.load_weights_only;
  LoadedCheckpoint loaded;
  try {
    if (session.sharded) {
      // The whole file is read on every rank, outside the run's books.
      Allocator file_books;
      ModelState full(*state.program, file_books, /*with_gradients=*/false);
      full.ensure_optimizer_state();
      loaded = load_checkpoint(config.checkpoint.load, full, moments);
      session.sharded->load_full(full);
    } else {
      loaded = load_checkpoint(config.checkpoint.load, state, moments);
    }
  } catch (const InputError& e) {
    throw resume_error(config, e);
  }
  const auto step = static_cast<long long>(loaded.step);
  if (!moments) {
    std::printf("loaded the weights of %s (saved at step %lld); training starts at step 1\n",
                config.checkpoint.load.c_str(), step);
    return 0;
  }
  std::printf("loaded %s (step %lld)\n", config.checkpoint.load.c_str(), step);
  // From step 0 (a seed checkpoint, or pretrained weights) zero moments are
  // what any run starts with; later, the continued run differs from the one
  // that saved the file, so it says so.
  if (with_optimizer && !loaded.moments && loaded.step > 0) {
    std::printf(
        "warning: %s holds weights only, no AdamW moments: they start from zero at step %lld "
        "(the run that saved it had its own; steps after this differ from that run's)\n",
        config.checkpoint.load.c_str(), step + 1);
  }
  return loaded.step;
}

// Always one file (rank 0's): every rank starts from the same seed.
int write_seed_checkpoint(const JobConfig& config, const ModelState& state) {
  const std::string path = checkpoint_path(config, 0, /*sharded=*/false);
  save_checkpoint(path, state, 0, /*with_optimizer=*/false);
  std::printf("seed checkpoint written to %s\n", path.c_str());
  return 0;
}

void DevicePeak::raise_to(double achieved, int64_t step) {
  if (achieved <= flops) return;
  std::printf(
      "note: achieved %.1f GFLOP/s, above the peak of %.1f GFLOP/s (%s); "
      "using the achieved rate as the peak from now on\n",
      achieved / 1e9, flops / 1e9, source.c_str());
  flops = achieved;
  source = "achieved at step " + std::to_string(step);
}

// metrics.peak_flops, or measured on `threads` threads with the instruction
// the matmuls run on (bf16 MFU is stated against the bf16 dot-product peak;
// the fallback computes in fp32); prints the device line.
DevicePeak device_peak(const JobConfig& config, int threads, bool bf16) {
  const bool from_config = config.metrics.peak_flops > 0;
  const bool bf16_dots = bf16 && cpu::bf16_operands(cpu::bf16_gemm());
  DevicePeak peak{0, from_config ? "metrics.peak_flops"
                     : bf16_dots
                         ? "measured: bf16 dot products on these threads, best of 40 runs of 1 ms"
                         : "measured: fp32 FMA on these threads, best of 40 runs of 1 ms"};
  peak.flops = from_config ? config.metrics.peak_flops
               : bf16_dots ? cpu::best_peak_flops_bf16(threads)
                           : cpu::best_peak_flops(threads);
  std::printf("device: CPU, %d threads, peak %.1f GFLOP/s %s (%s), memory %s\n", threads,
              peak.flops / 1e9, bf16_dots ? "bf16" : "fp32", peak.source.c_str(),
              format_bytes(physical_memory_bytes()).c_str());
  std::printf("fp32 matmuls on %s\n", cpu::to_string(cpu::fp32_gemm()));
  if (bf16) {
    std::printf(
        "mixed precision: bf16 compute and activations, fp32 master weights, gradients "
        "and AdamW; matmuls on %s\n",
        cpu::to_string(cpu::bf16_gemm()));
    if (cpu::bf16_gemm_chosen_by_speed()) {
      std::printf(
          "bf16 matmuls: this CPU's bf16 dot products run at %.2fx its fp32 FMA rate (one core, "
          "best of %d runs of 1 ms each), so they %s (REMAT_BF16_KERNEL forces a choice)\n",
          cpu::bf16_dot_speed(), cpu::kBf16DotSpeedRuns,
          cpu::bf16_operands(cpu::bf16_gemm()) ? "take bf16 operands" : "compute in fp32");
    }
  }
  return peak;
}

}  // namespace remat
