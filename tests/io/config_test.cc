#include "io/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

JobConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_job_config(text, "test.toml", overrides);
}

// The message of the InputError `f` throws; fails the test if none is thrown.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

std::string error_of_toml(const std::string& text) {
  return error_of([&] { parse(text); });
}
std::string error_of_overrides(const std::vector<std::string>& overrides) {
  return error_of([&] { parse("", overrides); });
}

fs::path fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("remat_config_" + std::string(info->name()) + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Config, DefaultsMatchTheSpec) {
  const JobConfig c = parse("");
  EXPECT_EQ(c.job.dump_folder, "./outputs");
  EXPECT_EQ(c.model.name, "llama3");
  EXPECT_EQ(c.model.flavor, "debugmodel");
  EXPECT_EQ(c.model.tokenizer, "byte");
  EXPECT_EQ(c.model.loss_chunk_rows, 0);  // the logits kept whole, as torchtitan does
  EXPECT_EQ(parse("[model]\nloss_chunk_rows = 1024\n").model.loss_chunk_rows, 1024);
  EXPECT_TRUE(parse("[model]\nloss_chunk_rows = \"auto\"\n").model.loss_chunk_rows.automatic);
  EXPECT_EQ(c.training.local_batch_size, 8);
  EXPECT_EQ(c.training.global_batch_size, -1);  // torchtitan's: local x data-parallel ranks
  EXPECT_EQ(parse("[training]\nglobal_batch_size = 64\n").training.global_batch_size, 64);
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_EQ(c.training.steps, 10);
  EXPECT_EQ(c.training.max_norm, 1.0);
  EXPECT_EQ(c.training.seed, 0);
  EXPECT_EQ(c.training.dataset, "fortunes");
  EXPECT_EQ(c.optimizer.name, "AdamW");
  EXPECT_EQ(c.optimizer.lr, 8e-4);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 2);
  EXPECT_EQ(c.lr_scheduler.decay_ratio, 0.8);
  EXPECT_EQ(c.lr_scheduler.decay_type, "linear");
  EXPECT_EQ(c.lr_scheduler.lr_min, 0.0);
  EXPECT_EQ(c.activation_checkpoint.mode, "selective");
  EXPECT_EQ(c.activation_checkpoint.selective_ac_option, "2");
  EXPECT_EQ(c.activation_checkpoint.selective_op_ac_mm_flops_threshold, 0);
  EXPECT_EQ(c.activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns,
            std::vector<std::string>{"moe.router.gate"});
  EXPECT_FALSE(c.activation_checkpoint.log_mm_flops);
  EXPECT_EQ(c.metrics.log_freq, 1);
  EXPECT_FALSE(c.checkpoint.enable);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, 1);
}

TEST(Config, EverySectionRoundTrips) {
  const JobConfig c = parse(R"(
[job]
description = "round trip"
dump_folder = "/tmp/out"
[model]
name = "llama4"
flavor = "17bx16e"
vocab_size = 4096
tokenizer = "byte"
dim = 128
n_layers = 3
n_heads = 4
n_kv_heads = 2
ffn_dim_multiplier = 1.3
multiple_of = 64
num_experts = 4
top_k = 2
interleave_moe_layer_step = 1
score_func = "sigmoid"
[training]
local_batch_size = 3
seq_len = 64
steps = 0
max_norm = 0.5
seed = 42
dataset = "fortunes"
dataset_path = "data.npy"
threads = 2
[optimizer]
name = "AdamW"
lr = 3          # an integer is a fine number
eps = 1e-6
weight_decay = 0.0
beta1 = 0.8
beta2 = 0.99
[lr_scheduler]
warmup_steps = 5
decay_ratio = 1.0
decay_type = "cosine"
lr_min = 1e-5
[activation_checkpoint]
mode = "memory_budget"
selective_ac_option = "op"
selective_op_ac_mm_flops_threshold = 1e50
per_op_sac_force_recompute_mm_by_fqns = ["attention.wk", "layers.*.feed_forward.w1"]
log_mm_flops = true
memory_budget = "12GiB"
[metrics]
log_freq = 7
jsonl_path = "m.jsonl"
peak_flops = 1e12
[checkpoint]
enable = true
folder = "ckpt"
interval = 9
load = "w.safetensors"
create_seed_checkpoint = true
[validation]
enabled = true
dataset = "val.npy"
freq = 4
steps = 2
[parallelism]
data_parallel_shard_degree = 2
[memory]
limit = "16GiB"
)");
  EXPECT_EQ(c.job.description, "round trip");
  EXPECT_EQ(c.job.dump_folder, "/tmp/out");
  EXPECT_EQ(c.model.name, "llama4");
  EXPECT_EQ(c.model.flavor, "17bx16e");
  EXPECT_EQ(c.model.vocab_size, 4096);
  EXPECT_EQ(c.model.dim, 128);
  EXPECT_EQ(c.model.n_layers, 3);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.n_kv_heads, 2);
  EXPECT_EQ(c.model.ffn_dim_multiplier, 1.3);
  EXPECT_EQ(c.model.multiple_of, 64);
  EXPECT_EQ(c.model.num_experts, 4);
  EXPECT_EQ(c.model.top_k, 2);
  EXPECT_EQ(c.model.interleave_moe_layer_step, 1);
  EXPECT_EQ(c.model.score_func, "sigmoid");
  EXPECT_EQ(c.training.local_batch_size, 3);
  EXPECT_EQ(c.training.seq_len, 64);
  EXPECT_EQ(c.training.steps, 0);
  EXPECT_EQ(c.training.max_norm, 0.5);
  EXPECT_EQ(c.training.seed, 42);
  EXPECT_EQ(c.training.dataset_path, "data.npy");
  EXPECT_EQ(c.training.threads, 2);
  EXPECT_EQ(c.optimizer.lr, 3.0);
  EXPECT_EQ(c.optimizer.eps, 1e-6);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.optimizer.beta1, 0.8);
  EXPECT_EQ(c.optimizer.beta2, 0.99);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 5);
  EXPECT_EQ(c.lr_scheduler.decay_ratio, 1.0);
  EXPECT_EQ(c.lr_scheduler.decay_type, "cosine");
  EXPECT_EQ(c.lr_scheduler.lr_min, 1e-5);
  const auto& ac = c.activation_checkpoint;
  EXPECT_EQ(ac.mode, "memory_budget");
  EXPECT_EQ(ac.selective_ac_option, "op");
  EXPECT_EQ(ac.selective_op_ac_mm_flops_threshold, 1e50);
  EXPECT_EQ(ac.per_op_sac_force_recompute_mm_by_fqns,
            (std::vector<std::string>{"attention.wk", "layers.*.feed_forward.w1"}));
  EXPECT_TRUE(ac.log_mm_flops);
  EXPECT_EQ(ac.memory_budget, "12GiB");
  EXPECT_EQ(c.metrics.log_freq, 7);
  EXPECT_EQ(c.metrics.jsonl_path, "m.jsonl");
  EXPECT_EQ(c.metrics.peak_flops, 1e12);
  EXPECT_TRUE(c.checkpoint.enable);
  EXPECT_EQ(c.checkpoint.folder, "ckpt");
  EXPECT_EQ(c.checkpoint.interval, 9);
  EXPECT_EQ(c.checkpoint.load, "w.safetensors");
  EXPECT_TRUE(c.checkpoint.create_seed_checkpoint);
  EXPECT_TRUE(c.validation.enabled);
  EXPECT_EQ(c.validation.dataset, "val.npy");
  EXPECT_EQ(c.validation.freq, 4);
  EXPECT_EQ(c.validation.steps, 2);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, 2);
  EXPECT_EQ(c.memory.limit, "16GiB");
}

TEST(Config, OverridesOfEveryType) {
  const JobConfig c = parse("[training]\nsteps = 5\n",
                            {"--training.steps", "7",  // int
                             "--optimizer.lr=1e-3",    // double, = form
                             "--activation_checkpoint.selective_op_ac_mm_flops_threshold",
                             "1e50",                                        // double exponent
                             "--metrics.peak_flops=2",                      // int for a double
                             "--checkpoint.enable", "true",                 // bool
                             "--activation_checkpoint.log_mm_flops=false",  // bool, = form
                             "--job.description", "hello world",            // string
                             "--training.dataset_path=a=b.txt",             // '=' in a value
                             "--activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns",
                             "attention.wk,feed_forward.w1",  // list
                             "--validation.steps", "-1"});    // negative int
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.activation_checkpoint.selective_op_ac_mm_flops_threshold, 1e50);
  EXPECT_EQ(c.metrics.peak_flops, 2.0);
  EXPECT_TRUE(c.checkpoint.enable);
  EXPECT_FALSE(c.activation_checkpoint.log_mm_flops);
  EXPECT_EQ(c.job.description, "hello world");
  EXPECT_EQ(c.training.dataset_path, "a=b.txt");
  EXPECT_EQ(c.activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns,
            (std::vector<std::string>{"attention.wk", "feed_forward.w1"}));
  EXPECT_EQ(c.validation.steps, -1);
}

TEST(Config, ThresholdIsANumberOrAuto) {
  const JobConfig toml =
      parse("[activation_checkpoint]\nselective_op_ac_mm_flops_threshold = \"auto\"\n", {});
  EXPECT_TRUE(toml.activation_checkpoint.selective_op_ac_mm_flops_threshold.automatic);
  const JobConfig cli =
      parse("", {"--activation_checkpoint.selective_op_ac_mm_flops_threshold", "auto"});
  EXPECT_TRUE(cli.activation_checkpoint.selective_op_ac_mm_flops_threshold.automatic);
  const JobConfig number =
      parse("[activation_checkpoint]\nselective_op_ac_mm_flops_threshold = 7\n", {});
  EXPECT_EQ(number.activation_checkpoint.selective_op_ac_mm_flops_threshold, 7.0);
  const std::string e =
      error_of_overrides({"--activation_checkpoint.selective_op_ac_mm_flops_threshold=often"});
  EXPECT_NE(e.find("expected a number or \"auto\""), std::string::npos) << e;
}

TEST(Config, ListOverrideForms) {
  auto list = [](const std::string& value) {
    return parse("", {"--activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns=" + value})
        .activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns;
  };
  EXPECT_TRUE(list("").empty());
  EXPECT_EQ(list("moe.router.gate"), std::vector<std::string>{"moe.router.gate"});
  EXPECT_EQ(list("a, b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parse("", {"--activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns", ""})
                  .activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns.empty());
  EXPECT_NE(
      error_of_overrides({"--activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns=a,,b"})
          .find("per_op_sac_force_recompute_mm_by_fqns"),
      std::string::npos);
  // The config file's own form, a TOML array of strings, reads as the same
  // list; cut at its commas it would have been names with brackets and
  // quotes in them, which match no module.
  EXPECT_EQ(list("[\"attention.wq\", \"feed_forward.w1\"]"),
            (std::vector<std::string>{"attention.wq", "feed_forward.w1"}));
  EXPECT_EQ(list(" [\"a\"] "), std::vector<std::string>{"a"});
  EXPECT_TRUE(list("[]").empty());
  for (const std::string bad : {"[1, 2]", "[", "[\"a\", \"\"]", "[\"a\"] x", "\"wq\"", "a]"}) {
    const std::string e = error_of_overrides(
        {"--activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns=" + bad});
    EXPECT_NE(e.find("or a TOML array of strings"), std::string::npos) << bad << ": " << e;
  }
}

TEST(Config, LaterOverridesWinAndBareBoolIsTrue) {
  const JobConfig c = parse("", {"--training.steps=1", "--training.steps=2", "--checkpoint.enable",
                                 "--training.seed", "3"});
  EXPECT_EQ(c.training.steps, 2);
  EXPECT_TRUE(c.checkpoint.enable);
  EXPECT_EQ(c.training.seed, 3);
}

TEST(Config, UnknownKeysAndSectionsAreNamed) {
  std::string e = error_of_toml("[training]\nstepz = 3\n");
  EXPECT_NE(e.find("unknown key 'training.stepz' in test.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("known keys in [training]: local_batch_size, global_batch_size, seq_len, steps"),
            std::string::npos)
      << e;
  e = error_of_toml("[trainin]\nsteps = 3\n");
  EXPECT_NE(e.find("unknown section 'trainin'"), std::string::npos) << e;
  EXPECT_NE(e.find("known sections: job, model, training"), std::string::npos) << e;
  e = error_of_toml("steps = 3\n");
  EXPECT_NE(e.find("'steps'"), std::string::npos) << e;
  EXPECT_NE(e.find("[training]"), std::string::npos) << e;
  e = error_of_toml("[training.sub]\nx = 1\n");
  EXPECT_NE(e.find("training.sub"), std::string::npos) << e;
  e = error_of_overrides({"--training.stepz", "3"});
  EXPECT_NE(e.find("unknown key 'training.stepz' on the command line"), std::string::npos) << e;
  e = error_of_overrides({"--nosuch.key=1"});
  EXPECT_NE(e.find("unknown section 'nosuch'"), std::string::npos) << e;
}

TEST(Config, WrongTypesNameKeyValueAndType) {
  std::string e = error_of_toml("[training]\nsteps = \"ten\"\n");
  EXPECT_NE(e.find("training.steps = \"ten\""), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;
  e = error_of_toml("[training]\nsteps = 1.5\n");
  EXPECT_NE(e.find("training.steps = 1.5"), std::string::npos) << e;
  e = error_of_toml("[optimizer]\nlr = \"fast\"\n");
  EXPECT_NE(e.find("optimizer.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a number"), std::string::npos) << e;
  e = error_of_toml("[checkpoint]\nenable = 1\n");
  EXPECT_NE(e.find("checkpoint.enable"), std::string::npos) << e;
  EXPECT_NE(e.find("expected true or false"), std::string::npos) << e;
  e = error_of_toml("[model]\nflavor = 8\n");
  EXPECT_NE(e.find("model.flavor"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a string"), std::string::npos) << e;
  e = error_of_toml("[activation_checkpoint]\nper_op_sac_force_recompute_mm_by_fqns = [1]\n");
  EXPECT_NE(e.find("per_op_sac_force_recompute_mm_by_fqns"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a list of strings"), std::string::npos) << e;
  e = error_of_toml("training = 3\n");
  EXPECT_NE(e.find("expected a section [training]"), std::string::npos) << e;

  e = error_of_overrides({"--training.steps", "ten"});
  EXPECT_NE(e.find("training.steps = \"ten\""), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;
  e = error_of_overrides({"--optimizer.lr=abc"});
  EXPECT_NE(e.find("optimizer.lr = \"abc\""), std::string::npos) << e;
  e = error_of_overrides({"--optimizer.lr=1e999"});
  EXPECT_NE(e.find("optimizer.lr"), std::string::npos) << e;
  e = error_of_overrides({"--checkpoint.enable=yes"});
  EXPECT_NE(e.find("checkpoint.enable = \"yes\""), std::string::npos) << e;
  EXPECT_NE(e.find("expected true or false"), std::string::npos) << e;
  e = error_of_overrides({"--training.steps"});
  EXPECT_NE(e.find("--training.steps"), std::string::npos) << e;
  EXPECT_NE(e.find("needs a value"), std::string::npos) << e;
}

// toml++ 3.3.0 breaks its own preconditions on these (found by
// tests/fuzz/fuzz_config; assertions in a build with them): each is a syntax
// error, exit 2.
TEST(Config, TableHeadersThatCannotStartAKeyAndArraysOfBrace) {
  using namespace std::string_literals;
  for (const std::string& text : {"[="s, "[[="s, "[[[1]]]"s, "[[[a]]]"s, "[[[]]"s, "[ *]\n"s,
                                  "t=[}"s, "t = [1,}"s, "t=[[[[}]]]]"s, "t={a=[}]}"s,
                                  "y = 0535-05-27T\0\0\0\0"
                                  "07:32"s}) {
    const std::string e = error_of_toml(text);
    EXPECT_NE(e.find("TOML syntax error in test.toml at line 1"), std::string::npos)
        << text << " -> " << e;
  }
  const std::string e = error_of_toml("t = [ # a comment\n  }]");
  EXPECT_NE(e.find("at line 2, column 3: expected a value or ']' in an array, saw '}'"),
            std::string::npos)
      << e;
}

// toml++ 3.3.0 reaches __builtin_unreachable() on a non-ASCII character
// where it looks for whitespace (found by tests/fuzz/fuzz_config); remat
// reports those syntax errors itself, and accepts non-ASCII text wherever
// TOML does.
TEST(Config, NonAsciiOutsideStringsIsASyntaxError) {
  struct Case {
    std::string text, where;
  };
  const Case cases[] = {
      {"[training]\nsteps = 1111111\xcb\x9a\xce\xa2"
       "15.8",
       "line 2, column 16"},
      {"[training] \xc2\xa7\n", "line 1, column 12"},
      {"[job]\ndescription = \"x\" \xc2\xa7\n", "line 2, column 19"},
      {"[job]\n\xc3\xa9 = 1\n", "line 2, column 1"},
      {"[job]\ndescription = \"\"\"\\\n\xc2\xa7\"\"\"\n", "line 3, column 1"},
      {"[job]\ndescription = \"\"\"\\\xc2\xa7\"\"\"\n", "line 2, column 19"},
      // toml++ reads a bare value up to whitespace, ] } , or #, through quotes
      {"m = 0\x1f'ae\xc7\xb3", "line 1, column 10"},
      {"[job]\ndescription = 1979-05-27 \"\xc3\xa9\"\n", "line 2, column 27"},
      {"[job]\ndescription = [1\"\xc3\xa9\"]\n", "line 2, column 18"},
      {std::string("t=[[[[-\x00{'%{[\xef\xb9\xbf", 16), "line 1, column 14"},
      {"t = -{'\xc3\xa9'}", "line 1, column 8"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of_toml(c.text);
    EXPECT_NE(e.find("TOML syntax error in test.toml at " + c.where), std::string::npos)
        << c.text << " -> " << e;
  }
}

TEST(Config, NonAsciiInStringsAndCommentsIsFine) {
  const JobConfig c = parse(
      "\xEF\xBB\xBF# r\xc3\xa9sum\xc3\xa9 \xe2\x98\x83\n"
      "[job] # \xc2\xa7\n"
      "description = \"\"\"caf\xc3\xa9 \\\n   na\xc3\xafve\n\xc2\xa7\"\"\"\n"
      "dump_folder = '/tmp/\xc3\xa9t\xc3\xa9'\n"
      "[\"model\"]\n"
      "flavor = '''\xc2\xa7'''\n"
      "[activation_checkpoint]\n"
      "per_op_sac_force_recompute_mm_by_fqns = [\n"
      "  \"\xc3\xa9\", # \xc2\xa7\n"
      "  '\\\xc2\xa7',\n"
      "]\n");
  EXPECT_EQ(c.job.description, "caf\xc3\xa9 na\xc3\xafve\n\xc2\xa7");
  EXPECT_EQ(c.job.dump_folder, "/tmp/\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(c.model.flavor, "\xc2\xa7");
  EXPECT_EQ(c.activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns,
            (std::vector<std::string>{"\xc3\xa9", "\\\xc2\xa7"}));
}

TEST(Config, MalformedOverrides) {
  for (const std::string bad : {"training.steps", "-training.steps=1", "--steps=1", "--.steps=1",
                                "--training.=1", "--a.b.c=1", "--",
                                // shorter than "--" before an "=" (found by tests/fuzz/fuzz_cli)
                                "x=1", "-=", "=", ""}) {
    const std::string e = error_of_overrides({bad, "1"});
    EXPECT_NE(e.find("bad override '" + bad + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("--section.key"), std::string::npos) << e;
  }
}

TEST(Config, OutOfRangeValuesNameKeyValueAndExpectation) {
  struct Case {
    std::string override_arg, expected;
  };
  const Case cases[] = {
      {"--training.steps=-1", "training.steps = -1"},
      {"--training.seq_len=0", "training.seq_len = 0"},
      {"--training.local_batch_size=0", "training.local_batch_size = 0"},
      {"--training.threads=-2", "training.threads = -2"},
      {"--training.max_norm=0", "training.max_norm = 0"},
      {"--metrics.log_freq=0", "metrics.log_freq = 0"},
      {"--optimizer.lr=-0.1", "optimizer.lr = -0.1"},
      {"--optimizer.name=SGD", "optimizer.name = \"SGD\""},
      {"--optimizer.beta1=1", "optimizer.beta1 = 1"},
      {"--optimizer.beta2=-0.5", "optimizer.beta2 = -0.5"},
      {"--optimizer.eps=0", "optimizer.eps = 0"},
      {"--lr_scheduler.warmup_steps=-1", "lr_scheduler.warmup_steps = -1"},
      {"--lr_scheduler.decay_ratio=1.5", "lr_scheduler.decay_ratio = 1.5"},
      {"--lr_scheduler.decay_type=step", "lr_scheduler.decay_type = \"step\""},
      {"--activation_checkpoint.mode=some", "activation_checkpoint.mode = \"some\""},
      {"--activation_checkpoint.selective_ac_option=-1",
       "activation_checkpoint.selective_ac_option = \"-1\""},
      {"--activation_checkpoint.selective_ac_option=ops",
       "activation_checkpoint.selective_ac_option = \"ops\""},
      {"--activation_checkpoint.selective_op_ac_mm_flops_threshold=-1",
       "activation_checkpoint.selective_op_ac_mm_flops_threshold = -1"},
      {"--activation_checkpoint.memory_budget=lots", "activation_checkpoint.memory_budget"},
      {"--activation_checkpoint.memory_budget=1e30GiB", "activation_checkpoint.memory_budget"},
      {"--activation_checkpoint.cost_model=guess", "activation_checkpoint.cost_model"},
      {"--activation_checkpoint.budget_solver=greedy", "activation_checkpoint.budget_solver"},
      {"--memory.limit=1e30GiB", "memory.limit"},
      {"--model.name=gpt2", "model.name = \"gpt2\""},
      {"--parallelism.data_parallel_shard_degree=0", "parallelism.data_parallel_shard_degree = 0"},
      {"--checkpoint.interval=0", "checkpoint.interval = 0"},
      {"--memory.limit=16", "memory.limit = \"16\""},
  };
  for (const auto& c : cases) {
    const std::string e = error_of_overrides({c.override_arg});
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.override_arg << " -> " << e;
    EXPECT_NE(e.find("expected"), std::string::npos) << e;
    EXPECT_NE(e.find("on the command line"), std::string::npos) << e;
  }
  // A value from the file is blamed on the file.
  const std::string e = error_of_toml("[training]\nseq_len = -4\n");
  EXPECT_NE(e.find("training.seq_len = -4 (set in test.toml): expected an integer > 0"),
            std::string::npos)
      << e;
  // memory_budget mode needs a budget.
  EXPECT_NE(error_of_overrides({"--activation_checkpoint.mode=memory_budget"})
                .find("activation_checkpoint.memory_budget"),
            std::string::npos);
}

TEST(Config, BoundaryValuesAreAccepted) {
  const JobConfig c = parse("", {"--training.steps=0", "--optimizer.lr=0", "--optimizer.beta1=0",
                                 "--lr_scheduler.decay_ratio=0", "--training.threads=0",
                                 "--activation_checkpoint.selective_ac_option=0",
                                 "--activation_checkpoint.mode=memory_budget",
                                 "--activation_checkpoint.memory_budget=0.0"});
  EXPECT_EQ(c.activation_checkpoint.selective_ac_option, "0");
  for (const std::string mode : {"none", "full", "selective"})
    EXPECT_EQ(parse("", {"--activation_checkpoint.mode=" + mode}).activation_checkpoint.mode, mode);
  for (const std::string type : {"linear", "sqrt", "cosine"})
    EXPECT_EQ(parse("", {"--lr_scheduler.decay_type=" + type}).lr_scheduler.decay_type, type);
}

TEST(Config, TomlSyntaxErrorGivesLineAndColumn) {
  const std::string e = error_of_toml("[training]\nsteps = = 3\n");
  EXPECT_NE(e.find("test.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("column"), std::string::npos) << e;
}

TEST(Config, FileErrors) {
  const fs::path dir = fresh_dir();
  const std::string missing = (dir / "nope.toml").string();
  std::string e = error_of([&] { load_job_config(missing, {}); });
  EXPECT_NE(e.find("cannot read config file '" + missing + "': no such file"), std::string::npos)
      << e;
  const std::string folder = dir.string();
  e = error_of([&] { load_job_config(folder, {}); });
  EXPECT_NE(e.find(folder), std::string::npos) << e;
  EXPECT_NE(e.find("is a directory, expected a TOML file"), std::string::npos) << e;

  const std::string good = (dir / "good.toml").string();
  std::ofstream(good) << "[training]\nsteps = 4\n";
  EXPECT_EQ(load_job_config(good, {"--training.seed=9"}).training.seed, 9);
  EXPECT_EQ(load_job_config(good, {}).training.steps, 4);
  const std::string bad = (dir / "bad.toml").string();
  std::ofstream(bad) << "[training]\nstepz = 4\n";
  e = error_of([&] { load_job_config(bad, {}); });
  EXPECT_NE(e.find("in " + bad), std::string::npos) << e;
}

TEST(Config, ShippedConfigsLoad) {
  const fs::path configs = fs::path(__FILE__).parent_path().parent_path().parent_path() / "configs";
  ASSERT_TRUE(fs::is_directory(configs)) << configs;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(configs)) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    const JobConfig c = load_job_config(entry.path().string(), {});
    EXPECT_EQ(c.model.name.substr(0, 5), "llama");
    ++count;
  }
  EXPECT_GE(count, 4);
  const JobConfig debug = load_job_config((configs / "llama3_debug.toml").string(), {});
  EXPECT_EQ(debug.model.flavor, "debugmodel");
  EXPECT_EQ(debug.training.seq_len, 256);
  EXPECT_EQ(debug.training.local_batch_size, 8);
  EXPECT_EQ(debug.training.steps, 100);
  EXPECT_EQ(debug.activation_checkpoint.selective_ac_option, "op");
  EXPECT_EQ(debug.metrics.log_freq, 10);
  const JobConfig big = load_job_config((configs / "llama3_405b.toml").string(), {});
  EXPECT_EQ(big.model.flavor, "405B");
  EXPECT_EQ(big.model.vocab_size, 128256);
  EXPECT_EQ(big.training.seq_len, 8192);
  EXPECT_EQ(big.optimizer.lr, 8e-5);
  EXPECT_EQ(big.lr_scheduler.warmup_steps, 200);
}

// torchtitan's train_configs run unchanged (spec.md §1, issue 13): its keys
// are accepted, and those this engine does not honor are listed, once each.
TEST(Config, TorchtitanKeysAreAcceptedAndTheIgnoredOnesListed) {
  const JobConfig c = parse(
      "[job]\nprint_args = true\nuse_for_integration_test = true\n"
      "[training]\ncompile = false\n"
      "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 8\n"
      "pipeline_parallel_degree = 1\nfsdp_reshard_after_forward = \"default\"\n"
      "[checkpoint]\nenable_checkpoint = true\nasync_mode = \"async\"\n"
      "[float8]\nfilter_fqns = [\"output\"]\n"
      "[profiling]\nenable_profiling = true\n"
      "[metrics]\ndisable_color_printing = true\n");
  EXPECT_TRUE(c.job.print_args);
  EXPECT_TRUE(c.checkpoint.enable);
  EXPECT_TRUE(c.profiling.enable_profiling);
  EXPECT_TRUE(c.metrics.disable_color_printing);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, 1);
  // compile = false, a degree of 1 and "default" ask for nothing remat lacks.
  EXPECT_EQ(format_ignored_keys(c),
            "ignored on this engine: job.use_for_integration_test (not built), "
            "parallelism.tensor_parallel_degree (not built), float8.filter_fqns (GPU-only)");
  EXPECT_EQ(c.checkpoint.async_mode, "async");  // honored (train/background_save.h)
  EXPECT_EQ(format_ignored_keys(parse("")), "");
  EXPECT_EQ(parse("", {"--training.compile"}).ignored_keys,
            std::vector<std::string>{"training.compile (GPU-only)"});
}

// checkpoint.exclude_from_loading: an empty list asks for nothing; a
// non-empty one is listed (the whole checkpoint is loaded).
TEST(Config, ExcludeFromLoadingIsListedOnlyWhenItExcludesSomething) {
  EXPECT_EQ(format_ignored_keys(parse("[checkpoint]\nexclude_from_loading = []\n")), "");
  EXPECT_EQ(format_ignored_keys(parse("[checkpoint]\nexclude_from_loading = [\"dataloader\"]\n")),
            "ignored on this engine: checkpoint.exclude_from_loading (not built)");
}

TEST(Config, TorchtitanKeysAreTypeChecked) {
  std::string e = error_of_toml("[parallelism]\ntensor_parallel_degree = \"8\"\n");
  EXPECT_NE(e.find("parallelism.tensor_parallel_degree = \"8\""), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;
  e = error_of_overrides({"--training.compile", "maybe"});
  EXPECT_NE(e.find("expected true or false"), std::string::npos) << e;
  e = error_of_toml("[parallelism]\ndata_parallel_shard_degree = -2\n");
  EXPECT_NE(e.find("or -1"), std::string::npos) << e;
}

TEST(Config, TyposGetADidYouMean) {
  std::string e = error_of_toml("[training]\nstepz = 3\n");
  EXPECT_NE(e.find("did you mean 'training.steps'?"), std::string::npos) << e;
  e = error_of_toml("[checkpoint]\nenable_checkpont = true\n");
  EXPECT_NE(e.find("did you mean 'checkpoint.enable_checkpoint'?"), std::string::npos) << e;
  e = error_of_toml("[training]\nlr = 0.1\n");  // right key, wrong section
  EXPECT_NE(e.find("did you mean 'optimizer.lr'?"), std::string::npos) << e;
  e = error_of_toml("[trainin]\nsteps = 3\n");
  EXPECT_NE(e.find("did you mean [training]?"), std::string::npos) << e;
  e = error_of_overrides({"--flaot8.filter_fqns", "output"});
  EXPECT_NE(e.find("did you mean [float8]?"), std::string::npos) << e;
  e = error_of_toml("[training]\nxyzzy_quux = 3\n");  // nothing near: no guess
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
}

TEST(Config, ResolvedConfigPrintsAsTomlThatReadsBack) {
  const JobConfig c = parse(
      "[job]\ndescription = \"a \\\"quoted\\\" \\\\ tab\\there\"\n"
      "[activation_checkpoint]\nselective_op_ac_mm_flops_threshold = \"auto\"\n"
      "per_op_sac_force_recompute_mm_by_fqns = [\"a\", \"b*c\"]\n",
      {"--optimizer.lr", "3e-4", "--checkpoint.enable_checkpoint"});
  const std::string toml = format_job_config(c);
  EXPECT_NE(toml.find("[training]\nlocal_batch_size = 8\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("enable = true\n"), std::string::npos) << toml;
  EXPECT_EQ(toml.find("enable_checkpoint"), std::string::npos) << toml;  // an alias
  EXPECT_EQ(format_job_config(parse(toml)), toml);
  EXPECT_EQ(parse(toml).job.description, c.job.description);
  EXPECT_EQ(parse(toml).optimizer.lr, 3e-4);
}

// Data parallelism under mpirun: the replicate degree and torchtitan's
// [comm] timeouts are checked like any key (the trainer checks the degrees
// against the ranks).
TEST(Config, DataParallelKeys) {
  const JobConfig c = parse("[parallelism]\ndata_parallel_replicate_degree = 2\n",
                            {"--comm.train_timeout_seconds", "5"});
  EXPECT_EQ(c.parallelism.data_parallel_replicate_degree, 2);
  EXPECT_EQ(c.comm.train_timeout_seconds, 5);
  EXPECT_EQ(c.comm.init_timeout_seconds, 300);
  EXPECT_EQ(format_ignored_keys(c), "");
  for (const char* bad : {"--parallelism.data_parallel_replicate_degree=0",
                          "--comm.init_timeout_seconds=0", "--comm.train_timeout_seconds=-1"}) {
    const std::string e = error_of_overrides({bad});
    const std::string key = std::string(bad).substr(2, std::string(bad).find('=') - 2);
    EXPECT_NE(e.find(key), std::string::npos) << bad << " -> " << e;
    EXPECT_NE(e.find("expected"), std::string::npos) << e;
  }
}

// checkpoint.format: "auto" by default (sharded only when the state is),
// the two formats by name, anything else an error naming the choices.
TEST(Config, CheckpointFormatIsOneOfThree) {
  EXPECT_EQ(parse("", {}).checkpoint.format, "auto");
  for (const std::string format : {"auto", "sharded", "single_file"})
    EXPECT_EQ(parse("", {"--checkpoint.format=" + format}).checkpoint.format, format);
  const std::string e = error_of_overrides({"--checkpoint.format=dcp"});
  EXPECT_NE(e.find("checkpoint.format = \"dcp\""), std::string::npos) << e;
  EXPECT_NE(e.find("\"auto\", \"sharded\" or \"single_file\""), std::string::npos) << e;
}

}  // namespace
}  // namespace remat
