// Rotary position embedding, torchtitan's interleaved pair layout.
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

constexpr int64_t kMaxPairs = 512;  // head_dim up to 1024

// Rotates every head of every (batch, position) row by +angle (sign = 1) or
// -angle (sign = -1); row p of a sequence is at position first + p.
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

void rope_apply(const float* x, int64_t batch, int64_t seq, int64_t first, int64_t heads,
                int64_t head_dim, double theta, float sign, Store store, float* out) {
  if (head_dim % 2 != 0 || head_dim / 2 > kMaxPairs)
    throw std::invalid_argument("rope: head_dim must be even and at most 1024");
  const int64_t pairs = head_dim / 2;
  const int64_t row = heads * head_dim;
  double freq[kMaxPairs];
  for (int64_t i = 0; i < pairs; ++i)
    freq[i] = std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
  const int nt = num_threads();
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (batch * seq * row >= detail::kParallelMin)
  for (int64_t p = 0; p < seq; ++p) {
    float c[kMaxPairs], s[kMaxPairs];
    for (int64_t i = 0; i < pairs; ++i) {
      const double angle = static_cast<double>(first + p) * freq[i];
      c[i] = static_cast<float>(std::cos(angle));
      s[i] = sign * static_cast<float>(std::sin(angle));
    }
    for (int64_t b = 0; b < batch; ++b) {
      const float* xr = x + (b * seq + p) * row;
      float* yr = out + (b * seq + p) * row;
      for (int64_t h = 0; h < heads; ++h) {
        const float* xh = xr + h * head_dim;
        float* yh = yr + h * head_dim;
        for (int64_t i = 0; i < pairs; ++i) {
          const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
          const float y0 = std::fma(x0, c[i], -(x1 * s[i]));
          const float y1 = std::fma(x0, s[i], x1 * c[i]);
          if (store == Store::kAdd) {
            yh[2 * i] += y0;
            yh[2 * i + 1] += y1;
          } else if (store == Store::kAddToZero) {
            yh[2 * i] = 0.0f + y0;  // +0 for a -0 rotation, as the zeroed buffer gives
            yh[2 * i + 1] = 0.0f + y1;
          } else {
            yh[2 * i] = y0;
            yh[2 * i + 1] = y1;
          }
        }
      }
    }
  }
}

}  // namespace

void rope_forward(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  double theta, float* out) {
  rope_apply(x, batch, seq, 0, heads, head_dim, theta, 1.0f, Store::kAssign, out);
}

void rope_forward_from(const float* x, int64_t batch, int64_t seq, int64_t first_position,
                       int64_t heads, int64_t head_dim, double theta, float* out) {
  if (first_position < 0) throw std::invalid_argument("rope: first_position must be >= 0");
  rope_apply(x, batch, seq, first_position, heads, head_dim, theta, 1.0f, Store::kAssign, out);
}

// The rotation is orthogonal: its transpose is the rotation by -angle.
void rope_backward(const float* dout, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                   double theta, float* dx, uint32_t fresh) {
  rope_apply(dout, batch, seq, 0, heads, head_dim, theta, -1.0f,
             (fresh & 1) != 0 ? Store::kAddToZero : Store::kAdd, dx);
}

}  // namespace remat::cpu
