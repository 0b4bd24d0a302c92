#include "core/sampling/logit_penalties.h"

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/util/check.h"

namespace kvserve {

absl::Status ValidatePenaltyOptions(const PenaltyOptions& options,
                                    int vocab_size) {
  if (options.logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias: at most ", kMaxLogitBias, " tokens, got ",
                     options.logit_bias.size()));
  }
  absl::flat_hash_set<int32_t> seen;
  for (const auto& [id, bias] : options.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias: token id ", id,
          " is not in this model's vocabulary [0, ", vocab_size, ")"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: the bias of token ", id,
                       " must be in [-100, 100], got ", bias));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: token id ", id, " is given twice"));
    }
  }
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty",
                                      options.presence_penalty},
        {"frequency_penalty", options.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in [-2, 2], got ", value));
    }
  }
  if (!(options.repeat_penalty > 0.0f) ||
      !std::isfinite(options.repeat_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeat_penalty must be finite and > 0 (1: off), got ",
                     options.repeat_penalty));
  }
  if (options.repeat_last_n < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repeat_last_n must be -1 (the whole history), 0 (off) or more, got ",
        options.repeat_last_n));
  }
  return absl::OkStatus();
}

LogitPenalties::LogitPenalties(PenaltyOptions options)
    : options_(std::move(options)), active_(options_.active()) {}

void LogitPenalties::PushWindow(int32_t token) {
  ++in_window_[token];
  if (options_.repeat_last_n < 0) return;  // the whole history
  window_.push_back(token);
  if (window_.size() > static_cast<size_t>(options_.repeat_last_n)) {
    const int32_t old = window_.front();
    window_.pop_front();
    auto it = in_window_.find(old);
    if (--it->second == 0) in_window_.erase(it);
  }
}

void LogitPenalties::AddContext(absl::Span<const int32_t> tokens) {
  if (!options_.repeats()) return;  // the context counts for nothing else
  if (options_.repeat_last_n > 0 &&
      tokens.size() > static_cast<size_t>(options_.repeat_last_n)) {
    tokens = tokens.last(options_.repeat_last_n);
  }
  for (int32_t t : tokens) PushWindow(t);
}

void LogitPenalties::AddGenerated(int32_t token) {
  if (options_.repeats()) PushWindow(token);
  if (options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f) {
    ++generated_[token];
  }
}

void LogitPenalties::Apply(absl::Span<float> logits) const {
  for (const auto& [id, bias] : options_.logit_bias) {
    KVSERVE_CHECK(static_cast<size_t>(id) < logits.size());
    logits[id] += bias;
  }
  const float p = options_.repeat_penalty;
  for (const auto& [id, count] : in_window_) {
    KVSERVE_CHECK(static_cast<size_t>(id) < logits.size());
    float& logit = logits[id];
    logit = logit > 0.0f ? logit / p : logit * p;
  }
  for (const auto& [id, count] : generated_) {
    KVSERVE_CHECK(static_cast<size_t>(id) < logits.size());
    logits[id] -= static_cast<float>(count) * options_.frequency_penalty +
                  options_.presence_penalty;
  }
}

}  // namespace kvserve
