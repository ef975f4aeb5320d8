#include "runtime/model_state.h"

#include <algorithm>

#include "core/normal.h"
#include "kernels/cpu/kernels.h"

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

// SplitMix64's finalizer: distinct seeds for the blocks' generators from
// nearby inputs.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Draws n values of `init` into host memory.
void draw(const ParamInit& init, StandardNormal& normal, int64_t n, float* out) {
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
        value = init.std * normal();
        break;
      case ParamInit::Kind::kTruncatedNormal:
        // Rejection sampling: exact truncated normal on [lower, upper].
        do {
          value = init.std * normal();
        } while (value < init.lower || value > init.upper);
        break;
    }
    out[j] = static_cast<float>(value);
  }
}

// Values per generator. Blocks fill in parallel (an 8B model is 8 billion
// draws); each has its own generator, seeded by the run's seed, the
// parameter's name and the block's index, so the values are the same for
// every thread count and every sharding.
constexpr int64_t kValuesPerGenerator = int64_t{1} << 16;

}  // namespace

void draw_initial_values(const Param& p, uint64_t seed, float* host, int64_t n) {
  const uint64_t stream = seed * 0x9E3779B97F4A7C15ull ^ fnv1a(p.fqn);
  const int64_t blocks = (n + kValuesPerGenerator - 1) / kValuesPerGenerator;
  cpu::parallel_for(blocks, [&](int64_t b) {
    StandardNormal normal(mix(stream + static_cast<uint64_t>(b)));
    const int64_t begin = b * kValuesPerGenerator;
    draw(p.init, normal, std::min(kValuesPerGenerator, n - begin), host + begin);
  });
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
