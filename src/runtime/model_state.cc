#include "runtime/model_state.h"

#include <cmath>
#include <random>

namespace remat {

ModelState::ModelState(const Program& program, Allocator& alloc, bool with_gradients,
                       Backend& backend, Holds holds)
    : program(&program), allocator(&alloc), backend(&backend), holds(holds) {
  for (const Param& p : program.params) {
    if (holds == Holds::kBuffersOnly && p.trainable)
      params.emplace_back();
    else
      params.emplace_back(alloc, p.shape, MemoryCategory::kParameters, p.dtype);
  }
  if (with_gradients && holds == Holds::kEverything) {
    for (const Param& p : program.params) {
      grads.emplace_back(alloc, p.shape, MemoryCategory::kGradients, p.dtype);
    }
    zero_gradients();
  }
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Standard normal from two uniforms (Box-Muller), written out so the numbers
// do not depend on the C++ library's distribution implementation.
double standard_normal(std::mt19937_64& rng) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// Draws n values of `init` from rng into host memory.
void draw(const ParamInit& init, std::mt19937_64& rng, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    double value = 0;
    switch (init.kind) {
      case ParamInit::Kind::kZeros:
        value = 0;
        break;
      case ParamInit::Kind::kOnes:
        value = 1;
        break;
      case ParamInit::Kind::kNormal:
        value = init.std * standard_normal(rng);
        break;
      case ParamInit::Kind::kTruncatedNormal:
        // Rejection sampling: exact truncated normal on [lower, upper].
        do {
          value = init.std * standard_normal(rng);
        } while (value < init.lower || value > init.upper);
        break;
    }
    out[j] = static_cast<float>(value);
  }
}

}  // namespace

void draw_initial_values(const Param& p, uint64_t seed, float* host, int64_t n) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ fnv1a(p.fqn));
  draw(p.init, rng, n, host);
}

void ModelState::initialize(uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& t = params[i];
    if (!t.defined()) continue;  // kBuffersOnly: a shard's parameter
    // The initial weights are host data: drawn on the host, then handed over.
    write_from_host(*backend, t, [&](float* host) {
      draw_initial_values(program->params[i], seed, host, t.numel());
    });
  }
}

void ModelState::zero_gradients() {
  for (Tensor& g : grads) backend->zero(g);
}

void ModelState::ensure_optimizer_state() {
  if (!exp_avg.empty() || holds == Holds::kBuffersOnly) return;
  for (const Tensor& p : params) {
    exp_avg.emplace_back(*allocator, p.shape(), MemoryCategory::kOptimizerState, p.dtype());
    backend->zero(exp_avg.back());
    exp_avg_sq.emplace_back(*allocator, p.shape(), MemoryCategory::kOptimizerState, p.dtype());
    backend->zero(exp_avg_sq.back());
  }
}

}  // namespace remat
