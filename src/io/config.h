// The job config: one typed struct whose sections mirror torchtitan's job
// config (../shared/spec.md §1). Loaded from TOML, then overridden from the
// command line with `--section.key value` or `--section.key=value`.
//
// Every problem (unknown section or key, wrong type, out-of-range value,
// unreadable file) throws InputError naming the key, the value and what was
// expected, with a did-you-mean for a misspelt key or section. Nothing here
// touches output files.
//
// torchtitan's train_configs run unchanged: its keys that this engine does
// not honor (GPU-only features, features not built) are accepted, type-checked
// and listed in JobConfig::ignored_keys instead of being errors.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace remat {

// The most ranks a run, a plan or a sharded checkpoint may have (2^20): a
// bound far above any cluster, under which every product of ranks and
// per-rank counts stays exact.
inline constexpr int64_t kMaxRanks = int64_t{1} << 20;

// A number, or "auto" (the engine picks it for the run at hand).
struct NumberOrAuto {
  double value = 0;
  bool automatic = false;
  bool operator==(double x) const { return !automatic && value == x; }
};

struct JobConfig {
  struct Job {
    std::string description;
    std::string dump_folder = "./outputs";
    bool print_args = false;  // print the resolved config at start-up
  } job;
  struct Model {
    std::string name = "llama3";  // "llama3" | "llama4"
    std::string flavor = "debugmodel";
    int64_t vocab_size = 0;          // 0: the tokenizer's, else the flavor's
    std::string tokenizer = "byte";  // "byte" or a tokenizer file
    std::string tokenizer_path;      // torchtitan's key: a .model or tokenizer.json
    // Architecture overrides on top of the flavor (0 / negative: flavor's).
    // Used for test models and the benchmark's wider model.
    int64_t dim = 0;
    int64_t n_layers = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    double ffn_dim_multiplier = 0;
    int64_t multiple_of = 0;
    // llama4 only
    int64_t num_experts = 0;
    int64_t top_k = 0;
    int64_t interleave_moe_layer_step = 0;
    std::string score_func;  // "" (flavor's), "softmax", "sigmoid"
    // > 0: the output projection and the loss run fused, this many rows of
    // logits at a time, rebuilt in the backward instead of kept; 0: whole;
    // "auto": the planner picks whole or 1024-row chunks for the run
    // (planner/setup.h). Always a whole number when not "auto".
    NumberOrAuto loss_chunk_rows;
  } model;
  struct Training {
    int64_t local_batch_size = 8;
    // torchtitan's: the sequences of one optimizer step over all ranks. -1:
    // local_batch_size x data-parallel ranks. A multiple of that accumulates
    // gradients over global / (local x ranks) microbatches per step.
    int64_t global_batch_size = -1;
    int64_t seq_len = 2048;
    int64_t steps = 10;  // >= 0; 0 builds and reports only
    double max_norm = 1.0;
    int64_t seed = 0;
    std::string dataset = "fortunes";  // built-in default dataset name
    std::string dataset_path;          // a .txt, .jsonl or .npy file
    int64_t threads = 0;               // 0: all cores
    // The compute dtype the planner assumes (master weights, gradients and
    // optimizer state stay fp32). The CPU engine itself computes in fp32.
    std::string mixed_precision_param = "float32";  // "float32" | "bfloat16"
  } training;
  struct Optimizer {
    std::string name = "AdamW";
    double lr = 8e-4;
    double eps = 1e-8;
    double weight_decay = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
  } optimizer;
  struct LrScheduler {
    int64_t warmup_steps = 2;
    double decay_ratio = 0.8;
    std::string decay_type = "linear";  // "linear" | "sqrt" | "cosine"
    double lr_min = 0.0;
  } lr_scheduler;
  struct ActivationCheckpoint {
    std::string mode = "selective";         // none | full | selective | memory_budget | auto
    std::string selective_ac_option = "2";  // "op" or a decimal integer
    NumberOrAuto selective_op_ac_mm_flops_threshold;  // FLOPs, or "auto"
    std::vector<std::string> per_op_sac_force_recompute_mm_by_fqns = {"moe.router.gate"};
    bool log_mm_flops = false;
    std::string memory_budget;  // fraction "0.5" or size "12GiB"
    // What recompute costs to the budget solver: "flops", or "measured" (each
    // op's forward time on this machine at this shape, calibrated and cached).
    std::string cost_model = "flops";
    std::string cost_cache;  // "" : <job.dump_folder>/op_times.json
    // "remat" (the true-peak solver) or "pytorch_knapsack" (PyTorch's
    // saved-bytes knapsack, a baseline to compare against; fraction only).
    std::string budget_solver = "remat";
  } activation_checkpoint;
  struct Metrics {
    int64_t log_freq = 1;
    std::string jsonl_path;               // "" : no machine-readable metrics
    double peak_flops = 0;                // FLOP/s; 0: measure at start-up
    bool disable_color_printing = false;  // colour is only ever used on a terminal
    // Every sample_freq steps `train` prints a short sample of the model's
    // text (as llm.c does); 0: never.
    int64_t sample_freq = 0;
    // TensorBoard event files of the logged steps' metrics, as torchtitan
    // writes them: under <job.dump_folder>/<save_tb_folder>/<YYYYmmdd-HHMM>/
    // (the run's start, local time), by rank 0, or by every rank into a
    // rank_<r> folder of its own with save_for_all_ranks.
    bool enable_tensorboard = false;
    std::string save_tb_folder = "tb";
    bool save_for_all_ranks = false;
  } metrics;
  struct Checkpoint {
    bool enable = false;                // also read as torchtitan's enable_checkpoint
    std::string folder = "checkpoint";  // under job.dump_folder
    int64_t interval = 500;
    std::string load;  // a .safetensors file or a sharded checkpoint's step folder to start from
    bool create_seed_checkpoint = false;
    // "single_file": rank 0 writes step-N.safetensors; "sharded": every rank
    // writes its shard into the folder step-N/ (train/sharded_checkpoint.h);
    // "auto": sharded when the training state is (data_parallel_shard_degree > 1).
    std::string format = "auto";
    // torchtitan's: the save at the last step (training.steps) holds the
    // model weights only, no optimizer state, stored as export_dtype
    // ("float32", "bfloat16" or "float16"; sharded checkpoints: float32).
    // A run stopped earlier saves as usual, so that it can resume.
    bool last_save_model_weights_only = false;
    std::string export_dtype = "float32";
    // torchtitan's: after each save, only the latest keep_latest_k
    // checkpoints in the folder stay (0: every one; train/checkpoint_folder.h
    // remove_old_checkpoints). 1 is allowed, unlike in torchtitan, whose
    // asynchronous save may still be writing the latest: here an older
    // checkpoint is removed only once the new one is complete on disk.
    int64_t keep_latest_k = 10;
    // torchtitan's: "disabled", or "async" (and "async_with_pinned_mem", the
    // same on the CPU): interval saves written by a forked child while the
    // run trains on (train/background_save.h); one process only.
    std::string async_mode = "disabled";
    // torchtitan's: the step of checkpoint.folder to resume from, -1 for the
    // latest (train/checkpoint_folder.h checkpoint_to_resume).
    int64_t load_step = -1;
    // torchtitan's: also save after step 1, to find a broken save early.
    bool enable_first_step_checkpoint = false;
    // torchtitan's: the checkpoint a training run starts from when
    // checkpoint.folder holds none to resume from (a run resuming its own
    // saves ignores it). With initial_load_model_weights_only (torchtitan's
    // default) its weights alone: the run starts at step 0 with fresh AdamW
    // moments and the data from the start, as fine-tuning pretrained
    // weights does; false: the whole saved state, as checkpoint.load.
    std::string initial_load_path;
    bool initial_load_model_weights_only = true;
    // Not a key: checkpoint.load came from initial_load_path, weights only.
    bool load_weights_only = false;
    // Not a key: set where `load` was not given but found, the latest
    // checkpoint in the folder (train resumes from it), so that a load
    // error can say why that file was read.
    bool load_found_in_folder = false;
  } checkpoint;
  struct Validation {
    bool enabled = false;
    std::string dataset;  // a .npy token file (or text)
    int64_t freq = 10;
    int64_t steps = -1;  // -1: the whole file
  } validation;
  struct Parallelism {
    // Ranks that each hold a full replica and all-reduce the gradients.
    int64_t data_parallel_replicate_degree = 1;
    // torchtitan's -1 ("every rank left") is resolved when loading to 1;
    // under mpirun the trainer checks the product of the degrees against
    // the number of ranks.
    int64_t data_parallel_shard_degree = 1;
  } parallelism;
  struct Comm {                          // torchtitan's [comm]: bounds on every collective's wait
    double init_timeout_seconds = 300;   // the start-up agreement, and waits for a save
    double train_timeout_seconds = 100;  // each collective of a training step
  } comm;
  struct Profiling {
    // The per-op time profile at the end of train, and every profile_freq
    // steps a Chrome/Perfetto trace of that step under
    // dump_folder/save_traces_folder/iteration_N/ (torchtitan's layout).
    bool enable_profiling = false;
    std::string save_traces_folder = "profile_traces";
    int64_t profile_freq = 10;
    // The memory timeline of a run's first step, measured (train/memory_snapshot.h),
    // written under job.dump_folder / save_memory_snapshot_folder.
    bool enable_memory_snapshot = false;
    std::string save_memory_snapshot_folder = "memory_snapshot";
  } profiling;
  struct Memory {
    std::string limit;  // e.g. "16GiB"; "" : physical RAM
  } memory;

  // Not a section: the torchtitan keys the config set that this engine does
  // not honor, in torchtitan's order, each as "section.key (reason)" with the
  // reason "GPU-only" or "not built". A key set to the value that asks for
  // nothing (false, a degree of 1, async_mode "disabled") is honored, not listed.
  std::vector<std::string> ignored_keys;
};

// The one start-up line that lists JobConfig::ignored_keys:
// "ignored on this engine: key (reason), key (reason), ..."; "" when none.
std::string format_ignored_keys(const JobConfig& config);

// The resolved config as a TOML document (every section and key, with the
// values the run uses), which parse_job_config reads back to the same config.
std::string format_job_config(const JobConfig& config);

// The same settings as a list: "section.key" and its value as TOML writes
// it, in the config's own order.
std::vector<std::pair<std::string, std::string>> job_config_settings(const JobConfig& config);

// Reads the TOML file (missing/unreadable/directory -> InputError), applies
// the overrides (argv-style: "--section.key", "value" or "--section.key=value"),
// then validates ranges. Returns the config.
JobConfig load_job_config(const std::string& path, const std::vector<std::string>& overrides);

// Records the files the job names as inputs (files.h ProtectedInputs):
// training.dataset_path, validation.dataset, the tokenizer file and
// checkpoint.load (a sharded step folder's files). Call before any output
// is written: a measured-cost calibration writes its cache
// (activation_checkpoint.cost_cache) while planning, before the dataset is
// read, and named the same, it replaced the dataset.
void note_job_inputs(const JobConfig& config);

// checkpoint.format: "auto" follows the training state, which is sharded
// only under data_parallel_shard_degree > 1.
bool sharded_checkpoints(const JobConfig& config);

// The largest training.threads accepted: 4 x the cores, at most 1024 (an
// OpenMP pool of 100000 threads overflows the stack rather than failing).
int64_t max_training_threads();

// "12GiB", "512MiB", "80GB": bytes; 0 if the text is not a size or is more
// than 4 EiB (2^62 bytes), so every accepted size fits an int64.
double parse_memory_size(const std::string& text);

// Applies TOML text (for tests); same checks as load_job_config.
JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides);

}  // namespace remat
