// Constraint: one sequence's grammar during decoding. The engine asks it
// for the tokens allowed next (a bit per token) and tells it the token
// chosen; it never sees HTTP, gRPC or the grammar's source.
//
// ConstraintVocabulary is the model's side, built once per model: each
// token's bytes (as DecodeToken gives them in the middle of a text) in a
// TokenTrie, and the end-of-generation tokens. Those are allowed exactly
// where the grammar may end; control tokens never.
//
// GrammarMatcher is a grammar's side, shared by every sequence decoding
// with it (MatcherCache finds it by the grammar's content, so requests
// that compile the same schema share it too): the automaton, and the mask
// of each state a sequence reached. States recur (a string's content, a
// list's next item, the same object in n choices or in the next request),
// so a state costs its trie walk once, whichever sequence reaches it
// first; the masks are dropped when they pass kMaxMaskBytes.
//
// Thread-safety: ConstraintVocabulary is immutable and GrammarMatcher and
// MatcherCache thread-safe (the engine samples a step's sequences in
// parallel); a Constraint is one sequence's, used by one thread at a time.
#ifndef KVSERVE_CORE_CONSTRAIN_CONSTRAINT_H_
#define KVSERVE_CORE_CONSTRAIN_CONSTRAINT_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
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
  // bytes(id), or a control token's piece ("[TOOL_CALLS]"), which a lazy
  // grammar's trigger may be.
  const std::string& text(int32_t id) const {
    return bytes_[id].empty() ? pieces_[id] : bytes_[id];
  }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<std::string> pieces_;  // control tokens' (not ends'); else ""
  std::vector<int32_t> end_tokens_;
  TokenTrie trie_;
};

// The tokens allowed in a state: bit id of vocab_size() bits (64-bit
// words); `any` is false when none is.
struct TokenMask {
  std::vector<uint64_t> bits;
  bool any = false;
};

class GrammarMatcher {
 public:
  // About 1,300 states at 102,400 tokens.
  static constexpr int64_t kMaxMaskBytes = int64_t{16} << 20;

  GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                 std::shared_ptr<const ConstraintVocabulary> vocab,
                 const AutomatonLimits& limits = {});

  // The state's mask, end-of-generation tokens included where the grammar
  // may end; null when the automaton passed its limits computing it.
  // REQUIRES: state >= 0.
  std::shared_ptr<const TokenMask> Mask(int32_t state);

  GrammarAutomaton& automaton() { return automaton_; }
  const ConstraintVocabulary& vocab() const { return *vocab_; }
  // Trie walks done (masks computed rather than found).
  int64_t masks_computed() const {
    return masks_computed_.load(std::memory_order_relaxed);
  }

 private:
  const std::shared_ptr<const ConstraintVocabulary> vocab_;
  GrammarAutomaton automaton_;
  std::atomic<int64_t> masks_computed_{0};
  std::mutex mu_;  // guards what follows
  absl::flat_hash_map<int32_t, std::shared_ptr<const TokenMask>> masks_;
  int64_t mask_bytes_ = 0;
};

// The matchers of the grammars in use and of the last few used: a grammar
// equal in content to one kept (the JSON-object grammar, the same schema
// again) gets its matcher, with the states and masks found so far. A
// matcher whose automaton holds half its limit of states is retired: the
// sequences on it finish there, new ones start on a fresh matcher, so
// states that a server's traffic accumulates over days never exhaust the
// limit for everyone (each sequence still has the other half).
class MatcherCache {
 public:
  // Matchers kept besides those in use.
  static constexpr int kMaxIdle = 8;

  explicit MatcherCache(std::shared_ptr<const ConstraintVocabulary> vocab,
                        const AutomatonLimits& limits = {});

  std::shared_ptr<GrammarMatcher> Get(std::shared_ptr<const Grammar> grammar);

 private:
  const std::shared_ptr<const ConstraintVocabulary> vocab_;
  const AutomatonLimits limits_;
  std::mutex mu_;  // guards what follows
  // Most recently used first; keyed by the grammar's content.
  std::list<std::pair<std::string, std::shared_ptr<GrammarMatcher>>> lru_;
};

// A lazy constraint (non-empty `triggers`) lets the text run free until
// one of the triggers appears in it; from there on the text, the trigger
// included, follows the grammar (whose sentences begin with a trigger):
// a tool call's grammar switched on at its opener, so that the model may
// answer in words or call a tool, and a call it begins is well-formed.
// Should the trigger's token carry bytes past it that the grammar refuses,
// the text stays free.
class Constraint {
 public:
  explicit Constraint(std::shared_ptr<GrammarMatcher> matcher,
                      std::vector<std::string> triggers = {});

  // The grammar holds (always, unless lazy and not triggered yet). While
  // it does not, every token is allowed and Allowed() is not to be asked.
  bool active() const { return state_ != kInactive; }

  // The tokens allowed next. Valid until the next call. RESOURCE_EXHAUSTED
  // when the grammar needs more than the automaton's limits;
  // FAILED_PRECONDITION when no token of the vocabulary can continue it
  // (the grammar wants a byte no token starts with).
  absl::StatusOr<const std::vector<uint64_t>*> Allowed();
  // Takes the chosen token (an end of generation where the grammar may end
  // changes nothing). INVALID_ARGUMENT for one the grammar does not allow
  // here (the caller sampled outside Allowed()).
  absl::Status Accept(int32_t token);

  // The text so far is complete under the grammar.
  bool CanEnd() const { return !active() || automaton().CanEnd(state_); }
  // Nothing may follow: the generation is over.
  bool Complete() const { return active() && automaton().IsFinal(state_); }

 private:
  static constexpr int32_t kInactive = -2;  // not a state (kDead is -1)

  // Lazy: adds a token's text to what was seen and switches the grammar on
  // at a trigger.
  void Watch(int32_t token);

  const GrammarAutomaton& automaton() const { return matcher_->automaton(); }

  const std::shared_ptr<GrammarMatcher> matcher_;
  const std::vector<std::string> triggers_;
  std::string seen_;  // lazy, not triggered: the text's last bytes
  int32_t state_;
  std::shared_ptr<const TokenMask> mask_;  // Allowed()'s
  int64_t bytes_accepted_ = 0;             // for errors: where the text is
};

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_CONSTRAINT_H_
