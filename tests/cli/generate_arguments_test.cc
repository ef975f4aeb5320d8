// `remat generate`'s command line: its flags are pulled out of the config
// overrides (a prompt may look like a flag), and their values are checked
// before any config is read.
#include <gtest/gtest.h>

#include "cli/arguments.h"
#include "cli/generate_command.h"
#include "core/error.h"

namespace remat {
namespace {

GenerateFlags flags_of(std::vector<std::string> args) {
  args.insert(args.begin(), {"generate", "--config", "a.toml"});
  return parse_generate_flags(parse_command_line(args));
}

TEST(GenerateArguments, FlagsAreNotConfigOverrides) {
  const CommandLine c =
      parse_command_line({"generate", "--config", "a.toml", "--prompt", "--top_k 3", "--ids",
                          "--checkpoint.load=w", "--temperature=0.5", "--top_p", "0.9", "--seed",
                          "4", "--max_new_tokens", "9", "--top_k", "7"});
  EXPECT_EQ(c.overrides, (std::vector<std::string>{"--checkpoint.load=w"}));
  const GenerateFlags f = parse_generate_flags(c);
  EXPECT_EQ(f.prompt, "--top_k 3");
  EXPECT_TRUE(f.ids);
  EXPECT_EQ(f.sampling.temperature, 0.5);
  EXPECT_EQ(f.sampling.top_p, 0.9);
  EXPECT_EQ(f.sampling.top_k, 7);
  EXPECT_EQ(f.sampling.seed, 4u);
  EXPECT_EQ(f.max_new_tokens, 9);
}

TEST(GenerateArguments, Defaults) {
  const GenerateFlags f = flags_of({"--prompt", "x"});
  EXPECT_EQ(f.max_new_tokens, 100);
  EXPECT_EQ(f.sampling.temperature, 1.0);
  EXPECT_EQ(f.sampling.top_k, 0);
  EXPECT_EQ(f.sampling.top_p, 1.0);
  EXPECT_EQ(f.sampling.seed, 0u);
  EXPECT_FALSE(f.ids);
}

TEST(GenerateArguments, BadValuesAreInputErrors) {
  EXPECT_THROW(parse_command_line({"generate", "--config", "a.toml"}), InputError);
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--prompt", ""},
           {"--prompt", "x", "--temperature", "-0.1"},
           {"--prompt", "x", "--temperature", "inf"},
           {"--prompt", "x", "--temperature", "1x"},
           {"--prompt", "x", "--top_p", "0"},
           {"--prompt", "x", "--top_p", "1.01"},
           {"--prompt", "x", "--top_k", "-1"},
           {"--prompt", "x", "--seed", "-1"},
           {"--prompt", "x", "--seed", ""},
           {"--prompt", "x", "--max_new_tokens", "0"},
           {"--prompt", "x", "--max_new_tokens", "99999999999999999999"}}) {
    EXPECT_THROW(flags_of(bad), InputError) << bad[bad.size() - 2] << " " << bad.back();
  }
  EXPECT_EQ(flags_of({"--prompt", "x", "--temperature", "0"}).sampling.temperature, 0.0);
  EXPECT_EQ(flags_of({"--prompt", "x", "--top_p", "1"}).sampling.top_p, 1.0);
}

}  // namespace
}  // namespace remat
