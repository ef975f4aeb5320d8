#include "train/validation.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "ac/schedule.h"
#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "train/evaluate.h"
#include "train/load_balance.h"
#include "train/metrics.h"

namespace remat {

namespace {

int64_t validation_rows(const JobConfig& config, size_t tokens) {
  const int64_t rows = count_eval_rows(static_cast<int64_t>(tokens), config.training.seq_len);
  return config.validation.steps > 0 ? std::min(rows, config.validation.steps) : rows;
}

}  // namespace

TokenDataset validation_tokens(const JobConfig& config, TokenDataset& training,
                               int64_t vocab_size) {
  TokenDataset data;
  const auto& t = config.training;
  if (!config.validation.dataset.empty()) {
    data = load_token_file(config.validation.dataset, config.model.tokenizer, vocab_size);
    std::error_code ec;
    if (!t.dataset_path.empty() &&
        std::filesystem::equivalent(config.validation.dataset, t.dataset_path, ec)) {
      std::printf(
          "warning: validation.dataset '%s' is the training data (training.dataset_path '%s'): "
          "its loss is measured on tokens the run trains on, not held-out ones\n",
          config.validation.dataset.c_str(), t.dataset_path.c_str());
    }
    // The built-in dataset trains on every file of its folder.
    const std::filesystem::path file = std::filesystem::weakly_canonical(
        std::filesystem::absolute(config.validation.dataset, ec), ec);
    if (t.dataset_path.empty() && t.dataset == "fortunes" && !ec &&
        file.parent_path() == std::filesystem::weakly_canonical(kFortunesDir, ec)) {
      std::printf(
          "warning: validation.dataset '%s' is one of the files in %s that the built-in "
          "dataset \"fortunes\" trains on: its loss is measured on tokens the run trains on, "
          "not held-out ones (leave validation.dataset unset for the built-in held-out part)\n",
          config.validation.dataset.c_str(), kFortunesDir);
    }
  } else if (t.dataset_path.empty()) {
    HeldOutSplit split = split_held_out(training, kHeldOutFraction);
    data.description = "the last " + with_thousands(split.held_out.size()) + " tokens of " +
                       t.dataset + ", held out (never trained on)";
    data.tokens = std::move(split.held_out);
    training.tokens = std::move(split.train);
    std::erase_if(training.document_starts,
                  [&](int64_t start) { return start >= std::ssize(training.tokens); });
    training.description +=
        ", less the " + with_thousands(data.tokens.size()) + " held out for validation";
  } else {
    throw InputError(
        "validation: training.dataset_path is set, so there is no built-in "
        "held-out part; set validation.dataset to a held-out file");
  }
  if (validation_rows(config, data.tokens.size()) == 0)
    throw InputError(
        "validation: " + data.description +
        " (too few): expected at least training.seq_len + 1 = " + with_thousands(t.seq_len + 1) +
        " tokens, one window of inputs and its next-token targets");
  return data;
}

ValidationPlan plan_validation(const JobConfig& config) {
  ValidationPlan plan{make_setup(config, /*batch=*/1, Pass::kForwardOnly), 0};
  plan.predicted_peak = predict_validation(plan.setup.program(), plan.setup.ac.plan).peak_bytes;
  const bool limited = !config.memory.limit.empty();
  const auto available = limited ? static_cast<int64_t>(parse_memory_size(config.memory.limit))
                                 : physical_memory_bytes();
  if (plan.predicted_peak > available)
    throw InputError("memory: validation's forward pass needs " +
                     format_bytes(plan.predicted_peak) + " at its peak but " +
                     format_bytes(available) + " is available (" +
                     (limited ? "memory.limit" : "physical RAM") +
                     "); set validation.enabled = false or use a smaller model");
  return plan;
}

Validator::Validator(const JobConfig& config, Session& session, ValidationPlan plan,
                     TokenDataset data)
    : plan_(std::move(plan)),
      session_(session),
      executor_(plan_.setup.program(),
                make_schedule(plan_.setup.program(), plan_.setup.ac.plan,
                              /*with_backward=*/false),
                session.allocator, session.state),
      data_(std::move(data)),
      seq_len_(config.training.seq_len),
      rows_(validation_rows(config, data_.tokens.size())) {}

double Validator::run() {
  session_.allocator.reset_peak();
  const double loss = mean_eval_loss(executor_, data_.tokens, seq_len_, rows_);
  executor_.release_values();
  // The routers counted the validation tokens; the next step must not see them.
  reset_expert_counts(session_.state);
  return loss;
}

std::string Validator::describe() const {
  return with_thousands(rows_) + " rows of " + std::to_string(seq_len_) + " tokens from " +
         data_.description;
}

}  // namespace remat
