// The job config loader's parts and what they share: the key table
// (fields_of, kTorchtitanOnly) and the Schema over it, read by
//  - config_toml.cc: a TOML file into the fields,
//  - config_overrides.cc: --section.key value overrides,
//  - config_validation.cc: every value checked against what it may be,
// and config.cc, which runs them in that order (parse_job_config). Only
// io/config*.cc include it; the rest of remat sees io/config.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/error.h"
#include "io/config.h"

namespace remat::config_parts {

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

struct Field {
  std::string_view section;
  std::string_view key;
  FieldRef ref;
  const ForeignKey* foreign = nullptr;  // set for a key of kTorchtitanOnly
  bool alias = false;                   // another name for a field listed before it
  std::string name() const { return std::string(section) + "." + std::string(key); }
};

// Every key of JobConfig, each pointing at its member of `c`.
std::vector<Field> fields_of(JobConfig& c);

std::string in_quotes(std::string_view s);
std::string join(const std::vector<std::string>& items, std::string_view sep);
// The value as a message shows it: strings quoted, lists bracketed.
std::string render(const FieldRef& ref);
// The value as TOML that parse_job_config reads back to the same value.
std::string toml_value(const FieldRef& ref);

// A double remat takes from a config file or the command line alike:
// finite, and 0 or normal. A subnormal (1e-320) is refused as inf and nan
// are: no setting means one, and it has already lost precision.
bool usable_double(double v);
inline constexpr const char* kUsableDouble =
    " that is finite and 0 or between 2.2e-308 and 1.8e308 in size (a double)";

// "expected an integer", ...: what a field of this type takes.
const char* expectation(const FieldRef& ref);

// The candidate nearest to `name`, if it is near enough to be a typo of it
// (at most 2 edits, or a third of the name); "" otherwise.
std::string nearest(std::string_view name, const std::vector<std::string>& candidates);

// A value of a kTorchtitanOnly key, of the type its kind names.
using ForeignValue = std::variant<int64_t, bool, std::string, std::vector<std::string>>;

// The key table plus where each key was last set, for error messages.
class Schema {
 public:
  // Every JobConfig field (fields_of) and every kTorchtitanOnly key.
  explicit Schema(JobConfig& config);

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

// ---- the parts ---------------------------------------------------------------

// config_toml.cc: the sections and keys of `text` (read from `source`) into
// the schema's fields.
void apply_toml(Schema& schema, const std::string& text, const std::string& source);
// The TOML syntax errors toml++ 3.3.0 would meet with undefined behaviour,
// as InputError (config_toml.cc says which); call before toml::parse.
void check_toml_lexically_safe(const std::string& text, const std::string& source);
// True for a file that is empty or only comments: parse_job_config has
// accepted it, so it parses.
bool sets_no_keys(const std::string& text);

// config_overrides.cc: "--section.key value" and "--section.key=value".
void apply_overrides(Schema& schema, const std::vector<std::string>& args);
// The whole of `s` as a decimal integer (an optional '+') or double (as
// TOML writes one, usable_double); false otherwise.
bool parse_int(std::string_view s, int64_t& out);
bool parse_double(const std::string& s, double& out);
std::string trim(std::string_view s);  // without leading and trailing blanks

// config_validation.cc: every check, in the order the errors are reported.
void validate(const JobConfig& c, Schema& schema);
// "12GiB", "512 MB", "1.5TiB", "100B": a size in bytes with a unit, at most
// 4 EiB; 0 on failure.
double parse_size(const std::string& s);

}  // namespace remat::config_parts
