// Constraint: one sequence's grammar during decoding. The engine asks it
// for the tokens allowed next (a bit per token) and tells it the token
// chosen; it never sees HTTP, gRPC or the grammar's source.
//
// ConstraintVocabulary is the model's side, built once per model: each
// token's bytes (as DecodeToken gives them in the middle of a text) in a
// TokenTrie, and the end-of-generation tokens. Those are allowed exactly
// where the grammar may end; control tokens never.
//
// A state's mask is kept (states recur: a string's content, a list's next
// item), so a state costs its trie walk once per sequence; the cache is
// dropped when it passes kMaxMaskCacheBytes.
//
// Thread-safety: ConstraintVocabulary is immutable (share it); a Constraint
// is one sequence's, used by one thread at a time.
#ifndef KVSERVE_CORE_CONSTRAIN_CONSTRAINT_H_
#define KVSERVE_CORE_CONSTRAIN_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/constrain/grammar.h"
#include "core/constrain/grammar_automaton.h"
#include "core/constrain/token_trie.h"
#include "core/tokenizer/tokenizer.h"

namespace kvserve::constrain {

class ConstraintVocabulary {
 public:
  explicit ConstraintVocabulary(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return trie_.vocab_size(); }
  const TokenTrie& trie() const { return trie_; }
  // The bytes a token adds to the text; empty for control tokens.
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_tokens_;
  TokenTrie trie_;
};

class Constraint {
 public:
  // Per sequence: 64 running constrained sequences keep at most 256 MiB of
  // masks (about 320 states each at 102,400 tokens).
  static constexpr int64_t kMaxMaskCacheBytes = int64_t{4} << 20;

  Constraint(std::shared_ptr<const Grammar> grammar,
             std::shared_ptr<const ConstraintVocabulary> vocab);

  // The tokens allowed next: bit id of the vocab_size() bits (64-bit
  // words). Valid until the next call. RESOURCE_EXHAUSTED when the grammar
  // needs more states than the automaton's limits; FAILED_PRECONDITION
  // when no token of the vocabulary can continue it (the grammar wants a
  // byte no token starts with).
  absl::StatusOr<const std::vector<uint64_t>*> Allowed();
  // Takes the chosen token (an end of generation where the grammar may end
  // changes nothing). INVALID_ARGUMENT for one the grammar does not allow
  // here (the caller sampled outside Allowed()).
  absl::Status Accept(int32_t token);

  // The text so far is complete under the grammar.
  bool CanEnd() const { return automaton_.CanEnd(state_); }
  // Nothing may follow: the generation is over.
  bool Complete() const { return automaton_.IsFinal(state_); }

 private:
  const std::shared_ptr<const ConstraintVocabulary> vocab_;
  GrammarAutomaton automaton_;
  int32_t state_;
  absl::flat_hash_map<int32_t, std::vector<uint64_t>> masks_;
  int64_t bytes_cached_ = 0;
  int64_t bytes_accepted_ = 0;  // for errors: where the text is
};

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_CONSTRAINT_H_
