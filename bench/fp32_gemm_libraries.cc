// OpenBLAS sgemm against oneDNN's f32 matmul as the engine runs them
// (src/kernels/cpu/gemm_fp32.h): the engine's own fp32 linear layers
// (linear_forward / linear_backward, linear_in_out_*, grouped_linear_*),
// rows in their fixed chunks shared out over the threads, each chunk one
// single-threaded GEMM, on each implementation in turn (ScopedFp32Gemm).
//
// Shapes: every linear of one training step of
//  - llama3 debug: dim 256, 6 layers, FFN 768, vocab 2048, 8 x 256 = 2048 rows;
//  - llama4 debug: the same attention, output and (3 layers) dense FFNs; 3
//    MoE layers of router 256 -> 8, 8 experts and a shared expert of
//    hidden 512 (weights stored (in, out)), top-1 routing of the 2048 rows
//    split over the experts as kExpertRows (a fixed uneven split: real
//    routing moves every step, and the chunks of each segment with it);
//  - wide: dim 1024, 8 layers, FFN 2816, vocab 2048, 2 x 1024 = 2048 rows.
// Passes: y (forward: overwrite), dx and dw written fresh (the first writer
// of a gradient: beta 0, which OpenBLAS runs as a memset of C and an
// accumulation) and accumulated (beta 1).
//
// Interleaved rounds (each pass on OpenBLAS, then on oneDNN), so a
// neighbour's load hits both alike; the median call. Per model, one step's
// GEMM mix: every linear's y, its dw fresh (one writer per parameter), its
// dx fresh for the first reader of an activation (wq of wq/wk/wv, w1 of
// w1/w3; the MoE layer's router, experts and shared expert share n2: one
// fresh, the others accumulate) and accumulated for the others; op AC's
// recomputed forwards are not counted. Before timing, the two
// implementations' results are compared (relative 1e-4 of the largest
// element: they only sum in other orders).
//
//   ninja -C build fp32_gemm_libraries && build/fp32_gemm_libraries [threads] [rounds]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/kernels.h"

namespace {

using remat::cpu::Fp32Gemm;

enum class Kind { kLinear, kInOut, kGrouped };

struct Layer {
  std::string name;
  Kind kind;
  int64_t rows, in, out;  // x[rows, in] -> y[rows, out]
  int count;              // how many a step runs
  int dx_fresh;           // of those, how many write dx fresh (the others accumulate)
};

constexpr int64_t kExperts = 8;
// 2048 rows over 8 experts, top-1 (sums to 2048).
const int64_t kExpertRows[kExperts] = {412, 330, 291, 262, 231, 208, 178, 136};

std::vector<Layer> llama3_debug() {
  return {{"wq/wk/wv/wo 256x256", Kind::kLinear, 2048, 256, 256, 24, 12},
          {"w1/w3 256->768", Kind::kLinear, 2048, 256, 768, 12, 6},
          {"w2 768->256", Kind::kLinear, 2048, 768, 256, 6, 6},
          {"output 256->2048", Kind::kLinear, 2048, 256, 2048, 1, 1}};
}

std::vector<Layer> llama4_debug() {
  return {{"wq/wk/wv/wo 256x256", Kind::kLinear, 2048, 256, 256, 24, 12},
          {"dense w1/w3 256->768", Kind::kLinear, 2048, 256, 768, 6, 3},
          {"dense w2 768->256", Kind::kLinear, 2048, 768, 256, 3, 3},
          {"router 256->8", Kind::kLinear, 2048, 256, 8, 3, 3},
          {"experts w1/w3 256->512", Kind::kGrouped, 2048, 256, 512, 6, 0},
          {"experts w2 512->256", Kind::kGrouped, 2048, 512, 256, 3, 3},
          {"shared w1/w3 256->512", Kind::kInOut, 2048, 256, 512, 6, 0},
          {"shared w2 512->256", Kind::kInOut, 2048, 512, 256, 3, 3},
          {"output 256->2048", Kind::kLinear, 2048, 256, 2048, 1, 1}};
}

std::vector<Layer> wide() {
  return {{"wq/wk/wv/wo 1024x1024", Kind::kLinear, 2048, 1024, 1024, 32, 16},
          {"w1/w3 1024->2816", Kind::kLinear, 2048, 1024, 2816, 16, 8},
          {"w2 2816->1024", Kind::kLinear, 2048, 2816, 1024, 8, 8},
          {"output 1024->2048", Kind::kLinear, 2048, 1024, 2048, 1, 1}};
}

std::vector<float> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// One layer's operands and outputs.
struct Buffers {
  std::vector<float> x, w, dy, y, dx, dw, offsets;
  Buffers(const Layer& l)
      : x(random_vector(l.rows * l.in, 1)),
        w(random_vector((l.kind == Kind::kGrouped ? kExperts : 1) * l.in * l.out, 2)),
        dy(random_vector(l.rows * l.out, 3)),
        y(static_cast<size_t>(l.rows * l.out)),
        dx(static_cast<size_t>(l.rows * l.in)),
        dw(w.size()) {
    offsets.push_back(0);
    for (int64_t rows : kExpertRows) offsets.push_back(offsets.back() + static_cast<float>(rows));
  }
};

enum class Pass { kY, kDxFresh, kDxAccumulate, kDwFresh, kDwAccumulate };
const char* const kPassNames[] = {"y", "dx fresh", "dx +=", "dw fresh", "dw +="};

// The engine's call for one pass of `l`.
void run_pass(const Layer& l, Pass pass, Buffers& b) {
  using namespace remat::cpu;
  const int64_t m = l.rows, k = l.in, n = l.out;
  const bool y = pass == Pass::kY, dx = pass == Pass::kDxFresh || pass == Pass::kDxAccumulate;
  const uint32_t fresh = pass == Pass::kDxFresh ? 1u : pass == Pass::kDwFresh ? 2u : 0u;
  float* dx_out = dx ? b.dx.data() : nullptr;
  float* dw_out = dx ? nullptr : b.dw.data();
  switch (l.kind) {
    case Kind::kLinear:
      if (y) return linear_forward(b.x.data(), b.w.data(), m, k, n, b.y.data());
      return linear_backward(b.dy.data(), b.x.data(), b.w.data(), m, k, n, dx_out, dw_out, fresh);
    case Kind::kInOut:
      if (y) return linear_in_out_forward(b.x.data(), b.w.data(), m, k, n, b.y.data());
      return linear_in_out_backward(b.dy.data(), b.x.data(), b.w.data(), m, k, n, dx_out, dw_out,
                                    fresh);
    case Kind::kGrouped:
      if (y) {
        return grouped_linear_forward(b.x.data(), b.offsets.data(), b.w.data(), kExperts, m, k, n,
                                      b.y.data());
      }
      return grouped_linear_backward(b.dy.data(), b.x.data(), b.offsets.data(), b.w.data(),
                                     kExperts, m, k, n, dx_out, dw_out, fresh);
  }
}

const std::vector<float>& output_of(Pass pass, const Buffers& b) {
  if (pass == Pass::kY) return b.y;
  return pass == Pass::kDxFresh || pass == Pass::kDxAccumulate ? b.dx : b.dw;
}

// The largest difference between the implementations' results, relative
// to the largest element (accumulating passes start from zeros).
double relative_difference(const Layer& l, Pass pass, Buffers& b) {
  std::vector<float> results[2];
  for (Fp32Gemm gemm : {Fp32Gemm::kOpenblas, Fp32Gemm::kOnednn}) {
    const remat::cpu::ScopedFp32Gemm scope(gemm);
    std::fill(b.dx.begin(), b.dx.end(), 0.0f);
    std::fill(b.dw.begin(), b.dw.end(), 0.0f);
    run_pass(l, pass, b);
    results[static_cast<int>(gemm)] = output_of(pass, b);
  }
  double scale = 0, error = 0;
  for (size_t i = 0; i < results[0].size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(results[0][i])));
    error = std::max(error, static_cast<double>(std::abs(results[0][i] - results[1][i])));
  }
  return scale > 0 ? error / scale : error;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// Median seconds of each implementation over interleaved rounds.
std::vector<double> time_pass(const Layer& l, Pass pass, Buffers& b, int rounds) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds[2];
  for (int r = 0; r < rounds; ++r) {
    for (Fp32Gemm gemm : {Fp32Gemm::kOpenblas, Fp32Gemm::kOnednn}) {
      const remat::cpu::ScopedFp32Gemm scope(gemm);
      const auto start = Clock::now();
      run_pass(l, pass, b);
      seconds[static_cast<int>(gemm)].push_back(
          std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return {median(seconds[0]), median(seconds[1])};
}

// How many of `pass` one step of `l` runs.
int per_step(const Layer& l, Pass pass) {
  switch (pass) {
    case Pass::kY:
    case Pass::kDwFresh:
      return l.count;
    case Pass::kDxFresh:
      return l.dx_fresh;
    case Pass::kDxAccumulate:
      return l.count - l.dx_fresh;
    case Pass::kDwAccumulate:
      break;
  }
  return 0;
}

void run_model(const char* model, const std::vector<Layer>& layers, int rounds) {
  double step[2] = {0, 0}, step_flops = 0;
  for (const Layer& l : layers) {
    Buffers b(l);
    const double flops = 2.0 * static_cast<double>(l.rows * l.in * l.out);
    for (int p = 0; p < 5; ++p) {
      const auto pass = static_cast<Pass>(p);
      const double diff = relative_difference(l, pass, b);  // also the warm-up
      const std::vector<double> t = time_pass(l, pass, b, rounds);
      const int count = per_step(l, pass);
      for (int i = 0; i < 2; ++i) step[i] += count * t[i];
      step_flops += count * flops;
      std::printf("| %s | %s | %s | %.1f | %.1f | %.2f | %d |%s\n", model, l.name.c_str(),
                  kPassNames[p], flops / t[0] / 1e9, flops / t[1] / 1e9, t[0] / t[1], count,
                  diff > 1e-4 ? " RESULTS DIFFER" : "");
    }
  }
  std::printf(
      "| %s | one step's GEMM mix | | %.1f ms (%.1f GF/s) | %.1f ms (%.1f GF/s) | %.2f | |\n",
      model, step[0] * 1e3, step_flops / step[0] / 1e9, step[1] * 1e3, step_flops / step[1] / 1e9,
      step[0] / step[1]);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 21;
  remat::cpu::set_num_threads(threads);
  if (!remat::cpu::detail::onednn_f32_available()) {
    std::printf("oneDNN has only its reference f32 matmul here: nothing to compare\n");
    return 0;
  }
  std::printf("%d threads, %d interleaved rounds, median call; oneDNN %s\n\n", threads, rounds,
              remat::cpu::detail::onednn_f32_implementation(false, true, 512, 256, 256, 256, 256,
                                                            remat::cpu::CWrite::kOverwrite, 256)
                  .c_str());
  std::printf(
      "| model | linear | pass | OpenBLAS GF/s | oneDNN GF/s | oneDNN speed-up | per step "
      "|\n|---|---|---|---:|---:|---:|---:|\n");
  run_model("llama3 debug", llama3_debug(), rounds);
  run_model("llama4 debug", llama4_debug(), rounds);
  run_model("wide", wide(), rounds);
  return 0;
}
