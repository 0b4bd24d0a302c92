// Greedy decoding compared with a reference run, by the rule the goldens in
// ../shared/golden are judged by: tokens agree until the first
// disagreement, which is allowed only at a step where the reference's
// top1 - top2 gap is below `near_tie` (the comparison stops there); at
// every compared step the reference's top-5 logits, each taken relative to
// its own top-1, are within `logit_tol` of ours (ours relative to our max).
#ifndef KVSERVE_TESTS_TESTING_GREEDY_REFERENCE_H_
#define KVSERVE_TESTS_TESTING_GREEDY_REFERENCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/model/model.h"
#include "gtest/gtest.h"

namespace kvserve::testing {

struct ReferenceRun {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;  // greedy continuation
  // Per step: the 5 largest logits (id, logit), largest first.
  std::vector<std::vector<std::pair<int32_t, float>>> top5;
  std::vector<float> gap;  // per step: top1 - top2
};

// The first result of a golden file of ../shared/golden/quant or
// ../shared/golden/families; nullopt when it cannot be read.
std::optional<ReferenceRun> ReadGoldenRun(const std::string& path);

// Our greedy run of n tokens after `prompt`, the prompt prefilled in one
// chunk and every token decoded alone; full logits of every step kept.
struct OurRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [step][vocab]
  absl::Status status;
};
OurRun RunGreedy(Model& model, BlockPool* pool,
                 const std::vector<int32_t>& prompt, int n);

// The logits after each of `tokens` (positions 0, 1, ...) by a plain
// double-precision forward pass written from the math, recomputing every
// position from scratch: q/k/v biases, both RoPE styles (rotary_dim and
// frequency factors), the sliding window, tied output, any stored matrix
// type (dequantized). Independent of Model, GqaAttention and Linear.
// With a kv_dtype other than f32, each position's K (after RoPE) and V
// rows are read back as that KV cache type stores them (StoreKvRow then
// LoadKvRow of the f32-rounded values).
std::vector<std::vector<double>> ReferenceLogits(
    const ModelWeights& weights, const std::vector<int32_t>& tokens,
    DType kv_dtype = DType::kF32);

// ‖got − want‖ / ‖want‖.
double RelativeError(absl::Span<const float> got,
                     const std::vector<double>& want);

// `ours` as a reference (its own top-5 and gaps).
ReferenceRun AsReference(const std::vector<int32_t>& prompt,
                         const OurRun& ours);

// Success, or a message naming the step, token and logit that differ.
// *compared (when given) gets the number of steps compared.
::testing::AssertionResult AgreesWithReference(const ReferenceRun& ref,
                                               const OurRun& ours,
                                               double logit_tol,
                                               double near_tie = 0.1,
                                               int* compared = nullptr);

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_GREEDY_REFERENCE_H_
