#include "io/shard_index.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/config.h"
#include "io/json_error.h"

namespace remat {

namespace {

using nlohmann::json;

constexpr const char* kFormat = "remat-sharded-checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kMaxElements = int64_t{1} << 50;  // far above any model: sums cannot overflow

// Every complaint names the file and what was expected.
[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw InputError("checkpoint error: '" + path + "': " + what);
}

const json& field(const json& object, const char* key, const std::string& where,
                  const std::string& path) {
  if (!object.is_object() || !object.contains(key))
    bad(path, where + " has no \"" + key + "\" (expected a remat sharded checkpoint index)");
  return object.at(key);
}

int64_t integer(const json& object, const char* key, int64_t min, int64_t max,
                const std::string& where, const std::string& path) {
  const json& v = field(object, key, where, path);
  if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max)
    bad(path, where + " \"" + key + "\" is " + json_excerpt(v) + ", expected an integer in [" +
                  std::to_string(min) + ", " + std::to_string(max) + "]");
  return v.get<int64_t>();
}

const json& array(const json& object, const char* key, const std::string& where,
                  const std::string& path) {
  const json& v = field(object, key, where, path);
  if (!v.is_array()) bad(path, where + " \"" + key + "\" is not an array");
  return v;
}

ShardIndex::Param parse_param(const json& j, const std::string& where, const std::string& path) {
  ShardIndex::Param p;
  const json& fqn = field(j, "fqn", where, path);
  if (!fqn.is_string() || fqn.get<std::string>().empty())
    bad(path, where + " \"fqn\" is not a non-empty string");
  p.fqn = fqn.get<std::string>();
  int64_t numel = 1;
  for (const json& d : array(j, "shape", where, path)) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxElements)
      bad(path, where + " (" + p.fqn + ") has dimension " + json_excerpt(d) +
                    ", expected an integer >= 0");
    p.shape.push_back(d.get<int64_t>());
    // Checked as it is multiplied: two dimensions of 2^32 wrapped to 0.
    if (__builtin_mul_overflow(numel, p.shape.back(), &numel) || numel > kMaxElements)
      bad(path, where + " (" + p.fqn + ") has too many elements");
  }
  p.offset = integer(j, "offset", 0, kMaxElements, where, path);
  p.id = integer(j, "id", 0, kMaxElements, where, path);
  return p;
}

int64_t param_numel(const ShardIndex::Param& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  return n;
}

ShardIndex::Unit parse_unit(const json& j, int64_t ranks, const std::string& where,
                            const std::string& path) {
  ShardIndex::Unit u;
  u.block = static_cast<int32_t>(integer(j, "block", -1, 1 << 30, where, path));
  u.numel = integer(j, "numel", 0, kMaxElements, where, path);
  u.chunk = integer(j, "chunk", 0, kMaxElements, where, path);
  if (u.chunk != (u.numel + ranks - 1) / ranks)
    bad(path, where + " has chunk " + std::to_string(u.chunk) + ", expected ceil(numel " +
                  std::to_string(u.numel) + " / ranks " + std::to_string(ranks) + ")");
  int64_t next = 0;
  for (const json& p : array(j, "params", where, path)) {
    const std::string at = where + " parameter " + std::to_string(u.params.size());
    u.params.push_back(parse_param(p, at, path));
    if (u.params.back().offset != next)
      bad(path, at + " starts at offset " + std::to_string(u.params.back().offset) + ", expected " +
                    std::to_string(next) + " (parameters tile the unit in order)");
    next += param_numel(u.params.back());
    if (next > kMaxElements) bad(path, where + " has too many elements");
  }
  if (next != u.numel)
    bad(path, where + " has numel " + std::to_string(u.numel) + ", its parameters hold " +
                  std::to_string(next));
  return u;
}

std::map<std::string, std::string> parse_run(const json& j, const std::string& path) {
  const json& run = field(j, "run", "the index", path);
  if (!run.is_object()) bad(path, "\"run\" is not an object");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : run.items()) {
    if (!value.is_string()) bad(path, "\"run\" value of \"" + key + "\" is not a string");
    out[key] = value.get<std::string>();
  }
  return out;
}

void parse_files(const json& j, ShardIndex& index, const std::string& path) {
  for (const json& f : array(j, "files", "the index", path)) {
    const std::string where = "file " + std::to_string(index.files.size());
    const json& name = field(f, "name", where, path);
    const std::string text = name.is_string() ? name.get<std::string>() : "";
    if (text.empty() || text == "." || text == ".." || text.find('/') != std::string::npos ||
        text.find('\0') != std::string::npos)
      bad(path, where + " \"name\" is " + json_excerpt(name) +
                    ", expected a file name in the checkpoint's folder");
    index.files.push_back(text);
    index.file_bytes.push_back(integer(f, "bytes", 0, kMaxElements, where, path));
  }
  if (static_cast<int64_t>(index.files.size()) != index.ranks)
    bad(path, "names " + std::to_string(index.files.size()) +
                  " shard files, expected one per "
                  "rank (" +
                  std::to_string(index.ranks) + ")");
}

// No FQN twice; the ids number the parameters 0 .. n - 1, each once.
void check_params(const ShardIndex& index, const std::string& path) {
  std::set<std::string> fqns;
  std::vector<bool> ids;
  size_t count = 0;
  for (const ShardIndex::Unit& u : index.units) count += u.params.size();
  ids.assign(count, false);
  for (const ShardIndex::Unit& u : index.units) {
    for (const ShardIndex::Param& p : u.params) {
      if (!fqns.insert(p.fqn).second) bad(path, "names parameter '" + p.fqn + "' twice");
      if (p.id >= static_cast<int64_t>(count) || ids[p.id])
        bad(path, "parameter '" + p.fqn + "' has id " + std::to_string(p.id) +
                      ", expected each of 0.." + std::to_string(count - 1) + " once");
      ids[p.id] = true;
    }
  }
}

}  // namespace

ShardIndex ShardIndex::parse(const std::string& text, const std::string& path) {
  if (const std::string problem = json_text_problem(text); !problem.empty())
    bad(path, "has " + problem);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) bad(path, "is not a JSON object (expected an index)");
  const json& format = field(j, "format", "the index", path);
  if (format != kFormat)
    bad(path, "has format " + json_excerpt(format) + ", expected \"" + kFormat + "\"");
  integer(j, "version", kVersion, kVersion, "the index", path);
  ShardIndex index;
  index.step = integer(j, "step", 0, kMaxElements, "the index", path);
  index.ranks = static_cast<int>(integer(j, "ranks", 1, kMaxRanks, "the index", path));
  const json& optimizer = field(j, "with_optimizer", "the index", path);
  if (!optimizer.is_boolean()) bad(path, "\"with_optimizer\" is not true or false");
  index.with_optimizer = optimizer.get<bool>();
  index.run = parse_run(j, path);
  for (const json& u : array(j, "units", "the index", path))
    index.units.push_back(
        parse_unit(u, index.ranks, "unit " + std::to_string(index.units.size()), path));
  parse_files(j, index, path);
  check_params(index, path);
  return index;
}

std::string ShardIndex::to_json() const {
  json units_json = json::array();
  for (const Unit& u : units) {
    json params = json::array();
    for (const Param& p : u.params)
      params.push_back({{"fqn", p.fqn}, {"shape", p.shape}, {"offset", p.offset}, {"id", p.id}});
    units_json.push_back(
        {{"block", u.block}, {"numel", u.numel}, {"chunk", u.chunk}, {"params", params}});
  }
  json files_json = json::array();
  for (size_t r = 0; r < files.size(); ++r)
    files_json.push_back({{"name", files[r]}, {"bytes", file_bytes.at(r)}});
  const json j = {{"format", kFormat},
                  {"version", kVersion},
                  {"step", step},
                  {"ranks", ranks},
                  {"with_optimizer", with_optimizer},
                  {"run", run},
                  {"units", units_json},
                  {"files", files_json}};
  return j.dump() + "\n";
}

}  // namespace remat
