// Incremental decoding with a KV cache, for `remat generate` and the samples
// `remat train` prints. There is no second model here: the decoder runs the
// model's own program (the ops models/ builds, through the backend's
// kernels) on the new tokens only, and each attention reads the keys and
// values of the earlier positions from a cache instead of recomputing them.
//
// How: n new tokens run the program of batch 1 x seq n. Its rope and attention
// nodes run at the cache's position (OpAttrs::position); the values that are
// attention's k and v inputs are written by their producers straight into
// their layer's cache rows (no copy); the loss node is skipped and its logits
// input is the result. Decoding changes nothing in the model state: MoE
// routing gets no writable parameters, so its token counts stay as they are.
//
// Memory: the allocator books the cache (as activations, from the
// constructor on) and each step's values (as temporaries, each freed after
// its last reader).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "io/config.h"
#include "runtime/model_state.h"

namespace remat {

// The bytes of the KV cache a Decoder of `max_positions` holds for the
// attention layers of `program` (the model at any batch and seq), as a double:
// a refused request can exceed what an int64_t counts.
double kv_cache_bytes(const Program& program, int64_t max_positions);

class Decoder {
 public:
  // `state` holds the weights of `model` (the parameters of its program at
  // any batch and seq); the cache holds `max_positions` >= 1 positions. The
  // state and the allocator must outlive the decoder.
  Decoder(const JobConfig::Model& model, const ModelState& state, Allocator& allocator,
          int64_t max_positions);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Runs `tokens` (at least one, each < vocab_size()) at positions
  // position() .. position() + n - 1, caching their keys and values, and
  // returns their logits: n rows of vocab_size() floats, on the host.
  // std::length_error when they do not fit in the cache.
  std::vector<float> append(std::span<const int32_t> tokens);

  int64_t position() const { return position_; }
  int64_t max_positions() const { return max_positions_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  // The program of n tokens and what walking it needs, built once per n.
  struct StepProgram {
    Program program;
    std::vector<int32_t> last_reader;  // per value: the last node reading it (-1: none)
    std::vector<int32_t> cache_slot;   // per value: its cache tensor (k, v), -1: none
    std::vector<int32_t> layer;        // per node: attention's cache layer, -1: none
    ValueId logits = -1;
  };
  const StepProgram& step_program(int64_t n);
  void run_node(const StepProgram& step, int32_t index, std::span<const int32_t> tokens,
                std::vector<Tensor>& values, std::vector<float*>& where);

  const JobConfig::Model model_;
  const ModelState& state_;
  Allocator& allocator_;
  Backend& backend_;
  const int64_t max_positions_;
  int64_t vocab_size_ = 0;
  int64_t position_ = 0;
  std::map<int64_t, StepProgram> programs_;  // by the number of new tokens
  std::vector<Tensor> cache_;  // per layer: k, then v; [max_positions, kv_heads * head_dim]
};

}  // namespace remat
