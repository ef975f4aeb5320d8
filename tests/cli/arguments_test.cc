#include "cli/arguments.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace remat {
namespace {

TEST(CommandLine, TrainSplitsConfigFromOverrides) {
  const CommandLine c = parse_command_line(
      {"train", "--training.steps", "3", "--config", "a.toml", "--model.dim=64"});
  EXPECT_EQ(c.command, "train");
  EXPECT_EQ(c.config_path, "a.toml");
  EXPECT_EQ(c.overrides, (std::vector<std::string>{"--training.steps", "3", "--model.dim=64"}));
  EXPECT_TRUE(c.extra.empty());
}

TEST(CommandLine, ConfigWithEqualsAndLastOneWins) {
  EXPECT_EQ(parse_command_line({"eval", "--config=x.toml", "--config", "y.toml"}).config_path,
            "y.toml");
}

TEST(CommandLine, PlanFlagsAnywhere) {
  const CommandLine c = parse_command_line(
      {"plan", "--mm", "--config", "a.toml", "--json", "--pareto=f.svg", "--torchtitan"});
  EXPECT_TRUE(c.json && c.matmuls && c.torchtitan);
  EXPECT_EQ(c.extra.at("pareto"), "f.svg");
  EXPECT_TRUE(c.overrides.empty());
}

// A value after a flag that takes none is named, not read as a stray
// override ("bad override 'true'").
TEST(CommandLine, FlagsWithoutValuesRefuseOne) {
  auto message = [](const std::vector<std::string>& args) {
    try {
      parse_command_line(args);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({"generate", "--config", "a", "--ids", "true", "--prompt", "x"})
                .find("--ids takes no value (given, it is on), but 'true' follows it"),
            std::string::npos);
  EXPECT_NE(message({"plan", "--config", "a", "--json", "1"}).find("--json takes no value"),
            std::string::npos);
  EXPECT_EQ(message({"generate", "--ids", "--config", "a", "--prompt", "x"}), "accepted");
  EXPECT_EQ(message({"plan", "--json", "--mm", "--config", "a"}), "accepted");
}

TEST(CommandLine, PlanTimelineAndItsComparison) {
  const CommandLine c = parse_command_line(
      {"plan", "--config", "a.toml", "--timeline", "t.svg", "--timeline-compare=none"});
  EXPECT_EQ(c.extra.at("timeline"), "t.svg");
  EXPECT_EQ(c.extra.at("timeline-compare"), "none");
  EXPECT_TRUE(c.overrides.empty());
  // A comparison has nothing to be drawn beside without a timeline.
  EXPECT_THROW(parse_command_line({"plan", "--config", "a", "--timeline-compare", "none"}),
               InputError);
}

TEST(CommandLine, GradsNeedsTokensAndOut) {
  const CommandLine c =
      parse_command_line({"grads", "--config", "a.toml", "--tokens", "t.npy", "--out", "g"});
  EXPECT_EQ(c.extra.at("tokens"), "t.npy");
  EXPECT_EQ(c.extra.at("out"), "g");
  EXPECT_THROW(parse_command_line({"grads", "--config", "a.toml", "--tokens", "t.npy"}),
               InputError);
}

TEST(CommandLine, HelpNeedsNothingElse) {
  EXPECT_EQ(parse_command_line({"--help"}).command, "help");
  EXPECT_EQ(parse_command_line({"-h", "junk"}).command, "help");
  // After a command too: the usage, not "missing --config".
  EXPECT_EQ(parse_command_line({"train", "--help"}).command, "help");
  EXPECT_EQ(parse_command_line({"plan", "--config", "a.toml", "-h"}).command, "help");
}

// The commands dispatch() handles before parse_command_line are named too.
TEST(CommandLine, UnknownCommandListsEveryCommand) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{}, std::vector<std::string>{"fly", "--config", "a.toml"}}) {
    try {
      parse_command_line(args);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(
          std::string(e.what()).find("train, eval, plan, grads, generate, tokenizer or checkpoint"),
          std::string::npos)
          << e.what();
    }
  }
}

TEST(CommandLine, EmptyTimelineComparisonIsRefused) {
  EXPECT_THROW(parse_command_line(
                   {"plan", "--config", "a", "--timeline", "t.svg", "--timeline-compare", ""}),
               InputError);
}

TEST(CommandLine, BadLinesAreInputErrors) {
  EXPECT_THROW(parse_command_line({}), InputError);
  EXPECT_THROW(parse_command_line({"fly", "--config", "a.toml"}), InputError);
  EXPECT_THROW(parse_command_line({"train"}), InputError);
  EXPECT_THROW(parse_command_line({"train", "--config"}), InputError);
  EXPECT_THROW(parse_command_line({"train", "--config="}), InputError);
  EXPECT_THROW(parse_command_line({"plan", "--config", "a.toml", "--pareto"}), InputError);
  // --pareto belongs to plan only: elsewhere it is an override for the config loader.
  EXPECT_EQ(parse_command_line({"train", "--config", "a", "--pareto", "p"}).overrides.size(), 2u);
}

}  // namespace
}  // namespace remat
