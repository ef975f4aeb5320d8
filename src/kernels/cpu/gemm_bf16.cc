// gemm_bf16 (bf16.h): the native AVX512-BF16 kernel, the fp32 fallback and
// the choice among them and oneDNN's matmul (gemm_onednn.h).
//
// The native kernel follows the usual packed-GEMM shape: op(A) is packed in
// blocks of kKc k-values into tiles of kMr rows, op(B) (once per call, shared
// by all row chunks) into panels of kNr columns; both hold bf16 pairs
// (k, k+1) as one 32-bit word, the layout vdpbf16ps reads. A 12 x 32 register tile of fp32
// accumulators (24 zmm) takes one broadcast A pair and two B vectors per k pair. Each output
// element sums its k-blocks in order, each block's pairs in order: the
// result depends only on the shape.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

constexpr int64_t kMr = 12;   // rows of the register tile
constexpr int64_t kNr = 32;   // columns of the register tile (two zmm)
constexpr int64_t kKc = 256;  // k values per packed block: a B panel is 16 KiB (L1)

inline uint32_t pair(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// x[0] and x[1] as one pair: two adjacent bf16 are already one (little-endian).
inline uint32_t adjacent_pair(const bf16* x) {
  uint32_t word;
  std::memcpy(&word, x, sizeof word);
  return word;
}

// Rows [0, m) of op(A), k-values [p0, p0 + kc), as tiles of kMr rows:
// word (tile t, pair q, row r) at (t * pairs + q) * kMr + r; zero padded.
// Reads run along A's stored rows: along k for A, along m for A^T (the
// weight gradient's dy^T, where walking k would stride a whole row).
void pack_a(const bf16* a, int64_t lda, bool trans, int64_t m, int64_t p0, int64_t kc,
            uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2, whole = kc / 2;  // whole: pairs with both values
  for (int64_t t = 0; t * kMr < m; ++t) {
    uint32_t* tile = out + t * pairs * kMr;
    const int64_t rows = std::min(kMr, m - t * kMr);
    if (rows < kMr) std::memset(tile, 0, sizeof(uint32_t) * pairs * kMr);
    if (trans) {
      for (int64_t q = 0; q < whole; ++q) {
        const bf16* lo = a + (p0 + 2 * q) * lda + t * kMr;
        for (int64_t r = 0; r < rows; ++r) tile[q * kMr + r] = pair(lo[r], lo[lda + r]);
      }
      if (whole < pairs) {
        const bf16* lo = a + (p0 + 2 * whole) * lda + t * kMr;
        for (int64_t r = 0; r < rows; ++r) tile[whole * kMr + r] = pair(lo[r], 0);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const bf16* row = a + (t * kMr + r) * lda + p0;
        for (int64_t q = 0; q < whole; ++q) tile[q * kMr + r] = adjacent_pair(row + 2 * q);
        if (whole < pairs) tile[whole * kMr + r] = pair(row[2 * whole], 0);
      }
    }
  }
}

// Columns [j0, j0 + cols) of op(B), k-values [p0, p0 + kc), as one panel:
// word (pair q, column c) at q * kNr + c; zero padded to kNr columns. Reads
// run along B's stored rows, as in pack_a.
void pack_b(const bf16* b, int64_t ldb, bool trans, int64_t j0, int64_t cols, int64_t p0,
            int64_t kc, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2, whole = kc / 2;
  if (cols < kNr) std::memset(out, 0, sizeof(uint32_t) * pairs * kNr);
  if (trans) {  // op(B)[i, j] = b[j, i]: a column of op(B) is a stored row
    for (int64_t c = 0; c < cols; ++c) {
      const bf16* col = b + (j0 + c) * ldb + p0;
      for (int64_t q = 0; q < whole; ++q) out[q * kNr + c] = adjacent_pair(col + 2 * q);
      if (whole < pairs) out[whole * kNr + c] = pair(col[2 * whole], 0);
    }
    return;
  }
  for (int64_t q = 0; q < pairs; ++q) {
    const bf16* lo = b + (p0 + 2 * q) * ldb + j0;
    uint32_t* words = out + q * kNr;
    if (q < whole) {
      for (int64_t c = 0; c < cols; ++c) words[c] = pair(lo[c], lo[ldb + c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) words[c] = pair(lo[c], 0);
    }
  }
}

// C tile [rows, cols] (+)= A tile @ B panel over `pairs` k pairs.
__attribute__((target("avx512f,avx512bf16"))) void micro_tile(const uint32_t* ap,
                                                              const uint32_t* bp, int64_t pairs,
                                                              float* c, int64_t ldc, int64_t rows,
                                                              int64_t cols, CWrite write) {
  // C's rows are far apart (ldc) and cold: fetched (for writing) now, they
  // arrive while the k loop runs instead of stalling the stores after it.
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = c + r * ldc;
    __builtin_prefetch(row, 1, 3);
    __builtin_prefetch(row + 16, 1, 3);
    __builtin_prefetch(row + kNr - 1, 1, 3);  // a third line where the row is unaligned
  }
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * kNr + 16);
    const uint32_t* a = ap + q * kMr;
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  if (cols == kNr) {
    // Whole rows: plain loads and stores (masked ones are slower on some CPUs).
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      if (r >= rows) break;
      float* row = c + r * ldc;
      __m512 lo = acc[r][0], hi = acc[r][1];
      if (write == CWrite::kAccumulate) {
        lo = _mm512_add_ps(_mm512_loadu_ps(row), lo);
        hi = _mm512_add_ps(_mm512_loadu_ps(row + 16), hi);
      } else if (write == CWrite::kFresh) {
        lo = _mm512_add_ps(_mm512_setzero_ps(), lo);
        hi = _mm512_add_ps(_mm512_setzero_ps(), hi);
      }
      _mm512_storeu_ps(row, lo);
      _mm512_storeu_ps(row + 16, hi);
    }
    return;
  }
  const auto mask = [](int64_t n) -> __mmask16 {
    return n >= 16 ? 0xffff : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
  };
  const __mmask16 m0 = mask(cols), m1 = mask(cols - 16);
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) break;
    float* row = c + r * ldc;
    __m512 lo = acc[r][0], hi = acc[r][1];
    if (write == CWrite::kAccumulate) {
      lo = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), lo);
      hi = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), hi);
    } else if (write == CWrite::kFresh) {
      lo = _mm512_add_ps(_mm512_setzero_ps(), lo);
      hi = _mm512_add_ps(_mm512_setzero_ps(), hi);
    }
    _mm512_mask_storeu_ps(row, m0, lo);
    _mm512_mask_storeu_ps(row + 16, m1, hi);
  }
}

void zero_c(int64_t m, int64_t n, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, sizeof(float) * n);
}

constexpr int64_t kPanelWords = kKc / 2 * kNr;  // one packed B panel, padded to a full block

int64_t panels_of(int64_t n) { return (n + kNr - 1) / kNr; }

// All of op(B), k-block by k-block, each block's panels in column order.
void pack_b_all(const bf16* b, int64_t ldb, bool trans, int64_t k, int64_t n,
                std::vector<uint32_t>& out) {
  const int64_t blocks = (k + kKc - 1) / kKc, panels = panels_of(n);
  out.resize(static_cast<size_t>(blocks * panels * kPanelWords));
#pragma omp parallel for schedule(static) if (k * n >= detail::kParallelMin)
  for (int64_t i = 0; i < blocks * panels; ++i) {
    const int64_t p0 = i / panels * kKc, j0 = i % panels * kNr;
    pack_b(b, ldb, trans, j0, std::min(kNr, n - j0), p0, std::min(kKc, k - p0),
           out.data() + i * kPanelWords);
  }
}

void gemm_native(bool ta, int64_t m, const bf16* a, int64_t lda, const PreparedB& b, CWrite write,
                 float* c, int64_t ldc) {
  thread_local std::vector<uint32_t> a_pack;
  const int64_t tiles = (m + kMr - 1) / kMr, panels = panels_of(b.n);
  for (int64_t p0 = 0; p0 < b.k; p0 += kKc) {
    const int64_t kc = std::min(kKc, b.k - p0);
    const int64_t pairs = (kc + 1) / 2;
    pack_a(a, lda, ta, m, p0, kc, detail::grown(a_pack, tiles * pairs * kMr));
    const CWrite block_write = p0 > 0 ? CWrite::kAccumulate : write;
    const uint32_t* block = b.packed.data() + p0 / kKc * panels * kPanelWords;
    for (int64_t jp = 0; jp < panels; ++jp) {
      const int64_t j0 = jp * kNr;
      for (int64_t t = 0; t < tiles; ++t) {
        micro_tile(a_pack.data() + t * pairs * kMr, block + jp * kPanelWords, pairs,
                   c + t * kMr * ldc + j0, ldc, std::min(kMr, m - t * kMr), std::min(kNr, b.n - j0),
                   block_write);
      }
    }
  }
}

// X (rows x cols as stored) widened to fp32; `parallel` only where no team
// is running already (never inside a row chunk: a nested team spins).
void widen_matrix(const bf16* x, int64_t ld, int64_t rows, int64_t cols, std::vector<float>& out,
                  bool parallel) {
  out.resize(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (parallel && rows * cols >= detail::kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const bf16* src = x + i * ld;
    float* dst = out.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) dst[j] = from_bf16(src[j]);
  }
}

void gemm_fallback(bool ta, int64_t m, const bf16* a, int64_t lda, const PreparedB& b, CWrite write,
                   float* c, int64_t ldc) {
  thread_local std::vector<float> a32;
  const int64_t k = b.k, n = b.n;
  widen_matrix(a, lda, ta ? k : m, ta ? m : k, a32, false);  // A is stored [m, k] or [k, m]
  gemm_fp32(ta, b.trans, m, n, k, a32.data(), ta ? m : k, b.wide.data(), b.trans ? k : n, write, c,
            ldc);
}

Bf16Gemm choose_gemm() {
  if (const std::optional<Bf16Gemm> forced = forced_bf16_gemm()) return *forced;
  const bool dots = cpu_has_avx512_bf16();
  return default_bf16_gemm(dots, dots && detail::onednn_bf16_available(),
                           dots ? bf16_dot_speed() : 0.0);
}

}  // namespace

Bf16Gemm default_bf16_gemm(bool has_avx512_bf16, bool onednn_bf16, double dot_speed) {
  // bf16 operands pay only where a bf16 dot product (two products a lane)
  // outruns an fp32 FMA: it does 2x on Zen 4 and Zen 5; on an Intel Xeon
  // (family 6 model 207, AMX not exposed) it ran at 0.45x, and the wide
  // model trained at 0.59x fp32's tokens/s on either bf16 GEMM against
  // 0.98x on the fallback (bench/bf16_speed.py).
  if (!has_avx512_bf16 || dot_speed < kMinBf16DotSpeed) return Bf16Gemm::kFallback;
  // oneDNN's matmul is the faster of the two bf16 GEMMs at every shape measured
  // (bench/bf16_gemm_libraries.cc), in remat's row chunks too.
  return onednn_bf16 ? Bf16Gemm::kOnednn : Bf16Gemm::kNative;
}

double bf16_dot_speed() {
  static const double speed = [] {
    if (!cpu_has_avx512_bf16()) return 0.0;
    const double fma = best_peak_flops(1, kBf16DotSpeedRuns);
    return fma > 0.0 ? best_peak_flops_bf16(1, kBf16DotSpeedRuns) / fma : 0.0;
  }();
  return speed;
}

std::optional<Bf16Gemm> forced_bf16_gemm() {
  const char* forced = std::getenv("REMAT_BF16_KERNEL");
  const std::string choice = forced == nullptr ? "" : forced;
  if (choice.empty()) return std::nullopt;
  if (choice == "fallback") return Bf16Gemm::kFallback;
  if (choice == "native" || choice == "onednn") {
    if (!cpu_has_avx512_bf16()) {
      throw InputError("REMAT_BF16_KERNEL=" + choice +
                       ", but this CPU has no avx512_bf16 (or REMAT_MAX_ISA=avx2 hides it): unset "
                       "it or use fallback");
    }
    if (choice == "native") return Bf16Gemm::kNative;
    if (!detail::onednn_bf16_available()) {
      throw InputError(
          "REMAT_BF16_KERNEL=onednn, but oneDNN offers no bf16 matmul beyond its reference one "
          "here: unset it or use native or fallback");
    }
    return Bf16Gemm::kOnednn;
  }
  throw InputError("REMAT_BF16_KERNEL=\"" + choice +
                   "\": expected onednn, native, fallback or unset");
}

bool bf16_gemm_chosen_by_speed() { return !forced_bf16_gemm() && cpu_has_avx512_bf16(); }

bool cpu_has_avx512_bf16() {
  return !isa_capped_at_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bf16");
}

Bf16Gemm bf16_gemm() {
  static const Bf16Gemm gemm = choose_gemm();
  return gemm;
}

const char* to_string(Bf16Gemm gemm) {
  switch (gemm) {
    case Bf16Gemm::kOnednn:
      return "oneDNN avx512_bf16";
    case Bf16Gemm::kNative:
      return "avx512_bf16";
    case Bf16Gemm::kFallback:
      break;
  }
  return "fp32 fallback";
}

void prepare_b(Bf16Gemm gemm, bool trans_b, int64_t k, int64_t n, const bf16* b, int64_t ldb,
               PreparedB& out) {
  out.gemm = gemm;
  out.trans = trans_b;
  out.k = k;
  out.n = n;
  if (gemm == Bf16Gemm::kOnednn) {
    out.source = b;  // oneDNN reads B where it is
    out.ld = ldb;
  } else if (gemm == Bf16Gemm::kNative) {
    pack_b_all(b, ldb, trans_b, k, n, out.packed);
  } else {
    widen_matrix(b, ldb, trans_b ? n : k, trans_b ? k : n, out.wide, true);  // [k, n] or [n, k]
  }
}

void gemm_bf16_prepared(bool trans_a, int64_t m, const bf16* a, int64_t lda, const PreparedB& b,
                        CWrite write, float* c, int64_t ldc) {
  if (m <= 0 || b.n <= 0) return;
  if (b.k <= 0) {
    if (write != CWrite::kAccumulate) zero_c(m, b.n, c, ldc);
    return;
  }
  if (b.gemm == Bf16Gemm::kOnednn) {
    detail::gemm_onednn(trans_a, b.trans, m, b.n, b.k, a, lda, b.source, b.ld, write, c, ldc);
  } else if (b.gemm == Bf16Gemm::kNative) {
    gemm_native(trans_a, m, a, lda, b, write, c, ldc);
  } else {
    gemm_fallback(trans_a, m, a, lda, b, write, c, ldc);
  }
}

void gemm_bf16_with(Bf16Gemm gemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) {
  thread_local PreparedB prepared;
  prepare_b(gemm, trans_b, k, n, b, ldb, prepared);
  gemm_bf16_prepared(trans_a, m, a, lda, prepared,
                     beta == 0.0f ? CWrite::kOverwrite : CWrite::kAccumulate, c, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a,
               int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_bf16_with(bf16_gemm(), trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void narrow_to_bf16(const float* x, int64_t n, bf16* out) {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(x[i]);
}

void widen_from_bf16(const bf16* x, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = from_bf16(x[i]);
}

}  // namespace remat::cpu
