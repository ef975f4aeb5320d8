// Measured fp32 FMA throughput, the denominator of MFU on the CPU, and the
// bf16 dot-product throughput that bf16 MFU is stated against.
//
// The fp32 peak is that of the widest FMA the CPU runs (and the ISA cap
// allows): 8-wide AVX2 FMAs, and 16-wide AVX-512 ones where present. Which
// is faster depends on the core: Zen 4 splits a 512-bit FMA into two
// 256-bit halves (the same rate), Zen 5 and Intel server cores run it
// whole (twice the rate). Measuring only the 8-wide one made a GEMM library
// with AVX-512 kernels read above 100% MFU on Zen 5.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// Zen 3 and most AVX2 cores: 2 FMA pipes x latency 4 needs >= 8 independent
// chains; 12 covers latency 5-6 too and stays within 16 ymm registers.
constexpr int kChains = 12;
constexpr int64_t kInner = 4096;       // FMAs per chain between clock reads
constexpr double kFlopsPerFma = 16.0;  // 8 lanes x (mul + add)

volatile float g_seed = 0.999999f;
volatile float g_sink = 0.0f;

// Runs FMA chains for about `seconds`; returns the number of FMA
// instructions issued and adds a result to g_sink so nothing is elided.
int64_t fma_loop(double seconds) {
  const __m256 mul = _mm256_set1_ps(g_seed);
  const __m256 add = _mm256_set1_ps(1e-6f * g_seed);
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 0.01f);
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(seconds);
  int64_t rounds = 0;
  do {
    for (int64_t i = 0; i < kInner; ++i) {
      // Fully unrolled: kChains independent dependency chains.
      acc[0] = _mm256_fmadd_ps(acc[0], mul, add);
      acc[1] = _mm256_fmadd_ps(acc[1], mul, add);
      acc[2] = _mm256_fmadd_ps(acc[2], mul, add);
      acc[3] = _mm256_fmadd_ps(acc[3], mul, add);
      acc[4] = _mm256_fmadd_ps(acc[4], mul, add);
      acc[5] = _mm256_fmadd_ps(acc[5], mul, add);
      acc[6] = _mm256_fmadd_ps(acc[6], mul, add);
      acc[7] = _mm256_fmadd_ps(acc[7], mul, add);
      acc[8] = _mm256_fmadd_ps(acc[8], mul, add);
      acc[9] = _mm256_fmadd_ps(acc[9], mul, add);
      acc[10] = _mm256_fmadd_ps(acc[10], mul, add);
      acc[11] = _mm256_fmadd_ps(acc[11], mul, add);
    }
    ++rounds;
  } while (std::chrono::steady_clock::now() - start < budget);
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  g_sink = g_sink + detail::hsum(s);
  return rounds * kInner * kChains;
}

// The same chains on 16-wide vectors: FMAs (AVX-512F, 16 lanes x (mul +
// add)) or, with kBf16, vdpbf16ps (16 lanes x 2 products x (mul + add)).
// The target names both extensions; the FMA instantiation uses none of
// AVX512-BF16's instructions, so it runs on any AVX-512F CPU.
constexpr double kFlopsPerFma512 = 32.0;
constexpr double kFlopsPerDot = 64.0;

template <bool kBf16>
__attribute__((target("avx512f,avx512bf16"))) int64_t zmm_loop(double seconds) {
  const __m512 mul = _mm512_set1_ps(g_seed);
  const __m512 add = _mm512_set1_ps(1e-6f * g_seed);
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // the pair (1, 1)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // about 1e-7 each
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 0.01f);
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(seconds);
  int64_t rounds = 0;
  do {
    for (int64_t i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) {
        if constexpr (kBf16) {
          acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
        } else {
          acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
        }
      }
    }
    ++rounds;
  } while (std::chrono::steady_clock::now() - start < budget);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it (-Werror)
  _mm512_storeu_ps(lanes, s);
  for (float lane : lanes) g_sink = g_sink + lane;
  return rounds * kInner * kChains;
}

int64_t fma512_loop(double seconds) { return zmm_loop<false>(seconds); }
int64_t dot_bf16_loop(double seconds) { return zmm_loop<true>(seconds); }

bool fma512_allowed() { return !isa_capped_at_avx2() && __builtin_cpu_supports("avx512f"); }

// Instructions per second of `loop` over `threads` threads, times `flops`.
double measure(int threads, double seconds, int64_t (*loop)(double), double flops) {
  if (threads < 1) threads = 1;
  if (seconds <= 0.0) seconds = 0.01;
  // Short warm-up so the cores reach their sustained clock first.
  const double warmup = seconds * 0.1 < 0.02 ? seconds * 0.1 : 0.02;
  int64_t total = 0;
  double elapsed = 0.0;
#pragma omp parallel num_threads(threads)
  {
    loop(warmup);
#pragma omp barrier
#pragma omp single
    {
      elapsed = -std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                     .count();
    }  // implicit barrier: every thread starts after the clock is read
    const int64_t done = loop(seconds);
#pragma omp atomic
    total += done;
#pragma omp barrier
#pragma omp single
    {
      elapsed += std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                     .count();
    }
  }
  return elapsed > 0.0 ? static_cast<double>(total) * flops / elapsed : 0.0;
}

}  // namespace

double measure_peak_flops(int threads, double seconds) {
  const double avx2 = measure(threads, seconds, fma_loop, kFlopsPerFma);
  if (!fma512_allowed()) return avx2;
  return std::max(avx2, measure(threads, seconds, fma512_loop, kFlopsPerFma512));
}

double best_peak_flops(int threads, int runs, double seconds) {
  double best = 0.0;
  for (int r = 0; r < runs; ++r) best = std::max(best, measure_peak_flops(threads, seconds));
  return best;
}

double best_peak_flops_bf16(int threads, int runs, double seconds) {
  if (!cpu_has_avx512_bf16()) return 0.0;
  double best = 0.0;
  for (int r = 0; r < runs; ++r)
    best = std::max(best, measure(threads, seconds, dot_bf16_loop, kFlopsPerDot));
  return best;
}

}  // namespace remat::cpu
