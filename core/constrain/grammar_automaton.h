// GrammarAutomaton: a Grammar's recognizer as a deterministic automaton over
// bytes, built lazily as it is walked.
//
// A parse position is a stack of grammar positions (where each open rule
// continues), as in llama.cpp's grammar sampler; a state is the set of
// stacks the bytes so far leave possible. Stacks are hash-consed (a stack
// is its top position and the id of the stack below it), so equal stacks
// have equal ids, a state is a sorted set of ids, and equal states are one
// state: the set-of-stacks construction becomes a DFA whose transitions are
// computed once and then looked up. Each stack's top is a byte-set element
// (stacks are expanded through rule references and finished alternatives
// as they are made), or the stack is empty: the grammar is complete there.
//
// States only grow; a grammar whose walk needs more than `max_states`
// states or `max_stacks` stacks (deep nesting, heavy ambiguity) stops with
// kOverflow, never with unbounded memory.
//
// Thread-safety: not thread-safe (Next and Mask fill the caches); one per
// sequence, or one per thread.
#ifndef KVSERVE_CORE_CONSTRAIN_GRAMMAR_AUTOMATON_H_
#define KVSERVE_CORE_CONSTRAIN_GRAMMAR_AUTOMATON_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/constrain/grammar.h"

namespace kvserve::constrain {

struct AutomatonLimits {
  // 1 KiB of transitions each: at most 64 MiB per sequence.
  int64_t max_states = 1 << 16;
  // Bounds the memory and, as a closure interns each stack it makes, the
  // time of one step (about a second on the engine thread at the limit).
  int64_t max_stacks = 1 << 20;
};

class GrammarAutomaton {
 public:
  // No byte can follow: the text so far is outside the grammar.
  static constexpr int32_t kDead = -1;
  // The walk needed more than the limits allow.
  static constexpr int32_t kOverflow = -2;

  explicit GrammarAutomaton(std::shared_ptr<const Grammar> grammar,
                            const AutomatonLimits& limits = {});

  // The state before any byte; kOverflow when even that passed the limits.
  int32_t start() const { return start_; }
  // The state after `byte` in `state`: kDead or kOverflow when none.
  // REQUIRES: state >= 0.
  int32_t Next(int32_t state, uint8_t byte);
  // The state's transitions as computed so far: entry b is Next(state, b)
  // once that was asked, else kUnknown. Valid until the next call that
  // adds a state (Next). For walks that look up many transitions
  // (TokenTrie::Allowed). REQUIRES: state >= 0.
  const int32_t* Transitions(int32_t state) const {
    return states_[state].next.get();
  }
  static constexpr int32_t kUnknown = -3;

  // The state after `bytes` (kDead or kOverflow as soon as one is).
  int32_t Walk(int32_t state, std::string_view bytes);
  // The text so far is a whole sentence of the grammar (never for kDead or
  // kOverflow).
  bool CanEnd(int32_t state) const {
    return state >= 0 && states_[state].accept;
  }
  // No byte can follow (the grammar is complete and allows nothing more;
  // so too for kDead and kOverflow).
  bool IsFinal(int32_t state) const {
    return state < 0 || states_[state].stacks.empty();
  }

  const Grammar& grammar() const { return *grammar_; }
  int64_t num_states() const { return states_.size(); }

 private:
  static constexpr int32_t kNoParent = -1;
  struct Stack {
    uint32_t pos;    // into grammar().elements
    int32_t parent;  // the stack below; kNoParent at the bottom
  };
  struct State {
    std::vector<int32_t> stacks;      // sorted; each top is a kBytes element
    bool accept = false;              // an empty stack is among them
    std::unique_ptr<int32_t[]> next;  // 256 transitions; kUnknown: not yet
  };

  int32_t InternStack(uint32_t pos, int32_t parent);
  // Adds the expansions of the stack (pos, parent) to `out`: through rule
  // references and finished alternatives, until each top is a byte set.
  void Expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out,
              bool& accept);
  int32_t InternState(std::vector<int32_t> stacks, bool accept);

  const std::shared_ptr<const Grammar> grammar_;
  const AutomatonLimits limits_;
  std::vector<Stack> stacks_;
  absl::flat_hash_map<uint64_t, int32_t> stack_ids_;
  std::vector<State> states_;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> state_ids_;
  // The (position, stack below) pairs the closure being computed expanded.
  absl::flat_hash_set<uint64_t> expanded_;
  bool overflow_ = false;
  int32_t start_ = kDead;
};

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_GRAMMAR_AUTOMATON_H_
