#include "cli/commands.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "cli/generate_command.h"
#include "cli/tokenizer_command.h"
#include "core/error.h"
#include "io/config.h"
#include "io/tokenizer.h"
#include "planner/pareto_output.h"
#include "planner/plan_command.h"
#include "planner/timeline_output.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace remat {

namespace {

// plan's flags; --pareto's path is checked before the config is read.
PlanCommandOptions plan_options(const CommandLine& c) {
  PlanCommandOptions options;
  options.json = c.json;
  options.matmuls = c.matmuls;
  options.torchtitan = c.torchtitan;
  options.explain = c.explain;
  options.maximize_throughput = c.extra.count("maximize") > 0;
  if (auto it = c.extra.find("pareto"); it != c.extra.end()) {
    options.pareto_path = it->second;
    check_pareto_path(options.pareto_path);
  }
  if (auto it = c.extra.find("timeline"); it != c.extra.end()) {
    options.timeline_path = it->second;
    check_timeline_path(options.timeline_path);
  }
  if (auto it = c.extra.find("timeline-compare"); it != c.extra.end())
    options.timeline_compare = it->second;
  return options;
}

// What a run says about its config before anything else: the torchtitan keys
// it ignores (one line) and, with job.print_args, the resolved config. On
// stderr when stdout carries JSON (plan --json) or generated text, so that
// output stays clean.
void print_startup(const JobConfig& config, FILE* out) {
  const std::string ignored = format_ignored_keys(config);
  if (!ignored.empty()) std::fprintf(out, "%s\n", ignored.c_str());
  if (config.job.print_args) {
    std::fprintf(out, "resolved config (job.print_args):\n%s", format_job_config(config).c_str());
  }
  std::fflush(out);
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  if (!args.empty() && args[0] == "tokenizer")  // needs no job config
    return run_tokenizer_command({args.begin() + 1, args.end()});
  const CommandLine c = parse_command_line(args);
  if (c.command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const PlanCommandOptions plan = c.command == "plan" ? plan_options(c) : PlanCommandOptions{};
  const GenerateFlags generate =
      c.command == "generate" ? parse_generate_flags(c) : GenerateFlags{};
  JobConfig config = load_job_config(c.config_path, c.overrides);
  // stdout carries only the JSON of plan --json and only the text of generate.
  FILE* notes = plan.json || c.command == "generate" ? stderr : stdout;
  // Planning reads no data: a torchtitan config naming a tokenizer that is
  // not on this machine still plans, at the flavor's vocabulary size.
  const std::string& tokenizer_path = config.model.tokenizer_path;
  if (c.command == "plan" && !tokenizer_path.empty() && !std::filesystem::exists(tokenizer_path)) {
    std::fprintf(notes,
                 "model.tokenizer_path \"%s\" is not on this machine: planning with the "
                 "flavor's vocab_size\n",
                 tokenizer_path.c_str());
    config.model.tokenizer_path.clear();
  }
  resolve_tokenizer(config);
  print_startup(config, notes);
  if (c.command == "train") return run_train(config);
  if (c.command == "eval") return run_eval(config);
  if (c.command == "plan") return run_plan(config, plan);
  if (c.command == "generate") return run_generate(config, generate);
  // grads (parse_command_line accepts no other command)
  return run_dump_gradients(config, c.extra.at("tokens"), c.extra.at("out"));
}

}  // namespace

int run_cli(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const InputError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
}

}  // namespace remat
