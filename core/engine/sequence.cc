#include "core/engine/sequence.h"

#include <omp.h>

namespace kvserve {

std::vector<absl::StatusOr<int32_t>> SampleAll(
    absl::Span<Sequence* const> seqs,
    absl::Span<const absl::Span<const float>> logits) {
  const int n = static_cast<int>(seqs.size());
  std::vector<absl::StatusOr<int32_t>> tokens(n, absl::UnknownError(""));
  int64_t total = 0;
  for (absl::Span<const float> row : logits) total += row.size();
  // A draw at temperature 1 costs about 11 ns a logit (constrain_bench);
  // below this many logits a fork-join of the threads costs more than it
  // saves.
  constexpr int64_t kParallelLogits = int64_t{1} << 17;
#pragma omp parallel for schedule(dynamic, \
                                  1) if (n > 1 && total >= kParallelLogits)
  for (int i = 0; i < n; ++i) tokens[i] = seqs[i]->Sample(logits[i]);
  return tokens;
}

}  // namespace kvserve
