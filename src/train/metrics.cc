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

namespace {

// torchtitan's colours (torchtitan/tools/utils.py, Color).
struct Colors {
  const char *red, *green, *orange, *turquoise, *blue, *cyan, *magenta, *reset;
};
constexpr Colors kColors{"\033[31m", "\033[32m", "\033[38;2;180;60;0m", "\033[38;2;54;234;195m",
                         "\033[34m", "\033[36m", "\033[35m", "\033[39m"};
constexpr Colors kNoColors{"", "", "", "", "", "", "", ""};

}  // namespace

std::string format_log_line(const StepMetrics& m, bool color) {
  const Colors& c = color ? kColors : kNoColors;
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "%sstep: %2lld  %sloss: %7.4f  %sgrad_norm: %7.4f  %smemory: %5.2fGiB(%.2f%%)  "
                "%stps: %s  %stflops: %.2f  %smfu: %.2f%%  hfu: %.2f%%%s",
                c.red, static_cast<long long>(m.step), c.green, m.loss, c.orange, m.grad_norm,
                c.turquoise, static_cast<double>(m.peak_bytes) / (1024.0 * 1024 * 1024),
                100.0 * static_cast<double>(m.peak_bytes) / static_cast<double>(m.device_bytes),
                c.blue, with_thousands(static_cast<int64_t>(m.tokens_per_second + 0.5)).c_str(),
                c.cyan, m.model_flops_per_second / 1e12, c.magenta,
                100.0 * m.model_flops_per_second / m.peak_flops,
                100.0 * m.hardware_flops_per_second / m.peak_flops, c.reset);
  return buf;
}

}  // namespace remat
