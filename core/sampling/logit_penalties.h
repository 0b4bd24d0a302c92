// LogitPenalties: what a request asks to change in each step's logits
// before a token is drawn, and the per-sequence state it needs:
//
//   logit_bias (OpenAI)      logit[t] += bias[t]
//   repeat_penalty (llama.cpp), over the last repeat_last_n tokens of the
//   history (prompt and generated): logit[t] /= p when logit[t] > 0, else
//   logit[t] *= p
//   frequency_penalty, presence_penalty (OpenAI), over the tokens generated
//   so far, c[t] times each: logit[t] -= c[t] * frequency + (c[t] > 0) *
//   presence
//
// applied in that order. Only the tokens biased or seen are touched, never
// the whole vocabulary: the cost of a step is O(biased + distinct tokens
// seen), and of a token added O(1).
//
// Thread-safety: not thread-safe; one per sequence.
#ifndef KVSERVE_CORE_SAMPLING_LOGIT_PENALTIES_H_
#define KVSERVE_CORE_SAMPLING_LOGIT_PENALTIES_H_

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kvserve {

// Biased tokens a request may name: each is touched every step.
inline constexpr int kMaxLogitBias = 1024;

struct PenaltyOptions {
  // Token id -> bias in [-100, 100], ids unique, at most kMaxLogitBias.
  std::vector<std::pair<int32_t, float>> logit_bias{};
  float presence_penalty = 0.0f;   // [-2, 2]; 0: off
  float frequency_penalty = 0.0f;  // [-2, 2]; 0: off
  float repeat_penalty = 1.0f;     // > 0; 1: off
  // Tokens of the history repeat_penalty looks at: > 0 the last n, 0 none,
  // -1 all of them.
  int repeat_last_n = 64;

  bool repeats() const { return repeat_penalty != 1.0f && repeat_last_n != 0; }
  bool active() const {
    return !logit_bias.empty() || presence_penalty != 0.0f ||
           frequency_penalty != 0.0f || repeats();
  }
};

// OK, or INVALID_ARGUMENT naming the field and value: more than
// kMaxLogitBias biases, bias values outside [-100, 100], ids outside
// [0, vocab_size) or given twice, penalties
// outside [-2, 2], a repeat_penalty not > 0, repeat_last_n < -1.
absl::Status ValidatePenaltyOptions(const PenaltyOptions& options,
                                    int vocab_size);

class LogitPenalties {
 public:
  // REQUIRES: ValidatePenaltyOptions(options, vocabulary).ok().
  explicit LogitPenalties(PenaltyOptions options);

  bool active() const { return active_; }
  // History the sequence starts from (prompt and earlier turns): it counts
  // for repeat_penalty only.
  void AddContext(absl::Span<const int32_t> tokens);
  // A token drawn; it counts for every penalty.
  void AddGenerated(int32_t token);
  // Changes `logits` (one row over the vocabulary) at the tokens biased or
  // seen. REQUIRES: every such id < logits.size().
  void Apply(absl::Span<float> logits) const;

 private:
  void PushWindow(int32_t token);

  const PenaltyOptions options_;
  const bool active_;
  absl::flat_hash_map<int32_t, int32_t> generated_;  // token -> times
  absl::flat_hash_map<int32_t, int32_t> in_window_;  // token -> times
  std::deque<int32_t> window_;  // the last repeat_last_n tokens (> 0)
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_SAMPLING_LOGIT_PENALTIES_H_
