#include "core/kv/kv_rows.h"

#include <cstring>

#include "core/quant/activation.h"
#include "core/quant/quant.h"
#include "core/util/bf16.h"
#include "core/util/check.h"

namespace kvserve {
namespace {

const quant::TypeInfo& BlockInfo(DType dtype) {
  const quant::TypeInfo* info = quant::Info(
      dtype == DType::kQ8_0 ? quant::Type::kQ8_0 : quant::Type::kQ4_0);
  KVSERVE_CHECK(info != nullptr);
  return *info;
}

}  // namespace

void StoreKvRow(DType dtype, const float* src, int64_t n, void* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      // ggml's x86 q8_0 quantizer, vectorized: llama.cpp writes its q8_0
      // cache with it.
      quant::QuantizeActivation(quant::Type::kQ8_0, src, n, dst);
      return;
    case DType::kQ4_0:
      KVSERVE_CHECK(n % kDTypeBlockElems == 0);
      BlockInfo(dtype).quantize(src, dst, n);
      return;
  }
}

void LoadKvRow(DType dtype, const void* src, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16: {
      const char* in = static_cast<const char*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, in + 2 * i, sizeof(bits));
        dst[i] = Bf16ToFloat(bits);
      }
      return;
    }
    case DType::kQ8_0:
    case DType::kQ4_0:
      KVSERVE_CHECK(n % kDTypeBlockElems == 0);
      BlockInfo(dtype).dequantize(src, dst, n);
      return;
  }
}

}  // namespace kvserve
