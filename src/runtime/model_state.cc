#include "runtime/model_state.h"

#include <cmath>
#include <random>

namespace remat {

ModelState::ModelState(const Program& program, Allocator& alloc, bool with_gradients)
    : program(&program), allocator(&alloc) {
  for (const Param& p : program.params) {
    params.emplace_back(alloc, p.shape, MemoryCategory::kParameters);
  }
  if (with_gradients) {
    for (const Param& p : program.params) {
      grads.emplace_back(alloc, p.shape, MemoryCategory::kGradients);
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

}  // namespace

void ModelState::initialize(uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = program->params[i];
    Tensor& t = params[i];
    if (t.data() == nullptr) continue;  // counting-only allocator
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ fnv1a(p.fqn));
    const ParamInit& init = p.init;
    for (int64_t j = 0; j < t.numel(); ++j) {
      double value = 0;
      switch (init.kind) {
        case ParamInit::Kind::kZeros: value = 0; break;
        case ParamInit::Kind::kOnes: value = 1; break;
        case ParamInit::Kind::kNormal: value = init.std * standard_normal(rng); break;
        case ParamInit::Kind::kTruncatedNormal:
          // Rejection sampling: exact truncated normal on [lower, upper].
          do {
            value = init.std * standard_normal(rng);
          } while (value < init.lower || value > init.upper);
          break;
      }
      t.data()[j] = static_cast<float>(value);
    }
  }
}

void ModelState::zero_gradients() {
  for (Tensor& g : grads) g.zero();
}

void ModelState::ensure_optimizer_state() {
  if (!exp_avg.empty()) return;
  for (const Tensor& p : params) {
    exp_avg.emplace_back(*allocator, p.shape(), MemoryCategory::kOptimizerState);
    exp_avg.back().zero();
    exp_avg_sq.emplace_back(*allocator, p.shape(), MemoryCategory::kOptimizerState);
    exp_avg_sq.back().zero();
  }
}

}  // namespace remat
