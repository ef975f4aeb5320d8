// The job config's key table and the helpers every part of the loader
// uses (io/config_parts.h).
//
// One table (fields_of) lists every key of JobConfig with a pointer to its
// member; parsing, overrides, error messages and validation all read that
// table, so a key added to the struct and the table is accepted everywhere
// with the same name and type. A second table (kTorchtitanOnly) lists the
// torchtitan keys this engine accepts without honoring them; their values
// live in the Schema, are type-checked like any other, and end up only in
// JobConfig::ignored_keys.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "io/config_parts.h"

namespace remat::config_parts {

namespace {

// torchtitan's July 2025 job config keys that this engine does not honor, in
// torchtitan's order.
constexpr ForeignKey kTorchtitanOnly[] = {
    {"job", "use_for_integration_test", 'b', "not built", "false"},
    {"metrics", "enable_wandb", 'b', "not built", "false"},
    {"training", "compile", 'b', "GPU-only", "false"},
    {"parallelism", "fsdp_reshard_after_forward", 's', "not built", "\"default\""},
    {"parallelism", "tensor_parallel_degree", 'i', "not built", "1"},
    {"parallelism", "enable_async_tensor_parallel", 'b', "GPU-only", "false"},
    {"parallelism", "pipeline_parallel_degree", 'i', "not built", "1"},
    {"parallelism", "context_parallel_degree", 'i', "not built", "1"},
    {"parallelism", "expert_parallel_degree", 'i', "not built", "1"},
    {"checkpoint", "exclude_from_loading", 'l', "not built", "[]"},
    {"float8", "enable_fsdp_float8_all_gather", 'b', "GPU-only", "false"},
    {"float8", "precompute_float8_dynamic_scale_for_fsdp", 'b', "GPU-only", "false"},
    {"float8", "filter_fqns", 'l', "GPU-only", ""},
    {"float8", "moe_fqns", 'l', "GPU-only", ""},
};

ForeignValue initial_value(char kind) {
  if (kind == 'b') return false;
  if (kind == 'i') return int64_t{0};
  if (kind == 's') return std::string();
  return std::vector<std::string>();
}

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto byte = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (byte < 0x20 || byte == 0x7f) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", byte);
      out += escape;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Levenshtein distance (insertions, deletions, substitutions), for did-you-mean.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substituted = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substituted});
    }
  }
  return row[b.size()];
}

}  // namespace

// The macro writes each section and key name once, from the member itself,
// so a name in the table can never drift from the struct's field name.
#define REMAT_FIELD(section, key) \
  Field { #section, #key, &c.section.key }
// long because it is the table of every key, one line each, in the order
// the config is printed: a table cut in two would be read in two places.
std::vector<Field> fields_of(JobConfig& c) {
  return {
      REMAT_FIELD(job, description),
      REMAT_FIELD(job, dump_folder),
      REMAT_FIELD(job, print_args),
      REMAT_FIELD(model, name),
      REMAT_FIELD(model, flavor),
      REMAT_FIELD(model, vocab_size),
      REMAT_FIELD(model, tokenizer),
      REMAT_FIELD(model, tokenizer_path),
      REMAT_FIELD(model, dim),
      REMAT_FIELD(model, n_layers),
      REMAT_FIELD(model, n_heads),
      REMAT_FIELD(model, n_kv_heads),
      REMAT_FIELD(model, ffn_dim_multiplier),
      REMAT_FIELD(model, multiple_of),
      REMAT_FIELD(model, num_experts),
      REMAT_FIELD(model, top_k),
      REMAT_FIELD(model, interleave_moe_layer_step),
      REMAT_FIELD(model, score_func),
      REMAT_FIELD(model, loss_chunk_rows),
      REMAT_FIELD(training, local_batch_size),
      REMAT_FIELD(training, global_batch_size),
      REMAT_FIELD(training, seq_len),
      REMAT_FIELD(training, steps),
      REMAT_FIELD(training, max_norm),
      REMAT_FIELD(training, seed),
      REMAT_FIELD(training, dataset),
      REMAT_FIELD(training, dataset_path),
      REMAT_FIELD(training, threads),
      REMAT_FIELD(training, mixed_precision_param),
      REMAT_FIELD(optimizer, name),
      REMAT_FIELD(optimizer, lr),
      REMAT_FIELD(optimizer, eps),
      REMAT_FIELD(optimizer, weight_decay),
      REMAT_FIELD(optimizer, beta1),
      REMAT_FIELD(optimizer, beta2),
      REMAT_FIELD(lr_scheduler, warmup_steps),
      REMAT_FIELD(lr_scheduler, decay_ratio),
      REMAT_FIELD(lr_scheduler, decay_type),
      REMAT_FIELD(lr_scheduler, lr_min),
      REMAT_FIELD(activation_checkpoint, mode),
      REMAT_FIELD(activation_checkpoint, selective_ac_option),
      REMAT_FIELD(activation_checkpoint, selective_op_ac_mm_flops_threshold),
      REMAT_FIELD(activation_checkpoint, per_op_sac_force_recompute_mm_by_fqns),
      REMAT_FIELD(activation_checkpoint, log_mm_flops),
      REMAT_FIELD(activation_checkpoint, memory_budget),
      REMAT_FIELD(activation_checkpoint, cost_model),
      REMAT_FIELD(activation_checkpoint, cost_cache),
      REMAT_FIELD(activation_checkpoint, budget_solver),
      REMAT_FIELD(metrics, log_freq),
      REMAT_FIELD(metrics, jsonl_path),
      REMAT_FIELD(metrics, peak_flops),
      REMAT_FIELD(metrics, disable_color_printing),
      REMAT_FIELD(metrics, sample_freq),
      REMAT_FIELD(metrics, enable_tensorboard),
      REMAT_FIELD(metrics, save_tb_folder),
      REMAT_FIELD(metrics, save_for_all_ranks),
      REMAT_FIELD(checkpoint, enable),
      Field{"checkpoint", "enable_checkpoint", &c.checkpoint.enable, nullptr, /*alias=*/true},
      REMAT_FIELD(checkpoint, folder),
      REMAT_FIELD(checkpoint, interval),
      REMAT_FIELD(checkpoint, load),
      REMAT_FIELD(checkpoint, create_seed_checkpoint),
      REMAT_FIELD(checkpoint, format),
      REMAT_FIELD(checkpoint, last_save_model_weights_only),
      REMAT_FIELD(checkpoint, export_dtype),
      REMAT_FIELD(checkpoint, keep_latest_k),
      REMAT_FIELD(checkpoint, async_mode),
      REMAT_FIELD(checkpoint, load_step),
      REMAT_FIELD(checkpoint, enable_first_step_checkpoint),
      REMAT_FIELD(checkpoint, initial_load_path),
      REMAT_FIELD(checkpoint, initial_load_model_weights_only),
      REMAT_FIELD(validation, enabled),
      REMAT_FIELD(validation, dataset),
      REMAT_FIELD(validation, freq),
      REMAT_FIELD(validation, steps),
      REMAT_FIELD(parallelism, data_parallel_replicate_degree),
      REMAT_FIELD(parallelism, data_parallel_shard_degree),
      REMAT_FIELD(comm, init_timeout_seconds),
      REMAT_FIELD(comm, train_timeout_seconds),
      REMAT_FIELD(memory, limit),
      REMAT_FIELD(profiling, enable_profiling),
      REMAT_FIELD(profiling, save_traces_folder),
      REMAT_FIELD(profiling, profile_freq),
      REMAT_FIELD(profiling, enable_memory_snapshot),
      REMAT_FIELD(profiling, save_memory_snapshot_folder),
  };
}
#undef REMAT_FIELD

// Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on the
// operator+ chain once it is inlined into render().
std::string in_quotes(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(sep) : "") + items[i];
  return out;
}

namespace {

// "[a, b]", appended piece by piece (GCC 12's -Wrestrict, as in_quotes).
std::string bracketed(const std::vector<std::string>& items) {
  std::string out = "[";
  out += join(items, ", ");
  out += ']';
  return out;
}

}  // namespace

std::string render(const FieldRef& ref) {
  struct {
    std::string operator()(int64_t* v) const { return std::to_string(*v); }
    std::string operator()(double* v) const { return format_double(*v); }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(std::string* v) const { return in_quotes(*v); }
    std::string operator()(std::vector<std::string>* v) const {
      std::vector<std::string> q;
      for (const auto& s : *v) q.push_back(in_quotes(s));
      return bracketed(q);
    }
    std::string operator()(NumberOrAuto* v) const {
      return v->automatic ? "\"auto\"" : format_double(v->value);
    }
  } visitor;
  return std::visit(visitor, ref);
}

std::string toml_value(const FieldRef& ref) {
  if (const auto* text = std::get_if<std::string*>(&ref)) return toml_string(**text);
  if (const auto* list = std::get_if<std::vector<std::string>*>(&ref)) {
    std::vector<std::string> items;
    for (const auto& s : **list) items.push_back(toml_string(s));
    return bracketed(items);
  }
  return render(ref);  // numbers, booleans and "auto" are already TOML
}

bool usable_double(double v) { return std::isfinite(v) && (v == 0 || std::isnormal(v)); }

const char* expectation(const FieldRef& ref) {
  static const char* const kByIndex[] = {
      "expected an integer", "expected a number",          "expected true or false",
      "expected a string",   "expected a list of strings", "expected a number or \"auto\""};
  return kByIndex[ref.index()];
}

std::string nearest(std::string_view name, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(name, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

Schema::Schema(JobConfig& config) : fields_(fields_of(config)) {
  for (const ForeignKey& k : kTorchtitanOnly) {
    // A key that gains a JobConfig field is honored: it leaves the table.
    if (find(k.section, k.key))
      throw std::logic_error("config: " + std::string(k.section) + "." + std::string(k.key) +
                             " is both a field and in kTorchtitanOnly");
    ForeignValue& value = foreign_values_.emplace_back(initial_value(k.kind));
    fields_.push_back(
        Field{k.section, k.key, std::visit([](auto& v) -> FieldRef { return &v; }, value), &k});
  }
}

}  // namespace remat::config_parts
