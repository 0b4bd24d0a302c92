#include "core/dnnl/linear.h"

#include "absl/strings/str_format.h"
#include "core/dnnl/context.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(
    absl::Span<const WeightTensor> weights, const LinearOptions& options) {
  if (weights.empty()) return absl::InvalidArgumentError("Linear: no weights");
  bool all_f32 = true, all_bf16 = true;
  for (const WeightTensor& w : weights) {
    if (w.cols != weights[0].cols || w.rows <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Linear: a [%d x %d] matrix cannot be stacked with [%d x %d]", w.rows,
          w.cols, weights[0].rows, weights[0].cols));
    }
    all_f32 = all_f32 && w.type == quant::Type::kF32;
    all_bf16 = all_bf16 && w.type == quant::Type::kBF16;
  }
  if (all_f32 || (all_bf16 && DnnlHasBf16Matmul())) {
    return linear_internal::CreateDnnlLinear(weights, options);
  }
  return linear_internal::CreateBlockLinear(weights, options);
}

}  // namespace kvserve
