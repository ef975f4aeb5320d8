#include "generate/decoder.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "models/registry.h"

namespace remat {

namespace {

// The last reader of the logits: after every node, so they outlive the walk.
constexpr int32_t kKeptToTheEnd = std::numeric_limits<int32_t>::max();

// The decoder reads the state's parameters by index: its programs must have
// exactly the state program's parameters.
void check_same_parameters(const Program& decoding, const Program& state) {
  bool same = decoding.params.size() == state.params.size();
  for (size_t i = 0; same && i < state.params.size(); ++i) {
    same = decoding.params[i].fqn == state.params[i].fqn &&
           decoding.params[i].shape == state.params[i].shape;
  }
  if (!same) throw std::logic_error("decoder: the model state holds another model's parameters");
}

// Decoding reads the logits themselves: the unfused output head, whatever
// training used (model.loss_chunk_rows; the parameters are the same).
JobConfig::Model with_whole_logits(JobConfig::Model model) {
  model.loss_chunk_rows = NumberOrAuto{};
  return model;
}

}  // namespace

double kv_cache_bytes(const Program& program, int64_t max_positions) {
  double bytes = 0;
  for (const Node& node : program.nodes) {
    if (node.kind != OpKind::kAttention) continue;
    // k and v, each [max_positions, kv_heads * head_dim] in fp32 (the
    // constructor's cache_).
    bytes += 2.0 * static_cast<double>(max_positions) *
             static_cast<double>(node.attrs.kv_heads * node.attrs.head_dim) * sizeof(float);
  }
  return bytes;
}

Decoder::Decoder(const JobConfig::Model& model, const ModelState& state, Allocator& allocator,
                 int64_t max_positions)
    : model_(with_whole_logits(model)),
      state_(state),
      allocator_(allocator),
      backend_(*state.backend),
      max_positions_(max_positions) {
  if (max_positions < 1) throw std::invalid_argument("decoder: max_positions must be >= 1");
  const StepProgram& one = step_program(1);
  vocab_size_ = one.program.values[one.logits].shape.back();
  for (size_t i = 0; i < one.program.nodes.size(); ++i) {
    if (one.layer[i] < 0) continue;
    const OpAttrs& a = one.program.nodes[i].attrs;
    for (int kv = 0; kv < 2; ++kv) {
      cache_.emplace_back(allocator_, Shape{max_positions, a.kv_heads * a.head_dim},
                          MemoryCategory::kActivations);
    }
  }
}

const Decoder::StepProgram& Decoder::step_program(int64_t n) {
  if (auto it = programs_.find(n); it != programs_.end()) return it->second;
  StepProgram s;
  s.program = build_model(model_, /*batch=*/1, /*seq=*/n).program;
  const Program& p = s.program;
  check_same_parameters(p, *state_.program);
  s.last_reader.assign(p.values.size(), -1);
  s.cache_slot.assign(p.values.size(), -1);
  s.layer.assign(p.nodes.size(), -1);
  int32_t layers = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(p.nodes.size()); ++i) {
    const Node& node = p.nodes[i];
    for (ValueId v : node.inputs) s.last_reader[v] = i;
    if (node.kind == OpKind::kAttention) {
      s.layer[i] = layers;
      s.cache_slot[node.inputs[1]] = 2 * layers;
      s.cache_slot[node.inputs[2]] = 2 * layers + 1;
      ++layers;
    } else if (node.kind == OpKind::kCrossEntropy) {
      s.logits = node.inputs[0];
    }
  }
  if (s.logits < 0) throw std::logic_error("decoder: the program has no loss node");
  s.last_reader[s.logits] = kKeptToTheEnd;
  return programs_.emplace(n, std::move(s)).first->second;
}

std::vector<float> Decoder::append(std::span<const int32_t> tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("decoder: no tokens to append");
  if (position_ + n > max_positions_) {
    throw std::length_error("decoder: " + std::to_string(position_) + " cached positions + " +
                            std::to_string(n) + " new ones exceed the cache's " +
                            std::to_string(max_positions_));
  }
  const StepProgram& step = step_program(n);
  const Program& p = step.program;
  std::vector<Tensor> values(p.values.size());
  std::vector<float*> where(p.values.size(), nullptr);  // each value's first float
  for (int32_t i = 0; i < static_cast<int32_t>(p.nodes.size()); ++i) {
    const Node& node = p.nodes[i];
    if (node.kind == OpKind::kCrossEntropy) continue;  // no targets: the logits are the result
    run_node(step, i, tokens, values, where);
    for (ValueId v : node.inputs) {
      if (step.last_reader[v] == i) values[v].reset();
    }
    for (ValueId v : node.outputs) {
      if (step.last_reader[v] < 0) values[v].reset();  // e.g. statistics only a backward reads
    }
  }
  std::vector<float> logits(static_cast<size_t>(values[step.logits].numel()));
  backend_.copy_to_host(values[step.logits], logits.data());
  position_ += n;
  return logits;
}

void Decoder::run_node(const StepProgram& step, int32_t index, std::span<const int32_t> tokens,
                       std::vector<Tensor>& values, std::vector<float*>& where) {
  const Node& node = step.program.nodes[index];
  OpBuffers b;
  b.tokens = tokens.data();
  // Read-only parameters (no mutable_params): decoding updates no state.
  for (ParamId id : node.params) b.params.push_back(state_.params[id].data());
  const int32_t layer = step.layer[index];
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    // Attention reads k and v from its layer's cache: every position so far.
    const bool cached = layer >= 0 && i > 0;
    b.inputs.push_back(cached ? cache_[2 * layer + i - 1].data() : where[node.inputs[i]]);
  }
  for (ValueId v : node.outputs) {
    if (const int32_t slot = step.cache_slot[v]; slot >= 0) {
      Tensor& cache = cache_[slot];
      where[v] = cache.data() + position_ * (cache.numel() / max_positions_);
    } else {
      const Value& value = step.program.values[v];
      values[v] = Tensor(allocator_, value.shape, MemoryCategory::kTemporaries, value.dtype);
      where[v] = values[v].data();
    }
    b.outputs.push_back(where[v]);
  }
  if (node.kind == OpKind::kRope || node.kind == OpKind::kAttention) {
    Node positioned = node;
    positioned.attrs.position = position_;
    backend_.forward(positioned, b);
  } else {
    backend_.forward(node, b);
  }
}

}  // namespace remat
