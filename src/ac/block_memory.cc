#include "ac/block_memory.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "ac/plan.h"

namespace remat {

namespace {

int64_t booked(int64_t bytes, double scale) {
  return scale == 1.0 ? bytes : static_cast<int64_t>(std::ceil(static_cast<double>(bytes) * scale));
}

// The bytes value v's gradient books: fp32 whatever the value's dtype, and
// none for a value that gets no gradient (carries_gradient).
int64_t booked_grad_bytes(const Program& program, ValueId v, double scale) {
  if (!carries_gradient(program, v)) return 0;
  return booked(bytes_of(numel(program.values[v].shape), DType::kF32), scale);
}

bool is_own(const BlockShape& s, ValueId v) {
  return v >= s.first_value && v < s.first_value + s.n_values;
}

// A node may be re-run when none of its outputs must be kept and, where the
// decision space is limited, one of them may be rebuilt (the others stay
// pinned: kept, and rebuilt into scratch when the node re-runs).
bool recomputable(const Program& program, const BlockShape& s, int32_t n,
                  const std::vector<bool>& decidable) {
  bool any = false;
  for (ValueId out : program.nodes[n].outputs) {
    if (s.forced[out - s.first_value]) return false;
    any = any || decidable.empty() || decidable[out];
  }
  return any;
}

// Reused buffers: the enumeration simulates hundreds of thousands of choices.
struct Simulator {
  const Program& program;
  const BlockShape& s;
  const OpCost& cost;
  std::vector<bool> needed, keep, grad_live;
  std::vector<int32_t> forward_last, backward_last;
  std::vector<int32_t> window;      // backward window: recompute nodes, then backward nodes
  std::vector<int64_t> out_bytes;   // per node: the bytes of its outputs
  std::vector<int64_t> free_bytes;  // per step: the bytes freed after it
  std::vector<std::vector<int32_t>> saved_own;  // per node: own values its backward reads

  Simulator(const Program& p, const BlockShape& shape, const OpCost& c)
      : program(p), s(shape), cost(c) {
    forward_last.assign(s.n_values, -1);
    for (int32_t n = s.first; n <= s.last; ++n) {
      const Node& node = program.nodes[n];
      int64_t bytes = 0;
      for (ValueId v : node.outputs) bytes += s.bytes[v - s.first_value];
      out_bytes.push_back(bytes);
      saved_own.emplace_back();
      for (ValueId v : saved_values(node)) {
        if (is_own(s, v)) saved_own.back().push_back(v - s.first_value);
      }
      for (ValueId v : node.inputs) {
        if (is_own(s, v)) forward_last[v - s.first_value] = n;
      }
      for (ValueId v : node.outputs) {
        int32_t& last = forward_last[v - s.first_value];
        last = std::max(last, n);
      }
    }
  }

  BlockOption run(const std::vector<bool>& recompute) {
    BlockOption o;
    o.recompute = recompute;
    choose_kept(recompute, o);
    o.forward_peak = forward_window_peak();
    o.backward_peak = backward_window_peak(recompute);
    return o;
  }

  bool producer_in(const std::vector<bool>& recompute, int32_t i) const {
    return recompute[program.values[s.first_value + i].producer - s.first];
  }

  // Which own values stay from forward to backward (`keep`), and the cost.
  void choose_kept(const std::vector<bool>& recompute, BlockOption& o) {
    const ValueId base = s.first_value;
    auto in_r = [&](int32_t n) { return bool(recompute[n - s.first]); };
    needed.assign(s.n_values, false);
    for (int32_t i = 0; i < s.n_values; ++i) needed[i] = s.saved[i] || s.boundary[i];
    for (int32_t n = s.first; n <= s.last; ++n) {
      if (!in_r(n)) continue;
      o.cost += cost(program.nodes[n]);
      for (ValueId v : program.nodes[n].inputs) {
        if (is_own(s, v)) needed[v - base] = true;
      }
    }
    keep.assign(s.n_values, false);
    for (int32_t i = 0; i < s.n_values; ++i) {
      keep[i] = needed[i] && (s.pinned[i] || !producer_in(recompute, i));
      if (keep[i] && !s.boundary[i]) o.kept_bytes += s.bytes[i];
    }
  }

  // Forward window: outputs booked as produced; what is not kept dies after
  // its last forward reader.
  int64_t forward_window_peak() {
    const int32_t width = s.last - s.first + 1;
    free_bytes.assign(width, 0);
    for (int32_t i = 0; i < s.n_values; ++i) {
      if (!keep[i]) free_bytes[forward_last[i] - s.first] += s.bytes[i];
    }
    int64_t level = s.weight_copies, peak = level;
    for (int32_t n = s.first; n <= s.last; ++n) {
      level += out_bytes[n - s.first];
      peak = std::max(peak, level + s.forward_scratch[n - s.first]);
      level -= free_bytes[n - s.first];
    }
    return peak;
  }

  // Backward window: rebuild in forward order, then backward in reverse.
  int64_t backward_window_peak(const std::vector<bool>& recompute) {
    const ValueId base = s.first_value;
    auto in_r = [&](int32_t n) { return bool(recompute[n - s.first]); };
    window.clear();
    for (int32_t n = s.first; n <= s.last; ++n) {
      if (in_r(n)) window.push_back(n);
    }
    const auto n_recompute = static_cast<int32_t>(window.size());
    for (int32_t n = s.last; n >= s.first; --n) window.push_back(n);
    backward_last.assign(s.n_values, -1);
    for (int32_t pos = 0; pos < static_cast<int32_t>(window.size()); ++pos) {
      const Node& node = program.nodes[window[pos]];
      if (pos < n_recompute) {
        for (ValueId v : node.inputs) {
          if (is_own(s, v)) backward_last[v - base] = pos;
        }
        for (ValueId v : node.outputs) backward_last[v - base] = pos;
      } else {
        for (int32_t i : saved_own[window[pos] - s.first]) backward_last[i] = pos;
      }
    }
    free_bytes.assign(window.size(), 0);
    for (int32_t i = 0; i < s.n_values; ++i) {
      if (backward_last[i] >= 0 && !s.boundary[i] && (keep[i] || producer_in(recompute, i))) {
        free_bytes[backward_last[i]] += s.bytes[i];
      }
    }
    grad_live = s.grad_live_at_start;
    int64_t level = s.weight_copies, peak = level;
    for (int32_t pos = 0; pos < static_cast<int32_t>(window.size()); ++pos) {
      const int32_t n = window[pos];
      const Node& node = program.nodes[n];
      if (pos < n_recompute) {
        level += out_bytes[n - s.first];
        peak = std::max(peak, level + s.forward_scratch[n - s.first]);
        // A rebuilt copy of a value still kept is scratch for this step.
        for (ValueId v : node.outputs) {
          if (keep[v - base]) level -= s.bytes[v - base];
        }
        level -= free_bytes[pos];
        continue;
      }
      // Inputs that die here and become their own gradients: booked
      // already, and not freed below.
      int64_t kept_as_grads = 0;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const ValueId v = node.inputs[i];
        if (!is_own(s, v) || grad_live[v - base]) continue;
        grad_live[v - base] = true;
        if (((s.grads_over_inputs[n - s.first] >> i) & 1) != 0 &&
            dies_at(v - base, pos, recompute)) {
          kept_as_grads += s.bytes[v - base];
        } else {
          level += s.grad_bytes[v - base];
        }
      }
      level += s.foreign_grad_bytes[n - s.first];
      // An input's gradient booked just now that is the output's gradient
      // buffer handed over: it is booked already, and is not freed below.
      level -= s.grad_output_taken[n - s.first];
      peak = std::max(peak, level + s.workspace_bytes[n - s.first]);
      for (ValueId v : node.outputs) {
        if (grad_live[v - base]) {
          grad_live[v - base] = false;
          level -= s.grad_bytes[v - base];
        }
      }
      level += s.grad_output_taken[n - s.first];
      level -= free_bytes[pos] + s.foreign_freed_bytes[n - s.first];
      level += kept_as_grads;
    }
    return peak;
  }

  // Own value i is freed after window position pos (free_bytes' rule).
  bool dies_at(int32_t i, int32_t pos, const std::vector<bool>& recompute) const {
    return backward_last[i] == pos && !s.boundary[i] && (keep[i] || producer_in(recompute, i));
  }
};

// Equal signatures: equal options. Names differ per layer; shapes, wiring
// and the facts describe_block gathered are what the simulation reads.
std::string block_signature(const Program& program, const BlockShape& s,
                            const std::vector<bool>& decidable) {
  std::string sig;
  auto put = [&sig](int64_t x) { sig += std::to_string(x) + ','; };
  for (int32_t n = s.first; n <= s.last; ++n) {
    const Node& node = program.nodes[n];
    const OpAttrs& a = node.attrs;
    put(static_cast<int64_t>(node.kind));
    for (int64_t x : {a.m, a.k, a.n, a.rows, a.dim, a.batch, a.seq, a.heads, a.kv_heads, a.head_dim,
                      a.experts, a.top_k}) {
      put(x);
    }
    for (ValueId v : node.inputs) put(is_own(s, v) ? v - s.first_value : -1);
    put(recomputable(program, s, n, decidable));
    sig += '|';
  }
  put(s.weight_copies);
  for (int32_t i = 0; i < s.n_values; ++i) {
    put(s.bytes[i]);
    put(s.grad_bytes[i]);
    put(s.boundary[i] * 1 + s.forced[i] * 2 + s.saved[i] * 4 + s.grad_live_at_start[i] * 8 +
        s.pinned[i] * 16);
  }
  for (size_t i = 0; i < s.workspace_bytes.size(); ++i) {
    put(s.grads_over_inputs[i]);
    put(s.foreign_grad_bytes[i]);
    put(s.foreign_freed_bytes[i]);
    put(s.workspace_bytes[i]);
    put(s.grad_output_taken[i]);
    put(s.forward_scratch[i]);
  }
  return sig;
}

// The block's node range and its own (contiguous) values.
void find_block_range(const Program& program, BlockShape& s) {
  const auto n_nodes = static_cast<int32_t>(program.nodes.size());
  s.first = -1;
  for (int32_t n = 0; n < n_nodes; ++n) {
    if (program.nodes[n].block != s.block) continue;
    if (s.first < 0) s.first = n;
    if (s.last >= 0 && s.last != n - 1) {
      throw std::logic_error("budget solver: the nodes of block " + std::to_string(s.block) +
                             " are not contiguous");
    }
    s.last = n;
  }
  if (s.first < 0) throw std::logic_error("budget solver: empty block");
  s.first_value = program.nodes[s.first].outputs.front();
  const ValueId end_value = program.nodes[s.last].outputs.back() + 1;
  s.n_values = end_value - s.first_value;
  for (int32_t n = s.first; n <= s.last; ++n) {
    for (ValueId v : program.nodes[n].outputs) {
      if (v < s.first_value || v >= end_value) {
        throw std::logic_error("budget solver: block values are not contiguous");
      }
    }
  }
}

// Who reads each value of the program: its first and last consumers, its
// first backward reader, and whether a node outside the block reads it.
struct Readers {
  ValueReaders consumers;
  std::vector<int32_t> first_saved_reader;
  std::vector<bool> read_outside;
};

Readers find_readers(const Program& program, int32_t block) {
  const size_t n_values = program.values.size();
  Readers r{value_readers(program), std::vector<int32_t>(n_values, -1),
            std::vector<bool>(n_values, false)};
  for (int32_t n = 0; n < static_cast<int32_t>(program.nodes.size()); ++n) {
    const Node& node = program.nodes[n];
    for (ValueId v : node.inputs) {
      if (node.block != block) r.read_outside[v] = true;
    }
    for (ValueId v : saved_values(node)) {
      if (r.first_saved_reader[v] < 0) r.first_saved_reader[v] = n;
    }
  }
  return r;
}

void describe_own_values(const Program& program, const Readers& r,
                         const std::vector<bool>& decidable, BlockShape& s) {
  s.bytes.resize(s.n_values);
  s.boundary.resize(s.n_values);
  s.forced.resize(s.n_values);
  s.pinned.resize(s.n_values);
  s.saved.resize(s.n_values);
  s.grad_live_at_start.resize(s.n_values);
  s.grad_bytes.resize(s.n_values);
  for (int32_t i = 0; i < s.n_values; ++i) {
    const ValueId v = s.first_value + i;
    const Node& producer = program.nodes[program.values[v].producer];
    const int32_t reader = r.first_saved_reader[v];
    s.bytes[i] = booked(program.values[v].bytes(), s.scale);
    s.grad_bytes[i] = booked_grad_bytes(program, v, s.scale);
    s.boundary[i] = r.read_outside[v] || v == program.loss;
    s.forced[i] = s.boundary[i] || op_info(producer.kind).outputs_always_kept;
    s.pinned[i] = s.forced[i] || (!decidable.empty() && !decidable[v]);
    s.saved[i] = reader >= 0 && program.nodes[reader].block == s.block;
    s.grad_live_at_start[i] = r.consumers.last[v] > s.last;
    if (s.boundary[i] && reader < 0) {
      throw std::logic_error("budget solver: " + program.values[v].name +
                             " crosses a block boundary but no backward reads it");
    }
  }
}

// Values kept whatever the choice (block boundaries) whose last backward
// reader runs in this window die there; gradients of values produced
// elsewhere are booked by their first consumer in backward order.
void describe_foreign_values(const Program& program, const Readers& r, const StepBookings& bookings,
                             BlockShape& s) {
  const int32_t width = s.last - s.first + 1;
  s.foreign_grad_bytes.assign(width, 0);
  s.foreign_freed_bytes.assign(width, 0);
  s.workspace_bytes.assign(width, 0);
  s.grad_output_taken.assign(width, 0);
  s.grads_over_inputs.assign(width, 0);
  s.forward_scratch.assign(width, 0);
  s.weight_copies = 0;
  auto in_window = [&s](int32_t n) { return n >= s.first && n <= s.last; };
  std::vector<bool> seen(program.values.size(), false);
  for (int32_t n = s.first; n <= s.last; ++n) {
    const Node& node = program.nodes[n];
    s.workspace_bytes[n - s.first] = booked(bookings.backward_scratch[n], s.scale);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (grad_may_overwrite_input(program, r.consumers, n, i))
        s.grads_over_inputs[n - s.first] |= 1u << i;
    }
    // Backward runs in reverse node order: an input's gradient exists at
    // node n's backward when a later node reads it.
    if (grad_output_taker(program, node, [&](ValueId v) { return r.consumers.last[v] > n; }) >= 0) {
      s.grad_output_taken[n - s.first] = booked_grad_bytes(program, node.outputs[0], s.scale);
    }
    s.forward_scratch[n - s.first] = booked(bookings.forward_scratch[n], s.scale);
    // Every node of a block runs in both its windows (its backward runs
    // whatever the plan), so both cast the same copies.
    s.weight_copies += booked(bookings.weight_copies[n], s.scale);
    for (ValueId v : node.inputs) {
      if (is_own(s, v) || seen[v]) continue;
      seen[v] = true;
      const int64_t bytes = booked(program.values[v].bytes(), s.scale);
      if (r.consumers.last[v] <= s.last)
        s.foreign_grad_bytes[r.consumers.last[v] - s.first] +=
            booked_grad_bytes(program, v, s.scale);
      const int32_t reader = r.first_saved_reader[v];
      if (reader < 0) {
        throw std::logic_error("budget solver: " + program.values[v].name + " enters block " +
                               std::to_string(s.block) + " but no backward reads it");
      }
      if (in_window(reader)) s.foreign_freed_bytes[reader - s.first] += bytes;
    }
  }
  for (int32_t i = 0; i < s.n_values; ++i) {
    const int32_t reader = r.first_saved_reader[s.first_value + i];
    if (s.boundary[i] && in_window(reader)) s.foreign_freed_bytes[reader - s.first] += s.bytes[i];
  }
}

}  // namespace

BlockShape describe_block(const Program& program, int32_t block, double scale,
                          const StepBookings& bookings, const std::vector<bool>& decidable) {
  if (bookings.forward_scratch.size() != program.nodes.size() ||
      bookings.backward_scratch.size() != program.nodes.size() ||
      bookings.weight_copies.size() != program.nodes.size()) {
    throw std::logic_error("budget solver: one step booking per node expected");
  }
  BlockShape s;
  s.block = block;
  s.scale = scale;
  find_block_range(program, s);
  const Readers readers = find_readers(program, block);
  describe_own_values(program, readers, decidable, s);
  describe_foreign_values(program, readers, bookings, s);
  s.signature = block_signature(program, s, decidable);
  return s;
}

BlockOption simulate_block(const Program& program, const BlockShape& shape,
                           const std::vector<bool>& recompute, const OpCost& cost) {
  Simulator sim(program, shape, cost);
  return sim.run(recompute);
}

std::vector<BlockOption> block_options(const Program& program, const BlockShape& s,
                                       const OpCost& cost, const std::vector<bool>& decidable) {
  Simulator sim(program, s, cost);
  std::vector<BlockOption> all;
  const int32_t width = s.last - s.first + 1;
  std::vector<bool> recompute(width, false);
  std::vector<bool> needed(s.n_values);
  for (int32_t i = 0; i < s.n_values; ++i) needed[i] = s.saved[i] || s.boundary[i];
  std::vector<bool> can_recompute(width);
  for (int32_t n = s.first; n <= s.last; ++n) {
    can_recompute[n - s.first] = recomputable(program, s, n, decidable);
  }

  // Depth-first over nodes, last to first: a node is a choice only when the
  // backward (or a choice already made) needs one of its outputs, so every
  // leaf is a distinct plan.
  auto visit = [&](auto&& self, int32_t n) -> void {
    if (n < s.first) {
      all.push_back(sim.run(recompute));
      return;
    }
    const Node& node = program.nodes[n];
    bool any_needed = false;
    for (ValueId v : node.outputs) any_needed = any_needed || needed[v - s.first_value];
    self(self, n - 1);  // keep (or nothing to decide)
    if (!any_needed || !can_recompute[n - s.first]) return;
    recompute[n - s.first] = true;
    std::vector<int32_t> marked;
    for (ValueId v : node.inputs) {
      if (is_own(s, v) && !needed[v - s.first_value]) {
        needed[v - s.first_value] = true;
        marked.push_back(v - s.first_value);
      }
    }
    self(self, n - 1);
    for (int32_t i : marked) needed[i] = false;
    recompute[n - s.first] = false;
  };
  visit(visit, s.last);

  // Keep the choices no other choice beats in every coordinate.
  auto key = [](const BlockOption& o) {
    return std::make_tuple(o.cost, o.kept_bytes, o.forward_peak, o.kept_bytes + o.backward_peak);
  };
  std::sort(all.begin(), all.end(),
            [&](const BlockOption& a, const BlockOption& b) { return key(a) < key(b); });
  std::vector<BlockOption> front;
  for (BlockOption& o : all) {
    bool dominated = false;
    for (const BlockOption& f : front) {
      if (f.kept_bytes <= o.kept_bytes && f.forward_peak <= o.forward_peak &&
          f.kept_bytes + f.backward_peak <= o.kept_bytes + o.backward_peak) {
        dominated = true;  // f.cost <= o.cost by the sort
        break;
      }
    }
    if (!dominated) front.push_back(std::move(o));
  }
  return front;
}

}  // namespace remat
