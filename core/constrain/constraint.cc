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
    : bytes_(TokenBytes(tokenizer)), trie_(bytes_) {
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsEndOfGeneration(id)) end_tokens_.push_back(id);
  }
}

Constraint::Constraint(std::shared_ptr<const Grammar> grammar,
                       std::shared_ptr<const ConstraintVocabulary> vocab)
    : vocab_(std::move(vocab)),
      automaton_(std::move(grammar)),
      state_(automaton_.start()) {}

absl::StatusOr<const std::vector<uint64_t>*> Constraint::Allowed() {
  if (state_ < 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the grammar needs more than %d parser states or stacks at byte %d "
        "of the output; simplify it",
        automaton_.num_states(), bytes_accepted_));
  }
  if (auto it = masks_.find(state_); it != masks_.end()) return &it->second;
  std::vector<uint64_t> mask;
  if (!vocab_->trie().Allowed(automaton_, state_, mask)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the grammar needs more than %d parser states at byte %d of the "
        "output; simplify it",
        automaton_.num_states(), bytes_accepted_));
  }
  bool any = false;
  for (uint64_t w : mask) any = any || w != 0;
  if (CanEnd()) {
    for (int32_t id : vocab_->end_tokens()) {
      mask[id >> 6] |= uint64_t{1} << (id & 63);
      any = true;
    }
  }
  if (!any) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no token of the vocabulary can continue the grammar at byte %d of "
        "the output",
        bytes_accepted_));
  }
  if (bytes_cached_ > kMaxMaskCacheBytes) {
    masks_.clear();
    bytes_cached_ = 0;
  }
  bytes_cached_ += mask.size() * sizeof(uint64_t);
  return &(masks_[state_] = std::move(mask));
}

absl::Status Constraint::Accept(int32_t token) {
  if (token < 0 || token >= vocab_->vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token %d is outside the vocabulary", token));
  }
  const std::string& bytes = vocab_->bytes(token);
  // An end of generation where the grammar may end leaves it there.
  if (bytes.empty() && CanEnd() &&
      std::find(vocab_->end_tokens().begin(), vocab_->end_tokens().end(),
                token) != vocab_->end_tokens().end()) {
    return absl::OkStatus();
  }
  const int32_t next =
      bytes.empty() ? GrammarAutomaton::kDead : automaton_.Walk(state_, bytes);
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
