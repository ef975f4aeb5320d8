// Rotary position embedding, torchtitan's interleaved pair layout. One body
// on fp32 operands (kernels.h) or activations in bf16 (bf16.h's *_act,
// operands.h): a bf16 x is widened and a bf16 out rounded element by
// element, the bits of the fp32 kernel on a widened copy, rounded.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/operands.h"

namespace remat::cpu {

namespace {

constexpr int64_t kMaxPairs = 512;  // head_dim up to 1024

// The calling thread's table of cos and sin per position: reused from call to
// call (the same size every step), so a steady-state step allocates nothing.
std::vector<float>& rope_table() {
  thread_local std::vector<float> table;
  return table;
}

// How the rotated values reach `out`.
enum class Store {
  kAssign,  // out = rotated (forward)
  kAdd,     // out += rotated (backward)
  // out = 0 + rotated (backward into a fresh gradient, kernels.h): the
  // bits of kAdd into a zeroed buffer, without zeroing it. Both add the same
  // rotated value because its products are contracted by hand (std::fma):
  // left to the compiler (-ffp-contract=fast, C++'s default), each store
  // path could contract them differently, off by an ulp.
  kAddToZero,
};

// y (8 lanes, rotated) stored at element i of out as `store` says.
template <Store store, class Y>
void store8(Y out, int64_t i, __m256 y) {
  if constexpr (store == Store::kAssign) {
    out.store(i, y);
  } else if constexpr (store == Store::kAdd) {
    _mm256_storeu_ps(out.p + i, _mm256_add_ps(_mm256_loadu_ps(out.p + i), y));
  } else {  // +0 for a -0 rotation, as the zeroed buffer gives
    _mm256_storeu_ps(out.p + i, _mm256_add_ps(_mm256_setzero_ps(), y));
  }
}
template <Store store, class Y>
void store1(Y out, int64_t i, float y) {
  if constexpr (store == Store::kAssign) {
    out.set(i, y);
  } else if constexpr (store == Store::kAdd) {
    out.p[i] += y;
  } else {
    out.p[i] = 0.0f + y;
  }
}

// Rotates every head of every (batch, position) row by +angle (sign = 1) or
// -angle (sign = -1); row p of a sequence is at position first + p.
// x and out are operands.h's; kAdd and kAddToZero need an F32Out. A pair
// (x0, x1) becomes (fma(x0, c, x1 * -s), fma(x0, s, x1 * c)) (-(x1 * s) is
// x1 * -s exactly): 8 lanes hold 4 pairs, x0 duplicated into both lanes of
// its pair times (c, s), plus x1 duplicated times (-s, c), the same
// operations lane by lane as the scalar tail.
template <Store store, class X, class Y>
void rope_apply(X x, int64_t batch, int64_t seq, int64_t first, int64_t heads, int64_t head_dim,
                double theta, float sign, Y out) {
  if (head_dim % 2 != 0 || head_dim / 2 > kMaxPairs)
    throw std::invalid_argument("rope: head_dim must be even and at most 1024");
  const int64_t pairs = head_dim / 2;
  const int64_t row = heads * head_dim;
  const int64_t vector_end = head_dim / 8 * 8;
  double freq[kMaxPairs];
  for (int64_t i = 0; i < pairs; ++i)
    freq[i] = std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
  // Per position, per element of a head: cs = (c, s) and sc = (-s, c) of its
  // pair, computed once per call and shared by the batch.
  std::vector<float>& table = rope_table();
  table.resize(static_cast<size_t>(2 * seq * head_dim));
  const int nt = num_threads();
#pragma omp parallel num_threads(nt) if (batch * seq * row >= detail::kParallelMin)
  {
#pragma omp for schedule(static)
    for (int64_t p = 0; p < seq; ++p) {
      float* cs = table.data() + 2 * p * head_dim;
      float* sc = cs + head_dim;
      for (int64_t i = 0; i < pairs; ++i) {
        const double angle = static_cast<double>(first + p) * freq[i];
        const float c = static_cast<float>(std::cos(angle));
        const float s = sign * static_cast<float>(std::sin(angle));
        cs[2 * i] = c;
        cs[2 * i + 1] = s;
        sc[2 * i] = -s;
        sc[2 * i + 1] = c;
      }
    }
    // Rows (batch, position) in contiguous runs per thread: the rows the
    // GEMMs around it give each thread (linear.cc), so a thread reads and
    // writes what its own core made. Split by position instead, each thread
    // had half of every sequence, and half its rows came from the other core.
#pragma omp for schedule(static)
    for (int64_t r = 0; r < batch * seq; ++r) {
      const float* cs = table.data() + 2 * (r % seq) * head_dim;
      const float* sc = cs + head_dim;
      const int64_t xr = r * row;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t xh = xr + h * head_dim;
        for (int64_t j = 0; j < vector_end; j += 8) {
          const __m256 v = x.load(xh + j);
          const __m256 y =
              _mm256_fmadd_ps(_mm256_moveldup_ps(v), _mm256_loadu_ps(cs + j),
                              _mm256_mul_ps(_mm256_movehdup_ps(v), _mm256_loadu_ps(sc + j)));
          store8<store>(out, xh + j, y);
        }
        for (int64_t j = vector_end; j < head_dim; j += 2) {
          const float x0 = x.at(xh + j), x1 = x.at(xh + j + 1);
          store1<store>(out, xh + j, std::fma(x0, cs[j], x1 * sc[j]));
          store1<store>(out, xh + j + 1, std::fma(x0, cs[j + 1], x1 * sc[j + 1]));
        }
      }
    }
  }
}

}  // namespace

void rope_forward(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  double theta, float* out) {
  rope_apply<Store::kAssign>(detail::F32In{x}, batch, seq, 0, heads, head_dim, theta, 1.0f,
                             detail::F32Out{out});
}

void rope_forward_from(const float* x, int64_t batch, int64_t seq, int64_t first_position,
                       int64_t heads, int64_t head_dim, double theta, float* out) {
  if (first_position < 0) throw std::invalid_argument("rope: first_position must be >= 0");
  rope_apply<Store::kAssign>(detail::F32In{x}, batch, seq, first_position, heads, head_dim, theta,
                             1.0f, detail::F32Out{out});
}

void rope_forward_act(ActIn x, int64_t batch, int64_t seq, int64_t first_position, int64_t heads,
                      int64_t head_dim, double theta, ActOut out) {
  if (first_position < 0) throw std::invalid_argument("rope: first_position must be >= 0");
  detail::on_input_output(x, out, [&](auto in, auto y) {
    rope_apply<Store::kAssign>(in, batch, seq, first_position, heads, head_dim, theta, 1.0f, y);
  });
}

// The rotation is orthogonal: its transpose is the rotation by -angle.
void rope_backward(const float* dout, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                   double theta, float* dx, uint32_t fresh) {
  if ((fresh & 1) != 0) {
    rope_apply<Store::kAddToZero>(detail::F32In{dout}, batch, seq, 0, heads, head_dim, theta, -1.0f,
                                  detail::F32Out{dx});
  } else {
    rope_apply<Store::kAdd>(detail::F32In{dout}, batch, seq, 0, heads, head_dim, theta, -1.0f,
                            detail::F32Out{dx});
  }
}

}  // namespace remat::cpu
