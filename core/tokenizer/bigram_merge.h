// MergeBigrams: greedy pairwise merging of adjacent pieces, the best pair
// first and the leftmost among equals, until no adjacent pair may merge. It
// is the loop of SentencePiece BPE (pairs ranked by the merged token's
// score) and of byte-level BPE (pairs ranked by merge rank).
#ifndef KVSERVE_CORE_TOKENIZER_BIGRAM_MERGE_H_
#define KVSERVE_CORE_TOKENIZER_BIGRAM_MERGE_H_

#include <cstddef>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace kvserve {

// `pieces` are consecutive views into one text, in order. `priority(left,
// right)` ranks merging two adjacent pieces (higher first) or returns
// nullopt when they may not merge. Returns the merged pieces, in order.
template <typename Priority>
std::vector<std::string_view> MergeBigrams(
    const std::vector<std::string_view>& pieces, Priority priority) {
  // A doubly linked list over the pieces; a merged piece keeps the left
  // index and absorbs the right one (whose view becomes empty).
  struct Symbol {
    int prev;
    int next;
    std::string_view text;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(pieces.size());
  for (std::string_view p : pieces) {
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, idx + 1, p});
  }
  if (symbols.empty()) return {};
  symbols.back().next = -1;

  struct Bigram {
    int left;
    int right;
    double priority;
    size_t len;  // of the merged text, to detect stale entries
  };
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.priority < b.priority ||
           (a.priority == b.priority && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(
      worse);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view l = symbols[left].text, r = symbols[right].text;
    std::optional<double> p = priority(l, r);
    if (p.has_value()) queue.push({left, right, *p, l.size() + r.size()});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  }
  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.text.empty() || r.text.empty() ||
        l.text.size() + r.text.size() != top.len) {
      continue;
    }
    l.text = std::string_view(l.text.data(), top.len);
    r.text = {};
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    try_add(l.prev, top.left);
    try_add(top.left, l.next);
  }
  std::vector<std::string_view> out;
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].text);
  return out;
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_BIGRAM_MERGE_H_
