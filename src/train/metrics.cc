#include "train/metrics.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/format.h"

namespace remat {

std::string format_log_line(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step: %2lld  loss: %7.4f  grad_norm: %7.4f  memory: %s(%.2f%%)  tps: %s  "
                "tflops: %.2f  mfu: %.2f%%  hfu: %.2f%%",
                static_cast<long long>(m.step), m.loss, m.grad_norm,
                format_bytes(m.peak_bytes).c_str(),
                100.0 * static_cast<double>(m.peak_bytes) / static_cast<double>(m.device_bytes),
                with_thousands(static_cast<int64_t>(m.tokens_per_second + 0.5)).c_str(),
                m.model_flops_per_second / 1e12,
                100.0 * m.model_flops_per_second / m.peak_flops,
                100.0 * m.hardware_flops_per_second / m.peak_flops);
  return buf;
}

namespace {

// A flat object as Python's json.dumps lays it out ({"a": 1, "b": 2}): one
// line that readers and tests may also split as text. Keys and values are
// nlohmann's own text (escaped strings, shortest round-trip doubles, null for
// NaN and infinities).
std::string dump_flat(const nlohmann::ordered_json& object) {
  std::string out = "{";
  for (const auto& [key, value] : object.items()) {
    if (out.size() > 1) out += ", ";
    out += nlohmann::json(key).dump() + ": " + value.dump();
  }
  return out + "}";
}

}  // namespace

std::string metrics_json(const StepMetrics& m, int64_t activation_bytes_at_peak,
                         int64_t max_activation_bytes) {
  const nlohmann::ordered_json line = {
      {"step", m.step},
      {"loss", m.loss},
      {"grad_norm", m.grad_norm},
      {"lr", m.lr},
      {"peak_bytes", m.peak_bytes},
      {"activation_bytes_at_peak", activation_bytes_at_peak},
      {"max_activation_bytes", max_activation_bytes},
      {"tps", m.tokens_per_second},
      {"mfu", m.model_flops_per_second / m.peak_flops},
      {"hfu", m.hardware_flops_per_second / m.peak_flops}};
  return dump_flat(line);
}

}  // namespace remat
