// The job config loader: TOML file -> overrides -> validation.
//
// One table (fields_of) lists every key of JobConfig with a pointer to its
// member; parsing, overrides, error messages and validation all read that
// table, so a key added to the struct and the table is accepted everywhere
// with the same name and type. A second table (kTorchtitanOnly) lists the
// torchtitan keys this engine accepts without honoring them; their values
// live in the Schema, are type-checked like any other, and end up only in
// JobConfig::ignored_keys.
#include "io/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <variant>
#include <vector>

#include "core/error.h"
#include "io/files.h"

namespace remat {
namespace {

using FieldRef =
    std::variant<int64_t*, double*, bool*, std::string*, std::vector<std::string>*, NumberOrAuto*>;

// A torchtitan key without a JobConfig field (spec.md §1: listed as ignored).
struct ForeignKey {
  std::string_view section, key;
  char kind;                // 'b' bool, 'i' integer, 's' string, 'l' list of strings
  std::string_view reason;  // "GPU-only" or "not built"
  // The value (as render() writes it) that asks for nothing this engine
  // lacks, so setting it is honoring it; "" when every value asks for more.
  std::string_view neutral;
};

// torchtitan's July 2025 job config keys that this engine does not honor, in
// torchtitan's order.
constexpr ForeignKey kTorchtitanOnly[] = {
    {"job", "use_for_integration_test", 'b', "not built", "false"},
    {"metrics", "enable_tensorboard", 'b', "not built", "false"},
    {"metrics", "save_tb_folder", 's', "not built", ""},
    {"metrics", "enable_wandb", 'b', "not built", "false"},
    {"training", "compile", 'b', "GPU-only", "false"},
    {"parallelism", "fsdp_reshard_after_forward", 's', "not built", "\"default\""},
    {"parallelism", "tensor_parallel_degree", 'i', "not built", "1"},
    {"parallelism", "enable_async_tensor_parallel", 'b', "GPU-only", "false"},
    {"parallelism", "pipeline_parallel_degree", 'i', "not built", "1"},
    {"parallelism", "context_parallel_degree", 'i', "not built", "1"},
    {"parallelism", "expert_parallel_degree", 'i', "not built", "1"},
    {"checkpoint", "async_mode", 's', "not built", "\"disabled\""},
    {"float8", "enable_fsdp_float8_all_gather", 'b', "GPU-only", "false"},
    {"float8", "precompute_float8_dynamic_scale_for_fsdp", 'b', "GPU-only", "false"},
    {"float8", "filter_fqns", 'l', "GPU-only", ""},
    {"float8", "moe_fqns", 'l', "GPU-only", ""},
};

struct Field {
  std::string_view section;
  std::string_view key;
  FieldRef ref;
  const ForeignKey* foreign = nullptr;  // set for a key of kTorchtitanOnly
  bool alias = false;                   // another name for a field listed before it
  std::string name() const { return std::string(section) + "." + std::string(key); }
};

// The macro writes each section and key name once, from the member itself,
// so a name in the table can never drift from the struct's field name.
#define REMAT_FIELD(section, key) \
  Field { #section, #key, &c.section.key }
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
      REMAT_FIELD(checkpoint, enable),
      Field{"checkpoint", "enable_checkpoint", &c.checkpoint.enable, nullptr, /*alias=*/true},
      REMAT_FIELD(checkpoint, folder),
      REMAT_FIELD(checkpoint, interval),
      REMAT_FIELD(checkpoint, load),
      REMAT_FIELD(checkpoint, create_seed_checkpoint),
      REMAT_FIELD(checkpoint, format),
      REMAT_FIELD(checkpoint, last_save_model_weights_only),
      REMAT_FIELD(checkpoint, export_dtype),
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

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(sep) : "") + items[i];
  return out;
}

std::string render(const FieldRef& ref) {
  struct {
    std::string operator()(int64_t* v) const { return std::to_string(*v); }
    std::string operator()(double* v) const { return format_double(*v); }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(std::string* v) const { return in_quotes(*v); }
    std::string operator()(std::vector<std::string>* v) const {
      std::vector<std::string> q;
      for (const auto& s : *v) q.push_back(in_quotes(s));
      return "[" + join(q, ", ") + "]";
    }
    std::string operator()(NumberOrAuto* v) const {
      return v->automatic ? "\"auto\"" : format_double(v->value);
    }
  } visitor;
  return std::visit(visitor, ref);
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

// The value as TOML that parse_job_config reads back to the same value.
std::string toml_value(const FieldRef& ref) {
  if (const auto* text = std::get_if<std::string*>(&ref)) return toml_string(**text);
  if (const auto* list = std::get_if<std::vector<std::string>*>(&ref)) {
    std::vector<std::string> items;
    for (const auto& s : **list) items.push_back(toml_string(s));
    return "[" + join(items, ", ") + "]";
  }
  return render(ref);  // numbers, booleans and "auto" are already TOML
}

// A double remat takes from a config file or the command line alike:
// finite, and 0 or normal. A subnormal (1e-320) is refused as inf and nan
// are: no setting means one, and it has already lost precision.
bool usable_double(double v) { return std::isfinite(v) && (v == 0 || std::isnormal(v)); }
constexpr const char* kUsableDouble =
    " that is finite and 0 or between 2.2e-308 and 1.8e308 in size (a double)";

const char* expectation(const FieldRef& ref) {
  static const char* const kByIndex[] = {
      "expected an integer", "expected a number",          "expected true or false",
      "expected a string",   "expected a list of strings", "expected a number or \"auto\""};
  return kByIndex[ref.index()];
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

// The candidate nearest to `name`, if it is near enough to be a typo of it
// (at most 2 edits, or a third of the name); "" otherwise.
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

// A value of a kTorchtitanOnly key, of the type its kind names.
using ForeignValue = std::variant<int64_t, bool, std::string, std::vector<std::string>>;

ForeignValue initial_value(char kind) {
  if (kind == 'b') return false;
  if (kind == 'i') return int64_t{0};
  if (kind == 's') return std::string();
  return std::vector<std::string>();
}

// The key table plus where each key was last set, for error messages.
class Schema {
 public:
  explicit Schema(JobConfig& config) : fields_(fields_of(config)) {
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

  std::vector<std::string> sections() const {
    std::vector<std::string> out;
    for (const auto& f : fields_)
      if (std::find(out.begin(), out.end(), f.section) == out.end()) out.emplace_back(f.section);
    return out;
  }
  bool has_section(std::string_view section) const { return !keys_in(section).empty(); }
  std::vector<std::string> keys_in(std::string_view section) const {
    std::vector<std::string> out;
    for (const auto& f : fields_)
      if (f.section == section) out.emplace_back(f.key);
    return out;
  }
  Field* find(std::string_view section, std::string_view key) {
    for (auto& f : fields_)
      if (f.section == section && f.key == key) return &f;
    return nullptr;
  }
  Field& at(std::string_view dotted) {
    auto dot = dotted.find('.');
    Field* f = find(dotted.substr(0, dot), dotted.substr(dot + 1));
    if (!f) throw std::logic_error("config: no field " + std::string(dotted));
    return *f;
  }

  // `where` is " in FILE" or " on the command line".
  [[noreturn]] void unknown_section(std::string_view section, const std::string& where) const {
    const std::string guess = nearest(section, sections());
    throw InputError("config error: unknown section '" + std::string(section) + "'" + where +
                     (guess.empty() ? "" : "; did you mean [" + guess + "]?") +
                     " (known sections: " + join(sections(), ", ") + ")");
  }
  [[noreturn]] void unknown_key(std::string_view section, std::string_view key,
                                const std::string& where) const {
    throw InputError("config error: unknown key '" + std::string(section) + "." + std::string(key) +
                     "'" + where + did_you_mean(section, key) + " (known keys in [" +
                     std::string(section) + "]: " + join(keys_in(section), ", ") + ")");
  }

  void set_origin(const Field& f, std::string origin) { origins_[f.name()] = std::move(origin); }
  std::string origin_of(const Field& f) const {
    auto it = origins_.find(f.name());
    return it == origins_.end() ? " (the default)" : " (set " + it->second + ")";
  }

  // "section.key (reason)" for each kTorchtitanOnly key that was set to a
  // value asking for something this engine lacks.
  std::vector<std::string> ignored_keys() const {
    std::vector<std::string> out;
    for (const Field& f : fields_) {
      if (!f.foreign || !origins_.count(f.name())) continue;
      if (!f.foreign->neutral.empty() && render(f.ref) == f.foreign->neutral) continue;
      out.push_back(f.name() + " (" + std::string(f.foreign->reason) + ")");
    }
    return out;
  }

 private:
  // A nearby key of the same section, else the same key in another section.
  std::string did_you_mean(std::string_view section, std::string_view key) const {
    std::string guess = nearest(key, keys_in(section));
    if (!guess.empty()) return "; did you mean '" + std::string(section) + "." + guess + "'?";
    for (const Field& f : fields_)
      if (f.key == key) return "; did you mean '" + f.name() + "'?";
    return "";
  }

  std::vector<Field> fields_;
  std::deque<ForeignValue> foreign_values_;  // a deque: fields_ point into it
  std::map<std::string, std::string> origins_;
};

// ---- TOML ------------------------------------------------------------------

std::string render_node(const toml::node& node) {
  // Strings as the user most likely typed them ("ten"), not toml++'s 'ten'.
  std::string s;
  if (const auto* text = node.as_string()) {
    s = in_quotes(text->get());
  } else {
    std::ostringstream os;
    node.visit([&](const auto& n) { os << n; });
    s = os.str();
  }
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A NUL inside a string (TOML's \u0000) would cut every path, name and
// message built from it at that character: "out\u0000/../x" would write to
// "out". No value of remat's has one, so none is taken.
void refuse_nul(const Field& field, const toml::node& node, const std::string& where) {
  auto check = [&](const toml::node& n) {
    const std::optional<std::string> text = n.value_exact<std::string>();
    if (text && text->find('\0') != std::string::npos)
      throw InputError("config error: " + field.name() + where +
                       " holds a NUL character (\\u0000); expected text without one");
  };
  if (const toml::array* array = node.as_array()) {
    for (const toml::node& element : *array) check(element);
  } else {
    check(node);
  }
}

// Stores `node` into the field or throws naming the key, value and type.
void assign_from_toml(const Field& field, const toml::node& node, const std::string& where) {
  refuse_nul(field, node, where);
  const bool ok = std::visit(
      [&](auto* target) -> bool {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, double>) {  // integers are numbers too
          std::optional<double> v = node.is_integer()
                                        ? static_cast<double>(*node.value_exact<int64_t>())
                                        : node.value_exact<double>();
          if (!v || !usable_double(*v)) return false;
          *target = *v;
          return true;
        } else if constexpr (std::is_same_v<T, NumberOrAuto>) {
          if (node.value_exact<std::string>() == std::optional<std::string>("auto")) {
            *target = NumberOrAuto{0, true};
            return true;
          }
          std::optional<double> v = node.is_integer()
                                        ? static_cast<double>(*node.value_exact<int64_t>())
                                        : node.value_exact<double>();
          if (!v || !usable_double(*v)) return false;
          *target = NumberOrAuto{*v, false};
          return true;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          const toml::array* array = node.as_array();
          if (!array) return false;
          std::vector<std::string> items;
          for (const auto& element : *array) {
            auto v = element.value_exact<std::string>();
            if (!v) return false;
            items.push_back(*v);
          }
          *target = std::move(items);
          return true;
        } else {
          auto v = node.value_exact<T>();
          if (v) *target = *v;
          return v.has_value();
        }
      },
      field.ref);
  if (!ok) {
    const bool number_field = field.ref.index() == 1 || field.ref.index() == 5;
    throw InputError("config error: " + field.name() + " = " + render_node(node) + where + ": " +
                     expectation(field.ref) +
                     (number_field && node.is_floating_point() ? kUsableDouble : ""));
  }
}

// toml++ 3.3.0 (Debian 12's, which remat links) has undefined behaviour on
// two kinds of malformed TOML (found by tests/fuzz/fuzz_config; both fixed
// upstream after 3.3.0):
//  - a non-ASCII character where it looks for whitespace (outside strings
//    and comments, or after a backslash in a """ string) reaches
//    __builtin_unreachable() for U+00A1..U+0499 and others
//    (marzer/tomlplusplus issues 190 and 295);
//  - a table header whose key starts with a character no key starts with
//    ("[=", "[[[1]]]") breaks a precondition of its key parser (issue 294),
//    and an array element starting with '}' ("t = [}") one of its value
//    parser: assertions in a build with them, __builtin_assume under clang.
// Both are syntax errors in TOML, so this scan reports them itself, before
// toml++ sees the text. It follows TOML's lexical structure as toml++ reads
// it (comments, the four string kinds, bare values up to their terminator,
// arrays and inline tables); anything else it leaves to toml++. Valid TOML
// is refused in one corner only: a non-ASCII character right after a
// line-ending backslash in a """ string (where toml++ 3.3.0 has the bug).
// Long because it is one scanner whose cases share the position, the line
// and the stack of open brackets; split, each piece would carry all three.
void check_toml_lexically_safe(const std::string& text, const std::string& source) {
  size_t i = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a UTF-8 byte order mark
  size_t line = 1, line_start = i;
  std::vector<char> open;  // the [ and { of values, innermost last
  bool in_key = true;      // a key may come next (else a value's text)
  char prev = '\n';        // the last character that was not a blank
  char last = '\n';        // the last one that was not a blank, newline or comment
  bool in_bare = false;    // inside a bare value (a number, date, boolean, ...)
  auto column = [&](size_t at) {
    size_t c = 1;  // in characters, as toml++ counts
    for (size_t k = line_start; k < at; ++k)
      c += (static_cast<unsigned char>(text[k]) & 0xC0) != 0x80;
    return c;
  };
  auto fail = [&](size_t at, const std::string& what) {
    throw InputError("config error: TOML syntax error in " + source + " at line " +
                     std::to_string(line) + ", column " + std::to_string(column(at)) + ": " + what);
  };
  auto newline = [&](size_t at) {
    ++line;
    line_start = at + 1;
  };
  auto is_key_start = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '"' ||
           c == '\'';
  };
  auto skip_blanks = [&](size_t at) {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
    return at;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '#') in_bare = false;
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '\n') {
      newline(i++);
      prev = '\n';
      if (open.empty()) in_key = true;
      continue;
    }
    if (c == '#') {  // a comment: anything up to the end of the line
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (static_cast<unsigned char>(c) >= 0x80)
      fail(i, "a non-ASCII character outside a string or comment (TOML allows them only there)");
    // toml++ reads a bare value (1e3, true, 1979-05-27, ...) up to whitespace,
    // ] } , or #, taking quotes, [ and { in between as part of it.
    if (in_bare) {
      if (c != ']' && c != '}' && c != ',') {
        prev = last = c;
        ++i;
        continue;
      }
      in_bare = false;
    }
    const bool value_starts =
        !in_key &&
        (last == '=' || ((last == '[' || last == ',') && !open.empty() && open.back() == '['));
    // A quote opens a string only where a key or a value starts.
    const bool string_may_start =
        value_starts ||
        (in_key && (prev == '\n' || last == '.' || last == '{' || last == ',' || last == '['));
    if ((c == '"' || c == '\'') && string_may_start) {
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      i += multi ? 3 : 1;
      while (i < text.size()) {
        if (text[i] == c && (!multi || text.compare(i, 3, std::string(3, c)) == 0)) {
          i += multi ? 3 : 1;
          // """a"""" ends with up to two quotes of content before the delimiter.
          for (int extra = 0; multi && extra < 2 && i < text.size() && text[i] == c; ++extra) ++i;
          break;
        }
        if (text[i] == '\n') {
          if (!multi) return;  // an unterminated string: toml++ stops there
          newline(i);
        } else if (c == '"' && text[i] == '\\' && i + 1 < text.size()) {
          const size_t next = i + 1;
          if (multi && static_cast<unsigned char>(text[next]) >= 0x80)
            fail(next, "a backslash followed by a non-ASCII character (not an escape)");
          if (multi && std::isspace(static_cast<unsigned char>(text[next]))) {
            // A line-ending backslash: the string resumes at the next
            // character that is not whitespace.
            size_t k = next;
            while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) {
              if (text[k] == '\n') newline(k);
              ++k;
            }
            if (k < text.size() && static_cast<unsigned char>(text[k]) >= 0x80)
              fail(k,
                   "a non-ASCII character right after a line-ending backslash (toml++ 3.3.0 "
                   "cannot read it there; write it as a \\u escape or move the backslash)");
            i = k;
            continue;
          }
          ++i;  // the escaped character (an escaped quote does not end the string)
        }
        ++i;
      }
      prev = last = c;
      continue;
    }
    // An array element cannot start with '}' (toml++ 3.3.0 asserts it does not).
    if (c == '}' && !open.empty() && open.back() == '[' && (last == '[' || last == ','))
      fail(i, "expected a value or ']' in an array, saw '}'");
    if (c == '[' && open.empty() && prev == '\n') {  // a table header
      size_t k = skip_blanks(i + 1);
      if (k < text.size() && text[k] == '[' && k == i + 1) k = skip_blanks(k + 1);
      if (k < text.size() && text[k] != ']' && !is_key_start(text[k]))
        fail(k, "a table header must start with a key (a bare key or a quoted one)");
      in_key = true;
      prev = last = '[';
      i = k;
      continue;
    }
    if (value_starts && c != '[' && c != '{' && c != ']' && c != '}' && c != ',') {
      in_bare = true;  // a bare value: read up to its terminator (above)
      prev = last = c;
      ++i;
      continue;
    }
    if (c == '=') in_key = false;
    if (!in_key || !open.empty()) {  // in a value: arrays and inline tables nest
      if (c == '[' || c == '{') open.push_back(c);
      if ((c == ']' || c == '}') && !open.empty()) open.pop_back();
      if (c == '{' || (c == ',' && !open.empty() && open.back() == '{')) in_key = true;
    }
    prev = last = c;
    ++i;
  }
}

void apply_toml(Schema& schema, const std::string& text, const std::string& source) {
  check_toml_lexically_safe(text, source);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw InputError("config error: TOML syntax error in " + source + " at line " +
                     std::to_string(at.line) + ", column " + std::to_string(at.column) + ": " +
                     std::string(e.description()));
  }
  const std::string where = " in " + source;
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    if (!table) {
      if (schema.has_section(section))
        throw InputError("config error: " + section + " = " + render_node(section_node) + where +
                         ": expected a section [" + section + "]");
      // A key above the first [section]: say which section it belongs in.
      std::string hint;
      for (const auto& s : schema.sections())
        if (schema.find(s, section)) hint += (hint.empty() ? "" : " or ") + ("[" + s + "]");
      throw InputError("config error: key '" + section + "'" + where + " is outside any section" +
                       (hint.empty() ? "" : "; did you mean to put it under " + hint + "?") +
                       " (known sections: " + join(schema.sections(), ", ") + ")");
    }
    if (!schema.has_section(section)) schema.unknown_section(section, where);
    for (const auto& [key, node] : *table) {
      Field* field = schema.find(section, key.str());
      if (!field) schema.unknown_key(section, key.str(), where);
      assign_from_toml(*field, node, where);
      schema.set_origin(*field, "in " + source);
    }
  }
}

// ---- command-line overrides --------------------------------------------------

bool parse_int(std::string_view s, int64_t& out) {
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (!s.empty() && s[0] == '-') return false;  // "+-5" is no integer
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// A decimal number as TOML writes one (strtod would also read hexadecimal
// "0x1p3", which a config file cannot hold).
bool parse_double(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  if (s.find_first_of("xX") != std::string::npos) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE && usable_double(out);
}

std::string trim(std::string_view s) {
  const char* ws = " \t";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

// A TOML array of non-empty strings, as a config file writes a list.
bool parse_string_array(const std::string& array, std::vector<std::string>& out) {
  const std::string text = "list = " + array;
  check_toml_lexically_safe(text, "the command line");
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error&) {
    return false;
  }
  const toml::array* items = root["list"].as_array();
  if (items == nullptr) return false;
  for (const toml::node& item : *items) {
    const std::optional<std::string> name = item.value<std::string>();
    if (!name || name->empty()) return false;
    out.push_back(*name);
  }
  return true;
}

// Comma-separated names ("" is the empty list), or the TOML array a config
// file holds (["a", "b"]). Cut at its commas, an array would become names
// with brackets and quotes in them, which match no module: names never hold
// those characters, so such an item is refused.
bool parse_list(const std::string& s, std::vector<std::string>& out) {
  out.clear();
  const std::string text = trim(s);
  if (text.empty()) return true;
  if (text.front() == '[') return parse_string_array(text, out);
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = trim(std::string_view(text).substr(start, comma - start));
    if (item.empty() || item.find_first_of("[]\"'") != std::string::npos) return false;
    out.push_back(item);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

void assign_from_text(const Field& field, const std::string& value) {
  bool ok = std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return parse_int(value, *target);
        } else if constexpr (std::is_same_v<T, double>) {
          return parse_double(value, *target);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value != "true" && value != "false") return false;
          *target = value == "true";
          return true;
        } else if constexpr (std::is_same_v<T, std::string>) {
          *target = value;
          return true;
        } else if constexpr (std::is_same_v<T, NumberOrAuto>) {
          if (value == "auto") {
            *target = NumberOrAuto{0, true};
            return true;
          }
          double number = 0;
          if (!parse_double(value, number)) return false;
          *target = NumberOrAuto{number, false};
          return true;
        } else {
          return parse_list(value, *target);
        }
      },
      field.ref);
  if (!ok) {
    std::string expected = expectation(field.ref);
    // Digits after an optional sign that do not parse: too many of them.
    const size_t sign = !value.empty() && (value[0] == '+' || value[0] == '-') ? 1 : 0;
    const bool whole_number =
        value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
    if (field.ref.index() == 0 && whole_number)
      expected += " from -2^63 to 2^63 - 1 (a signed 64-bit integer)";
    // A number strtod reads whole but not as a finite, normal double: inf,
    // nan, 1e400, or one as tiny as 1e-320; or one written in hexadecimal.
    char* end = nullptr;
    if (field.ref.index() == 1 && !value.empty() &&
        (std::strtod(value.c_str(), &end), end == value.c_str() + value.size()))
      expected +=
          value.find_first_of("xX") == std::string::npos ? kUsableDouble : " written in decimal";
    if (field.ref.index() == 4)
      expected =
          "expected a comma-separated list of names, or a TOML array of strings such as "
          "[\"a\", \"b\"]";
    throw InputError("config error: " + field.name() + " = " + in_quotes(value) +
                     " on the command line: " + expected);
  }
}

void apply_overrides(Schema& schema, const std::vector<std::string>& args) {
  const std::string where = " on the command line";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t eq = arg.find('=');
    // "--section.key" before any "=": checked to start with "--" before it is cut.
    const std::string name =
        arg.starts_with("--") ? arg.substr(2, eq == std::string::npos ? eq : eq - 2) : "";
    const size_t dot = name.find('.');
    if (!arg.starts_with("--") || dot == std::string::npos || dot == 0 || dot + 1 == name.size() ||
        name.find('.', dot + 1) != std::string::npos)
      throw InputError("config error: bad override '" + arg +
                       "': expected --section.key value or --section.key=value");
    const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
    if (!schema.has_section(section)) schema.unknown_section(section, " in '" + arg + "'");
    Field* field = schema.find(section, key);
    if (!field) schema.unknown_key(section, key, where);

    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
      value = args[++i];
    } else if (std::holds_alternative<bool*>(field->ref)) {
      value = "true";  // a bare boolean flag, as torchtitan's CLI allows
    } else {
      throw InputError("config error: override '" + arg + "' needs a value (" +
                       expectation(field->ref) + ")");
    }
    assign_from_text(*field, value);
    schema.set_origin(*field, "on the command line");
  }
}

// True for a file that is empty or only comments: parse_job_config has
// accepted it, so it parses.
bool sets_no_keys(const std::string& text) {
  try {
    return toml::parse(text).empty();
  } catch (const toml::parse_error&) {
    return false;
  }
}

// ---- validation ----------------------------------------------------------------

bool is_decimal(std::string_view s) {
  int64_t n = 0;
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos &&
         parse_int(s, n);
}

// The largest size accepted (4 EiB): every size becomes an int64 byte count.
constexpr double kMaxSizeBytes = 0x1p62;

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
  v.require(!c.checkpoint.folder.empty(), "checkpoint.folder", "a folder name");
  static const char* const kCheckpointFormats[] = {"auto", "sharded", "single_file"};
  v.require(one_of(c.checkpoint.format, kCheckpointFormats), "checkpoint.format",
            "\"auto\", \"sharded\" or \"single_file\"");
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

// Every check, in the order the errors are reported.
void validate(const JobConfig& c, Schema& schema) {
  Validator v(schema);
  validate_model_and_training(c, v);
  validate_optimizer(c, v);
  validate_activation_checkpoint(c, v);
  validate_other_sections(c, v);
}

}  // namespace

double parse_memory_size(const std::string& text) { return parse_size(text); }

bool sharded_checkpoints(const JobConfig& config) {
  return config.checkpoint.format == "sharded" ||
         (config.checkpoint.format == "auto" && config.parallelism.data_parallel_shard_degree > 1);
}

int64_t max_training_threads() {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min<int64_t>(4 * cores, 1024);
}

JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  JobConfig config;
  Schema schema(config);
  apply_toml(schema, toml_text, source_name);
  apply_overrides(schema, overrides);
  validate(config, schema);
  // One process holds every rank there is.
  if (config.parallelism.data_parallel_shard_degree == -1)
    config.parallelism.data_parallel_shard_degree = 1;
  config.ignored_keys = schema.ignored_keys();
  return config;
}

std::string format_ignored_keys(const JobConfig& config) {
  if (config.ignored_keys.empty()) return "";
  return "ignored on this engine: " + join(config.ignored_keys, ", ");
}

std::vector<std::pair<std::string, std::string>> job_config_settings(const JobConfig& config) {
  JobConfig copy = config;  // fields_of points into the config it is given
  std::vector<std::pair<std::string, std::string>> settings;
  for (const Field& f : fields_of(copy))
    if (!f.alias) settings.emplace_back(f.name(), toml_value(f.ref));
  return settings;
}

std::string format_job_config(const JobConfig& config) {
  std::string out, section;
  for (const auto& [name, value] : job_config_settings(config)) {
    const size_t dot = name.find('.');  // section names have none
    if (name.substr(0, dot) != section) {
      section = name.substr(0, dot);
      out += (out.empty() ? "[" : "\n[") + section + "]\n";
    }
    out += name.substr(dot + 1) + " = " + value + "\n";
  }
  return out;
}

void note_job_inputs(const JobConfig& config) {
  auto note = [](const std::string& path, const std::string& what) {
    if (!path.empty()) note_input(path, what);
  };
  note(config.training.dataset_path, "dataset (training.dataset_path)");
  note(config.validation.dataset, "validation dataset (validation.dataset)");
  note(config.model.tokenizer_path, "tokenizer file (model.tokenizer_path)");
  if (config.model.tokenizer != "byte")
    note(config.model.tokenizer, "tokenizer file (model.tokenizer)");
  note(config.checkpoint.load, "checkpoint (checkpoint.load)");
  std::error_code ec;
  if (!config.checkpoint.load.empty() &&
      std::filesystem::is_directory(config.checkpoint.load, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(config.checkpoint.load, ec))
      note(entry.path().string(), "checkpoint file (checkpoint.load)");
  }
}

JobConfig load_job_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  try {
    // A job config is a few kilobytes; 16 MiB bounds what a mistaken path
    // (a dataset, /proc/...) can make remat read.
    text = read_regular_file(path, "config file", "a TOML file", int64_t{16} << 20);
  } catch (const InputError& e) {
    throw InputError(std::string("config error: ") + e.what() +
                     " (a TOML job config, e.g. configs/llama3_debug.toml)");
  }
  JobConfig config = parse_job_config(text, path, overrides);
  if (sets_no_keys(text))
    std::fprintf(stderr,
                 "note: config file '%s' sets no keys: the run uses the built-in defaults "
                 "(and any --section.key overrides)\n",
                 path.c_str());
  return config;
}

}  // namespace remat
