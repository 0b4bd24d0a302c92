#include "core/session/kv_snapshot.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/kv/kv_rows.h"
#include "core/util/check.h"
#include "core/util/little_endian.h"
#include "core/util/xxhash64.h"

namespace kvserve {
namespace {

constexpr std::string_view kMagic = "KVSNAP01";

uint64_t TokensHash(absl::Span<const int32_t> tokens) {
  return Xxh64(tokens.data(), tokens.size() * sizeof(int32_t), 0);
}

struct Header {
  std::string fingerprint;
  uint64_t dtype, n_layers, n_kv_heads, head_dim, num_tokens, tokens_hash;
  size_t data_offset;
};

absl::StatusOr<Header> ParseHeader(std::string_view b) {
  auto loss = [](std::string_view what) {
    return absl::DataLossError(
        absl::StrFormat("KV snapshot is damaged: %s", what));
  };
  if (b.size() < kMagic.size() + 16 || b.substr(0, kMagic.size()) != kMagic) {
    return loss("bad magic");
  }
  const uint64_t sum = GetU64(b.data() + b.size() - 8);
  if (Xxh64(b.data(), b.size() - 8, 0) != sum) return loss("bad checksum");
  size_t pos = kMagic.size();
  Header h;
  const uint64_t fp_len = GetU64(b.data() + pos);
  pos += 8;
  if (fp_len > 1024 || b.size() < pos + fp_len + 7 * 8) return loss("header");
  h.fingerprint = std::string(b.substr(pos, fp_len));
  pos += fp_len;
  uint64_t* fields[] = {&h.dtype,    &h.n_layers,   &h.n_kv_heads,
                        &h.head_dim, &h.num_tokens, &h.tokens_hash};
  for (uint64_t* f : fields) {
    *f = GetU64(b.data() + pos);
    pos += 8;
  }
  h.data_offset = pos;
  if (h.dtype > 3 || h.n_layers > 4096 || h.n_kv_heads > 4096 ||
      h.head_dim > 4096) {
    return loss("header fields");
  }
  // per_token <= 2^39 and num_tokens <= 2^24: the sum cannot wrap.
  if (IsBlockQuantized(static_cast<DType>(h.dtype)) &&
      h.head_dim % kDTypeBlockElems != 0) {
    return loss("header fields");
  }
  const uint64_t per_token =
      h.n_layers * 2 * h.n_kv_heads *
      DTypeRowBytes(static_cast<DType>(h.dtype), h.head_dim);
  if (h.num_tokens > (uint64_t{1} << 24) ||
      b.size() != pos + h.num_tokens * per_token + 8) {
    return loss("size");
  }
  return h;
}

}  // namespace

std::string EncodeKvSnapshot(const KvSnapshotKey& key,
                             absl::Span<const int32_t> tokens,
                             const BlockTable& table) {
  const BlockPool& pool = *table.pool();
  const BlockPoolOptions& o = pool.options();
  const int64_t n = tokens.size();
  KVSERVE_CHECK(table.num_tokens() >= n);
  const int64_t row = pool.row_bytes();
  std::string out(kMagic);
  PutU64(out, key.model_fingerprint.size());
  out += key.model_fingerprint;
  for (uint64_t v : {static_cast<uint64_t>(key.dtype), uint64_t(key.n_layers),
                     uint64_t(key.n_kv_heads), uint64_t(key.head_dim),
                     uint64_t(n), TokensHash(tokens)}) {
    PutU64(out, v);
  }
  out.reserve(out.size() + o.n_layers * n * 2 * o.n_kv_heads * row + 8);
  for (int layer = 0; layer < o.n_layers; ++layer) {
    for (int64_t p = 0; p < n; ++p) {
      const int32_t block = table.blocks()[p / o.block_tokens];
      const int64_t slot = p % o.block_tokens;
      for (const void* base :
           {pool.KeyBlock(layer, block), pool.ValueBlock(layer, block)}) {
        const char* b = static_cast<const char*>(base);
        for (int h = 0; h < o.n_kv_heads; ++h) {
          const size_t at = out.size();
          out.resize(at + row);
          ReadKvRowAt(o.dtype, b + pool.GroupOffset(h), o.head_dim,
                      o.block_tokens, slot, out.data() + at);
        }
      }
    }
  }
  PutU64(out, Xxh64(out.data(), out.size(), 0));
  return out;
}

absl::StatusOr<int64_t> CheckKvSnapshot(
    std::string_view bytes, const KvSnapshotKey& key,
    absl::Span<const int32_t> session_tokens) {
  absl::StatusOr<Header> h = ParseHeader(bytes);
  if (!h.ok()) return h.status();
  const std::string want = absl::StrFormat(
      "model %s, kv %s, %d layers x %d kv heads x %d", key.model_fingerprint,
      DTypeName(key.dtype), key.n_layers, key.n_kv_heads, key.head_dim);
  const std::string got =
      absl::StrFormat("model %s, kv %s, %d layers x %d kv heads x %d",
                      h->fingerprint, DTypeName(static_cast<DType>(h->dtype)),
                      h->n_layers, h->n_kv_heads, h->head_dim);
  if (want != got) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV snapshot was written for %s; this server runs %s", got, want));
  }
  if (h->num_tokens > session_tokens.size() ||
      TokensHash(session_tokens.subspan(0, h->num_tokens)) != h->tokens_hash) {
    return absl::FailedPreconditionError(
        "KV snapshot holds other tokens than the session's history");
  }
  return static_cast<int64_t>(h->num_tokens);
}

void RestoreKvSnapshot(std::string_view bytes, int64_t from, int64_t n,
                       BlockTable* table) {
  absl::StatusOr<Header> h = ParseHeader(bytes);
  KVSERVE_CHECK(h.ok() && static_cast<int64_t>(h->num_tokens) >= n &&
                from >= 0);
  BlockPool& pool = *table->pool();
  const BlockPoolOptions& o = pool.options();
  KVSERVE_CHECK(h->dtype == static_cast<uint64_t>(o.dtype));
  // Rows are copied as stored: a quantized row is not quantized again.
  const int64_t row = pool.row_bytes();
  const int64_t width = int64_t{o.n_kv_heads} * row;
  for (int layer = 0; layer < o.n_layers; ++layer) {
    for (int64_t p = from; p < n; ++p) {
      const char* src = bytes.data() + h->data_offset +
                        ((layer * h->num_tokens + p) * 2) * width;
      const int32_t block = table->blocks()[p / o.block_tokens];
      KVSERVE_CHECK(pool.RefCount(block) == 1);
      const int64_t slot = p % o.block_tokens;
      for (void* base :
           {pool.KeyBlock(layer, block), pool.ValueBlock(layer, block)}) {
        char* b = static_cast<char*>(base);
        for (int hd = 0; hd < o.n_kv_heads; ++hd, src += row) {
          WriteKvRowAt(o.dtype, src, o.head_dim, o.block_tokens, slot,
                       b + pool.GroupOffset(hd));
        }
      }
    }
  }
}

}  // namespace kvserve
