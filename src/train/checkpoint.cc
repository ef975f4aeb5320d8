#include "train/checkpoint.h"

#include <charconv>
#include <map>
#include <stdexcept>

#include "core/error.h"
#include "io/safetensors.h"
#include "train/numerics.h"

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
  // A checkpoint is the state to go back to: it must never hold NaN or inf.
  for (const SafetensorsEntry& e : entries) {
    if (!all_finite(e.data, numel(e.shape)))
      throw std::runtime_error("refusing to write checkpoint " + path + ": tensor '" + e.name +
                               "' holds non-finite values");
  }
  save_safetensors(path, entries, {{"step", std::to_string(step)}, {"format", "remat"}},
                   "checkpoint.folder");
}

int64_t checkpoint_step(const SafetensorsReader& reader) {
  auto it = reader.metadata().find("step");
  if (it == reader.metadata().end()) return 0;
  // The whole text must be the number: "1e3" is not step 1, "-5" no step.
  const std::string& text = it->second;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || step < 0)
    throw InputError("checkpoint error: '" + reader.path() + "' has step metadata \"" + text +
                     "\", expected a non-negative decimal integer");
  return step;
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
  const int64_t step = checkpoint_step(reader);
  return step;
}

}  // namespace remat
