#include "core/constrain/constraint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace kvserve::constrain {
namespace {

std::vector<std::string> TokenBytes(const Tokenizer& tokenizer) {
  std::vector<std::string> out(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    // In the middle of a text (no BOS before it); control tokens and the
    // end of generation add nothing.
    if (!tokenizer.IsEndOfGeneration(id)) {
      out[id] = tokenizer.DecodeToken(-1, id);
    }
  }
  return out;
}

}  // namespace

ConstraintVocabulary::ConstraintVocabulary(const Tokenizer& tokenizer)
    : bytes_(TokenBytes(tokenizer)),
      pieces_(tokenizer.vocab_size()),
      trie_(bytes_) {
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsEndOfGeneration(id)) {
      end_tokens_.push_back(id);
    } else if (tokenizer.IsControl(id)) {
      pieces_[id] = tokenizer.Piece(id);
    }
  }
}

GrammarMatcher::GrammarMatcher(
    std::shared_ptr<const Grammar> grammar,
    std::shared_ptr<const ConstraintVocabulary> vocab,
    const AutomatonLimits& limits)
    : vocab_(std::move(vocab)), automaton_(std::move(grammar), limits) {}

std::shared_ptr<const TokenMask> GrammarMatcher::Mask(int32_t state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = masks_.find(state); it != masks_.end()) return it->second;
  }
  // The walk runs unlocked: sequences in other states walk meanwhile (two
  // reaching a new state at once both walk it; the results are equal).
  auto mask = std::make_shared<TokenMask>();
  if (!vocab_->trie().Allowed(automaton_, state, mask->bits)) return nullptr;
  masks_computed_.fetch_add(1, std::memory_order_relaxed);
  for (uint64_t w : mask->bits) mask->any = mask->any || w != 0;
  if (automaton_.CanEnd(state)) {
    for (int32_t id : vocab_->end_tokens()) {
      mask->bits[id >> 6] |= uint64_t{1} << (id & 63);
      mask->any = true;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (mask_bytes_ > kMaxMaskBytes) {
    masks_.clear();
    mask_bytes_ = 0;
  }
  auto [it, added] = masks_.try_emplace(state, std::move(mask));
  if (added) mask_bytes_ += it->second->bits.size() * sizeof(uint64_t);
  return it->second;
}

namespace {

// Two grammars with equal keys are the same grammar (rule names aside).
std::string GrammarKey(const Grammar& g) {
  std::string key;
  auto put = [&key](uint64_t v) {
    key.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  put(g.root);
  put(g.elements.size());
  for (const Grammar::Element& e : g.elements) {
    put((uint64_t{e.index} << 8) | static_cast<uint8_t>(e.kind));
  }
  put(g.byte_sets.size());
  for (const ByteSet& b : g.byte_sets) {
    for (uint64_t w : b.bits()) put(w);
  }
  put(g.alternatives.size());
  for (const std::vector<uint32_t>& alts : g.alternatives) {
    put(alts.size());
    for (uint32_t a : alts) put(a);
  }
  return key;
}

}  // namespace

MatcherCache::MatcherCache(std::shared_ptr<const ConstraintVocabulary> vocab,
                           const AutomatonLimits& limits)
    : vocab_(std::move(vocab)), limits_(limits) {}

std::shared_ptr<GrammarMatcher> MatcherCache::Get(
    std::shared_ptr<const Grammar> grammar) {
  std::string key = GrammarKey(*grammar);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(lru_.begin(), lru_.end(),
                         [&](const auto& e) { return e.first == key; });
  if (it != lru_.end() &&
      it->second->automaton().num_states() * 2 < limits_.max_states) {
    lru_.splice(lru_.begin(), lru_, it);
    return lru_.front().second;
  }
  if (it != lru_.end()) lru_.erase(it);  // retired
  lru_.emplace_front(std::move(key), std::make_shared<GrammarMatcher>(
                                         std::move(grammar), vocab_, limits_));
  std::shared_ptr<GrammarMatcher> matcher = lru_.front().second;
  // Drop the least recently used idle matchers past kMaxIdle (those in use
  // stay: their sequences hold them anyway).
  int idle = 0;
  for (auto e = lru_.begin(); e != lru_.end();) {
    if (e->second.use_count() == 1 && ++idle > kMaxIdle) {
      e = lru_.erase(e);
    } else {
      ++e;
    }
  }
  return matcher;
}

Constraint::Constraint(std::shared_ptr<GrammarMatcher> matcher,
                       std::vector<std::string> triggers)
    : matcher_(std::move(matcher)),
      triggers_(std::move(triggers)),
      state_(triggers_.empty() ? automaton().start() : kInactive) {}

void Constraint::Watch(int32_t token) {
  const ConstraintVocabulary& vocab = matcher_->vocab();
  if (token < 0 || token >= vocab.vocab_size()) return;
  seen_ += vocab.text(token);
  size_t at = std::string::npos;
  size_t longest = 0;
  for (const std::string& t : triggers_) {
    at = std::min(at, seen_.find(t));
    longest = std::max(longest, t.size());
  }
  if (at == std::string::npos) {
    // Keep what a trigger may still complete.
    if (seen_.size() > longest) seen_.erase(0, seen_.size() - longest);
    return;
  }
  const int32_t next =
      matcher_->automaton().Walk(automaton().start(), seen_.substr(at));
  if (next >= 0) {
    state_ = next;
    bytes_accepted_ = static_cast<int64_t>(seen_.size() - at);
  }
  seen_.clear();
}

absl::StatusOr<const std::vector<uint64_t>*> Constraint::Allowed() {
  if (!active()) {
    return absl::InternalError(
        "the mask of a lazy grammar not triggered yet was asked for");
  }
  if (state_ >= 0) mask_ = matcher_->Mask(state_);
  if (state_ < 0 || mask_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the grammar needs more than %d parser states or stacks at byte %d "
        "of the output; simplify it",
        automaton().num_states(), bytes_accepted_));
  }
  if (!mask_->any) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no token of the vocabulary can continue the grammar at byte %d of "
        "the output",
        bytes_accepted_));
  }
  return &mask_->bits;
}

absl::Status Constraint::Accept(int32_t token) {
  if (!active()) {
    Watch(token);
    return absl::OkStatus();
  }
  const ConstraintVocabulary& vocab = matcher_->vocab();
  if (token < 0 || token >= vocab.vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token %d is outside the vocabulary", token));
  }
  const std::string& bytes = vocab.bytes(token);
  // An end of generation where the grammar may end leaves it there.
  if (bytes.empty() && CanEnd() &&
      std::find(vocab.end_tokens().begin(), vocab.end_tokens().end(), token) !=
          vocab.end_tokens().end()) {
    return absl::OkStatus();
  }
  const int32_t next = bytes.empty()
                           ? GrammarAutomaton::kDead
                           : matcher_->automaton().Walk(state_, bytes);
  if (next < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token %d does not continue the grammar at byte %d of the output",
        token, bytes_accepted_));
  }
  state_ = next;
  bytes_accepted_ += bytes.size();
  return absl::OkStatus();
}

}  // namespace kvserve::constrain
