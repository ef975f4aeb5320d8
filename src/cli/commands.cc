#include "cli/commands.h"

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "planner/pareto_output.h"
#include "planner/plan_command.h"
#include "train/trainer.h"

namespace remat {

namespace {

const char* kUsage =
    "usage: remat <command> --config FILE [--section.key value ...]\n"
    "commands:\n"
    "  train   train the model the config describes\n"
    "  eval    print the validation loss of --checkpoint.load on --validation.dataset\n"
    "  plan    predict peak memory and recompute per AC mode without running;\n"
    "          --json for tools, --mm for the matmul table, --torchtitan for bf16 x 8 ranks,\n"
    "          --pareto FILE.svg|.csv|.json for the memory_budget front,\n"
    "          --explain for each value the plan keeps or rebuilds,\n"
    "          --maximize throughput for the batch size and plan with the most tokens/s\n"
    "  grads   one forward/backward pass; --tokens FILE.npy --out FILE.safetensors\n"
    "          (the gradient dump the PyTorch oracle test compares)\n"
    "Any config key can be overridden as --section.key value or --section.key=value.\n";

struct Arguments {
  std::string command;
  std::string config_path;
  std::map<std::string, std::string> extra;  // command-specific flags
  std::vector<std::string> overrides;
};

// Splits argv into the command, --config, command-specific flags and config
// overrides (everything else, checked by the config loader).
Arguments parse_arguments(int argc, char** argv, const std::vector<std::string>& extra_flags) {
  Arguments a;
  if (argc < 2) throw InputError(std::string("missing command\n") + kUsage);
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    bool is_extra = arg == "--config";
    for (const std::string& f : extra_flags) is_extra = is_extra || arg == "--" + f;
    if (!is_extra) {
      a.overrides.push_back(argv[i]);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) throw InputError("option " + arg + " needs a value");
      value = argv[++i];
    }
    if (arg == "--config") {
      a.config_path = value;
    } else {
      a.extra[arg.substr(2)] = value;
    }
  }
  if (a.config_path.empty()) {
    throw InputError("missing --config FILE (e.g. --config configs/llama3_debug.toml)");
  }
  return a;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) throw InputError(std::string("missing command (expected train, eval, plan or grads)\n") + kUsage);
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "train" || command == "eval") {
    Arguments a = parse_arguments(argc, argv, {});
    JobConfig config = load_job_config(a.config_path, a.overrides);
    return command == "train" ? run_train(config) : run_eval(config);
  }
  if (command == "plan") {
    // Flags without values: pulled out before the config overrides.
    PlanCommandOptions options;
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--json") {
        options.json = true;
      } else if (arg == "--mm") {
        options.matmuls = true;
      } else if (arg == "--torchtitan") {
        options.torchtitan = true;
      } else if (arg == "--explain") {
        options.explain = true;
      } else {
        rest.push_back(argv[i]);
      }
    }
    Arguments a =
        parse_arguments(static_cast<int>(rest.size()), rest.data(), {"pareto", "maximize"});
    if (a.extra.count("maximize")) {
      if (a.extra["maximize"] != "throughput") {
        throw InputError("--maximize " + a.extra["maximize"] + ": expected \"throughput\"");
      }
      options.maximize_throughput = true;
    }
    if (a.extra.count("pareto")) {
      options.pareto_path = a.extra["pareto"];
      check_pareto_path(options.pareto_path);
    }
    return run_plan(load_job_config(a.config_path, a.overrides), options);
  }
  if (command == "grads") {
    Arguments a = parse_arguments(argc, argv, {"tokens", "out"});
    if (!a.extra.count("tokens") || !a.extra.count("out")) {
      throw InputError("grads needs --tokens FILE.npy and --out FILE.safetensors");
    }
    JobConfig config = load_job_config(a.config_path, a.overrides);
    return run_dump_gradients(config, a.extra["tokens"], a.extra["out"]);
  }
  throw InputError("unknown command '" + command + "' (expected train, eval, plan or grads)\n" +
                   kUsage);
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
