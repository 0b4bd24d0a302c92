// Fuzzes the KV snapshot decoder (kv_snapshot.h): CheckKvSnapshot on
// arbitrary bytes, then, when it accepts them, RestoreKvSnapshot into a
// block table. A restored f32 snapshot encodes back to the same bytes.
//
// The first input byte picks the pool's dtype (bit 1) and whether the
// fuzzer rewrites the tokens hash and the trailing XXH64 (bit 0), which
// mutations almost always break, so that the decoder past the integrity
// check sees mutated headers and sizes too. The rest is the snapshot.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/kv/block_table.h"
#include "core/session/kv_snapshot.h"
#include "core/util/xxhash64.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

// The layout fuzz_seeds writes its snapshots for.
constexpr char kFingerprint[] = "fuzz-model";
constexpr int kLayers = 2, kKvHeads = 2, kHeadDim = 4, kBlockTokens = 4;
constexpr int kSessionTokens = 48;

struct State {
  std::unique_ptr<BlockPool> pools[2];  // by dtype: f32, bf16
  std::vector<int32_t> session_tokens;
};

State& GetState() {
  static State s;
  return s;
}

KvSnapshotKey Key(DType dtype) {
  KvSnapshotKey k;
  k.model_fingerprint = kFingerprint;
  k.dtype = dtype;
  k.n_layers = kLayers;
  k.n_kv_heads = kKvHeads;
  k.head_dim = kHeadDim;
  return k;
}

uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Rewrites the tokens hash (for the session's tokens) and the checksum.
void FixHashes(std::string& b, const std::vector<int32_t>& tokens) {
  if (b.size() < 16 + 8) return;
  const uint64_t fp_len = GetU64(b.data() + 8);
  if (fp_len <= 1024 && b.size() >= 16 + fp_len + 7 * 8) {
    const size_t fields = 16 + fp_len;
    const uint64_t n = GetU64(b.data() + fields + 4 * 8);
    if (n <= tokens.size()) {
      const uint64_t h = Xxh64(tokens.data(), n * sizeof(int32_t), 0);
      std::memcpy(b.data() + fields + 5 * 8, &h, 8);
    }
  }
  const uint64_t sum = Xxh64(b.data(), b.size() - 8, 0);
  std::memcpy(b.data() + b.size() - 8, &sum, 8);
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  State& s = GetState();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    BlockPoolOptions o;
    o.n_layers = kLayers;
    o.n_kv_heads = kKvHeads;
    o.head_dim = kHeadDim;
    o.block_tokens = kBlockTokens;
    o.dtype = dtype;
    o.capacity_bytes = int64_t{2} * kLayers * kKvHeads * kHeadDim *
                       DTypeSize(dtype) * (kSessionTokens + kBlockTokens);
    absl::StatusOr<std::unique_ptr<BlockPool>> pool = BlockPool::Create(o);
    FUZZ_CHECK(pool.ok(), "%s", pool.status().ToString().c_str());
    s.pools[dtype == DType::kF32 ? 0 : 1] = *std::move(pool);
  }
  for (int i = 0; i < kSessionTokens; ++i) {
    s.session_tokens.push_back(i * 7 + 3);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size == 0) return 0;
  const State& s = GetState();
  const DType dtype = (data[0] & 2) != 0 ? DType::kBF16 : DType::kF32;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0) FixHashes(bytes, s.session_tokens);

  const KvSnapshotKey key = Key(dtype);
  absl::StatusOr<int64_t> n = CheckKvSnapshot(bytes, key, s.session_tokens);
  if (!n.ok()) return 0;
  FUZZ_CHECK(*n >= 0 && *n <= kSessionTokens, "accepted %lld positions",
             static_cast<long long>(*n));
  BlockTable table(s.pools[dtype == DType::kF32 ? 0 : 1].get());
  const absl::Status extended = table.Extend(*n);
  FUZZ_CHECK(extended.ok(), "%s", extended.ToString().c_str());
  RestoreKvSnapshot(bytes, 0, *n, &table);
  // Rows are restored as stored, whatever their type.
  const std::vector<int32_t> tokens(s.session_tokens.begin(),
                                    s.session_tokens.begin() + *n);
  FUZZ_CHECK(EncodeKvSnapshot(key, tokens, table) == bytes,
             "restored snapshot encodes differently");
  return 0;
}
