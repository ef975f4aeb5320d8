// kernels.h's attention entry points: argument checks, the backward pass's
// row deltas, the AVX2 instantiation of the tile kernels (attention_impl.h)
// and the run-time choice between it and the AVX-512 one.
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tile.h"

namespace remat::cpu {

namespace {

// attention_impl.h's vector ISA, on 8 lanes of AVX2 + FMA.
struct Avx2 {
  using Reg = __m256;
  static constexpr int64_t kW = 8;
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg x) { _mm256_storeu_ps(p, x); }
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg fmsub(Reg a, Reg b, Reg c) { return _mm256_fmsub_ps(a, b, c); }
  static Reg exp2(Reg x) { return detail::exp2_256(x); }
  // Lanes j0 + i < lo become fill.
  static Reg keep_from(Reg x, int64_t j0, int64_t lo, Reg fill) {
    if (lo <= j0) return x;
    const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(j0)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i keep = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int>(lo - 1)));
    return _mm256_blendv_ps(fill, x, _mm256_castsi256_ps(keep));
  }
  static bool equal_all(Reg a, Reg b) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)) == 0xFF;
  }
  static void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars, int64_t aks,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    detail::tile_gemm(M, N, K, a, ars, aks, b, ldb, c, ldc, accumulate);
  }
};

using Avx2Attention = detail::AttentionKernel<Avx2>;

// AVX-512 only where head_dim fills its 16 lanes: padded to 16, a head_dim of
// 24 (say) does a third more work than on 8 lanes, more than the wider
// instructions save (measured: 8.8 ms against 10.4 ms per forward at batch 8
// x seq 256 x 16 heads). The choice depends on the shape only, so every call
// with one model takes the same path.
bool use_avx512(int64_t head_dim) { return head_dim % 16 == 0 && detail::avx512_kernels(); }

void check_shapes(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0)
    throw std::invalid_argument("attention: heads must be a multiple of kv_heads");
  if (head_dim <= 0 || head_dim > 1024)
    throw std::invalid_argument("attention: head_dim must be in [1, 1024]");
}

// delta = rowsum(dO * O) per [batch, head, position]; O fp32 or bf16 (a bf16
// row is widened first, so the dot is the fp32 one on the widened row).
template <class O>
void row_deltas(const float* dout, const O* out, int64_t batch, int64_t seq, int64_t heads,
                int64_t D, float* delta) {
  const int64_t q_stride = heads * D;
#pragma omp parallel for schedule(static) \
    num_threads(num_threads()) if (batch * seq * heads * D >= detail::kParallelMin)
  for (int64_t t = 0; t < batch * seq; ++t) {
    const int64_t b = t / seq, i = t % seq;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = t * q_stride + h * D;
      if constexpr (std::is_same_v<O, bf16>) {
        float row[1024];  // head_dim <= 1024 (check_shapes)
        for (int64_t d = 0; d < D; ++d) row[d] = from_bf16(out[off + d]);
        delta[(b * heads + h) * seq + i] = detail::dot(dout + off, row, D);
      } else {
        delta[(b * heads + h) * seq + i] = detail::dot(dout + off, out + off, D);
      }
    }
  }
}

// Both passes on q, k, v and out of one element type T (fp32 or bf16).
template <class T>
void forward_on(const T* q, const T* k, const T* v, int64_t batch, int64_t seq, int64_t past,
                int64_t heads, int64_t kv_heads, int64_t head_dim, T* out, float* lse) {
  check_shapes(heads, kv_heads, head_dim);
  if (past < 0) throw std::invalid_argument("attention: past must be >= 0");
  if (use_avx512(head_dim)) {
    detail::attention_forward_avx512(q, k, v, batch, seq, past, heads, kv_heads, head_dim, out,
                                     lse);
  } else {
    Avx2Attention::forward(q, k, v, batch, seq, past, heads, kv_heads, head_dim, out, lse);
  }
}

template <class T>
void backward_on(const float* dout, const T* q, const T* k, const T* v, const T* out,
                 const float* lse, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                 int64_t head_dim, float* dq, float* dk, float* dv, float* workspace,
                 uint32_t fresh) {
  check_shapes(heads, kv_heads, head_dim);
  float* delta = workspace;
  row_deltas(dout, out, batch, seq, heads, head_dim, delta);
  if (use_avx512(head_dim)) {
    detail::attention_backward_avx512(dout, q, k, v, lse, delta, batch, seq, heads, kv_heads,
                                      head_dim, dq, dk, dv, fresh);
  } else {
    Avx2Attention::backward(dout, q, k, v, lse, delta, batch, seq, heads, kv_heads, head_dim, dq,
                            dk, dv, fresh);
  }
}

// Whether q, k, v (and out) are all bf16, or all fp32; other mixes are not
// made by any program (set_compute_dtype gives them one dtype).
bool all_bf16(std::initializer_list<bool> bf16s) {
  bool any = false, all = true;
  for (bool b : bf16s) {
    any = any || b;
    all = all && b;
  }
  if (any != all)
    throw std::invalid_argument("attention: q, k, v and out must all be bf16 or all fp32");
  return all;
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, int64_t head_dim, float* out, float* lse) {
  attention_forward_cached(q, k, v, batch, seq, /*past=*/0, heads, kv_heads, head_dim, out, lse);
}

void attention_forward_cached(const float* q, const float* k, const float* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, float* out, float* lse) {
  forward_on(q, k, v, batch, seq, past, heads, kv_heads, head_dim, out, lse);
}

// With P = softmax(scale * q k^T) (causal), O = P v, dO given:
//   dv = P^T dO;  dP = dO v^T;  dS = P * (dP - rowsum(dO * O));
//   dq = scale * dS k;  dk = scale * dS^T q.
// workspace holds rowsum(dO * O) per [batch, head, position].
void attention_backward(const float* dout, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, int64_t batch, int64_t seq,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq, float* dk,
                        float* dv, float* workspace, uint32_t fresh) {
  backward_on(dout, q, k, v, out, lse, batch, seq, heads, kv_heads, head_dim, dq, dk, dv, workspace,
              fresh);
}

void attention_forward_act(ActIn q, ActIn k, ActIn v, int64_t batch, int64_t seq, int64_t past,
                           int64_t heads, int64_t kv_heads, int64_t head_dim, ActOut out,
                           float* lse) {
  if (all_bf16({q.bf16, k.bf16, v.bf16, out.bf16})) {
    forward_on(static_cast<const bf16*>(q.data), static_cast<const bf16*>(k.data),
               static_cast<const bf16*>(v.data), batch, seq, past, heads, kv_heads, head_dim,
               static_cast<bf16*>(out.data), lse);
  } else {
    forward_on(static_cast<const float*>(q.data), static_cast<const float*>(k.data),
               static_cast<const float*>(v.data), batch, seq, past, heads, kv_heads, head_dim,
               static_cast<float*>(out.data), lse);
  }
}

void attention_backward_act(const float* dout, ActIn q, ActIn k, ActIn v, ActIn out,
                            const float* lse, int64_t batch, int64_t seq, int64_t heads,
                            int64_t kv_heads, int64_t head_dim, float* dq, float* dk, float* dv,
                            float* workspace, uint32_t fresh) {
  if (all_bf16({q.bf16, k.bf16, v.bf16, out.bf16})) {
    backward_on(dout, static_cast<const bf16*>(q.data), static_cast<const bf16*>(k.data),
                static_cast<const bf16*>(v.data), static_cast<const bf16*>(out.data), lse, batch,
                seq, heads, kv_heads, head_dim, dq, dk, dv, workspace, fresh);
  } else {
    backward_on(dout, static_cast<const float*>(q.data), static_cast<const float*>(k.data),
                static_cast<const float*>(v.data), static_cast<const float*>(out.data), lse, batch,
                seq, heads, kv_heads, head_dim, dq, dk, dv, workspace, fresh);
  }
}

}  // namespace remat::cpu
