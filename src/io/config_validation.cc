// The job config loader's validation (io/config_parts.h): every value
// checked against what it may be, the first failure an InputError naming
// the key, its value, where it was set and what was expected.
#include <cmath>
#include <cstring>

#include "io/config_parts.h"

namespace remat::config_parts {

namespace {

bool is_decimal(std::string_view s) {
  int64_t n = 0;
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos &&
         parse_int(s, n);
}

// The largest size accepted (4 EiB): every size becomes an int64 byte count.
constexpr double kMaxSizeBytes = 0x1p62;

}  // namespace

// "12GiB", "512 MB", "1.5TiB", "100B": a size in bytes with a unit, at most
// kMaxSizeBytes; 0 on failure.
double parse_size(const std::string& s) {
  static const std::pair<const char*, double> units[] = {
      {"EiB", 0x1p60},       {"PiB", 0x1p50},    {"TiB", 1099511627776.0},
      {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0},
      {"EB", 1e18},          {"PB", 1e15},       {"TB", 1e12},
      {"GB", 1e9},           {"MB", 1e6},        {"KB", 1e3},
      {"kB", 1e3},           {"B", 1.0}};
  for (const auto& [unit, scale] : units) {
    if (!s.ends_with(unit)) continue;
    double number = 0;
    if (!parse_double(trim(s.substr(0, s.size() - std::strlen(unit))), number)) return 0;
    // Under one byte ("0.5B") is no size: 0, as for text that is none.
    return number * scale >= 1 && number * scale <= kMaxSizeBytes ? number * scale : 0;
  }
  return 0;
}

namespace {

class Validator {
 public:
  explicit Validator(Schema& schema) : schema_(schema) {}
  void require(bool ok, std::string_view key, std::string_view expected) {
    if (ok) return;
    Field& field = schema_.at(key);
    throw InputError("config error: " + field.name() + " = " + render(field.ref) +
                     schema_.origin_of(field) + ": expected " + std::string(expected));
  }

 private:
  Schema& schema_;
};

template <size_t N>
bool one_of(const std::string& value, const char* const (&choices)[N]) {
  for (const char* c : choices)
    if (value == c) return true;
  return false;
}

void validate_model_and_training(const JobConfig& c, Validator& v) {
  const auto& m = c.model;
  v.require(m.name == "llama3" || m.name == "llama4", "model.name", "\"llama3\" or \"llama4\"");
  v.require(!m.flavor.empty(), "model.flavor", "a flavor name such as \"debugmodel\" or \"8B\"");
  v.require(m.vocab_size >= 0, "model.vocab_size", "an integer >= 0 (0: the flavor's)");
  v.require(!m.tokenizer.empty(), "model.tokenizer", "\"byte\" or a tokenizer path");
  v.require(m.score_func.empty() || m.score_func == "softmax" || m.score_func == "sigmoid",
            "model.score_func", "\"softmax\", \"sigmoid\" or \"\" (the flavor's)");

  const auto& t = c.training;
  v.require(t.local_batch_size > 0, "training.local_batch_size", "an integer > 0");
  v.require(t.seq_len > 0, "training.seq_len", "an integer > 0");
  v.require(t.steps >= 0, "training.steps", "an integer >= 0");
  v.require(t.max_norm > 0, "training.max_norm", "a number > 0");
  v.require(t.threads >= 0, "training.threads", "an integer >= 0 (0: all cores)");
  // Bounds that keep later arithmetic exact (token slots are exact fp32
  // integers up to 2^24) and the thread pool within what the machine runs.
  constexpr int64_t kMaxTokenDim = int64_t{1} << 24;
  v.require(t.seq_len <= kMaxTokenDim, "training.seq_len", "an integer <= 16777216 (2^24)");
  v.require(t.local_batch_size <= kMaxTokenDim, "training.local_batch_size",
            "an integer <= 16777216 (2^24)");
  // Whether it divides by local_batch_size x the ranks is checked where the
  // ranks are known (gradient_accumulation_steps, train/data_parallel.h).
  v.require(
      t.global_batch_size == -1 || (t.global_batch_size > 0 && t.global_batch_size <= kMaxTokenDim),
      "training.global_batch_size",
      "-1 (local_batch_size x data-parallel ranks) or an integer in [1, 16777216 (2^24)]");
  const NumberOrAuto& rows = m.loss_chunk_rows;
  v.require(rows.automatic || (rows.value >= 0 && rows.value <= kMaxTokenDim &&
                               rows.value == std::floor(rows.value)),
            "model.loss_chunk_rows",
            "an integer in [0, 16777216 (2^24)] (0: the logits kept whole) or \"auto\" (whole "
            "or 1024-row chunks, whichever the planner finds fits with less recompute)");
  const int64_t max_threads = max_training_threads();
  v.require(t.threads <= max_threads, "training.threads",
            "an integer in [0, " + std::to_string(max_threads) +
                "] (0: all cores; at most 4 x the cores of this machine, and 1024)");
  v.require(m.ffn_dim_multiplier >= 0, "model.ffn_dim_multiplier",
            "a number > 0, or 0 for the flavor's");
}

void validate_optimizer(const JobConfig& c, Validator& v) {
  const auto& o = c.optimizer;
  v.require(o.name == "AdamW", "optimizer.name", "\"AdamW\" (the only optimizer)");
  v.require(o.lr >= 0, "optimizer.lr", "a number >= 0");
  v.require(o.eps > 0, "optimizer.eps", "a number > 0");
  v.require(o.weight_decay >= 0, "optimizer.weight_decay", "a number >= 0");
  v.require(o.beta1 >= 0 && o.beta1 < 1, "optimizer.beta1", "a number in [0, 1)");
  v.require(o.beta2 >= 0 && o.beta2 < 1, "optimizer.beta2", "a number in [0, 1)");

  const auto& s = c.lr_scheduler;
  v.require(s.warmup_steps >= 0, "lr_scheduler.warmup_steps", "an integer >= 0");
  v.require(s.decay_ratio >= 0 && s.decay_ratio <= 1, "lr_scheduler.decay_ratio",
            "a number in [0, 1]");
  static const char* const kDecayTypes[] = {"linear", "sqrt", "cosine"};
  v.require(one_of(s.decay_type, kDecayTypes), "lr_scheduler.decay_type",
            "\"linear\", \"sqrt\" or \"cosine\"");
  // A fraction of optimizer.lr that the decay ends at; above 1 it would rise.
  v.require(s.lr_min >= 0 && s.lr_min <= 1, "lr_scheduler.lr_min",
            "a number in [0, 1] (the fraction of optimizer.lr the decay ends at)");
}

void validate_activation_checkpoint(const JobConfig& c, Validator& v) {
  const auto& ac = c.activation_checkpoint;
  static const char* const kModes[] = {"none", "full", "selective", "memory_budget", "auto"};
  v.require(one_of(ac.mode, kModes), "activation_checkpoint.mode",
            "\"none\", \"full\", \"selective\", \"memory_budget\" or \"auto\"");
  v.require(ac.selective_ac_option == "op" || is_decimal(ac.selective_ac_option),
            "activation_checkpoint.selective_ac_option",
            "\"op\" or a non-negative integer such as \"2\"");
  v.require(ac.selective_op_ac_mm_flops_threshold.automatic ||
                ac.selective_op_ac_mm_flops_threshold.value >= 0,
            "activation_checkpoint.selective_op_ac_mm_flops_threshold",
            "a number >= 0 or \"auto\"");
  bool patterns_ok = true;
  for (const auto& p : ac.per_op_sac_force_recompute_mm_by_fqns) patterns_ok &= !p.empty();
  v.require(patterns_ok, "activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns",
            "a list of non-empty FQN patterns");
  if (!ac.memory_budget.empty()) {
    double fraction = -1;
    bool ok = parse_double(ac.memory_budget, fraction) ? fraction >= 0 && fraction <= 1
                                                       : parse_size(ac.memory_budget) > 0;
    v.require(ok, "activation_checkpoint.memory_budget",
              "a fraction in [0, 1] such as \"0.5\" or a size such as \"12GiB\" (from 1B to "
              "4EiB)");
  }
  double knapsack_fraction = -1;
  v.require(ac.budget_solver == "remat" ||
                (ac.budget_solver == "pytorch_knapsack" &&
                 (ac.mode != "memory_budget" || parse_double(ac.memory_budget, knapsack_fraction))),
            "activation_checkpoint.budget_solver",
            "\"remat\", or \"pytorch_knapsack\" with a fractional memory_budget");
  v.require(ac.cost_model == "flops" || ac.cost_model == "measured",
            "activation_checkpoint.cost_model", "\"flops\" or \"measured\"");
  v.require(ac.mode != "memory_budget" || !ac.memory_budget.empty(),
            "activation_checkpoint.memory_budget",
            "a fraction such as \"0.5\" or a size such as \"12GiB\" when mode = "
            "\"memory_budget\"");
}

void validate_other_sections(const JobConfig& c, Validator& v) {
  v.require(c.metrics.log_freq > 0, "metrics.log_freq", "an integer > 0");
  v.require(c.metrics.sample_freq >= 0, "metrics.sample_freq",
            "an integer >= 0 (steps between training samples; 0: never)");
  v.require(c.metrics.peak_flops >= 0, "metrics.peak_flops",
            "a number >= 0 (FLOP/s; 0: measure at start-up)");
  v.require(c.checkpoint.interval > 0, "checkpoint.interval", "an integer > 0");
  v.require(c.checkpoint.keep_latest_k >= 0, "checkpoint.keep_latest_k",
            "an integer >= 0 (the checkpoints kept in checkpoint.folder; 0: every one)");
  v.require(!c.checkpoint.folder.empty(), "checkpoint.folder", "a folder name");
  static const char* const kCheckpointFormats[] = {"auto", "sharded", "single_file"};
  v.require(one_of(c.checkpoint.format, kCheckpointFormats), "checkpoint.format",
            "\"auto\", \"sharded\" or \"single_file\"");
  v.require(c.checkpoint.load_step >= -1, "checkpoint.load_step",
            "a step of checkpoint.folder to resume from, or -1 for the latest");
  v.require(c.checkpoint.load_step == -1 || c.checkpoint.load.empty(), "checkpoint.load_step",
            "-1 when checkpoint.load names the checkpoint to start from (one or the other)");
  v.require(c.checkpoint.load_step == -1 || c.checkpoint.enable, "checkpoint.load_step",
            "-1 unless checkpoint.enable is true (it picks the checkpoint of checkpoint.folder "
            "that a run with checkpointing on resumes from)");
  v.require(c.checkpoint.initial_load_path.empty() || c.checkpoint.load.empty(),
            "checkpoint.initial_load_path",
            "empty when checkpoint.load names the checkpoint to start from (one or the other)");
  static const char* const kAsyncModes[] = {"disabled", "async", "async_with_pinned_mem"};
  v.require(one_of(c.checkpoint.async_mode, kAsyncModes), "checkpoint.async_mode",
            "\"disabled\", \"async\" or \"async_with_pinned_mem\"");
  static const char* const kExportDtypes[] = {"float32", "bfloat16", "float16"};
  v.require(one_of(c.checkpoint.export_dtype, kExportDtypes), "checkpoint.export_dtype",
            "\"float32\", \"bfloat16\" or \"float16\" (the final weights-only save's "
            "precision)");
  // Sharded checkpoints hold fp32 only.
  v.require(c.checkpoint.export_dtype == "float32" || !c.checkpoint.last_save_model_weights_only ||
                !sharded_checkpoints(c),
            "checkpoint.export_dtype",
            "\"float32\" where the final save is a sharded checkpoint (checkpoint.format, "
            "data_parallel_shard_degree > 1), or checkpoint.format = \"single_file\" for a "
            "half-precision export");
  v.require(c.validation.freq > 0, "validation.freq", "an integer > 0");
  v.require(c.profiling.profile_freq > 0, "profiling.profile_freq", "an integer > 0");
  v.require(c.validation.steps == -1 || c.validation.steps >= 1, "validation.steps",
            "an integer >= 1, or -1 (the whole file)");
  const int64_t shard = c.parallelism.data_parallel_shard_degree;
  const int64_t replicate = c.parallelism.data_parallel_replicate_degree;
  const std::string most = std::to_string(kMaxRanks);
  v.require(
      (shard >= 1 && shard <= kMaxRanks) || shard == -1, "parallelism.data_parallel_shard_degree",
      "an integer from 1 to " + most + ", or -1 (torchtitan's every rank left: 1 on this engine)");
  v.require(
      replicate >= 1 && replicate <= kMaxRanks, "parallelism.data_parallel_replicate_degree",
      "an integer from 1 to " + most + " (the ranks of mpirun -np that each hold a full replica)");
  v.require(shard < 1 || replicate < 1 || shard > kMaxRanks || replicate > kMaxRanks ||
                shard * replicate <= kMaxRanks,
            "parallelism.data_parallel_replicate_degree",
            "a product with data_parallel_shard_degree (the ranks) of at most " + most);
  v.require(c.comm.init_timeout_seconds > 0, "comm.init_timeout_seconds", "seconds > 0");
  v.require(c.comm.train_timeout_seconds > 0, "comm.train_timeout_seconds", "seconds > 0");
  v.require(c.training.mixed_precision_param == "float32" ||
                c.training.mixed_precision_param == "bfloat16",
            "training.mixed_precision_param", "\"float32\" or \"bfloat16\"");
  v.require(c.memory.limit.empty() || parse_size(c.memory.limit) > 0, "memory.limit",
            "a size such as \"16GiB\" (from 1B to 4EiB) or \"\" (physical RAM)");
}

}  // namespace

void validate(const JobConfig& c, Schema& schema) {
  Validator v(schema);
  validate_model_and_training(c, v);
  validate_optimizer(c, v);
  validate_activation_checkpoint(c, v);
  validate_other_sections(c, v);
}

}  // namespace remat::config_parts
