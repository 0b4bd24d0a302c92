// Token sampling from one step's logits: logit bias and repetition
// penalties (LogitPenalties), greedy, temperature, top-k, min-p, top-p
// (nucleus) and a seed; plus the log-probabilities reported to clients.
#ifndef KVSERVE_CORE_SAMPLING_SAMPLER_H_
#define KVSERVE_CORE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/sampling/logit_penalties.h"

namespace kvserve {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (argmax; ties -> lowest id)
  int top_k = 0;             // 0: off; else keep the k most likely
  // 0 or 1: off; else keep the smallest set of most likely tokens whose
  // cumulative probability is >= top_p (nucleus), applied after top_k.
  float top_p = 0.0f;
  // 0: off; else keep the tokens at least min_p times as likely as the
  // most likely one (before temperature), applied after top_k.
  float min_p = 0.0f;
  uint64_t seed = 0;
  // Applied to the logits before everything above.
  PenaltyOptions penalties{};
};

// OK, or INVALID_ARGUMENT naming the field and value unless temperature is
// finite and >= 0, top_k >= 0, 0 <= top_p <= 1 and 0 <= min_p <= 1. The
// penalties are checked by ValidatePenaltyOptions, which needs the
// vocabulary.
absl::Status ValidateSamplingOptions(const SamplingOptions& options);

// Draws token ids from softmax(logits / temperature), the logits first
// changed by the penalties, restricted to the top_k most likely tokens, then
// to those min_p as likely as the first, then to the top_p nucleus of
// those. Ranking is by logit, ties broken by the lower id. top_k == 1 is
// greedy at any temperature. Each token drawn counts for the penalties of
// the next.
//
// A seed reproduces the same tokens for the same logits on every run and
// machine: the generator is std::mt19937_64, whose output the standard fixes,
// and the uniform draw and arithmetic are our own.
//
// NaN logits count as -inf and rank below it (never sampled unless every
// logit is NaN). When the largest logit is not finite (all -inf, or some
// +inf), the result is the greedy choice. No logits make it abort.
//
// Thread-safety: not thread-safe; one Sampler per request.
class Sampler {
 public:
  // REQUIRES: ValidateSamplingOptions(options).ok().
  explicit Sampler(const SamplingOptions& options);

  // The history before the first draw (prompt and earlier turns), for
  // repeat_penalty.
  void AddContext(absl::Span<const int32_t> tokens) {
    penalties_.AddContext(tokens);
  }

  // REQUIRES: !logits.empty(); the ids the penalties name are in range.
  // `allowed` (constrained decoding; null: every token): a bit per token,
  // logits.size() bits in 64-bit words with at least one set; the token
  // drawn is one of them (the draw runs on the allowed tokens alone, so
  // top_k, top_p and min_p rank among them).
  int32_t Sample(absl::Span<const float> logits,
                 const std::vector<uint64_t>* allowed = nullptr);

  const SamplingOptions& options() const { return options_; }

 private:
  int32_t Draw(absl::Span<const float> logits);
  // A uniform double in [0, 1) with 53 random bits.
  double Uniform01();

  const SamplingOptions options_;
  std::mt19937_64 rng_;
  LogitPenalties penalties_;
  std::vector<float> adjusted_;  // the logits the penalties changed
  // Scratch reused across steps; contents are meaningless between calls.
  std::vector<uint64_t> keys_;   // rank key per token (logit bits, id)
  std::vector<double> weights_;  // indexed by token id
};

struct TokenLogprob {
  int32_t token_id;
  float logprob;
};

inline constexpr int kMaxTopLogprobs = 20;

// The log-softmax of logits (computed stably in double) at `chosen`, and the
// top_n most likely tokens (fewer if the vocabulary is smaller), sorted by
// logprob descending, ties by lower id. NaN logits count as -inf (and are
// ranked last); -inf logits give -inf logprobs. Without a finite logit the
// result is softmax's limit: tokens with +inf logits share the probability
// (the rest get -inf), and if every logit is -inf or NaN each token gets
// log(1 / vocabulary size). Never NaN, never an abort.
struct Logprobs {
  float chosen;
  std::vector<TokenLogprob> top;
};

// REQUIRES: !logits.empty(); 0 <= chosen < logits.size();
// 0 <= top_n <= kMaxTopLogprobs.
Logprobs ComputeLogprobs(absl::Span<const float> logits, int32_t chosen,
                         int top_n);

}  // namespace kvserve

#endif  // KVSERVE_CORE_SAMPLING_SAMPLER_H_
