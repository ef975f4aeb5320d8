#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "planner/job_options.h"
#include "planner/setup.h"
#include "train/checkpoint.h"
#include "train/session.h"

namespace remat {

double mean_eval_loss(Executor& executor, std::span<const int32_t> tokens, int64_t seq_len,
                      int64_t rows) {
  std::vector<int32_t> inputs(seq_len), targets(seq_len);
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    fill_eval_rows(tokens, seq_len, r, 1, inputs, targets);
    sum += executor.run(Batch{inputs.data(), targets.data()});
  }
  return sum / static_cast<double>(rows);
}

int non_finite_logits(const std::string& what, const std::string& checkpoint,
                      const std::string& consequence) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s: the weights in %s give NaN or infinite logits%s%s\n",
               what.c_str(), checkpoint.c_str(), consequence.empty() ? "" : "; ",
               consequence.c_str());
  return 1;
}

int run_eval(const JobConfig& config) {
  if (config.checkpoint.load.empty()) {
    throw InputError("eval needs weights: pass --checkpoint.load FILE.safetensors");
  }
  if (config.validation.dataset.empty()) {
    throw InputError("eval needs data: pass --validation.dataset FILE (.npy token ids or text)");
  }
  const int64_t seq = config.training.seq_len;
  const Setup setup = make_setup(config, /*batch=*/1, Pass::kForwardOnly);
  TokenDataset data = load_token_file(config.validation.dataset, config.model.tokenizer,
                                      setup.model.summary.vocab_size);
  int64_t rows = count_eval_rows(static_cast<int64_t>(data.tokens.size()), seq);
  if (config.validation.steps > 0) rows = std::min(rows, config.validation.steps);
  if (rows == 0) {
    throw InputError("eval: '" + config.validation.dataset + "' has " +
                     std::to_string(data.tokens.size()) +
                     " tokens, expected at least seq_len + 1 = " + std::to_string(seq + 1));
  }
  read_checkpoint_info(config.checkpoint.load);  // bad input fails before any work
  configure_threads(config);
  Session session(setup, /*with_gradients=*/false);
  load_checkpoint(config.checkpoint.load, session.state, /*with_optimizer=*/false);
  const double mean = mean_eval_loss(session.executor, data.tokens, seq, rows);
  if (!std::isfinite(mean))
    return non_finite_logits("validation loss is not finite (" + std::to_string(mean) + ")",
                             config.checkpoint.load);
  std::printf("validation loss: %.9g\n", mean);
  std::printf("(%lld rows of %lld tokens from %s)\n", static_cast<long long>(rows),
              static_cast<long long>(seq), config.validation.dataset.c_str());
  return 0;
}

int run_dump_gradients(const JobConfig& config, const std::string& tokens_path,
                       const std::string& out_path) {
  const int64_t batch = config.training.local_batch_size, seq = config.training.seq_len;
  // One pass over one batch: a global batch that a training step would
  // accumulate over several microbatches is not what this writes.
  if (const int64_t micro = gradient_accumulation_steps(config, 1); micro > 1) {
    throw InputError(
        "grads: training.global_batch_size = " + std::to_string(config.training.global_batch_size) +
        " asks for " + std::to_string(micro) +
        " accumulated microbatches, but grads writes the gradients of one batch of "
        "training.local_batch_size = " +
        std::to_string(batch) +
        " rows (expected global_batch_size -1, or equal to local_batch_size)");
  }
  const Setup setup = make_setup(config, batch, Pass::kTraining);
  TokenDataset data =
      load_token_file(tokens_path, config.model.tokenizer, setup.model.summary.vocab_size);
  if (count_eval_rows(static_cast<int64_t>(data.tokens.size()), seq) < batch) {
    throw InputError("grads: '" + tokens_path + "' has too few tokens for " +
                     std::to_string(batch) + " rows of seq_len + 1");
  }
  if (config.checkpoint.load.empty()) throw InputError("grads needs --checkpoint.load FILE");
  read_checkpoint_info(config.checkpoint.load);  // bad input fails before any work
  check_output_file(out_path, "--out");
  configure_threads(config);
  Session session(setup, /*with_gradients=*/true);
  load_checkpoint(config.checkpoint.load, session.state, /*with_optimizer=*/false);
  std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
  fill_eval_rows(data.tokens, seq, 0, batch, inputs, targets);
  const double loss = session.executor.run(Batch{inputs.data(), targets.data()});
  if (!std::isfinite(loss))
    return non_finite_logits("loss is not finite (" + std::to_string(loss) + ")",
                             config.checkpoint.load, "--out is not written");
  const Program& program = setup.program();
  std::vector<SafetensorsEntry> entries;
  std::vector<HostView> host;  // the gradients' bytes on the host
  host.reserve(program.params.size());
  for (size_t i = 0; i < program.params.size(); ++i) {
    host.emplace_back(*session.state.backend, session.state.grads[i]);
    entries.push_back({program.params[i].fqn, program.params[i].shape, host.back().data()});
  }
  save_safetensors(out_path, entries, {}, "--out");
  std::printf("loss: %.9g\n", loss);
  return 0;
}

}  // namespace remat
