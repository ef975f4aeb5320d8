// Helpers for the kernel tests: seeded random buffers and a central
// finite-difference gradient check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu::testing {

// Sets the kernel thread count for a scope and restores it after.
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int threads) : saved_(num_threads()) { set_num_threads(threads); }
  ~ThreadsGuard() { set_num_threads(saved_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int saved_;
};

inline std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// bf16 copies of fp32 values, rounded to nearest even.
inline std::vector<bf16> narrowed(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  narrow_to_bf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

// fp32 copies of bf16 values (exact).
inline std::vector<float> widened(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  widen_from_bf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

// Bit patterns, so that comparisons tell -0 from +0 and NaN payloads apart.
inline std::vector<uint32_t> bits(const std::vector<float>& x) {
  std::vector<uint32_t> out(x.size());
  std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
  return out;
}

// A bf16 tensor as the input of an activation kernel.
inline ActIn in(const std::vector<bf16>& x) { return {x.data(), true}; }

inline std::vector<int32_t> random_tokens(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// sum_i out[i] * r[i] in double: the scalar loss whose gradient w.r.t. out is r.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

// `count` distinct indices in [0, n), or all of them if count >= n.
inline std::vector<int64_t> sample_indices(int64_t n, int64_t count, uint32_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  if (count >= n) return idx;
  std::mt19937 gen(seed);
  std::shuffle(idx.begin(), idx.end(), gen);
  idx.resize(static_cast<size_t>(count));
  return idx;
}

struct GradCheck {
  double max_abs_err = 0.0;
  double max_abs_grad = 0.0;
};

// Compares grad[i] with the central difference of loss() as x[i] moves by
// +-eps (x is restored). Fails if max |error| > tol * max(1, max |grad|).
inline GradCheck check_gradient(const std::string& name, std::vector<float>& x,
                                const std::vector<float>& grad, const std::function<double()>& loss,
                                float eps, double tol, const std::vector<int64_t>& indices = {}) {
  EXPECT_EQ(x.size(), grad.size()) << name;
  GradCheck result;
  for (float g : grad) result.max_abs_grad = std::max(result.max_abs_grad, std::fabs(double(g)));
  std::vector<int64_t> idx = indices;
  if (idx.empty()) idx = sample_indices(static_cast<int64_t>(x.size()), INT64_MAX, 0);
  int64_t worst = -1;
  double worst_num = 0.0;
  for (int64_t i : idx) {
    const float old = x[i];
    const float hi = old + eps, lo = old - eps;
    x[i] = hi;
    const double lp = loss();
    x[i] = lo;
    const double lm = loss();
    x[i] = old;
    const double num = (lp - lm) / (static_cast<double>(hi) - static_cast<double>(lo));
    const double err = std::fabs(num - static_cast<double>(grad[i]));
    if (err > result.max_abs_err) {
      result.max_abs_err = err;
      worst = i;
      worst_num = num;
    }
  }
  const double bound = tol * std::max(1.0, result.max_abs_grad);
  if (std::getenv("REMAT_TEST_VERBOSE") != nullptr)
    std::printf("  %-24s max|err| %.3g  bound %.3g  max|grad| %.3g\n", name.c_str(),
                result.max_abs_err, bound, result.max_abs_grad);
  EXPECT_LE(result.max_abs_err, bound)
      << name << ": worst element " << worst << " analytic " << (worst >= 0 ? grad[worst] : 0.0f)
      << " numeric " << worst_num << " (max |grad| " << result.max_abs_grad << ")";
  return result;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof(float)) == 0;
         });
}

}  // namespace remat::cpu::testing
