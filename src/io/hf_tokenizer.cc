#include "io/hf_tokenizer.h"

#include <compare>
#include <functional>
#include <queue>

#include "io/hf_tokenizer_model.h"

namespace remat {

using hf_bpe::pair_key;

const HfBpeTokenizer::Model::Added* HfBpeTokenizer::Model::added_at(std::string_view text,
                                                                    size_t pos) const {
  if (!added_starts[static_cast<unsigned char>(text[pos])]) return nullptr;
  const std::string_view rest = text.substr(pos);
  for (const Added& a : added)
    if (rest.starts_with(a.content)) return &a;
  return nullptr;
}

// Merges as Hugging Face's BPE does: the adjacent pair of lowest rank
// first, the leftmost among equals, one merge at a time. A heap of
// candidates keeps a long pre-token O(n log n); a candidate whose pair has
// changed since it was pushed is skipped.
void HfBpeTokenizer::Model::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    if (const auto it = token_ids.find(word); it != token_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
    auto operator<=>(const Candidate&) const = default;
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_ids[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto merge_of = [&](int32_t pos) -> const Merge* {
    if (pos < 0 || symbols[pos].next < 0) return nullptr;
    const auto it = merges.find(pair_key(symbols[pos].id, symbols[symbols[pos].next].id));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto consider = [&](int32_t pos) {
    if (const Merge* merge = merge_of(pos)) heap.push({merge->rank, pos, merge->id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const Merge* now = symbols[c.pos].alive ? merge_of(c.pos) : nullptr;
    if (!now || now->rank != c.rank) continue;
    Symbol& left = symbols[c.pos];
    const int32_t right = left.next;
    left.id = c.id;
    symbols[right].alive = false;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void HfBpeTokenizer::Model::encode_segment(std::string_view segment, pcre2_match_data* match,
                                           std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  std::vector<std::string_view> pieces = {segment}, next;
  for (const auto& split : splits) {
    next.clear();
    for (std::string_view piece : pieces) split->split(piece, match, next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) merge_word(piece, out);
}

HfBpeTokenizer::HfBpeTokenizer(const std::string& path, const std::string& key)
    : model_(std::make_unique<Model>()) {
  hf_bpe::read_tokenizer_json(path, key, *model_);
}

HfBpeTokenizer::~HfBpeTokenizer() = default;

int64_t HfBpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(model_->offsets.size()) - 1;
}

int32_t HfBpeTokenizer::bos_id() const { return model_->bos; }
int32_t HfBpeTokenizer::eos_id() const { return model_->eos; }

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (!match) throw std::bad_alloc();
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Model::Added* added = model_->added_at(text, pos);
    if (!added) {
      ++pos;
      continue;
    }
    model_->encode_segment(text.substr(segment, pos - segment), match.get(), ids);
    ids.push_back(added->id);
    pos += added->content.size();
    segment = pos;
  }
  model_->encode_segment(text.substr(segment), match.get(), ids);
  return ids;
}

void HfBpeTokenizer::append_document(std::string_view document, std::vector<int32_t>& out) const {
  if (model_->bos >= 0) out.push_back(model_->bos);
  const std::vector<int32_t> ids = encode(document);
  out.insert(out.end(), ids.begin(), ids.end());
  if (model_->eos >= 0) out.push_back(model_->eos);
}

std::string HfBpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  const auto& offsets = model_->offsets;
  for (int32_t id : ids) {
    if (id >= 0 && (id == model_->bos || id == model_->eos)) continue;
    if (id < 0 || static_cast<size_t>(id) + 1 >= offsets.size()) {
      text += "\xEF\xBF\xBD";  // U+FFFD
      continue;
    }
    text.append(model_->spellings, offsets[id], offsets[id + 1] - offsets[id]);
  }
  return text;
}

}  // namespace remat
