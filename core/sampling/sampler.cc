#include "core/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "absl/base/casts.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/util/check.h"

namespace kvserve {
namespace {

// The logit a token's probability comes from: NaN counts as -inf.
float EffectiveLogit(float logit) {
  return std::isnan(logit) ? -std::numeric_limits<float>::infinity() : logit;
}

// A rank whose unsigned order is the order of the logits: the bits made
// order-preserving (-0 as +0), NaN below everything, -inf included, so a
// NaN logit is never preferred to another one.
uint32_t Rank(float logit) {
  if (std::isnan(logit)) return 0;
  if (logit == 0.0f) logit = 0.0f;
  const uint32_t bits = absl::bit_cast<uint32_t>(logit);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// Strict total order "more likely first": higher rank, then lower id.
struct MoreLikely {
  absl::Span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    const uint32_t ra = Rank(logits[a]);
    const uint32_t rb = Rank(logits[b]);
    return ra > rb || (ra == rb && a < b);
  }
};

int32_t Argmax(absl::Span<const float> logits) {
  int32_t best = 0;
  uint32_t best_rank = Rank(logits[0]);
  for (size_t i = 1; i < logits.size(); ++i) {
    const uint32_t rank = Rank(logits[i]);
    if (rank > best_rank) {
      best_rank = rank;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// A key whose unsigned order is the order "more likely first": the rank
// above the id's complement, so equal logits rank the lower id first.
uint64_t RankKey64(float logit, int32_t id) {
  return (static_cast<uint64_t>(Rank(logit)) << 32) |
         static_cast<uint32_t>(~static_cast<uint32_t>(id));
}

int32_t IdOf(uint64_t key) {
  return static_cast<int32_t>(~static_cast<uint32_t>(key));
}

// Below this many candidates the nucleus search sorts instead of selecting;
// after this many selection rounds it sorts whatever is left (a guard against
// quickselect's quadratic worst case).
constexpr size_t kNucleusSortSize = 64;
constexpr int kNucleusMaxSelectRounds = 64;

}  // namespace

absl::Status ValidateSamplingOptions(const SamplingOptions& options) {
  if (!std::isfinite(options.temperature) || options.temperature < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be finite and >= 0, got ", options.temperature));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0, got ", options.top_k));
  }
  if (!(options.top_p >= 0.0f && options.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in [0, 1], got ", options.top_p));
  }
  if (!(options.min_p >= 0.0f && options.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_p must be in [0, 1], got ", options.min_p));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingOptions& options)
    : options_(options), rng_(options.seed), penalties_(options.penalties) {
  KVSERVE_CHECK(ValidateSamplingOptions(options).ok());
}

int32_t Sampler::Sample(absl::Span<const float> logits,
                        const std::vector<uint64_t>* allowed) {
  KVSERVE_CHECK(!logits.empty());
  auto is_allowed = [allowed](size_t id) {
    return allowed == nullptr || ((*allowed)[id >> 6] >> (id & 63)) & 1;
  };
  if (penalties_.active() || allowed != nullptr) {
    adjusted_.assign(logits.begin(), logits.end());
    if (penalties_.active()) penalties_.Apply(absl::MakeSpan(adjusted_));
    if (allowed != nullptr) {
      KVSERVE_CHECK(allowed->size() * 64 >= logits.size());
      for (size_t w = 0; w < allowed->size(); ++w) {
        const uint64_t word = (*allowed)[w];
        if (word == ~uint64_t{0}) continue;
        const size_t end = std::min(logits.size(), (w + 1) * 64);
        for (size_t id = w * 64; id < end; ++id) {
          if (!((word >> (id & 63)) & 1)) {
            adjusted_[id] = -std::numeric_limits<float>::infinity();
          }
        }
      }
    }
    logits = adjusted_;
  }
  int32_t token = Draw(logits);
  // Every allowed logit -inf or NaN: the draw's fallback may be outside
  // the mask; the first allowed token is taken instead.
  if (!is_allowed(token)) {
    for (size_t id = 0; id < logits.size(); ++id) {
      if (is_allowed(id)) {
        token = static_cast<int32_t>(id);
        break;
      }
    }
  }
  penalties_.AddGenerated(token);
  return token;
}

double Sampler::Uniform01() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::Draw(absl::Span<const float> logits) {
  if (options_.temperature == 0.0f || options_.top_k == 1) {
    return Argmax(logits);
  }

  // keys_[i] ranks token IdOf(keys_[i]); larger key = more likely.
  const size_t n = logits.size();
  keys_.resize(n);
  uint64_t max_key = 0;
  for (size_t i = 0; i < n; ++i) {
    keys_[i] = RankKey64(logits[i], static_cast<int32_t>(i));
    max_key = std::max(max_key, keys_[i]);
  }
  const int32_t best = IdOf(max_key);
  const double max_logit = EffectiveLogit(logits[best]);
  if (!std::isfinite(max_logit)) return best;

  // Candidates are keys_[0, support): after top-k, the k most likely.
  size_t support = n;
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < n) {
    support = static_cast<size_t>(options_.top_k);
    std::nth_element(keys_.begin(), keys_.begin() + support, keys_.end(),
                     std::greater<>());
  }

  // min_p: p / p_max >= min_p, that is logit >= max_logit + log(min_p).
  if (options_.min_p > 0.0f) {
    const double floor =
        max_logit + std::log(static_cast<double>(options_.min_p));
    support =
        std::partition(keys_.begin(), keys_.begin() + support,
                       [&](uint64_t key) {
                         return EffectiveLogit(logits[IdOf(key)]) >= floor;
                       }) -
        keys_.begin();
  }

  // Unnormalised softmax(logits / T); the most likely token has weight 1.
  weights_.resize(n);
  const double temperature = options_.temperature;
  double total = 0.0;
  for (size_t i = 0; i < support; ++i) {
    const int32_t id = IdOf(keys_[i]);
    const double w =
        std::exp((static_cast<double>(EffectiveLogit(logits[id])) - max_logit) /
                 temperature);
    weights_[id] = w;
    total += w;
  }
  auto weight_at = [&](size_t i) { return weights_[IdOf(keys_[i])]; };

  const bool nucleus = options_.top_p > 0.0f && options_.top_p < 1.0f;
  if (nucleus) {
    // The nucleus is the shortest most-likely prefix holding top_p of the
    // mass. Quickselect by mass narrows [lo, hi) around its end (expected
    // O(support)); the rest is sorted and walked.
    // Invariant: keys_[0, lo) rank above keys_[lo, hi), which rank above
    // keys_[hi, support); mass_before (of keys_[0, lo)) < target.
    const double target = static_cast<double>(options_.top_p) * total;
    double mass_before = 0.0;
    size_t lo = 0;
    size_t hi = support;
    for (int round = 0;
         hi - lo > kNucleusSortSize && round < kNucleusMaxSelectRounds;
         ++round) {
      const size_t mid = lo + (hi - lo) / 2;
      std::iter_swap(keys_.begin() + hi - 1,
                     std::max({keys_.begin() + lo, keys_.begin() + mid,
                               keys_.begin() + hi - 1},
                              [](auto a, auto b) { return *a > *b; }));
      const uint64_t pivot_key = keys_[hi - 1];
      const size_t pivot =
          std::partition(
              keys_.begin() + lo, keys_.begin() + hi - 1,
              [pivot_key](uint64_t key) { return key > pivot_key; }) -
          keys_.begin();
      std::iter_swap(keys_.begin() + pivot, keys_.begin() + hi - 1);
      double mass_upper = 0.0;
      for (size_t i = lo; i < pivot; ++i) mass_upper += weight_at(i);
      if (mass_before + mass_upper >= target) {
        hi = pivot;
      } else {
        mass_before += mass_upper;
        lo = pivot;  // the pivot stays in range; the range still shrinks
        if (mass_before + weight_at(pivot) >= target) {
          hi = pivot + 1;
        } else {
          mass_before += weight_at(pivot);
          lo = pivot + 1;
        }
      }
    }
    std::sort(keys_.begin() + lo, keys_.begin() + hi, std::greater<>());
    double cumulative = mass_before;
    size_t nucleus_size = hi;  // if rounding kept the target out of reach
    for (size_t i = lo; i < hi; ++i) {
      cumulative += weight_at(i);
      if (cumulative >= target) {
        nucleus_size = i + 1;
        break;
      }
    }
    support = nucleus_size;
    total = cumulative;
  }

  const double r = Uniform01() * total;
  double cumulative = 0.0;
  int32_t last_possible = best;
  for (size_t i = 0; i < support; ++i) {
    const double w = weight_at(i);
    if (w <= 0.0) continue;
    cumulative += w;
    if (r < cumulative) return IdOf(keys_[i]);
    last_possible = IdOf(keys_[i]);
  }
  return last_possible;  // r fell past the end through rounding
}

Logprobs ComputeLogprobs(absl::Span<const float> logits, int32_t chosen,
                         int top_n) {
  KVSERVE_CHECK(!logits.empty());
  KVSERVE_CHECK(chosen >= 0 && static_cast<size_t>(chosen) < logits.size());
  KVSERVE_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs);

  // log_softmax(x)[id] = x[id] - log_normalizer. Without a finite maximum
  // it is the limit of softmax: the +inf logits share the mass, and when
  // every logit is -inf (or NaN) no token is more likely than another.
  const double max_logit = EffectiveLogit(logits[Argmax(logits)]);
  std::function<float(int32_t)> logprob;
  if (std::isfinite(max_logit)) {
    double sum = 0.0;
    for (const float logit : logits) {
      sum += std::exp(static_cast<double>(EffectiveLogit(logit)) - max_logit);
    }
    const double log_normalizer = max_logit + std::log(sum);
    logprob = [&, log_normalizer](int32_t id) {
      return static_cast<float>(
          static_cast<double>(EffectiveLogit(logits[id])) - log_normalizer);
    };
  } else if (max_logit > 0) {
    const double n_inf = static_cast<double>(
        std::count(logits.begin(), logits.end(), max_logit));
    const float shared = static_cast<float>(-std::log(n_inf));
    logprob = [&, shared](int32_t id) {
      return logits[id] == max_logit ? shared
                                     : -std::numeric_limits<float>::infinity();
    };
  } else {
    const float uniform =
        static_cast<float>(-std::log(static_cast<double>(logits.size())));
    logprob = [uniform](int32_t) { return uniform; };
  }

  Logprobs result;
  result.chosen = logprob(chosen);
  const size_t n_top = std::min(static_cast<size_t>(top_n), logits.size());
  if (n_top > 0) {
    // Selection keeps this O(vocab) instead of sorting the vocabulary.
    std::vector<int32_t> top;
    top.reserve(n_top);
    const MoreLikely more_likely{logits};
    for (size_t i = 0; i < logits.size(); ++i) {
      const int32_t id = static_cast<int32_t>(i);
      if (top.size() < n_top) {
        top.push_back(id);
        std::push_heap(top.begin(), top.end(), more_likely);
      } else if (more_likely(id, top.front())) {
        std::pop_heap(top.begin(), top.end(), more_likely);
        top.back() = id;
        std::push_heap(top.begin(), top.end(), more_likely);
      }
    }
    std::sort_heap(top.begin(), top.end(), more_likely);
    result.top.reserve(n_top);
    for (const int32_t id : top) result.top.push_back({id, logprob(id)});
  }
  return result;
}

}  // namespace kvserve
