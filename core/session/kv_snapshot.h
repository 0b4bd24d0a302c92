// KvSnapshot: a session's KV cache as bytes, independent of block size, for
// the disk tier and restarts.
//
// Format (little-endian): "KVSNAP01", the model fingerprint (u64 length +
// bytes), dtype, n_layers, n_kv_heads, head_dim, num_tokens and the XXH64
// of the tokens it holds (u64 each); then for each layer and position K and
// V as [n_kv_heads] rows of head_dim elements of dtype (DTypeRowBytes;
// dtype 0 f32, 1 bf16, 2 q8_0, 3 q4_0); then the XXH64 of all that.
// A snapshot stays valid for a session while its tokens begin with the
// snapshot's tokens (a position's K/V depend only on the tokens up to it).
#ifndef KVSERVE_CORE_SESSION_KV_SNAPSHOT_H_
#define KVSERVE_CORE_SESSION_KV_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/kv/block_table.h"

namespace kvserve {

struct KvSnapshotKey {
  std::string model_fingerprint;
  DType dtype = DType::kF32;
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// Positions [0, tokens.size()) of `table`. REQUIRES: table holds them.
std::string EncodeKvSnapshot(const KvSnapshotKey& key,
                             absl::Span<const int32_t> tokens,
                             const BlockTable& table);

// How many positions the snapshot holds, after checking its integrity
// (DATA_LOSS), that it was written for this model and dtype
// (FAILED_PRECONDITION naming both), and that `session_tokens` begin with
// its tokens (FAILED_PRECONDITION).
absl::StatusOr<int64_t> CheckKvSnapshot(
    std::string_view bytes, const KvSnapshotKey& key,
    absl::Span<const int32_t> session_tokens);

// Writes the snapshot's positions [from, n) into `table`, as stored.
// REQUIRES: CheckKvSnapshot returned >= n; table->num_tokens() >= n and the
// positions are writable (their blocks not shared).
void RestoreKvSnapshot(std::string_view bytes, int64_t from, int64_t n,
                       BlockTable* table);

}  // namespace kvserve

#endif  // KVSERVE_CORE_SESSION_KV_SNAPSHOT_H_
