#include "ac/budget.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

namespace remat {

namespace {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max() / 4;

// The highest level inside block b's windows, above P_b.
int64_t window_peak(const BudgetProblem& pb, int32_t b, const BlockOption& o) {
  return std::max(pb.forward_base[b] + o.forward_peak,
                  pb.backward_base[b] + o.kept_bytes + o.backward_peak);
}

const BlockOption& option_of(const BudgetProblem& pb, int32_t b, int32_t o) {
  return pb.options[pb.block_class[b]][o];
}

// Costs that differ only by rounding are the same cost.
bool cost_leq(double a, double b) { return a <= b + 1e-9 * std::max(1.0, std::abs(b)); }

struct State {
  int64_t kept;  // P: bytes kept by the blocks so far
  double cost;
  int32_t prev;    // index in the previous layer
  int32_t option;  // this block's option
};

// States kept per block before the exact program gives way to the bucketed
// one; the bucket width then keeps about this many.
constexpr size_t kExactStates = 1 << 15;
constexpr int64_t kBuckets = 2048;
constexpr int64_t kRestBuckets = 8192;

// The bytes all blocks can keep at most (the range bucket widths divide).
int64_t most_kept(const BudgetProblem& pb) {
  int64_t most = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(pb.blocks.size()); ++b) {
    int64_t block_most = 0;
    for (const BlockOption& o : pb.options[pb.block_class[b]]) {
      block_most = std::max(block_most, o.kept_bytes);
    }
    most += block_most;
  }
  return most;
}

// The options of block b that no other option of it beats in kept bytes,
// window peak and cost together.
std::vector<int32_t> undominated_at(const BudgetProblem& pb, int32_t b) {
  const auto& opts = pb.options[pb.block_class[b]];
  std::vector<int32_t> order(opts.size());
  for (size_t o = 0; o < order.size(); ++o) order[o] = static_cast<int32_t>(o);
  auto key = [&](int32_t o) {
    return std::make_tuple(opts[o].cost, opts[o].kept_bytes, window_peak(pb, b, opts[o]));
  };
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return key(x) < key(y); });
  std::vector<int32_t> kept;
  for (int32_t o : order) {
    bool dominated = false;
    for (int32_t f : kept) {
      if (opts[f].kept_bytes <= opts[o].kept_bytes &&
          window_peak(pb, b, opts[f]) <= window_peak(pb, b, opts[o])) {
        dominated = true;  // and no more cost, by the order
        break;
      }
    }
    if (!dominated) kept.push_back(o);
  }
  return kept;
}

// A lower bound on what blocks b.. cost when `room` bytes are left under the
// budget (infinite: nothing fits).
double rest_lower_bound(const BudgetProblem& pb, int32_t b, int64_t room) {
  if (pb.rest_cost.empty()) return 0;
  if (room < pb.rest_origin) return std::numeric_limits<double>::infinity();
  const auto& row = pb.rest_cost[b];
  const int64_t j = std::min<int64_t>((room - pb.rest_origin) / pb.rest_width,
                                      static_cast<int64_t>(row.size()) - 1);
  return row[j];
}

// kExact: the full Pareto front of states. kThinned: at most one state per
// bucket of `width` kept bytes (the cheapest), with its true kept bytes, so
// every plan found fits but some may be missed: an upper bound on the least
// cost. kRelaxed: kept bytes rounded down to the bucket, so no plan is
// missed but some found may not fit: a lower bound.
enum class Rounding { kExact, kThinned, kRelaxed };
// No cost is too high (a search for "this cost or less" sets a cap: costs
// only grow, so a state above it is dead).
constexpr double kNoCostCap = std::numeric_limits<double>::infinity();

int64_t round_kept(int64_t kept, int64_t width, Rounding rounding) {
  return rounding == Rounding::kRelaxed ? kept / width * width : kept;
}

// The head of one option's extension list in a k-way merge of sorted lists:
// `bytes` (kept bytes, or room needed) rising, `cost` falling along a list.
struct Cursor {
  int64_t bytes;
  double cost;
  int32_t option, state;
};

// Heap order: the smallest bytes first, and the cheapest among equals.
bool later(const Cursor& x, const Cursor& y) {
  return x.bytes != y.bytes ? x.bytes > y.bytes : x.cost > y.cost;
}

// After a dominated cursor, the next state of its list worth a look: the
// first after `from` whose cost, plus the option's, is below `bar` (costs
// fall along a list, so a binary search finds it).
template <typename StateT>
int32_t first_cheaper(const std::vector<StateT>& list, int32_t from, int32_t end, double bar) {
  return static_cast<int32_t>(
      std::partition_point(list.begin() + from, list.begin() + end,
                           [bar](const StateT& st) { return st.cost >= bar; }) -
      list.begin());
}

// The states after block b: each option extends a prefix of the previous
// states, and the extensions are merged into a new Pareto front.
void extend_front(const BudgetProblem& pb, int32_t b, const std::vector<State>& prev,
                  const std::vector<int32_t>& useful, int64_t budget, int64_t room,
                  Rounding rounding, int64_t width, double cost_cap, std::vector<State>& layer) {
  const auto& opts = pb.options[pb.block_class[b]];
  // Each option extends a prefix of the previous states (those that leave
  // room for its window); each extension is sorted by kept bytes with
  // falling cost, so a k-way merge yields the new front in order.
  auto at = [&](int32_t o, int32_t s) {
    return Cursor{round_kept(prev[s].kept + opts[o].kept_bytes, width, rounding),
                  prev[s].cost + opts[o].cost, o, s};
  };
  std::vector<int32_t> usable(opts.size(), 0);
  std::vector<Cursor> heap;
  for (int32_t o : useful) {
    const int64_t limit = budget - window_peak(pb, b, opts[o]);
    usable[o] = static_cast<int32_t>(
        std::upper_bound(prev.begin(), prev.end(), limit,
                         [](int64_t x, const State& st) { return x < st.kept; }) -
        prev.begin());
    if (usable[o] > 0) heap.push_back(at(o, 0));
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cursor c = heap.back();
    heap.pop_back();
    if (c.bytes > room) continue;  // and so is the rest of this option's list
    const bool dominated = !layer.empty() && c.cost >= layer.back().cost;
    // After a dominated state, skip every later one the layer's last state
    // also dominates.
    const int32_t next = dominated ? first_cheaper(prev, c.state + 1, usable[c.option],
                                                   layer.back().cost - opts[c.option].cost)
                                   : c.state + 1;
    if (next < usable[c.option]) {
      heap.push_back(at(c.option, next));
      std::push_heap(heap.begin(), heap.end(), later);
    }
    if (dominated) continue;
    const double rest = rest_lower_bound(pb, b + 1, budget - c.bytes);
    if (rest == std::numeric_limits<double>::infinity()) continue;  // the rest cannot fit
    if (cost_cap != kNoCostCap && !cost_leq(c.cost + rest, cost_cap)) {
      continue;  // cannot beat a plan already known
    }
    const State st{c.bytes, c.cost, c.state, c.option};
    // Thinned: a cheaper state in the same bucket replaces the last one.
    if (rounding == Rounding::kThinned && !layer.empty() &&
        layer.back().kept / width == st.kept / width) {
      layer.back() = st;
    } else {
      layer.push_back(st);
    }
  }
}

// Least cost within `budget`, by dynamic programming over blocks (see
// Rounding). `overflow` is set when the exact program would hold more than
// kExactStates states in one block.
BudgetChoice least_cost(const BudgetProblem& pb, int64_t budget, Rounding rounding, int64_t width,
                        bool* overflow, double cost_cap = kNoCostCap) {
  BudgetChoice choice;
  const auto n = static_cast<int32_t>(pb.blocks.size());
  if (pb.outside_none_kept > budget) return choice;
  // The least bytes blocks b.. can keep: a state that cannot leave room for
  // them and the output layer is dead.
  std::vector<int64_t> least_rest(n + 1, 0);
  for (int32_t b = n - 1; b >= 0; --b) {
    int64_t least = kNoLimit;
    for (const BlockOption& o : pb.options[pb.block_class[b]])
      least = std::min(least, o.kept_bytes);
    least_rest[b] = least_rest[b + 1] + least;
  }
  std::vector<std::vector<int32_t>> useful_options(n);
  for (int32_t b = 0; b < n; ++b) useful_options[b] = undominated_at(pb, b);
  std::vector<std::vector<State>> layers(n + 1);
  layers[0].push_back({0, 0.0, -1, -1});
  for (int32_t b = 0; b < n; ++b) {
    const int64_t room = budget - pb.outside_all_kept - least_rest[b + 1];
    auto& layer = layers[b + 1];
    extend_front(pb, b, layers[b], useful_options[b], budget, room, rounding, width, cost_cap,
                 layer);
    if (layer.empty()) return choice;
    if (overflow && rounding == Rounding::kExact && layer.size() > kExactStates) {
      *overflow = true;
      return choice;
    }
  }
  int32_t best = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(layers[n].size()); ++s) {
    const State& st = layers[n][s];
    if (st.kept + pb.outside_all_kept > budget) break;
    if (best < 0 || st.cost < layers[n][best].cost) best = s;
  }
  if (best < 0) return choice;
  choice.feasible = true;
  choice.option.assign(n, 0);
  for (int32_t b = n, s = best; b > 0; --b) {
    choice.option[b - 1] = layers[b][s].option;
    s = layers[b][s].prev;
  }
  choice.cost = rounding == Rounding::kRelaxed ? layers[n][best].cost : cost_of(pb, choice.option);
  choice.peak = peak_of(pb, choice.option);
  choice.lower_bound = choice.cost;
  return choice;
}

// The least-cost plan within `budget` and a lower bound on any plan's cost:
// exact when the exact program stays small, else from bucketed programs.
BudgetChoice bounded_least_cost(const BudgetProblem& pb, int64_t budget,
                                double cost_cap = kNoCostCap) {
  // A quick coarse plan that fits caps the cost of states worth keeping
  // (unless the caller already knows a cap: then it only asks whether that
  // cost is reachable).
  const int64_t most = most_kept(pb);
  BudgetChoice coarse;
  if (cost_cap == kNoCostCap) {
    coarse = least_cost(pb, budget, Rounding::kThinned, std::max<int64_t>(1, most / kBuckets),
                        nullptr, cost_cap);
    if (coarse.feasible) cost_cap = coarse.cost;
  }
  bool overflow = false;
  BudgetChoice exact = least_cost(pb, budget, Rounding::kExact, 1, &overflow, cost_cap);
  if (!overflow) return exact;
  const int64_t width = std::max<int64_t>(1, most / kBuckets);
  BudgetChoice upper = coarse.feasible
                           ? coarse
                           : least_cost(pb, budget, Rounding::kThinned, width, nullptr, cost_cap);
  // No pruning here: the bound must not depend on the plan found.
  const BudgetChoice lower = least_cost(pb, budget, Rounding::kRelaxed, width, nullptr);
  // Two relaxations, each a valid bound; the higher is the better one.
  const double relaxed = lower.feasible ? lower.cost : upper.cost;
  const double suffix = rest_lower_bound(pb, 0, budget);
  upper.lower_bound = std::min(upper.cost, std::max(relaxed, suffix));
  return upper;
}

// Whether some choice fits `budget`: the least kept bytes so far is the
// only state that matters for feasibility.
bool fits(const BudgetProblem& pb, int64_t budget) {
  if (pb.outside_none_kept > budget) return false;
  int64_t kept = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(pb.blocks.size()); ++b) {
    int64_t best = kNoLimit;
    for (const BlockOption& o : pb.options[pb.block_class[b]]) {
      if (kept + window_peak(pb, b, o) <= budget) best = std::min(best, kept + o.kept_bytes);
    }
    if (best == kNoLimit) return false;
    kept = best;
  }
  return kept + pb.outside_all_kept <= budget;
}

// The table behind rest_lower_bound, from the last block back. A bucket
// stands for its highest room r: an option fits if its window peak is at
// most r, and leaves r - kept bytes, whose bucket's bound is no higher than
// that of any smaller room (the bound falls as the room grows).
void fill_rest_cost(BudgetProblem& pb) {
  const auto n = static_cast<int32_t>(pb.blocks.size());
  int64_t lowest = pb.outside_all_kept, highest = pb.outside_all_kept;
  for (int32_t b = 0; b < n; ++b) {
    for (const BlockOption& o : pb.options[pb.block_class[b]]) {
      lowest = std::min(lowest, window_peak(pb, b, o));
      highest = std::max(highest, window_peak(pb, b, o));
    }
  }
  highest += most_kept(pb);  // room enough for every choice: the bound is 0
  pb.rest_origin = lowest;
  pb.rest_width = std::max<int64_t>(1, (highest - lowest) / kRestBuckets + 1);
  const int64_t columns = (highest - lowest) / pb.rest_width + 1;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  pb.rest_cost.assign(n + 1, std::vector<double>(columns, kNever));
  auto top = [&](int64_t j) { return pb.rest_origin + (j + 1) * pb.rest_width - 1; };
  for (int64_t j = 0; j < columns; ++j) {
    if (top(j) >= pb.outside_all_kept) pb.rest_cost[n][j] = 0;
  }
  for (int32_t b = n - 1; b >= 0; --b) {
    const auto& next = pb.rest_cost[b + 1];
    auto& row = pb.rest_cost[b];
    for (const BlockOption& o : pb.options[pb.block_class[b]]) {
      const int64_t window = window_peak(pb, b, o);
      for (int64_t j = 0; j < columns; ++j) {
        if (top(j) < window) continue;
        const int64_t left = top(j) - o.kept_bytes;
        if (left < pb.rest_origin) continue;
        const int64_t k = std::min(columns - 1, (left - pb.rest_origin) / pb.rest_width);
        row[j] = std::min(row[j], o.cost + next[k]);
      }
    }
  }
}

// The suffix program (budget.h), from the last block back. Each option
// extends the following front: states whose room is covered by the option's
// window all need just that window, so only the cheapest of them (the last)
// starts its list; the lists are merged into the new front like
// extend_front's. Returns false when a front exceeds kExactStates.
bool suffix_fronts(const BudgetProblem& pb, int64_t budget, double cost_cap,
                   std::vector<std::vector<SuffixState>>& fronts) {
  const auto n = static_cast<int32_t>(pb.blocks.size());
  fronts.assign(n + 1, {});
  if (pb.outside_all_kept > budget) return true;
  fronts[n].push_back({pb.outside_all_kept, 0.0, -1, -1});
  // Blocks 0..b-1 keep at least least_prefix[b] bytes, so a choice for
  // blocks b.. needing more room than budget - least_prefix[b] never fits.
  std::vector<int64_t> least_prefix(n + 1, 0);
  for (int32_t b = 0; b < n; ++b) {
    int64_t least = kNoLimit;
    for (const BlockOption& o : pb.options[pb.block_class[b]])
      least = std::min(least, o.kept_bytes);
    least_prefix[b + 1] = least_prefix[b] + least;
  }
  // A state must cost less than this (the cap, up to rounding).
  const double too_dear =
      cost_cap == kNoCostCap
          ? kNoCostCap
          : std::nextafter(cost_cap + 1e-9 * std::max(1.0, std::abs(cost_cap)), kNoCostCap);
  for (int32_t b = n - 1; b >= 0; --b) {
    const auto& next = fronts[b + 1];
    if (next.empty()) return true;
    const int64_t room_limit = budget - least_prefix[b];
    const auto& opts = pb.options[pb.block_class[b]];
    auto at = [&](int32_t o, int32_t s) {
      return Cursor{std::max(window_peak(pb, b, opts[o]), opts[o].kept_bytes + next[s].room),
                    opts[o].cost + next[s].cost, o, s};
    };
    std::vector<Cursor> heap;
    for (int32_t o : undominated_at(pb, b)) {
      const int64_t covered = window_peak(pb, b, opts[o]) - opts[o].kept_bytes;
      const auto first =
          std::upper_bound(next.begin(), next.end(), covered,
                           [](int64_t x, const SuffixState& st) { return x < st.room; }) -
          next.begin();
      heap.push_back(at(o, static_cast<int32_t>(std::max<int64_t>(first - 1, 0))));
    }
    std::make_heap(heap.begin(), heap.end(), later);
    auto& layer = fronts[b];
    const auto size = static_cast<int32_t>(next.size());
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const Cursor c = heap.back();
      heap.pop_back();
      if (c.bytes > room_limit) break;  // and so is every state still to come
      const double bar = layer.empty() ? too_dear : std::min(too_dear, layer.back().cost);
      const bool dominated = c.cost >= bar;
      // After a dominated (or too dear) state, skip the following ones that
      // are too.
      const int32_t following =
          dominated ? first_cheaper(next, c.state + 1, size, bar - opts[c.option].cost)
                    : c.state + 1;
      if (following < size) {
        heap.push_back(at(c.option, following));
        std::push_heap(heap.begin(), heap.end(), later);
      }
      if (dominated) continue;
      layer.push_back({c.bytes, c.cost, c.state, c.option});
    }
    if (layer.size() > kExactStates) return false;
  }
  return true;
}

// The least cost within `budget` read off the suffix program's front, and
// among plans of that cost (up to rounding) the lowest peak.
BudgetChoice lookup(const BudgetProblem& pb, const std::vector<std::vector<SuffixState>>& fronts,
                    int64_t budget) {
  BudgetChoice choice;
  const auto& front = fronts[0];
  if (pb.outside_none_kept > budget || front.empty()) return choice;
  auto i = std::upper_bound(front.begin(), front.end(), budget,
                            [](int64_t x, const SuffixState& st) { return x < st.room; }) -
           front.begin() - 1;
  if (i < 0) return choice;
  while (i > 0 && cost_leq(front[i - 1].cost, front[i].cost)) --i;
  const auto n = static_cast<int32_t>(pb.blocks.size());
  choice.option.assign(n, 0);
  for (int32_t b = 0, s = static_cast<int32_t>(i); b < n; ++b) {
    choice.option[b] = fronts[b][s].option;
    s = fronts[b][s].next;
  }
  choice.feasible = true;
  choice.cost = cost_of(pb, choice.option);
  choice.peak = peak_of(pb, choice.option);
  choice.lower_bound = choice.cost;
  return choice;
}

}  // namespace

Plan make_reference_plan(const Program& program) {
  return complete_plan(program, std::vector<bool>(program.values.size(), true));
}

BudgetProblem make_budget_problem(const Program& program, const Schedule& reference,
                                  const std::vector<StepLevels>& levels,
                                  const StepBookings& bookings, double scale, const OpCost& cost,
                                  const std::vector<bool>& decidable) {
  if (levels.size() != reference.steps.size()) {
    throw std::logic_error("budget solver: one level per reference step expected");
  }
  BudgetProblem pb;
  pb.program = &program;
  const int32_t n = program.n_blocks;
  std::map<std::string, int32_t> class_of_signature;
  std::vector<int64_t> reference_kept(n);
  for (int32_t b = 0; b < n; ++b) {
    pb.blocks.push_back(describe_block(program, b, scale, bookings, decidable));
    const BlockShape& shape = pb.blocks.back();
    auto [it, added] =
        class_of_signature.emplace(shape.signature, static_cast<int32_t>(pb.options.size()));
    if (added) {
      pb.options.push_back(block_options(program, shape, cost, decidable));
      // The reference choice re-runs nothing; it has the least cost of all,
      // and among those the most kept bytes, so it sits on the front.
      const BlockOption keep_all =
          simulate_block(program, shape, std::vector<bool>(shape.last - shape.first + 1), cost);
      int32_t found = -1;
      for (int32_t o = 0; o < static_cast<int32_t>(pb.options.back().size()); ++o) {
        const BlockOption& x = pb.options.back()[o];
        if (x.kept_bytes == keep_all.kept_bytes && x.forward_peak == keep_all.forward_peak &&
            x.backward_peak == keep_all.backward_peak && x.cost == keep_all.cost) {
          found = o;
          break;
        }
      }
      if (found < 0) {
        pb.options.back().push_back(keep_all);
        found = static_cast<int32_t>(pb.options.back().size()) - 1;
      }
      pb.reference_option.push_back(found);
    }
    pb.block_class.push_back(it->second);
    reference_kept[b] = pb.options[it->second][pb.reference_option[it->second]].kept_bytes;
  }
  for (const auto& opts : pb.options) pb.enumerated += opts.size();

  // Read the window openings off the reference replay.
  std::vector<int64_t> forward_start(n, -1), backward_start(n, -1);
  int64_t all_kept = std::numeric_limits<int64_t>::min(), none_kept = 0;
  bool forward_blocks_done = false, backward_blocks_started = false;
  for (size_t s = 0; s < reference.steps.size(); ++s) {
    const Step& step = reference.steps[s];
    const int32_t b = program.nodes[step.node].block;
    const bool forward = step.kind == Step::Kind::kForward;
    if (b >= 0) {
      auto& start = forward ? forward_start[b] : backward_start[b];
      if (start < 0) start = levels[s].start;
      if (forward && b == n - 1) forward_blocks_done = true;
      if (!forward) backward_blocks_started = true;
      continue;
    }
    const bool all = forward ? forward_blocks_done : !backward_blocks_started;
    if (n > 0 && all) {
      all_kept = std::max(all_kept, levels[s].peak);
    } else {
      none_kept = std::max(none_kept, levels[s].peak);
    }
  }
  int64_t prefix = 0;
  for (int32_t b = 0; b < n; ++b) {
    pb.forward_base.push_back(forward_start[b] - prefix);
    pb.backward_base.push_back(backward_start[b] - prefix - reference_kept[b]);
    prefix += reference_kept[b];
  }
  pb.outside_all_kept = all_kept == std::numeric_limits<int64_t>::min() ? 0 : all_kept - prefix;
  pb.outside_none_kept = none_kept;

  fill_rest_cost(pb);
  return pb;
}

int64_t peak_of(const BudgetProblem& pb, const std::vector<int32_t>& option) {
  int64_t peak = pb.outside_none_kept, kept = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(pb.blocks.size()); ++b) {
    const BlockOption& o = option_of(pb, b, option[b]);
    peak = std::max(peak, kept + window_peak(pb, b, o));
    kept += o.kept_bytes;
  }
  return std::max(peak, kept + pb.outside_all_kept);
}

double cost_of(const BudgetProblem& pb, const std::vector<int32_t>& option) {
  double cost = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(pb.blocks.size()); ++b) {
    cost += option_of(pb, b, option[b]).cost;
  }
  return cost;
}

int64_t min_peak(const BudgetProblem& pb) {
  std::vector<int32_t> reference(pb.blocks.size());
  for (size_t b = 0; b < reference.size(); ++b) {
    reference[b] = pb.reference_option[pb.block_class[b]];
  }
  int64_t lo = 0, hi = peak_of(pb, reference);  // fits(hi) holds
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(pb, mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

BudgetChoice solve_budget(const BudgetProblem& pb, int64_t budget) {
  // A quick plan that fits caps the cost; then the suffix program, exact,
  // unless its fronts grow too large.
  if (pb.search == BudgetProblem::Search::kSuffixFirst) {
    const BudgetChoice coarse = least_cost(pb, budget, Rounding::kThinned,
                                           std::max<int64_t>(1, most_kept(pb) / kBuckets), nullptr);
    if (!coarse.feasible && !fits(pb, budget)) return coarse;
    std::vector<std::vector<SuffixState>> fronts;
    if (suffix_fronts(pb, budget, coarse.feasible ? coarse.cost : kNoCostCap, fronts)) {
      return lookup(pb, fronts, budget);
    }
  }
  BudgetChoice best = bounded_least_cost(pb, budget);
  if (!best.feasible) return best;
  const double lower_bound = best.lower_bound;
  if (lower_bound < best.cost) return best;  // not proven: no tie-break either
  // Among the plans of least cost, the lowest peak: the smallest budget at
  // which the least cost is still reached.
  // Usually the plan found already has the lowest peak: one program at one
  // byte less proves it; otherwise bisect.
  int64_t lo = min_peak(pb), hi = best.peak;
  if (lo < hi) {
    BudgetChoice c = bounded_least_cost(pb, hi - 1, best.cost);
    if (c.feasible && cost_leq(c.cost, best.cost)) {
      best = c;
      hi = c.peak;
    } else {
      lo = hi;
    }
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    BudgetChoice c = bounded_least_cost(pb, mid, best.cost);
    if (c.feasible && cost_leq(c.cost, best.cost)) {
      best = c;
      hi = c.peak;
    } else {
      lo = mid + 1;
    }
  }
  best.lower_bound = std::min(lower_bound, best.cost);
  return best;
}

std::vector<BudgetChoice> pareto_front(const BudgetProblem& pb, int points) {
  std::vector<int32_t> reference(pb.blocks.size());
  for (size_t b = 0; b < reference.size(); ++b) {
    reference[b] = pb.reference_option[pb.block_class[b]];
  }
  const int64_t lo = min_peak(pb), hi = peak_of(pb, reference);
  std::vector<BudgetChoice> front;
  for (int i = points - 1; i >= 0; --i) {
    const int64_t budget =
        points <= 1 ? hi
                    : lo + static_cast<int64_t>(static_cast<double>(hi - lo) * i / (points - 1));
    BudgetChoice c = solve_budget(pb, budget);
    if (!c.feasible) continue;
    if (!front.empty() && front.back().peak == c.peak && front.back().cost == c.cost) continue;
    front.push_back(std::move(c));
  }
  return front;
}

Plan plan_from_choice(const BudgetProblem& pb, const BudgetChoice& choice) {
  const Program& program = *pb.program;
  std::vector<bool> keep_wanted(program.values.size(), true);
  for (int32_t b = 0; b < static_cast<int32_t>(pb.blocks.size()); ++b) {
    const BlockShape& shape = pb.blocks[b];
    const BlockOption& o = option_of(pb, b, choice.option[b]);
    for (int32_t n = shape.first; n <= shape.last; ++n) {
      if (!o.recompute[n - shape.first]) continue;
      for (ValueId v : program.nodes[n].outputs) {
        if (!shape.pinned[v - shape.first_value]) keep_wanted[v] = false;
      }
    }
  }
  return complete_plan(program, keep_wanted);
}

}  // namespace remat
