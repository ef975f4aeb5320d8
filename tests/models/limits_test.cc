// Absurd model and step sizes are InputErrors raised before any program is
// built (so before allocating), never overflowing arithmetic.
#include "models/limits.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/error.h"
#include "models/registry.h"

namespace remat {
namespace {

std::string error_of(const JobConfig::Model& m, int64_t batch = 2, int64_t seq = 32) {
  try {
    build_model(m, batch, seq);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

JobConfig::Model llama(const std::string& name = "llama3") {
  JobConfig::Model m;
  m.name = name;
  return m;
}

TEST(ModelLimits, DebugModelsAndLargeFlavorsPass) {
  EXPECT_EQ(error_of(llama()), "");
  EXPECT_EQ(error_of(llama("llama4")), "");
  JobConfig::Model big = llama();
  big.flavor = "405B";
  EXPECT_EQ(error_of(big, 1, 8192), "");  // `remat plan` must still price it
}

// Each negative size is refused by its own key (0 keeps the flavor's).
TEST(ModelLimits, NegativeSizesAreRefusedByName) {
  for (const auto& [name, key] : {std::pair{"dim", &JobConfig::Model::dim},
                                  {"n_layers", &JobConfig::Model::n_layers},
                                  {"n_heads", &JobConfig::Model::n_heads},
                                  {"n_kv_heads", &JobConfig::Model::n_kv_heads},
                                  {"vocab_size", &JobConfig::Model::vocab_size},
                                  {"multiple_of", &JobConfig::Model::multiple_of}}) {
    JobConfig::Model m = llama();
    m.*key = -2;
    const std::string e = error_of(m);
    EXPECT_NE(e.find(std::string("model.") + name + " = -2: expected a positive integer"),
              std::string::npos)
        << e;
  }
  for (const auto& [name, key] :
       {std::pair{"num_experts", &JobConfig::Model::num_experts},
        {"top_k", &JobConfig::Model::top_k},
        {"interleave_moe_layer_step", &JobConfig::Model::interleave_moe_layer_step}}) {
    JobConfig::Model m = llama("llama4");
    m.*key = -1;
    const std::string e = error_of(m);
    EXPECT_NE(e.find(std::string("model.") + name + " = -1: expected a positive integer"),
              std::string::npos)
        << e;
  }
}

TEST(ModelLimits, HugeVocabularyIsRefusedByName) {
  JobConfig::Model m = llama();
  m.vocab_size = int64_t{1} << 62;
  const std::string e = error_of(m);
  EXPECT_NE(e.find("model.vocab_size = 4611686018427387904"), std::string::npos) << e;
  m.vocab_size = 2000000000;  // fits int32, but the embedding has 2e9 x 1024 elements
  m.dim = 1024;
  EXPECT_NE(error_of(m).find("tok_embeddings.weight"), std::string::npos) << error_of(m);
}

TEST(ModelLimits, HugeDimAndLayersAreRefusedBeforeBuilding) {
  JobConfig::Model m = llama();
  m.dim = int64_t{1} << 31;
  EXPECT_NE(error_of(m).find("model.dim = 2147483648"), std::string::npos) << error_of(m);
  m = llama();
  m.n_layers = 2000000;
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of(m);
  EXPECT_NE(e.find("model.n_layers = 2000000"), std::string::npos) << e;
  // Refused from the arguments, not after building a multi-GB program.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(ModelLimits, TinyFfnMultiplierIsRefused) {
  JobConfig::Model m = llama();
  m.ffn_dim_multiplier = 1e-9;
  EXPECT_NE(error_of(m).find("model.ffn_dim_multiplier"), std::string::npos) << error_of(m);
  m.ffn_dim_multiplier = 1e300;  // would be undefined behaviour cast to int64
  EXPECT_NE(error_of(m).find("model.ffn_dim_multiplier"), std::string::npos) << error_of(m);
}

TEST(ModelLimits, TokensPerStepAndMoeSlots) {
  std::string e = error_of(llama(), 16777216, 16777216);
  EXPECT_NE(e.find("training.local_batch_size x training.seq_len"), std::string::npos) << e;
  e = error_of(llama("llama4"), 1024, 32768);  // 2^25 slots: not exact in fp32
  EXPECT_NE(e.find("2^24"), std::string::npos) << e;
  EXPECT_EQ(error_of(llama("llama4"), 512, 32768), "");  // 2^24 exactly is fine
}

TEST(ModelLimits, StepFlopsBeyondInt64AreRefused) {
  JobConfig::Model m = llama();
  m.flavor = "405B";
  // Every tensor fits, but seq^2 attention over 126 layers passes 2^62 FLOPs.
  const std::string e = error_of(m, 1, 1 << 20);
  EXPECT_NE(e.find("FLOPs"), std::string::npos) << e;
}

}  // namespace
}  // namespace remat
