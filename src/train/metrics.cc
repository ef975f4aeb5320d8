#include "train/metrics.h"

#include <unistd.h>

#include <cstdio>

namespace remat {

int64_t model_flops_per_token(int64_t params, int64_t embedding_params,
                              int64_t attention_term, int64_t seq_len) {
  return 6 * (params - embedding_params) + 12 * attention_term * seq_len;
}

int64_t physical_memory_bytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
}

int64_t process_peak_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib < 0 ? -1 : static_cast<int64_t>(kib) * 1024;
}

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2fGiB", b / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.2fMiB", b / (1024.0 * 1024));
  }
  return buf;
}

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

}  // namespace remat
