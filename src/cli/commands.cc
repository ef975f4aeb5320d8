#include "cli/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "cli/checkpoint_command.h"
#include "cli/generate_command.h"
#include "cli/tokenizer_command.h"
#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "dist/comm.h"
#include "io/config.h"
#include "io/files.h"
#include "io/tokenizer.h"
#include "kernels/cpu/kernels.h"
#include "planner/pareto_output.h"
#include "planner/plan_command.h"
#include "planner/timeline_output.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "train/evaluate.h"
#include "train/profile_trace.h"
#include "train/trainer.h"

namespace remat {

namespace {

// plan's flags; --pareto's path is checked before the config is read.
PlanCommandOptions plan_options(const CommandLine& c) {
  PlanCommandOptions options;
  options.json = c.json;
  options.matmuls = c.matmuls;
  options.torchtitan = c.torchtitan;
  options.command_line_keys = override_keys(c.overrides);
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
  if (options.maximize_throughput && (c.extra.count("pareto") || c.extra.count("timeline")))
    throw InputError(
        "--maximize throughput writes no --pareto or --timeline file (they picture one batch "
        "size's plans); expected either the search or the pictures, in separate runs");
  // Each output is written whole and renamed into place, so two outputs at
  // one path would leave only the last: one of them silently lost.
  if (!options.pareto_path.empty() && !options.timeline_path.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    auto resolved = [&](const std::string& path) {
      return fs::weakly_canonical(fs::absolute(path, ec), ec);
    };
    const fs::path pareto = resolved(options.pareto_path);
    // A timeline .svg writes its .json beside it: that file is the timeline's too.
    for (const std::string& timeline_file :
         {options.timeline_path, json_path_of(options.timeline_path)}) {
      if (!ec && pareto == resolved(timeline_file))
        throw InputError(
            "--pareto and --timeline both name '" + timeline_file + "'" +
            (timeline_file == options.timeline_path
                 ? std::string()
                 : " (the .json the timeline writes beside '" + options.timeline_path + "')") +
            ": expected a file for each");
    }
  }
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

// The REMAT_* variables are checked whatever the command, so a bad value is
// never silently ignored by a command that does not use it; a name remat
// does not read (a typo: REMAT_PROFLIE=1) is warned about.
void check_environment() {
  cpu::check_kernel_environment();
  profiling_asked_by_environment();
  static const char* const kKnown[] = {"REMAT_MAX_ISA", "REMAT_FP32_GEMM", "REMAT_BF16_KERNEL",
                                       "REMAT_WORK_STEALING", "REMAT_PROFILE"};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!entry.starts_with("REMAT_")) continue;
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(std::begin(kKnown), std::end(kKnown), name) == std::end(kKnown))
      std::fprintf(stderr,
                   "warning: %s is not a variable remat reads (known: REMAT_MAX_ISA, "
                   "REMAT_FP32_GEMM, REMAT_BF16_KERNEL, REMAT_WORK_STEALING, REMAT_PROFILE); "
                   "ignored\n",
                   name.c_str());
  }
}

// The checkpoint a training run starts from when checkpoint.load names
// none: with checkpointing on, the latest in its folder (or
// checkpoint.load_step's), as torchtitan resumes; else, where the folder has
// none, checkpoint.initial_load_path. Sets checkpoint.load; says which.
void choose_starting_checkpoint(JobConfig& config, FILE* notes) {
  if (config.checkpoint.enable && config.checkpoint.load.empty() &&
      !config.checkpoint.create_seed_checkpoint) {
    const FoundCheckpoint latest = checkpoint_to_resume(config);
    config.checkpoint.load = latest.path;
    config.checkpoint.load_found_in_folder = !latest.path.empty();
    if (config.checkpoint.load_found_in_folder) {
      if (config.checkpoint.load_step >= 0)
        std::fprintf(notes, "resuming from %s (checkpoint.load_step)\n", latest.path.c_str());
      else
        std::fprintf(notes,
                     "resuming from %s, the latest checkpoint in checkpoint.folder (as "
                     "torchtitan does; checkpoint.load names another, a new job.dump_folder "
                     "starts afresh)\n",
                     latest.path.c_str());
      int64_t recorded = 0;
      try {
        recorded = read_checkpoint_info(latest.path).step;
      } catch (const InputError& e) {
        throw resume_error(config, e);
      }
      // Its saves would take the names of the steps after the one it
      // records, and replace the files there: a renamed file is not resumed.
      if (recorded != latest.step)
        throw resume_error(
            config, InputError("checkpoint error: '" + latest.path + "' records step " +
                               std::to_string(recorded) + ", not the " +
                               std::to_string(latest.step) + " of its name (a renamed file?)"));
    }
  }
  // torchtitan's initial load: only where the run has no save of its own to resume.
  if (config.checkpoint.load.empty() && !config.checkpoint.initial_load_path.empty() &&
      !config.checkpoint.create_seed_checkpoint) {
    config.checkpoint.load = config.checkpoint.initial_load_path;
    config.checkpoint.load_weights_only = config.checkpoint.initial_load_model_weights_only;
    std::fprintf(notes, "starting from %s (checkpoint.initial_load_path%s)\n",
                 config.checkpoint.load.c_str(),
                 config.checkpoint.load_weights_only
                     ? ", its weights only: step 0, fresh AdamW moments, the data from its start"
                     : ", its whole state");
  }
}

int dispatch(int argc, char** argv, Communicator& comm) {
  check_environment();
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  if (!args.empty() && args[0] == "tokenizer")  // needs no job config
    return run_tokenizer_command({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "checkpoint") {  // needs no job config either
    if (comm.size() > 1)
      throw InputError("`remat checkpoint` runs in one process (run it without mpirun)");
    return run_checkpoint_command({args.begin() + 1, args.end()});
  }
  const CommandLine c = parse_command_line(args);
  if (comm.size() > 1 && c.command != "train")
    throw InputError("`remat " + c.command +
                     "` runs in one process: under mpirun only `remat train` runs (run this "
                     "command without mpirun)");
  if (c.command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const PlanCommandOptions plan = c.command == "plan" ? plan_options(c) : PlanCommandOptions{};
  const GenerateFlags generate =
      c.command == "generate" ? parse_generate_flags(c) : GenerateFlags{};
  JobConfig config = load_job_config(c.config_path, c.overrides);
  comm.set_timeout(config.comm.init_timeout_seconds);
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
  if (c.command == "train") choose_starting_checkpoint(config, notes);
  note_job_inputs(config);  // before planning, which may write a cost cache
  print_startup(config, notes);
  if (c.command == "train") return run_train(config, comm);  // ends the malloc warm-up itself
  end_malloc_warm_up();
  if (c.command == "eval") return run_eval(config);
  if (c.command == "plan") return run_plan(config, plan);
  if (c.command == "generate") return run_generate(config, generate);
  // grads (parse_command_line accepts no other command)
  return run_dump_gradients(config, c.extra.at("tokens"), c.extra.at("out"));
}

// Bad input: exit status 2, the message printed once (dist/comm.h). Under
// mpirun before the inputs are agreed, by the lowest rank that saw bad
// input; after, the job ends on this rank's word.
int input_failure(Communicator& comm, const std::string& message) {
  std::fflush(stdout);
  if (comm.size() > 1 && comm.inputs_confirmed()) {
    std::fprintf(stderr, "error: rank %d: %s\n", comm.rank(), printable(message).c_str());
    comm.abort(2);
  }
  if (comm.size() == 1 || reject_inputs(comm))
    std::fprintf(stderr, "error: %s\n", printable(message).c_str());
  return 2;
}

// Anything else ends the whole job: a rank that returned alone would leave
// its peers waiting in a collective.
int failure(Communicator& comm, const char* kind, const std::string& message) {
  std::fflush(stdout);
  const std::string rank = comm.size() > 1 ? "rank " + std::to_string(comm.rank()) + ": " : "";
  std::fprintf(stderr, "%s%s%s\n", kind, rank.c_str(), printable(message).c_str());
  if (comm.size() > 1) comm.abort(1);
  return 1;
}

}  // namespace

int run_cli(int argc, char** argv) {
  try {
    Communicator& comm = world();
    // One rank speaks for the job on stdout; errors keep stderr on every rank.
    if (comm.rank() > 0 && !std::freopen("/dev/null", "w", stdout))
      throw std::runtime_error("cannot silence stdout on rank " + std::to_string(comm.rank()));
    try {
      const ProtectedInputs inputs;  // no output of the command replaces a file it read
      return dispatch(argc, argv, comm);
    } catch (const InputsRejected&) {
      return 2;  // the rank that saw the bad input printed it
    } catch (const InputError& e) {
      return input_failure(comm, e.what());
    } catch (const CommError& e) {
      return failure(comm, "error: ", e.what());  // its message names the rank
    } catch (const OutputError& e) {
      return failure(comm, "error: ", e.what());  // disk full and the like
    } catch (const std::bad_alloc&) {
      // Not a bug: the system had less memory to give than the start-up
      // check counted on, which sees physical RAM and memory.limit only.
      return failure(comm, "error: ",
                     "out of memory: the system refused an allocation (std::bad_alloc). The "
                     "start-up check compares the plan's peak with physical RAM or "
                     "memory.limit; a limit it does not see (ulimit -v, a cgroup) or other "
                     "processes can leave less. `remat plan` shows the peak of each AC mode; "
                     "a smaller training.local_batch_size, or an AC mode that keeps less, "
                     "needs less");
    } catch (const std::exception& e) {
      return failure(comm, "internal error: ", e.what());
    }
  } catch (const std::exception& e) {  // MPI could not start
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace remat
