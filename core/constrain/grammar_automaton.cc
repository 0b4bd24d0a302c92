#include "core/constrain/grammar_automaton.h"

#include <algorithm>
#include <utility>

namespace kvserve::constrain {

using Kind = Grammar::Element::Kind;

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const Grammar> grammar,
                                   const AutomatonLimits& limits)
    : grammar_(std::move(grammar)),
      limits_(limits),
      chunks_(
          (std::max<int64_t>(limits.max_states, 1) + (1 << kChunkBits) - 1) >>
          kChunkBits) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> stacks;
  bool accept = false;
  for (uint32_t alt : grammar_->alternatives[grammar_->root]) {
    Expand(alt, kNoParent, stacks, accept);
  }
  expanded_.clear();
  start_ = InternState(std::move(stacks), accept);
}

int32_t GrammarAutomaton::InternStack(uint32_t pos, int32_t parent) {
  const uint64_t key =
      (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
  auto [it, added] = stack_ids_.try_emplace(key, stacks_.size());
  if (added) {
    if (static_cast<int64_t>(stacks_.size()) >= limits_.max_stacks) {
      overflow_ = true;
    }
    stacks_.push_back(Stack{pos, parent});
  }
  return it->second;
}

void GrammarAutomaton::Expand(uint32_t pos, int32_t parent,
                              std::vector<int32_t>& out, bool& accept) {
  const Grammar& g = *grammar_;
  // A work list, not recursion: nested repetitions can chain a million
  // expansions, more than a thread's stack holds.
  std::vector<std::pair<uint32_t, int32_t>> work = {{pos, parent}};
  while (!work.empty() && !overflow_) {
    auto [p, below] = work.back();
    work.pop_back();
    // Finished alternatives return to the stack below, whose position is
    // already past the rule reference.
    bool accepted = false;
    while (g.elements[p].kind == Kind::kEnd) {
      if (below == kNoParent) {
        accepted = true;
        break;
      }
      p = stacks_[below].pos;
      below = stacks_[below].parent;
    }
    if (accepted) {
      accept = true;
      continue;
    }
    // Each (position, stack below) is expanded once per closure: the same
    // pair expands to the same stacks, and a repetition of something that
    // may be empty (`( [x]* )*`) comes back to the pair it started from.
    const uint64_t key = (uint64_t{p} << 32) | static_cast<uint32_t>(below + 1);
    if (!expanded_.insert(key).second) continue;
    const Grammar::Element& e = g.elements[p];
    if (e.kind == Kind::kBytes) {
      out.push_back(InternStack(p, below));
      continue;
    }
    // A rule reference: each alternative on top of the continuation. A
    // reference that ends its alternative continues where the alternative
    // would return to (a tail call), so that repetition (`x*` is
    // `r ::= x r | ""`) does not grow the stack. Any other reference to a
    // rule it is expanding would grow it for ever: ParseGbnf refuses such
    // left recursion.
    const int32_t continuation = g.elements[p + 1].kind == Kind::kEnd
                                     ? below
                                     : InternStack(p + 1, below);
    for (uint32_t alt : g.alternatives[e.index]) {
      work.emplace_back(alt, continuation);
    }
  }
}

int32_t GrammarAutomaton::InternState(std::vector<int32_t> stacks,
                                      bool accept) {
  if (overflow_) return kOverflow;
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty() && !accept) return kDead;
  // The key: the stacks, then 1 when accepting.
  std::vector<int32_t> key = stacks;
  key.push_back(accept ? 1 : 0);
  const int32_t id = num_states_.load(std::memory_order_relaxed);
  auto [it, added] = state_ids_.try_emplace(std::move(key), id);
  if (added) {
    if (id >= limits_.max_states) {
      state_ids_.erase(it);
      overflow_ = true;
      return kOverflow;
    }
    std::unique_ptr<State[]>& chunk = chunks_[id >> kChunkBits];
    if (chunk == nullptr) chunk.reset(new State[1 << kChunkBits]);
    State& s = chunk[id & ((1 << kChunkBits) - 1)];
    s.stacks = std::move(stacks);
    s.accept = accept;
    s.next.reset(new std::atomic<int32_t>[256]);
    for (int b = 0; b < 256; ++b) {
      s.next[b].store(kUnknown, std::memory_order_relaxed);
    }
    // Published by the release store of the transition that leads to it
    // (or, for the start state, by the constructor).
    num_states_.store(id + 1, std::memory_order_relaxed);
  }
  return it->second;
}

int32_t GrammarAutomaton::Next(int32_t state, uint8_t byte) {
  const int32_t next =
      state_at(state).next[byte].load(std::memory_order_acquire);
  if (next != kUnknown) return next;
  std::lock_guard<std::mutex> lock(mu_);
  return ComputeNext(state, byte);
}

int32_t GrammarAutomaton::ComputeNext(int32_t state, uint8_t byte) {
  std::atomic<int32_t>& next = state_at(state).next[byte];
  // Another thread may have computed it while this one waited.
  if (const int32_t known = next.load(std::memory_order_relaxed);
      known != kUnknown) {
    return known;
  }
  const Grammar& g = *grammar_;
  std::vector<int32_t> stacks;
  bool accept = false;
  for (int32_t id : state_at(state).stacks) {
    const Stack s = stacks_[id];
    if (!g.byte_sets[g.elements[s.pos].index].Has(byte)) continue;
    Expand(s.pos + 1, s.parent, stacks, accept);
  }
  expanded_.clear();
  const int32_t to = InternState(std::move(stacks), accept);
  next.store(to, std::memory_order_release);
  return to;
}

int32_t GrammarAutomaton::Walk(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state < 0) return state;
    state = Next(state, static_cast<uint8_t>(c));
  }
  return state;
}

}  // namespace kvserve::constrain
