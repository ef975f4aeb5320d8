// bf16 mixed precision on the CPU: conversions and the matmuls that take
// bf16 operands and accumulate in fp32.
//
// Numerics (the same on every machine):
//  - fp32 -> bf16 rounds to nearest, ties to even, in software (NaN stays a
//    quiet NaN); the AVX512-BF16 conversion instruction is not used because
//    it flushes denormals, which would make the two paths below disagree on
//    what a stored activation is;
//  - bf16 -> fp32 is exact.
//
// Matmuls: one function, gemm_bf16, behind which the implementation is
// chosen once per process:
//  - onednn: oneDNN's bf16 matmul (AVX512-BF16 dot products), measured the
//    fastest (bench/bf16_gemm_libraries.cc), run single-threaded per call;
//  - native: AVX512-BF16 dot products (vdpbf16ps: two bf16 products added
//    into an fp32 lane), a packed register-blocked kernel of our own;
//  - fallback: the operands widened to fp32 (exactly) and the fp32 GEMM
//    (gemm_fp32.h: OpenBLAS sgemm or oneDNN's f32 matmul).
// REMAT_BF16_KERNEL=onednn|native|fallback forces one (onednn or native on
// a CPU without avx512_bf16 is an error); otherwise onednn where the CPU has
// avx512_bf16 and oneDNN a bf16 matmul for it, else native where the CPU has
// avx512_bf16, else fallback. The engine's linear layers run onednn and
// native on bf16 weights and dy (linear_bf16_*), the fallback on fp32 ones
// (linear_act_*, below). Each is deterministic: each output element is
// summed over k in a fixed order that depends only on the shape, never on
// the thread count. The paths round differently from each other (their own
// k orders; vdpbf16ps flushes denormals), so bit-identity holds per path.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/cpu/gemm_write.h"

namespace remat::cpu {

using bf16 = uint16_t;  // the upper half of an IEEE fp32

inline float from_bf16(bf16 h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16 to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>((nan ? (u | 0x00400000u) : rounded) >> 16);
}

// Eight of them at once (AVX2), with the same results lane by lane.
inline __m256 load_bf16x8(const bf16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline void store_bf16x8(bf16* p, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i bits = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
  // packus works within 128-bit halves: qwords 0 and 2 hold lanes 0-3, 4-7.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

void narrow_to_bf16(const float* x, int64_t n, bf16* out);
void widen_from_bf16(const bf16* x, int64_t n, float* out);

enum class Bf16Gemm { kOnednn, kNative, kFallback };
// Whether `gemm` takes bf16 operands (onednn, native) rather than fp32 ones.
inline bool bf16_operands(Bf16Gemm gemm) { return gemm != Bf16Gemm::kFallback; }
// The implementation gemm_bf16 uses in this process (see above); throws
// InputError for a REMAT_BF16_KERNEL it cannot honour.
Bf16Gemm bf16_gemm();
// REMAT_BF16_KERNEL's choice, or none where it is unset or empty; the same
// InputError as bf16_gemm. Checks the variable without bf16_gemm's timing of
// the CPU, which only a bf16 run needs.
std::optional<Bf16Gemm> forced_bf16_gemm();
const char* to_string(Bf16Gemm gemm);
// Whether this CPU has the avx512_bf16 instructions the native path needs
// (false under REMAT_MAX_ISA=avx2, kernels.h).
bool cpu_has_avx512_bf16();

// The choice bf16_gemm makes unforced: the fallback without avx512_bf16 or
// where a bf16 dot product does not outrun an fp32 FMA (`dot_speed`, the
// ratio of their measured FLOP rates, below kMinBf16DotSpeed), else oneDNN
// where it has a bf16 matmul (`onednn_bf16`), else the native kernel.
constexpr double kMinBf16DotSpeed = 1.0;
Bf16Gemm default_bf16_gemm(bool has_avx512_bf16, bool onednn_bf16, double dot_speed);
// This CPU's bf16 dot-product FLOP rate over its fp32 FMA rate, on one core,
// each the best of kBf16DotSpeedRuns runs of 1 ms (about 70 ms, measured once
// per process); 0 without avx512_bf16. The ratios seen, 2 and 0.45, are far
// from 1, so one machine makes the same choice at every start-up.
constexpr int kBf16DotSpeedRuns = 20;
double bf16_dot_speed();
// Whether bf16_gemm chose by bf16_dot_speed (REMAT_BF16_KERNEL unset, the CPU
// has avx512_bf16), for the start-up line that says so.
bool bf16_gemm_chosen_by_speed();

// Row-major C[M, N] = beta * C + op(A)[M, K] @ op(B)[K, N], beta 0 or 1, on
// the calling thread only. op(A) is A (lda >= K) or, with trans_a, the
// transpose of A stored [K, M] (lda >= M); likewise op(B).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a,
               int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same with a chosen implementation (tests and the microbenchmark).
void gemm_bf16_with(Bf16Gemm gemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, float* c,
                    int64_t ldc);

// op(B)[k, n] made ready once for many row chunks of A (the linear layers
// cut A into chunks; B, a weight or the whole activation for dw, is shared):
// packed into the native kernel's panels, widened to fp32, or (onednn) left
// where it is and read by each call. Its buffers are reused by the next
// prepare (kernel scratch, outside the allocator's books like OpenBLAS's own
// packing buffers).
struct PreparedB {
  Bf16Gemm gemm = Bf16Gemm::kFallback;
  bool trans = false;
  int64_t k = 0, n = 0;
  const bf16* source = nullptr;  // onednn: op(B) as stored, ld elements a row
  int64_t ld = 0;
  std::vector<uint32_t> packed;  // native: bf16 pairs in panels
  std::vector<float> wide;       // fallback: op(B) as stored, in fp32
};
void prepare_b(Bf16Gemm gemm, bool trans_b, int64_t k, int64_t n, const bf16* b, int64_t ldb,
               PreparedB& out);
// How the gemm writes C (gemm_write.h). The native kernel flushes a tiny
// negative sum to -0, so its fresh write is not beta 0's.
// C[m, n] (+)= op(A) @ B on the calling thread (A as in gemm_bf16).
void gemm_bf16_prepared(bool trans_a, int64_t m, const bf16* a, int64_t lda, const PreparedB& b,
                        CWrite write, float* c, int64_t ldc);

// The linear layers of kernels.h with bf16 operands (x, dy and the weight's
// bf16 copy) and fp32 accumulation. Threaded like their fp32 versions: fixed
// row chunks shared out among the threads, so bits never depend on the
// thread count. Forward writes y in fp32 (y_bf16 false) or rounds it to
// bf16; backward accumulates into fp32 dx and dw (either may be null), or
// with fresh_dx / fresh_dw writes dx / dw as accumulating into zeros would
// (kernels.h), without reading or zeroing them first.
void linear_bf16_forward(const bf16* x, const bf16* w, bool weight_in_out, int64_t m, int64_t k,
                         int64_t n, void* y, bool y_bf16);
void linear_bf16_backward(const bf16* dy, const bf16* x, const bf16* w, bool weight_in_out,
                          int64_t m, int64_t k, int64_t n, float* dx, float* dw,
                          bool fresh_dw = false, bool fresh_dx = false);
// grouped_linear (kernels.h) with bf16 rows, dout and weights; out in bf16.
void grouped_linear_bf16_forward(const bf16* rows, const float* offsets, const bf16* w,
                                 int64_t experts, int64_t k, int64_t n, bf16* out);
void grouped_linear_bf16_backward(const bf16* dout, const bf16* rows, const float* offsets,
                                  const bf16* w, int64_t experts, int64_t k, int64_t n,
                                  float* drows, float* dw, bool fresh_dw = false,
                                  bool fresh_drows = false);

// An activation under bf16 compute: bf16 elements, or fp32 where the
// program keeps the value in fp32 (a value another op reads in fp32).
struct ActIn {
  const void* data;
  bool bf16;
};
struct ActOut {
  void* data;
  bool bf16;
};

// The linear layers of kernels.h on such activations with fp32 weights and
// fp32 output gradients, computed in fp32: what the engine runs where the
// matmuls compute in fp32 anyway (Bf16Gemm::kFallback). Rounding the fp32
// master weight and dy to bf16 only to widen them back per GEMM would cost
// two passes each and buy nothing the fp32 sgemm needs; the bf16 storage of
// activations is kept. Rows are chunked as in the fp32 linears, so bits never
// depend on the thread count. Forward writes y in fp32 or rounds it to bf16
// once; backward accumulates dx and dw (kernels.h), or overwrites them where
// `fresh` bits 0 and 1 say so. y and dx are the fp32 linear's bits on x
// widened; dw sums x's rows in blocks of 512, each widened where the GEMM
// reads it (linear_act.cc), so its rounding differs from the fp32 linear's.
void linear_act_forward(ActIn x, const float* w, bool weight_in_out, int64_t m, int64_t k,
                        int64_t n, ActOut y);
void linear_act_backward(const float* dy, ActIn x, const float* w, bool weight_in_out, int64_t m,
                         int64_t k, int64_t n, float* dx, float* dw, uint32_t fresh);
// grouped_linear (kernels.h) the same way: bf16 rows and out, fp32 w and dout.
void grouped_linear_act_forward(const bf16* rows, const float* offsets, const float* w,
                                int64_t experts, int64_t k, int64_t n, bf16* out);
void grouped_linear_act_backward(const float* dout, const bf16* rows, const float* offsets,
                                 const float* w, int64_t experts, int64_t k, int64_t n,
                                 float* drows, float* dw, uint32_t fresh);

// The pointwise ops of kernels.h on such activations, with fp32 weights,
// statistics and gradients. Each is the fp32 kernel's body instantiated on
// its operands' dtypes (operands.h: bf16 widened as it is read, a result
// rounded once as it is written): the bits of widening whole tensors,
// running the fp32 kernel and rounding (the executor's fp32 staging), on any
// thread count, without fp32 copies. RoPE's and the add's backwards read no
// activation.
void rmsnorm_forward_act(ActIn x, const float* weight, int64_t rows, int64_t dim, float eps,
                         ActOut out, float* rstd);
void rmsnorm_backward_act(const float* dout, ActIn x, const float* weight, const float* rstd,
                          int64_t rows, int64_t dim, float* dx, float* dweight,
                          bool fresh_dweight = false, bool fresh_dx = false);
void rope_forward_act(ActIn x, int64_t batch, int64_t seq, int64_t first_position, int64_t heads,
                      int64_t head_dim, double theta, ActOut out);
void silu_mul_forward_act(ActIn a, ActIn b, int64_t n, ActOut out);
// fresh: bit 0 da, bit 1 db, as silu_mul_backward (kernels.h).
void silu_mul_backward_act(const float* dout, ActIn a, ActIn b, int64_t n, float* da, float* db,
                           uint32_t fresh = 0);
void add_forward_act(ActIn a, ActIn b, int64_t n, ActOut out);

// Attention (kernels.h: attention_forward_cached, attention_backward) with
// q, k, v and out all bf16 (or all fp32): the tiles widen q, k and v exactly
// as they pack them, and out is rounded once from its fp32 value, so the
// bits are those of the fp32 kernels on widened copies, rounded, without
// whole-tensor fp32 copies. dout, lse and the gradients are fp32. A mix of
// bf16 and fp32 operands is an std::invalid_argument.
void attention_forward_act(ActIn q, ActIn k, ActIn v, int64_t batch, int64_t seq, int64_t past,
                           int64_t heads, int64_t kv_heads, int64_t head_dim, ActOut out,
                           float* lse);
void attention_backward_act(const float* dout, ActIn q, ActIn k, ActIn v, ActIn out,
                            const float* lse, int64_t batch, int64_t seq, int64_t heads,
                            int64_t kv_heads, int64_t head_dim, float* dq, float* dk, float* dv,
                            float* workspace, uint32_t fresh);

// Measured bf16 dot-product throughput (FLOP/s) over `threads` threads with
// vdpbf16ps, the best of `runs`; 0 where the CPU lacks avx512_bf16. The
// peak that bf16 MFU is stated against.
double best_peak_flops_bf16(int threads, int runs = 40, double seconds = 0.001);

}  // namespace remat::cpu
