// GEMM rates at the wide model's shapes: the engine's fp32 linear layers
// (OpenBLAS sgemm in fixed row chunks) against the ones it runs in bf16 on
// the implementation this process chose (REMAT_BF16_KERNEL=onednn|native|
// fallback forces one): linear_bf16_* on bf16 operands, or the fallback's
// linear_act_* on bf16 activations with fp32 weights and dy. Rows = batch 4
// x seq 1024; dim 1024, FFN hidden 2816.
//
//   ninja -C build gemm_rates && build/gemm_rates [threads [rows dim hidden]]
//   REMAT_BF16_KERNEL=fallback build/gemm_rates [threads]
//   REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell build/gemm_rates [threads]  (an AVX2 CPU)
//
// Prints GFLOP/s per shape and pass (forward y, backward dx, backward dw),
// best of 3 timings, and the FLOP-weighted rate over one block's matmuls.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"

namespace {

using remat::cpu::bf16;

struct Shape {
  const char* name;
  int64_t k, n, count;  // count: how many of this matmul one block runs
};

// Best seconds per call of `f` over 3 timings of enough calls for ~0.3 s.
double seconds_per_call(const std::function<void()>& f) {
  using Clock = std::chrono::steady_clock;
  f();  // warm-up: caches, page faults, thread pool
  const auto t0 = Clock::now();
  f();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const int calls = std::max(1, static_cast<int>(0.3 / std::max(once, 1e-6)));
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto start = Clock::now();
    for (int c = 0; c < calls; ++c) f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  return best;
}

template <typename T>
std::vector<T> filled(int64_t n, uint32_t seed, T (*cast)(float)) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = cast(dist(gen));
  return v;
}

float identity(float x) { return x; }

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  remat::cpu::set_num_threads(threads);
  // Optional rows, dim and FFN hidden: `build/gemm_rates 2 2048 256 768` is
  // the debug model's block at batch 8 x seq 256.
  const int64_t m = argc > 2 ? std::atoll(argv[2]) : 4 * 1024;
  const int64_t dim = argc > 3 ? std::atoll(argv[3]) : 1024;
  const int64_t hidden = argc > 4 ? std::atoll(argv[4]) : 2816;
  const std::string attn = "wq/wk/wv/wo " + std::to_string(dim) + "x" + std::to_string(dim),
                    up = "w1/w3 " + std::to_string(dim) + "->" + std::to_string(hidden),
                    down = "w2 " + std::to_string(hidden) + "->" + std::to_string(dim);
  const Shape shapes[] = {
      {attn.c_str(), dim, dim, 4}, {up.c_str(), dim, hidden, 2}, {down.c_str(), hidden, dim, 1}};
  std::printf("rows %lld, %d threads, bf16 matmuls on %s\n", static_cast<long long>(m), threads,
              remat::cpu::to_string(remat::cpu::bf16_gemm()));
  std::printf("%-24s %-8s %12s %12s %7s\n", "shape", "pass", "fp32 GF/s", "bf16 GF/s", "ratio");
  double flops_total = 0, fp32_total = 0, bf16_total = 0;
  for (const Shape& s : shapes) {
    const auto x32 = filled<float>(m * s.k, 1, identity),
               w32 = filled<float>(s.n * s.k, 2, identity);
    const auto dy32 = filled<float>(m * s.n, 3, identity);
    const auto x16 = filled<bf16>(m * s.k, 1, remat::cpu::to_bf16);
    const auto w16 = filled<bf16>(s.n * s.k, 2, remat::cpu::to_bf16);
    const auto dy16 = filled<bf16>(m * s.n, 3, remat::cpu::to_bf16);
    std::vector<float> y(m * s.n), dx(m * s.k), dw(s.n * s.k);
    std::vector<bf16> y16(m * s.n);
    const bool native = remat::cpu::bf16_operands(remat::cpu::bf16_gemm());
    const remat::cpu::ActIn x_act{x16.data(), true};
    const struct {
      const char* pass;
      std::function<void()> fp32, bf16;
    } passes[] = {
        {"y", [&] { remat::cpu::linear_forward(x32.data(), w32.data(), m, s.k, s.n, y.data()); },
         [&] {
           if (native) {
             remat::cpu::linear_bf16_forward(x16.data(), w16.data(), false, m, s.k, s.n, y16.data(),
                                             true);
           } else {
             remat::cpu::linear_act_forward(x_act, w32.data(), false, m, s.k, s.n,
                                            {y16.data(), true});
           }
         }},
        {"dx",
         [&] {
           remat::cpu::linear_backward(dy32.data(), x32.data(), w32.data(), m, s.k, s.n, dx.data(),
                                       nullptr);
         },
         [&] {
           if (native) {
             remat::cpu::linear_bf16_backward(dy16.data(), x16.data(), w16.data(), false, m, s.k,
                                              s.n, dx.data(), nullptr);
           } else {
             remat::cpu::linear_act_backward(dy32.data(), x_act, w32.data(), false, m, s.k, s.n,
                                             dx.data(), nullptr, 0);
           }
         }},
        {"dw",
         [&] {
           remat::cpu::linear_backward(dy32.data(), x32.data(), w32.data(), m, s.k, s.n, nullptr,
                                       dw.data());
         },
         [&] {
           if (native) {
             remat::cpu::linear_bf16_backward(dy16.data(), x16.data(), w16.data(), false, m, s.k,
                                              s.n, nullptr, dw.data());
           } else {
             remat::cpu::linear_act_backward(dy32.data(), x_act, w32.data(), false, m, s.k, s.n,
                                             nullptr, dw.data(), 0);
           }
         }},
    };
    const double flops = 2.0 * static_cast<double>(m * s.k * s.n);
    for (const auto& p : passes) {
      const double t32 = seconds_per_call(p.fp32), t16 = seconds_per_call(p.bf16);
      std::printf("%-24s %-8s %12.1f %12.1f %6.2fx\n", s.name, p.pass, flops / t32 / 1e9,
                  flops / t16 / 1e9, t32 / t16);
      flops_total += flops * s.count;
      fp32_total += t32 * s.count;
      bf16_total += t16 * s.count;
    }
  }
  std::printf("%-33s %12.1f %12.1f %6.2fx\n", "one block's matmuls (fwd+bwd)",
              flops_total / fp32_total / 1e9, flops_total / bf16_total / 1e9,
              fp32_total / bf16_total);
  std::printf("peak: fp32 FMA %.1f GF/s, bf16 dot %.1f GF/s\n",
              remat::cpu::best_peak_flops(threads) / 1e9,
              remat::cpu::best_peak_flops_bf16(threads) / 1e9);
  return 0;
}
