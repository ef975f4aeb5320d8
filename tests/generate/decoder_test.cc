// The KV-cache decoder against remat's own training forward pass: the whole
// sequence in one call is the forward pass the executor runs (its logits give
// the executor's loss bit for bit), and decoding position by position (or in
// chunks) after a prompt gives those logits to a tight tolerance, for Llama 3
// (GQA) and Llama 4 (MoE). Decoding leaves the weights and MoE counts alone
// and frees every temporary.
#include "generate/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ac/policy.h"
#include "ac/schedule.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "kernels/cpu/kernels.h"
#include "models/registry.h"
#include "runtime/executor.h"

namespace remat {
namespace {

constexpr int64_t kVocab = 300;

// A small GQA model: 4 layers, dim 64, 4 heads over 2 kv heads; llama4 adds
// 4 experts, top 2, MoE in every second block.
JobConfig::Model small_model(const std::string& name) {
  JobConfig::Model m;
  m.name = name;
  m.flavor = "debugmodel";
  m.dim = 64;
  m.n_layers = 4;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.vocab_size = kVocab;
  m.multiple_of = 32;
  if (name == "llama4") {
    m.num_experts = 4;
    m.top_k = 2;
    m.interleave_moe_layer_step = 2;
  }
  return m;
}

// Seeded weights of a model (its program at seq 8: only its parameters matter).
struct Weights {
  explicit Weights(const JobConfig::Model& m)
      : model(build_model(m, 1, 8)), state(model.program, allocator, false) {
    state.initialize(11);
  }
  BuiltModel model;
  Allocator allocator;
  ModelState state;
};

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, kVocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(gen);
  return v;
}

std::vector<float> host_copy(const ModelState& state) {
  std::vector<float> all;
  for (const Tensor& t : state.params) {
    HostView view(*state.backend, t);
    all.insert(all.end(), view.data(), view.data() + t.numel());
  }
  return all;
}

class DecoderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderTest, OneCallIsTheTrainingForwardPass) {
  const JobConfig::Model m = small_model(GetParam());
  Weights w(m);
  const int64_t n = 150;
  const std::vector<int32_t> tokens = random_tokens(n + 1, 5);
  Decoder decoder(m, w.state, w.allocator, n);
  const std::vector<float> logits = decoder.append({tokens.data(), static_cast<size_t>(n)});
  ASSERT_EQ(logits.size(), static_cast<size_t>(n * kVocab));
  EXPECT_EQ(decoder.position(), n);

  // The executor's forward-only pass on the same tokens (targets: the next ones).
  const Program program = build_model(m, 1, n).program;
  Executor executor(program, make_schedule(program, make_inference_plan(program), false),
                    w.allocator, w.state);
  const double loss = executor.run(Batch{tokens.data(), tokens.data() + 1});
  executor.release_values();
  std::vector<float> logits_copy = logits, lse(static_cast<size_t>(n));
  EXPECT_EQ(
      cpu::cross_entropy_forward(logits_copy.data(), tokens.data() + 1, n, kVocab, lse.data()),
      loss);
}

TEST_P(DecoderTest, KvCacheGivesTheLogitsOfTheWholeSequence) {
  const JobConfig::Model m = small_model(GetParam());
  Weights w(m);
  const int64_t n = 150;
  const std::vector<int32_t> tokens = random_tokens(n, 6);
  Decoder whole(m, w.state, w.allocator, n);
  const std::vector<float> expected = whole.append(tokens);

  // A prompt of 37, single positions, a chunk of 40 across a key tile, then
  // single positions again.
  Decoder cached(m, w.state, w.allocator, n);
  std::vector<int64_t> cuts = {37};
  for (int i = 0; i < 30; ++i) cuts.push_back(1);
  cuts.push_back(40);
  for (int64_t covered = 37 + 30 + 40; covered < n; ++covered) cuts.push_back(1);
  std::vector<float> got;
  for (const int64_t c : cuts) {
    const std::vector<float> part =
        cached.append({tokens.data() + cached.position(), static_cast<size_t>(c)});
    got.insert(got.end(), part.begin(), part.end());
  }
  ASSERT_EQ(cached.position(), n);
  ASSERT_EQ(got.size(), expected.size());
  double largest = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(expected[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - expected[i]));
  }
  EXPECT_GT(largest, 0.1);
  EXPECT_LE(worst, 1e-5 * largest) << "worst difference " << worst << " of " << largest;
}

TEST_P(DecoderTest, ChangesNoStateAndFreesItsTemporaries) {
  const JobConfig::Model m = small_model(GetParam());
  Weights w(m);
  const std::vector<float> before = host_copy(w.state);
  const int64_t params = w.allocator.current()[MemoryCategory::kParameters];
  {
    Decoder decoder(m, w.state, w.allocator, 20);
    // The cache: k and v of each layer, 20 positions of 2 kv heads x 16,
    // what kv_cache_bytes (generate's memory check) says it takes.
    EXPECT_EQ(w.allocator.current()[MemoryCategory::kActivations], 4 * 2 * 20 * 32 * 4);
    EXPECT_EQ(kv_cache_bytes(w.model.program, 20), 4 * 2 * 20 * 32 * 4);
    const std::vector<int32_t> tokens = random_tokens(20, 7);
    decoder.append({tokens.data(), 12});
    for (int i = 12; i < 20; ++i) decoder.append({tokens.data() + i, 1});
    EXPECT_EQ(w.allocator.current()[MemoryCategory::kTemporaries], 0);
    EXPECT_GT(w.allocator.peak(), params + w.allocator.current()[MemoryCategory::kActivations]);
  }
  EXPECT_EQ(w.allocator.current().total(), params);
  EXPECT_EQ(host_copy(w.state), before);  // MoE token counts included
}

TEST_P(DecoderTest, AFullCacheIsAnError) {
  const JobConfig::Model m = small_model(GetParam());
  Weights w(m);
  Decoder decoder(m, w.state, w.allocator, 4);
  const std::vector<int32_t> tokens = random_tokens(4, 8);
  decoder.append({tokens.data(), 3});
  EXPECT_THROW(decoder.append({tokens.data(), 2}), std::length_error);
  EXPECT_THROW(decoder.append({}), std::invalid_argument);
  decoder.append({tokens.data(), 1});
  EXPECT_EQ(decoder.position(), 4);
}

// generate() feeds a prompt longer than kPrefillChunk in passes of that many:
// its peak is that of a chunk's pass, not of the whole prompt's, and the
// token it picks is the one the whole prompt's logits give.
TEST_P(DecoderTest, GenerateFeedsALongPromptInChunks) {
  const JobConfig::Model m = small_model(GetParam());
  Weights w(m);
  const auto n = static_cast<int64_t>(2 * kPrefillChunk + 100);
  const std::vector<int32_t> prompt = random_tokens(n, 9);
  const int64_t params = w.allocator.current().total();
  SamplingOptions greedy;
  greedy.temperature = 0;

  int64_t whole_peak = 0;
  int32_t whole_argmax = -1;
  {
    Decoder whole(m, w.state, w.allocator, n + 1);
    w.allocator.reset_peak();
    const std::vector<float> logits = whole.append(prompt);
    whole_peak = w.allocator.peak() - params;
    const auto last = logits.end() - kVocab;
    whole_argmax = static_cast<int32_t>(std::max_element(last, logits.end()) - last);
  }
  Decoder chunked(m, w.state, w.allocator, n + 1);
  Sampler sampler(greedy);
  w.allocator.reset_peak();
  const std::vector<int32_t> out = generate(chunked, sampler, prompt, 1, /*eos_id=*/-1);
  const int64_t chunked_peak = w.allocator.peak() - params;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], whole_argmax);
  EXPECT_EQ(chunked.position(), n);
  // The cache is the same in both: the rest (a pass's values) scales with
  // the tokens of a pass, here 512 against 1124.
  const auto cache = static_cast<int64_t>(kv_cache_bytes(w.model.program, n + 1));
  EXPECT_LT(2 * (chunked_peak - cache), whole_peak - cache)
      << "peaks above the cache: chunked " << chunked_peak - cache << ", whole "
      << whole_peak - cache;
}

INSTANTIATE_TEST_SUITE_P(Models, DecoderTest, ::testing::Values("llama3", "llama4"));

}  // namespace
}  // namespace remat
