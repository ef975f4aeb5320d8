#include "runtime/shard_layout.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/tensor.h"

namespace remat {

namespace {

// Each parameter's block: the block of the nodes that read it, or -1 when
// nodes outside the blocks or of several blocks read it (or none does).
std::vector<int32_t> block_of_params(const Program& program) {
  std::vector<int32_t> block(program.params.size(), -1);
  std::vector<bool> seen(program.params.size(), false);
  for (const Node& node : program.nodes) {
    for (ParamId p : node.params) {
      block[p] = seen[p] && block[p] != node.block ? -1 : node.block;
      seen[p] = true;
    }
  }
  return block;
}

}  // namespace

ShardLayout make_shard_layout(const Program& program, int ranks) {
  if (ranks < 1) throw std::invalid_argument("make_shard_layout: ranks must be >= 1");
  ShardLayout layout;
  layout.ranks = ranks;
  layout.unit_of_param.assign(program.params.size(), -1);
  layout.offset_of_param.assign(program.params.size(), 0);
  const std::vector<int32_t> block = block_of_params(program);
  std::map<int32_t, size_t> unit_of_block;  // ordered: -1 (outside) first
  for (int32_t b : block) unit_of_block.emplace(b, 0);
  for (auto& [b, u] : unit_of_block) {
    u = layout.units.size();
    ShardUnit unit;
    unit.block = b;
    layout.units.push_back(unit);
  }
  for (size_t p = 0; p < program.params.size(); ++p) {
    const size_t u = unit_of_block.at(block[p]);
    ShardUnit& unit = layout.units[u];
    unit.params.push_back(static_cast<ParamId>(p));
    unit.offsets.push_back(unit.numel);
    layout.unit_of_param[p] = static_cast<int32_t>(u);
    layout.offset_of_param[p] = unit.numel;
    unit.numel += numel(program.params[p].shape);
  }
  for (ShardUnit& unit : layout.units) unit.chunk = (unit.numel + ranks - 1) / ranks;
  return layout;
}

std::pair<int64_t, int64_t> ShardLayout::owned(size_t u, int rank) const {
  const ShardUnit& unit = units.at(u);
  const int64_t begin = std::min(unit.numel, static_cast<int64_t>(rank) * unit.chunk);
  const int64_t end = std::min(unit.numel, begin + unit.chunk);
  return {begin, end};
}

int64_t ShardLayout::shard_elements() const {
  int64_t n = 0;
  for (const ShardUnit& unit : units) n += unit.chunk;
  return n;
}

int64_t ShardLayout::largest_gathered() const {
  int64_t n = 0;
  for (const ShardUnit& unit : units) n = std::max(n, unit.chunk * ranks);
  return n;
}

}  // namespace remat
