#include "core/constrain/token_trie.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <string_view>

namespace kvserve::constrain {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())) {
  std::vector<int32_t> order(token_bytes.size());
  std::iota(order.begin(), order.end(), 0);
  order.erase(
      std::remove_if(order.begin(), order.end(),
                     [&](int32_t id) { return token_bytes[id].empty(); }),
      order.end());
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] < token_bytes[b];
  });
  // Preorder: each token adds the nodes of its bytes past the prefix it
  // shares with the previous one (sorted order keeps subtrees together).
  // path[d]: the node of depth d + 1 on the current path.
  std::vector<int32_t> path;
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view bytes = token_bytes[id];
    size_t common = 0;
    while (common < prev.size() && common < bytes.size() &&
           prev[common] == bytes[common]) {
      ++common;
    }
    // The previous path's nodes past `common` are complete.
    for (size_t d = common; d < path.size(); ++d) {
      nodes_[path[d]].end = static_cast<int32_t>(nodes_.size());
    }
    path.resize(common);
    for (size_t d = common; d < bytes.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(bytes[d]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, 65535));
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    Node& last = nodes_[path.back()];
    if (last.num_tokens == 0) {
      last.first_token = static_cast<int32_t>(tokens_.size());
    }
    // Equal byte strings are adjacent in `order`: their ids are too.
    tokens_.push_back(id);
    ++last.num_tokens;
    max_depth_ = std::max<int>(max_depth_, bytes.size());
    prev = bytes;
  }
  for (int32_t node : path)
    nodes_[node].end = static_cast<int32_t>(nodes_.size());
}

bool TokenTrie::Allowed(GrammarAutomaton& automaton, int32_t state,
                        std::vector<uint64_t>& mask) const {
  mask.assign((vocab_size_ + 63) / 64, 0);
  // states[d]: the automaton's state after the first d bytes of the path;
  // moves[d] its transitions (each state owns its array; it never moves).
  std::vector<int32_t> states(max_depth_ + 1);
  std::vector<const std::atomic<int32_t>*> moves(max_depth_ + 1);
  states[0] = state;
  moves[0] = automaton.Transitions(state);
  bool overflow = false;
  const int32_t n_nodes = static_cast<int32_t>(nodes_.size());
  for (int32_t i = 0; i < n_nodes;) {
    const Node& n = nodes_[i];
    int32_t next = moves[n.depth - 1][n.byte].load(std::memory_order_acquire);
    if (next == GrammarAutomaton::kUnknown) {
      next = automaton.Next(states[n.depth - 1], n.byte);
    }
    if (next < 0) {
      overflow |= next == GrammarAutomaton::kOverflow;
      i = n.end;
      continue;
    }
    states[n.depth] = next;
    moves[n.depth] = automaton.Transitions(next);
    for (int32_t t = 0; t < n.num_tokens; ++t) {
      const int32_t id = tokens_[n.first_token + t];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
  return !overflow;
}

}  // namespace kvserve::constrain
