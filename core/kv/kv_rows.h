// One KV row (head_dim elements of one position and KV head) in the pool's
// element type (core/util/dtype.h): stored from f32 when a position is
// written, and read back as f32 where a path needs floats (oneDNN's
// prompt attention, snapshots, tests). The decode kernels read the stored
// groups (below) directly.
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

// A group: one KV head's rows of one cache block (block_tokens positions)
// as the pool keeps them, block_tokens · DTypeRowBytes bytes. f32 and bf16
// rows follow one another. q8_0 and q4_0 are split into two planes: every
// position's codes ([block_tokens][KvCodeBytes]: q8_0's n int8, q4_0's n / 2
// bytes of nibbles, each 32-element block's 16 bytes as in its row), then
// the f16 block scales by block ([n / 32][block_tokens]), so the decode
// kernels read a tile's codes and scales with plain vector loads.

// Bytes of one position in the codes plane (f32 / bf16: its whole row).
int64_t KvCodeBytes(DType dtype, int64_t n);
// Where the scales plane starts in a group (a block type's).
inline int64_t KvScalesOffset(DType dtype, int64_t n, int64_t block_tokens) {
  return block_tokens * KvCodeBytes(dtype, n);
}
// StoreKvRow / LoadKvRow at position `slot` of a group.
void StoreKvRowAt(DType dtype, const float* src, int64_t n,
                  int64_t block_tokens, int64_t slot, void* group);
void LoadKvRowAt(DType dtype, const void* group, int64_t n,
                 int64_t block_tokens, int64_t slot, float* dst);
// Position `slot`'s row in StoreKvRow's format (snapshots keep rows), out
// of a group and into one.
void ReadKvRowAt(DType dtype, const void* group, int64_t n,
                 int64_t block_tokens, int64_t slot, void* row);
void WriteKvRowAt(DType dtype, const void* row, int64_t n, int64_t block_tokens,
                  int64_t slot, void* group);

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_KV_ROWS_H_
