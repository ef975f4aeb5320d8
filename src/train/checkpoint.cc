#include "train/checkpoint.h"

#include <map>

#include "core/error.h"
#include "io/safetensors.h"

namespace remat {

namespace {
const char* kExpAvg = "optimizer.exp_avg.";
const char* kExpAvgSq = "optimizer.exp_avg_sq.";
}  // namespace

void save_checkpoint(const std::string& path, const ModelState& state, int64_t step,
                     bool with_optimizer) {
  std::vector<SafetensorsEntry> entries;
  const auto& params = state.program->params;
  for (size_t i = 0; i < params.size(); ++i) {
    entries.push_back({params[i].fqn, params[i].shape, state.params[i].data()});
  }
  if (with_optimizer && !state.exp_avg.empty()) {
    for (size_t i = 0; i < params.size(); ++i) {
      entries.push_back({kExpAvg + params[i].fqn, params[i].shape, state.exp_avg[i].data()});
      entries.push_back({kExpAvgSq + params[i].fqn, params[i].shape, state.exp_avg_sq[i].data()});
    }
  }
  save_safetensors(path, entries, {{"step", std::to_string(step)}, {"format", "remat"}});
}

int64_t load_checkpoint(const std::string& path, ModelState& state, bool with_optimizer) {
  SafetensorsReader reader = SafetensorsReader::open(path);
  const auto& params = state.program->params;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!reader.has(params[i].fqn)) {
      throw InputError("checkpoint error: '" + path + "' has no tensor '" + params[i].fqn +
                       "' (expected the weights of this model: check model.flavor and sizes)");
    }
    reader.read(params[i].fqn, params[i].shape, state.params[i].data());
  }
  if (with_optimizer && reader.has(kExpAvg + params[0].fqn)) {
    state.ensure_optimizer_state();
    for (size_t i = 0; i < params.size(); ++i) {
      reader.read(kExpAvg + params[i].fqn, params[i].shape, state.exp_avg[i].data());
      reader.read(kExpAvgSq + params[i].fqn, params[i].shape, state.exp_avg_sq[i].data());
    }
  }
  int64_t step = 0;
  if (auto it = reader.metadata().find("step"); it != reader.metadata().end()) {
    try {
      step = std::stoll(it->second);
    } catch (const std::exception&) {
      throw InputError("checkpoint error: '" + path + "' has step metadata '" + it->second +
                       "', expected an integer");
    }
  }
  return step;
}

}  // namespace remat
