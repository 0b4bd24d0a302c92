// One KV row (head_dim elements of one position and KV head) in the pool's
// element type (core/util/dtype.h): stored from f32 when a position is
// written, and read back as f32 where a path needs floats (oneDNN's
// prompt attention, snapshots, tests). The decode kernels read the stored
// rows directly.
//
// Block types are quantized as llama.cpp writes its q8_0 / q4_0 KV cache:
// q8_0 by ggml's x86 quantizer (d = amax / 127, q = x · 127 / amax rounded
// half to even; quant::QuantizeActivation), q4_0 by ggml's reference rule
// (d = the element of largest magnitude / −8, q = min(15, trunc(x / d +
// 8.5))).
//
// Thread-safety: pure functions.
#ifndef KVSERVE_CORE_KV_KV_ROWS_H_
#define KVSERVE_CORE_KV_KV_ROWS_H_

#include <cstdint>

#include "core/util/dtype.h"

namespace kvserve {

// dst gets DTypeRowBytes(dtype, n) bytes. REQUIRES for a block type:
// n % 32 == 0.
void StoreKvRow(DType dtype, const float* src, int64_t n, void* dst);
// dst[0, n) from a stored row. REQUIRES as StoreKvRow.
void LoadKvRow(DType dtype, const void* src, int64_t n, float* dst);

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_KV_ROWS_H_
