#include "train/metrics.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/format.h"
#include "io/files.h"

namespace remat {

namespace {

constexpr const char* kTensorBoardKey = "metrics.save_tb_folder";

// torchtitan's colours (torchtitan/tools/utils.py, Color).
struct Colors {
  const char *red, *green, *orange, *turquoise, *blue, *cyan, *magenta, *reset;
};
constexpr Colors kColors{
    "\033[31m", "\033[32m", "\033[38;2;180;60;0m", "\033[38;2;54;234;195m", "\033[34m", "\033[36m",
    "\033[35m", "\033[39m"};
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
  const nlohmann::ordered_json line = {{"step", m.step},
                                       {"loss", m.loss},
                                       {"grad_norm", m.grad_norm},
                                       {"lr", m.lr},
                                       {"peak_bytes", m.peak_bytes},
                                       {"activation_bytes_at_peak", activation_bytes_at_peak},
                                       {"max_activation_bytes", max_activation_bytes},
                                       {"tps", m.tokens_per_second},
                                       {"mfu", m.model_flops_per_second / m.peak_flops},
                                       {"hfu", m.hardware_flops_per_second / m.peak_flops},
                                       {"minor_faults", m.minor_faults}};
  return dump_flat(line);
}

std::string validation_json(int64_t step, double loss) {
  return dump_flat(nlohmann::ordered_json{{"step", step}, {"validation_loss", loss}});
}

std::vector<Scalar> tensorboard_scalars(const StepMetrics& m, int64_t tokens_seen,
                                        double step_seconds) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return {{"loss_metrics/global_avg_loss", m.loss},
          {"grad_norm", m.grad_norm},
          {"ntokens_seen", static_cast<double>(tokens_seen)},
          {"throughput(tps)", m.tokens_per_second},
          {"tflops", m.model_flops_per_second / 1e12},
          {"mfu(%)", 100.0 * m.model_flops_per_second / m.peak_flops},
          {"hfu(%)", 100.0 * m.hardware_flops_per_second / m.peak_flops},
          {"time_metrics/end_to_end(s)", step_seconds},
          {"memory/max_active(GiB)", static_cast<double>(m.peak_bytes) / kGiB},
          {"memory/max_active(%)", m.device_bytes > 0 ? 100.0 * static_cast<double>(m.peak_bytes) /
                                                            static_cast<double>(m.device_bytes)
                                                      : 0.0},
          {"lr", m.lr}};
}

std::vector<Scalar> tensorboard_validation_scalars(double loss) {
  return {{"validation_metrics/loss", loss}};
}

std::string tensorboard_root(const JobConfig& config) {
  return (std::filesystem::path(config.job.dump_folder) / config.metrics.save_tb_folder).string();
}

bool writes_tensorboard(const JobConfig& config, int rank) {
  return config.metrics.enable_tensorboard && (rank == 0 || config.metrics.save_for_all_ranks);
}

TensorBoardLog open_tensorboard(const JobConfig& config, int rank) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M", &local);
  std::filesystem::path folder = std::filesystem::path(tensorboard_root(config)) / stamp;
  if (config.metrics.save_for_all_ranks) folder /= "rank_" + std::to_string(rank);
  create_folders(folder.string(), kTensorBoardKey);
  return TensorBoardLog(folder.string(), kTensorBoardKey);
}

}  // namespace remat
