// What a run reports (spec.md §4): model FLOPs per token, the device peak,
// and the formatted log line.
#pragma once

#include <cstdint>
#include <string>

#include "graph/program.h"

namespace remat {

// 6 * (parameters - embedding parameters) + 12 * layers * heads * head_dim *
// seq_len, as torchtitan counts it. `embedding_params` are the token
// embedding's; `attention_term` is layers * heads * head_dim.
int64_t model_flops_per_token(int64_t params, int64_t embedding_params,
                              int64_t attention_term, int64_t seq_len);

int64_t physical_memory_bytes();

// The process's peak resident set size so far (VmHWM in /proc/self/status),
// or -1 where it cannot be read. memory.limit bounds the allocator's books,
// not this (README "What memory.limit bounds").
int64_t process_peak_rss_bytes();

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  int64_t peak_bytes = 0;
  int64_t device_bytes = 0;
  double tokens_per_second = 0;
  double model_flops_per_second = 0;      // model FLOPs only
  double hardware_flops_per_second = 0;   // recompute included
  double peak_flops = 1;
  double lr = 0;
};

// "step: 12  loss: 7.1234  grad_norm: 1.2345  memory:  3.21GiB(13.40%)
//  tps: 1,234  tflops: 0.08  mfu: 41.20%  hfu: 45.10%", torchtitan's line:
// memory always in GiB, as "%5.2f". With `color`, each field in torchtitan's
// ANSI colour (for a terminal only: a file or pipe gets plain text).
std::string format_log_line(const StepMetrics& m, bool color = false);
std::string format_bytes(int64_t bytes);        // "3.21GiB", "512.00MiB"
std::string with_thousands(int64_t value);      // "1,234"

}  // namespace remat
