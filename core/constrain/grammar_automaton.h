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
// Thread-safety: thread-safe, so that the sequences decoding with one
// grammar share one automaton and compute their masks in parallel. A known
// transition is read without a lock (each is an atomic, stored once its
// state is complete); computing a new one takes the automaton's mutex.
// States live in fixed chunks, so a state, once published, never moves.
#ifndef KVSERVE_CORE_CONSTRAIN_GRAMMAR_AUTOMATON_H_
#define KVSERVE_CORE_CONSTRAIN_GRAMMAR_AUTOMATON_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
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
  // once that was asked, else kUnknown (load with acquire: a state read
  // from it is complete). Valid as long as the automaton. For walks that
  // look up many transitions (TokenTrie::Allowed). REQUIRES: state >= 0.
  const std::atomic<int32_t>* Transitions(int32_t state) const {
    return state_at(state).next.get();
  }
  static constexpr int32_t kUnknown = -3;

  // The state after `bytes` (kDead or kOverflow as soon as one is).
  int32_t Walk(int32_t state, std::string_view bytes);
  // The text so far is a whole sentence of the grammar (never for kDead or
  // kOverflow).
  bool CanEnd(int32_t state) const {
    return state >= 0 && state_at(state).accept;
  }
  // No byte can follow (the grammar is complete and allows nothing more;
  // so too for kDead and kOverflow).
  bool IsFinal(int32_t state) const {
    return state < 0 || state_at(state).stacks.empty();
  }

  const Grammar& grammar() const { return *grammar_; }
  int64_t num_states() const {
    return num_states_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr int32_t kNoParent = -1;
  struct Stack {
    uint32_t pos;    // into grammar().elements
    int32_t parent;  // the stack below; kNoParent at the bottom
  };
  // Immutable once its id is published, but for `next`.
  struct State {
    std::vector<int32_t> stacks;  // sorted; each top is a kBytes element
    bool accept = false;          // an empty stack is among them
    // 256 transitions; kUnknown: not yet.
    std::unique_ptr<std::atomic<int32_t>[]> next;
  };
  static constexpr int kChunkBits = 10;  // states per chunk: 1,024

  const State& state_at(int32_t id) const {
    return chunks_[id >> kChunkBits][id & ((1 << kChunkBits) - 1)];
  }
  // Next's slow path. REQUIRES: mu_ held.
  int32_t ComputeNext(int32_t state, uint8_t byte);
  int32_t InternStack(uint32_t pos, int32_t parent);
  // Adds the expansions of the stack (pos, parent) to `out`: through rule
  // references and finished alternatives, until each top is a byte set.
  void Expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out,
              bool& accept);
  int32_t InternState(std::vector<int32_t> stacks, bool accept);

  const std::shared_ptr<const Grammar> grammar_;
  const AutomatonLimits limits_;
  // Sized at construction for max_states and never resized: a chunk's
  // pointer is set (under mu_) before any of its states is published.
  std::vector<std::unique_ptr<State[]>> chunks_;
  std::atomic<int32_t> num_states_{0};
  // What follows is guarded by mu_ (but for start_, set in the
  // constructor).
  std::mutex mu_;
  std::vector<Stack> stacks_;
  absl::flat_hash_map<uint64_t, int32_t> stack_ids_;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> state_ids_;
  // The (position, stack below) pairs the closure being computed expanded.
  absl::flat_hash_set<uint64_t> expanded_;
  bool overflow_ = false;
  int32_t start_ = kDead;
};

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_GRAMMAR_AUTOMATON_H_
