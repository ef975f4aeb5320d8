// The SwiGLU gate's kernels (silu(a) * b and its backward) at the debug
// models' shapes, on the lanes this process runs: 16 where the CPU has
// AVX-512, 8 under REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell.
// bench/swiglu_lanes.py runs it both ways in interleaved rounds.
//
//   ninja -C build swiglu_rates && build/swiglu_rates [threads]
//
// Prints one line per kernel: the median of 15 timings of one call (after
// a warm-up call), in microseconds, over the same operands each time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"

namespace {

using remat::cpu::bf16;

double median_microseconds(const std::function<void()>& f) {
  using Clock = std::chrono::steady_clock;
  f();
  std::vector<double> times;
  for (int r = 0; r < 15; ++r) {
    const auto start = Clock::now();
    f();
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<float> normal(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<bf16> narrowed(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  remat::cpu::narrow_to_bf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

// One SwiGLU shape: rows x hidden elements.
void run(const char* name, int64_t n) {
  using namespace remat::cpu;
  const std::vector<float> a = normal(n, 1, 3.0f), b = normal(n, 2, 1.0f), g = normal(n, 3, 1.0f);
  const std::vector<bf16> a16 = narrowed(a), b16 = narrowed(b);
  std::vector<float> out(n), da(n), db(n);
  std::vector<bf16> out16(n);
  const ActIn x{a16.data(), true}, y{b16.data(), true};
  const double fp32_forward =
      median_microseconds([&] { silu_mul_forward(a.data(), b.data(), n, out.data()); });
  const double fp32_backward = median_microseconds(
      [&] { silu_mul_backward(g.data(), a.data(), b.data(), n, da.data(), db.data(), 3); });
  const double bf16_forward =
      median_microseconds([&] { silu_mul_forward_act(x, y, n, {out16.data(), true}); });
  const double bf16_backward = median_microseconds(
      [&] { silu_mul_backward_act(g.data(), x, y, n, da.data(), db.data(), 3); });
  std::printf("%s\t%lld\tfp32 forward\t%.1f\n", name, static_cast<long long>(n), fp32_forward);
  std::printf("%s\t%lld\tfp32 backward\t%.1f\n", name, static_cast<long long>(n), fp32_backward);
  std::printf("%s\t%lld\tbf16 forward\t%.1f\n", name, static_cast<long long>(n), bf16_forward);
  std::printf("%s\t%lld\tbf16 backward\t%.1f\n", name, static_cast<long long>(n), bf16_backward);
}

}  // namespace

int main(int argc, char** argv) {
  long threads = 2;
  if (argc > 1) {
    char* end = nullptr;
    threads = std::strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || threads < 1 || threads > 1024) {
      std::fprintf(stderr, "threads: expected an integer from 1 to 1024, got \"%s\"\n", argv[1]);
      return 2;
    }
  }
  remat::cpu::set_num_threads(static_cast<int>(threads));
  std::printf("# threads %ld, %s\n", threads,
              remat::cpu::isa_capped_at_avx2() ? "capped at AVX2" : "this CPU's widest kernels");
  run("llama3 debug FFN (2048 x 768)", 2048 * 768);
  run("llama4 debug expert (2048 x 512)", 2048 * 512);
  return 0;
}
