#include "core/kv/kv_rows.h"

#include <cstring>

#include "absl/container/inlined_vector.h"
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

constexpr int64_t kScaleBytes = 2;

// A row staged between its format and a group's planes (on the stack up to
// this size).
using RowBuffer = absl::InlinedVector<char, 2048>;

}  // namespace

int64_t KvCodeBytes(DType dtype, int64_t n) {
  if (!IsBlockQuantized(dtype)) return DTypeRowBytes(dtype, n);
  return n / kDTypeBlockElems * DTypeBlockCodeBytes(dtype);
}

void ReadKvRowAt(DType dtype, const void* group, int64_t n,
                 int64_t block_tokens, int64_t slot, void* row) {
  const char* g = static_cast<const char*>(group);
  const int64_t code_bytes = KvCodeBytes(dtype, n);
  if (!IsBlockQuantized(dtype)) {
    std::memcpy(row, g + slot * code_bytes, code_bytes);
    return;
  }
  const int64_t cb = DTypeBlockCodeBytes(dtype);
  const char* codes = g + slot * code_bytes;
  const char* scales = g + KvScalesOffset(dtype, n, block_tokens);
  char* out = static_cast<char*>(row);
  for (int64_t b = 0; b < n / kDTypeBlockElems; ++b) {
    char* blk = out + b * (kScaleBytes + cb);
    std::memcpy(blk, scales + (b * block_tokens + slot) * kScaleBytes,
                kScaleBytes);
    std::memcpy(blk + kScaleBytes, codes + b * cb, cb);
  }
}

void WriteKvRowAt(DType dtype, const void* row, int64_t n, int64_t block_tokens,
                  int64_t slot, void* group) {
  char* g = static_cast<char*>(group);
  const int64_t code_bytes = KvCodeBytes(dtype, n);
  if (!IsBlockQuantized(dtype)) {
    std::memcpy(g + slot * code_bytes, row, code_bytes);
    return;
  }
  const int64_t cb = DTypeBlockCodeBytes(dtype);
  char* codes = g + slot * code_bytes;
  char* scales = g + KvScalesOffset(dtype, n, block_tokens);
  const char* in = static_cast<const char*>(row);
  for (int64_t b = 0; b < n / kDTypeBlockElems; ++b) {
    const char* blk = in + b * (kScaleBytes + cb);
    std::memcpy(scales + (b * block_tokens + slot) * kScaleBytes, blk,
                kScaleBytes);
    std::memcpy(codes + b * cb, blk + kScaleBytes, cb);
  }
}

void StoreKvRowAt(DType dtype, const float* src, int64_t n,
                  int64_t block_tokens, int64_t slot, void* group) {
  if (!IsBlockQuantized(dtype)) {
    StoreKvRow(dtype, src, n,
               static_cast<char*>(group) + slot * KvCodeBytes(dtype, n));
    return;
  }
  RowBuffer row(DTypeRowBytes(dtype, n));
  StoreKvRow(dtype, src, n, row.data());
  WriteKvRowAt(dtype, row.data(), n, block_tokens, slot, group);
}

void LoadKvRowAt(DType dtype, const void* group, int64_t n,
                 int64_t block_tokens, int64_t slot, float* dst) {
  if (!IsBlockQuantized(dtype)) {
    LoadKvRow(dtype,
              static_cast<const char*>(group) + slot * KvCodeBytes(dtype, n), n,
              dst);
    return;
  }
  RowBuffer row(DTypeRowBytes(dtype, n));
  ReadKvRowAt(dtype, group, n, block_tokens, slot, row.data());
  LoadKvRow(dtype, row.data(), n, dst);
}

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
