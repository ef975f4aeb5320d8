#include "cli/generate_command.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "generate/generate.h"
#include "io/tokenizer.h"
#include "planner/job_options.h"
#include "planner/setup.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/session.h"

namespace remat {

namespace {

// The longest text (prompt and new tokens) the KV cache is sized for.
constexpr int64_t kMaxPositions = int64_t{1} << 20;

template <typename T>
bool parse_whole(const std::string& text, T& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

[[noreturn]] void bad_flag(const std::string& flag, const std::string& value,
                           const std::string& expected) {
  throw InputError("--" + flag + " " + value + ": expected " + expected);
}

// A whole number of type T, at least `minimum`; one past T's range is told
// the range (its digits met "expected an integer >= 1" otherwise).
template <typename T>
T integer_flag(const CommandLine& c, const std::string& flag, T fallback, T minimum,
               const std::string& expected) {
  const auto it = c.extra.find(flag);
  if (it == c.extra.end()) return fallback;
  const std::string& text = it->second;
  T value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range)
    bad_flag(flag, text, expected + ", at most " + std::to_string(std::numeric_limits<T>::max()));
  if (!parse_whole(text, value) || value < minimum) bad_flag(flag, text, expected);
  return value;
}

double real_flag(const CommandLine& c, const std::string& flag, double fallback) {
  const auto it = c.extra.find(flag);
  if (it == c.extra.end()) return fallback;
  double value = 0;
  if (!parse_whole(it->second, value) || !std::isfinite(value)) value = -1;  // rejected below
  return value;
}

}  // namespace

GenerateFlags parse_generate_flags(const CommandLine& c) {
  GenerateFlags f;
  f.prompt = c.extra.at("prompt");
  if (f.prompt.empty())
    throw InputError("--prompt is empty: expected the text to continue, e.g. --prompt \"The\"");
  f.ids = c.ids;
  f.max_new_tokens =
      integer_flag<int64_t>(c, "max_new_tokens", f.max_new_tokens, 1, "an integer >= 1");
  f.sampling.top_k =
      integer_flag<int64_t>(c, "top_k", 0, 0, "an integer >= 0 (the k most likely tokens; 0: all)");
  // The generator takes all 64 bits, as torch.manual_seed does.
  f.sampling.seed = integer_flag<uint64_t>(c, "seed", 0, 0, "an integer >= 0");
  f.sampling.temperature = real_flag(c, "temperature", f.sampling.temperature);
  if (!(f.sampling.temperature >= 0))
    bad_flag("temperature", c.extra.at("temperature"), "a number >= 0 (0: greedy)");
  f.sampling.top_p = real_flag(c, "top_p", f.sampling.top_p);
  if (!(f.sampling.top_p > 0 && f.sampling.top_p <= 1))
    bad_flag("top_p", c.extra.at("top_p"), "a number in (0, 1] (1: no nucleus filter)");
  return f;
}

namespace {

// The weights and the KV cache of every position stay for the whole run; a
// request for more than the memory is refused before anything is allocated.
void check_generation_fits(const JobConfig& config, const Program& program, size_t prompt_tokens,
                           int64_t max_new_tokens) {
  Allocator counting(/*counting_only=*/true);
  const double weights = [&] {
    const ModelState probe(program, counting, /*with_gradients=*/false);
    return static_cast<double>(counting.current().total());
  }();
  const int64_t positions = static_cast<int64_t>(prompt_tokens) + max_new_tokens;
  const double cache = kv_cache_bytes(program, positions);
  const int64_t available = available_memory(config);
  if (weights + cache <= static_cast<double>(available)) return;
  auto bytes = [](double b) { return format_bytes(static_cast<int64_t>(std::min(b, 9e18))); };
  throw InputError("memory: " + std::to_string(prompt_tokens) +
                   " prompt tokens and --max_new_tokens " + std::to_string(max_new_tokens) +
                   " need a KV cache of " + bytes(cache) + " for " + std::to_string(positions) +
                   " positions, with the weights' " + bytes(weights) + ", but " +
                   format_bytes(available) + " is available (" +
                   (config.memory.limit.empty() ? "physical RAM" : "memory.limit") +
                   "); expected a shorter prompt or fewer new tokens");
}

}  // namespace

int run_generate(const JobConfig& config, const GenerateFlags& flags) {
  if (config.checkpoint.load.empty()) {
    throw InputError(
        "generate needs weights: pass --checkpoint.load FILE.safetensors (a checkpoint "
        "`remat train --checkpoint.enable true` saved)");
  }
  const Setup setup = make_setup(config, /*batch=*/1, Pass::kForwardOnly);
  const int64_t vocab = setup.model.summary.vocab_size;
  if (flags.sampling.top_k > vocab) {
    bad_flag("top_k", std::to_string(flags.sampling.top_k),
             "at most the vocabulary size, " + std::to_string(vocab));
  }
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(config.model.tokenizer, vocab);
  const std::vector<int32_t> prompt = prompt_ids(*tokenizer, flags.prompt);
  if (prompt.empty()) {  // a tokenizer without BOS that reads the text as nothing
    throw InputError("--prompt \"" + flags.prompt + "\": the tokenizer " + config.model.tokenizer +
                     " gives it no tokens; expected text it can encode");
  }
  if (flags.max_new_tokens > kMaxPositions - static_cast<int64_t>(prompt.size())) {
    throw InputError("--max_new_tokens " + std::to_string(flags.max_new_tokens) + ": the " +
                     std::to_string(prompt.size()) + " prompt tokens and the new ones exceed " +
                     std::to_string(kMaxPositions) + " positions");
  }
  read_checkpoint_info(config.checkpoint.load);  // bad input fails before any work
  check_generation_fits(config, setup.program(), prompt.size(), flags.max_new_tokens);
  configure_threads(config);
  Allocator allocator;
  ModelState state(setup.program(), allocator, /*with_gradients=*/false);
  load_checkpoint(config.checkpoint.load, state, /*with_optimizer=*/false);
  Decoder decoder(config.model, state, allocator,
                  static_cast<int64_t>(prompt.size()) + flags.max_new_tokens);
  Sampler sampler(flags.sampling);
  std::fprintf(stderr, "model: %s %s from %s; %zu prompt tokens\n",
               setup.model.summary.family.c_str(), setup.model.summary.flavor.c_str(),
               config.checkpoint.load.c_str(), prompt.size());

  const auto start = std::chrono::steady_clock::now();
  TextStream text(*tokenizer, stdout, prompt);
  if (flags.ids) {
    std::printf("prompt:");
    for (int32_t id : prompt) std::printf(" %d", id);
    std::printf("\ngenerated:");
  } else {
    text.finish();  // the prompt, as the tokenizer reads it back
  }
  std::vector<int32_t> generated;
  try {
    generated = generate(decoder, sampler, prompt, flags.max_new_tokens, tokenizer->eos_id(),
                         [&](int32_t id) {
                           if (flags.ids) {
                             std::printf(" %d", id);
                             std::fflush(stdout);
                           } else {
                             text.add(id);
                           }
                         });
  } catch (const NonFiniteLogits& e) {
    std::printf("\n");  // ends the text streamed so far
    return non_finite_logits(e.what(), config.checkpoint.load);
  }
  if (!flags.ids) text.finish();
  std::printf("\n");
  std::fflush(stdout);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool at_eos = !generated.empty() && generated.back() == tokenizer->eos_id();
  std::fprintf(stderr, "%zu tokens in %.2f s (%.1f tokens/s), %s; memory: peak %s\n",
               generated.size(), seconds, static_cast<double>(generated.size()) / seconds,
               at_eos ? "stopped at EOS" : "max_new_tokens reached",
               format_bytes(allocator.peak()).c_str());
  return 0;
}

}  // namespace remat
