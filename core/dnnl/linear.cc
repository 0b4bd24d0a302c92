#include "core/dnnl/linear.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <memory>

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

namespace linear_internal {

int64_t PrimitiveRows(int64_t m) {
  constexpr int64_t kExactRows = 16;
  if (m <= kExactRows) return m;
  const int octave = std::bit_width(static_cast<uint64_t>(m - 1));
  const int64_t step =
      std::max<int64_t>(kExactRows, int64_t{1} << (octave - 4));
  return (m + step - 1) / step * step;
}

const float* PaddedInput(const float* x, int64_t m, int64_t rows, int64_t k,
                         std::vector<float>* buf) {
  if (rows == m) return x;
  if (static_cast<int64_t>(buf->size()) < rows * k) buf->resize(rows * k);
  std::copy(x, x + m * k, buf->begin());
  std::fill(buf->begin() + m * k, buf->begin() + rows * k, 0.0f);
  return buf->data();
}

std::shared_ptr<void> WeightBuffer(size_t bytes) {
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  void* p = nullptr;
  if (posix_memalign(&p, align, std::max<size_t>(bytes, 1)) != 0) {
    return nullptr;
  }
  if (align == kHugePageBytes) {
    madvise(p, bytes, MADV_HUGEPAGE);  // advice: failure leaves small pages
  }
  return std::shared_ptr<void>(p, std::free);
}

void ReleasePages(const void* p, int64_t bytes) {
  const uintptr_t page = 4096;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
  }
}

float* PaddedOutput(float* y, int64_t m, int64_t rows, int64_t n,
                    std::vector<float>* buf) {
  if (rows == m) return y;
  if (static_cast<int64_t>(buf->size()) < rows * n) buf->resize(rows * n);
  return buf->data();
}

}  // namespace linear_internal

}  // namespace kvserve
