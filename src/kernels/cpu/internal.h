// Private helpers shared by the CPU kernels: thread count, a per-thread
// scratch arena for fixed-size tiles, and AVX2 building blocks whose
// reduction order is fixed (so results never depend on the compiler's
// choices, and no -ffast-math is needed to vectorize).
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu::detail {

// Below this many elements an elementwise kernel runs on the calling thread:
// forking a team costs more than the work.
constexpr int64_t kParallelMin = 1 << 15;

// Per-thread scratch of at least `floats` floats, 64-byte aligned. Contents
// are unspecified. The buffer is reused by later calls on the same thread,
// so a kernel must be done with it before it returns. Only for tile-sized
// scratch that does not grow with the problem (sequence length, rows).
float* thread_scratch(size_t floats);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// At least n elements of a reused (per-thread) scratch vector. It only
// grows: std::vector::resize down and up again would zero the difference on
// every call, a memset per kernel call of bytes nobody reads.
template <typename T>
T* grown(std::vector<T>& buffer, int64_t n) {
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// Rows per chunk: a function of the problem's row count only, never of the
// thread count. OpenBLAS's sgemm rounds a row differently depending on the
// row block it falls in (edge tiles of the NN layout take another path), so
// slicing rows by thread count made results depend on the thread count
// (issue 9, finding 14). Fixed chunks, shared out among threads, make every
// row's arithmetic the same whichever thread runs it and however many there
// are. About `target_chunks` chunks of at least 128 rows, a multiple of 16.
// Every chunk repacks the GEMM's other operand (the weight), so a dense GEMM
// takes 4: balanced on 1, 2 or 4 threads, and half the weight packing of 8
// (about a tenth of sgemm's time at 256-row chunks of the debug models).
//
// Under DataDependentShapes (gemm_onednn.h: an MoE expert's rows, a new
// count every step) chunks are always 128 rows, so what a chunk sizes (its
// scratch, oneDNN's packing buffers) never grows with the data: a quarter
// of a new largest expert grew a chunk's scratch, and its fresh pages
// faulted in, steps after warm-up. Up to 512 rows that is the same cut.
bool data_dependent_shapes();
inline int64_t chunk_rows(int64_t total, int64_t target_chunks = 4) {
  constexpr int64_t kMinRows = 128, kAlign = 16;
  if (data_dependent_shapes()) return kMinRows;
  const int64_t rows = (total + target_chunks - 1) / target_chunks;
  return std::max(kMinRows, (rows + kAlign - 1) / kAlign * kAlign);
}

// Fixed chunks of `total` rows (chunk_rows), shared out among the threads
// as contiguous runs of whole chunks: body(begin, end, chunk) is called once
// per thread on rows [begin, end), which it cuts every `chunk` rows. A body
// that prepares something all its chunks read does it once per run. Small
// problems run as one run on one thread. Each chunk is the same rows
// whichever thread runs it.
template <typename Body>
void split_chunk_runs(int64_t total, int64_t work_per_row, Body body) {
  const int64_t rows = chunk_rows(total);
  const int64_t chunks = (total + rows - 1) / rows;
  const int threads = num_threads();
  const bool parallel = threads > 1 && chunks > 1 && total * work_per_row >= (1 << 18);
  const int64_t runs = parallel ? std::min<int64_t>(threads, chunks) : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t t = 0; t < runs; ++t) {
    const int64_t c0 = chunks * t / runs, c1 = chunks * (t + 1) / runs;
    body(c0 * rows, std::min(total, c1 * rows), rows);
  }
}

// Whether run_items_stealing steals: REMAT_WORK_STEALING unset or 1; 0 keeps
// each thread to its own run (the schedule before stealing, for benchmarks);
// InputError for another value (checked with the other kernel variables).
bool work_stealing();

// Runs body(i) once for every item i < n on the threads (one thread unless
// `parallel`): thread t owns the contiguous run of items n * t / T ..
// n * (t + 1) / T - 1 and takes them front to back; a thread done with its
// run takes items from the back of the others' runs. So a core slowed by
// another process on the host no longer holds the others at the end, while
// each thread keeps to its own items (their rows) until then. Which thread
// runs an item depends on timing: items must be independent, each writing
// only its own outputs, for results not to depend on it.
template <typename Body>
void run_items_stealing(int64_t n, bool parallel, Body body) {
  const int threads = parallel && n > 1 ? num_threads() : 1;
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  // Static runs where stealing is off (REMAT_WORK_STEALING=0, for side-by-side
  // benchmarks), or past the 32-bit halves below.
  if (!work_stealing() || n >= (int64_t{1} << 32)) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  // Each run's remaining items, front (low 32 bits) and end (high 32),
  // claimed by compare-and-swap: the owner at the front, a thief at the end.
  struct alignas(64) Run {
    std::atomic<uint64_t> range;
  };
  std::vector<Run> runs(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const auto begin = static_cast<uint64_t>(n * t / threads);
    const auto end = static_cast<uint64_t>(n * (t + 1) / threads);
    runs[static_cast<size_t>(t)].range.store(begin | (end << 32), std::memory_order_relaxed);
  }
  const auto claim = [&](Run& run, bool from_front, int64_t& item) {
    uint64_t range = run.range.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = range & 0xffffffffu, end = range >> 32;
      if (front >= end) return false;
      const uint64_t next = from_front ? (front + 1) | (end << 32) : front | ((end - 1) << 32);
      if (run.range.compare_exchange_weak(range, next, std::memory_order_relaxed)) {
        item = static_cast<int64_t>(from_front ? front : end - 1);
        return true;
      }
    }
  };
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    int64_t item;
    while (claim(runs[static_cast<size_t>(t)], true, item)) body(item);
    // Every run but its own, the runs of threads the team did not get included.
    for (int k = 1; k < threads; ++k)
      while (claim(runs[static_cast<size_t>((t + k) % threads)], false, item)) body(item);
  }
}

// Runs body(begin, end) on each fixed chunk of `total` rows, chunks shared
// out as split_chunk_runs shares them, in contiguous runs, but a thread done
// with its run takes chunks from the end of the other's (run_items_stealing):
// a chunk is the same rows, the same arithmetic, whichever thread runs it.
template <typename Body>
void split_rows(int64_t total, int64_t work_per_row, Body body) {
  const int64_t rows = chunk_rows(total);
  const int64_t chunks = (total + rows - 1) / rows;
  const bool parallel = num_threads() > 1 && chunks > 1 && total * work_per_row >= (1 << 18);
  run_items_stealing(chunks, parallel,
                     [&](int64_t c) { body(c * rows, std::min(total, (c + 1) * rows)); });
}

// Whether the kernels with an AVX-512 instantiation may run it: the CPU has
// AVX-512F, BW and VL (every AVX-512 CPU since Skylake-X; the SwiGLU gate's
// masked bf16 tails need BW and VL) and REMAT_MAX_ISA does not cap it (isa.cc).
bool avx512_kernels();

// The AVX-512 instantiation of the attention kernels (attention_avx512.cc),
// for attention.cc to call when avx512_kernels() holds. Declared here,
// outside that file's AVX-512 target region.
void attention_forward_avx512(const float* q, const float* k, const float* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, float* out, float* lse);
void attention_backward_avx512(const float* dout, const float* q, const float* k, const float* v,
                               const float* lse, const float* delta, int64_t batch, int64_t seq,
                               int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq,
                               float* dk, float* dv, uint32_t fresh);
// The same on bf16 q, k, v and out (bf16.h): widened as they are packed,
// out rounded once.
void attention_forward_avx512(const bf16* q, const bf16* k, const bf16* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, bf16* out, float* lse);
void attention_backward_avx512(const float* dout, const bf16* q, const bf16* k, const bf16* v,
                               const float* lse, const float* delta, int64_t batch, int64_t seq,
                               int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq,
                               float* dk, float* dv, uint32_t fresh);

// The 16-lane instantiations of the SwiGLU gate (swiglu_avx512.cc), for
// elementwise.cc to call where avx512_kernels() holds. fp32 and all-bf16
// operands, the two the engine runs (mixed ones stay on 8 lanes); the bits
// of the 8-lane kernels (swiglu_impl.h).
void silu_mul_forward_avx512(const float* a, const float* b, int64_t n, float* out);
void silu_mul_forward_avx512(const bf16* a, const bf16* b, int64_t n, bf16* out);
void silu_mul_backward_avx512(const float* dout, const float* a, const float* b, int64_t n,
                              float* da, float* db, uint32_t fresh);
void silu_mul_backward_avx512(const float* dout, const bf16* a, const bf16* b, int64_t n, float* da,
                              float* db, uint32_t fresh);

// Horizontal sum of 8 lanes in a fixed order.
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                  // 4 lanes
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));         // 2 lanes
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));  // 1 lane
  return _mm_cvtss_f32(s);
}

inline double hsum_pd(__m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v);
  __m128d hi = _mm256_extractf128_pd(v, 1);
  __m128d s = _mm_add_pd(lo, hi);
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

inline float hmax(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_max_ps(lo, hi);
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 0x55));
  return _mm_cvtss_f32(s);
}

// expf on 8 lanes (Cephes polynomial, ~1 ulp on the normal range). Inputs
// below about -87.7 (including -inf) give 0, inputs above 88 give exp(88);
// NaN propagates.
inline __m256 exp256(__m256 x) {
  // Clamped so that round(x * log2(e)) stays in [-127, 127]: the top gives
  // exp(88) (finite), the bottom gives exponent bits 0, i.e. exactly 0.
  const __m256 hi = _mm256_set1_ps(88.0f);
  const __m256 lo = _mm256_set1_ps(-88.0f);
  // max/min return their second operand when either is NaN: keep x second.
  x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, z, x);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  // 2^fx; fx = -127 gives exponent bits 0, i.e. 0.0.
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127));
  e = _mm256_slli_epi32(e, 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// 2^x on 8 lanes (Cephes exp2f polynomial, ~1 ulp). Inputs below about
// -126.5 (including -inf) give 0, inputs above 127 give 2^127; NaN propagates.
inline __m256 exp2_256(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), x));
  const __m256 fx = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_sub_ps(x, fx);  // exact, in [-0.5, 0.5]
  __m256 y = _mm256_set1_ps(1.535336188319500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.339887440266574e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(9.618437357674640e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.550332471162809e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(2.402264791363012e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(6.931472028550421e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.0f));
  // 2^fx; fx = -127 gives exponent bits 0, i.e. 0.0.
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127));
  e = _mm256_slli_epi32(e, 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline float exp2_scalar(float x) { return _mm256_cvtss_f32(exp2_256(_mm256_set1_ps(x))); }

// Scalar version with the same arithmetic as one lane of exp256.
inline float exp_scalar(float x) { return _mm256_cvtss_f32(exp256(_mm256_set1_ps(x))); }

// Dot product of n floats: 8-lane partial sums, then a fixed horizontal order,
// then the scalar tail.
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace remat::cpu::detail
