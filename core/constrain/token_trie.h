// TokenTrie: a vocabulary's token bytes as a trie, laid out for computing
// which tokens a grammar state allows.
//
// The trie is stored in preorder, each node with the index just past its
// subtree: Allowed() walks it as one array, feeding each node's byte to the
// automaton from its parent's state, and skips a whole subtree as soon as a
// byte is refused. Tokens sharing a prefix share its transitions, so a
// state's mask costs one automaton step per trie node it reaches, and none
// for the subtrees it refuses.
//
// Thread-safety: immutable after construction; Allowed() may run on many
// threads at once (it grows only the automaton, which is thread-safe).
#ifndef KVSERVE_CORE_CONSTRAIN_TOKEN_TRIE_H_
#define KVSERVE_CORE_CONSTRAIN_TOKEN_TRIE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/constrain/grammar_automaton.h"

namespace kvserve::constrain {

class TokenTrie {
 public:
  // token_bytes[id]: the bytes token `id` adds to the text. An empty entry
  // (a control token) is never allowed by a grammar.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  int32_t vocab_size() const { return vocab_size_; }
  int64_t num_nodes() const { return nodes_.size(); }

  // Sets bit id of `mask` (vocab_size() bits in 64-bit words, resized and
  // cleared here) for every token whose bytes the automaton accepts from
  // `state`: each byte leads to a live state (one from which the grammar
  // may still be completed). Returns false when the automaton overflowed
  // (the mask is then incomplete). REQUIRES: state >= 0.
  bool Allowed(GrammarAutomaton& automaton, int32_t state,
               std::vector<uint64_t>& mask) const;

 private:
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;       // 1 for the first byte of a token
    int32_t end = 0;          // index just past this node's subtree
    int32_t first_token = 0;  // into tokens_: the tokens ending here
    int32_t num_tokens = 0;
  };
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  int32_t vocab_size_ = 0;
  int max_depth_ = 0;
};

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_TOKEN_TRIE_H_
