#include "core/kv/block_pool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/check.h"

namespace kvserve {
namespace {

// Huge-page aligned so the kernel can back the cache with 2 MiB pages: the
// attention kernels stream through all of it, and 4 KiB pages would make
// them TLB-bound.
constexpr size_t kAlignment = size_t{2} << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

std::unique_ptr<char, FreeDeleter> AllocateHuge(size_t bytes) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);
  return std::unique_ptr<char, FreeDeleter>(static_cast<char*>(p));
}

}  // namespace

struct BlockPool::Impl {
  // Constant after construction.
  BlockPoolOptions options;
  int32_t num_blocks = 0;
  int64_t block_bytes = 0;  // one of K or V, one layer, one block
  int64_t layer_bytes = 0;  // num_blocks * block_bytes
  std::unique_ptr<char, FreeDeleter> k;
  std::unique_ptr<char, FreeDeleter> v;

  std::vector<int32_t> refcount;   // [num_blocks]
  std::vector<uint64_t> hash;      // [num_blocks]; 0: none
  std::vector<int32_t> free_list;  // stack; back() is handed out next
  // Cached blocks, least recently cached first: a circular doubly linked
  // list through lru_prev / lru_next whose sentinel is index num_blocks.
  std::vector<int32_t> lru_prev, lru_next;  // [num_blocks + 1]
  int32_t num_cached = 0;                   // blocks on the list
  int32_t num_shared = 0;
  EvictionListener on_evict;

  int32_t sentinel() const { return num_blocks; }
  void PushCached(int32_t block) {
    const int32_t last = lru_prev[sentinel()];
    lru_prev[block] = last;
    lru_next[block] = sentinel();
    lru_next[last] = block;
    lru_prev[sentinel()] = block;
    ++num_cached;
  }
  void RemoveCached(int32_t block) {
    lru_next[lru_prev[block]] = lru_next[block];
    lru_prev[lru_next[block]] = lru_prev[block];
    lru_prev[block] = lru_next[block] = -1;
    --num_cached;
  }
  bool IsCached(int32_t block) const { return lru_next[block] >= 0; }

  char* Key(int layer, int32_t block) const {
    return k.get() + layer * layer_bytes + block * block_bytes;
  }
  char* Value(int layer, int32_t block) const {
    return v.get() + layer * layer_bytes + block * block_bytes;
  }
};

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(
    const BlockPoolOptions& options) {
  if (options.n_layers <= 0 || options.n_kv_heads <= 0 ||
      options.head_dim <= 0 || options.block_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block pool: n_layers %d, n_kv_heads %d, head_dim %d and "
        "block_tokens %d must be positive",
        options.n_layers, options.n_kv_heads, options.head_dim,
        options.block_tokens));
  }
  if (absl::Status rows = CheckKvRows(options.dtype, options.head_dim);
      !rows.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("block pool: ", rows.message()));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->block_bytes = int64_t{options.n_kv_heads} * options.block_tokens *
                      DTypeRowBytes(options.dtype, options.head_dim);
  const int64_t bytes_per_block = 2 * options.n_layers * impl->block_bytes;
  const int64_t num_blocks = options.capacity_bytes / bytes_per_block;
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block pool: capacity %d bytes is below one block (%d bytes)",
        options.capacity_bytes, bytes_per_block));
  }
  if (num_blocks > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block pool: %d blocks exceed the int32 block id range", num_blocks));
  }
  impl->num_blocks = static_cast<int32_t>(num_blocks);
  impl->layer_bytes = num_blocks * impl->block_bytes;
  const size_t half = static_cast<size_t>(options.n_layers * impl->layer_bytes);
  impl->k = AllocateHuge(half);
  impl->v = AllocateHuge(half);
  if (impl->k == nullptr || impl->v == nullptr) {
    const int64_t per_token = bytes_per_block / options.block_tokens;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "block pool: cannot allocate %d bytes of KV cache (%d blocks of %d "
        "tokens at %d bytes per token): lower --kv_cache_bytes or "
        "--max_context, or %s",
        2 * half, num_blocks, options.block_tokens, per_token,
        options.dtype == DType::kQ4_0
            ? "a smaller model"
            : "use a smaller --kv_dtype (bf16 half of f32's bytes per token, "
              "q8_0 0.53x bf16, q4_0 0.28x)"));
  }
  impl->refcount.assign(impl->num_blocks, 0);
  impl->hash.assign(impl->num_blocks, 0);
  impl->lru_prev.assign(impl->num_blocks + 1, -1);
  impl->lru_next.assign(impl->num_blocks + 1, -1);
  impl->lru_prev[impl->sentinel()] = impl->sentinel();
  impl->lru_next[impl->sentinel()] = impl->sentinel();
  impl->free_list.reserve(impl->num_blocks);
  // Lowest ids first, so a fresh pool hands out consecutive blocks.
  for (int32_t b = impl->num_blocks - 1; b >= 0; --b) {
    impl->free_list.push_back(b);
  }
  return std::unique_ptr<BlockPool>(new BlockPool(std::move(impl)));
}

BlockPool::BlockPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockPool::~BlockPool() = default;

absl::StatusOr<int32_t> BlockPool::Allocate() {
  Impl& p = *impl_;
  int32_t block;
  if (!p.free_list.empty()) {
    block = p.free_list.back();
    p.free_list.pop_back();
  } else if (p.num_cached > 0) {
    block = p.lru_next[p.sentinel()];
    p.RemoveCached(block);
    const uint64_t hash = std::exchange(p.hash[block], 0);
    if (p.on_evict) p.on_evict(block, hash);
  } else {
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV cache full: all %d blocks in use", p.num_blocks));
  }
  KVSERVE_CHECK(p.refcount[block] == 0 && p.hash[block] == 0);
  p.refcount[block] = 1;
  return block;
}

void BlockPool::Ref(int32_t block) {
  KVSERVE_CHECK(block >= 0 && block < impl_->num_blocks);
  int32_t& rc = impl_->refcount[block];
  if (rc == 0) {
    KVSERVE_CHECK(impl_->IsCached(block));
    impl_->RemoveCached(block);
  }
  if (++rc == 2) ++impl_->num_shared;
}

void BlockPool::Unref(int32_t block) {
  KVSERVE_CHECK(block >= 0 && block < impl_->num_blocks);
  int32_t& rc = impl_->refcount[block];
  KVSERVE_CHECK(rc > 0);
  if (--rc == 1) --impl_->num_shared;
  if (rc > 0) return;
  if (impl_->hash[block] != 0) {
    impl_->PushCached(block);
  } else {
    impl_->free_list.push_back(block);
  }
}

int BlockPool::RefCount(int32_t block) const {
  KVSERVE_CHECK(block >= 0 && block < impl_->num_blocks);
  return impl_->refcount[block];
}

void BlockPool::CopyBlock(int32_t src, int32_t dst) {
  KVSERVE_CHECK(src >= 0 && src < impl_->num_blocks);
  KVSERVE_CHECK(dst >= 0 && dst < impl_->num_blocks);
  if (src == dst) return;
  for (int layer = 0; layer < impl_->options.n_layers; ++layer) {
    std::memcpy(impl_->Key(layer, dst), impl_->Key(layer, src),
                impl_->block_bytes);
    std::memcpy(impl_->Value(layer, dst), impl_->Value(layer, src),
                impl_->block_bytes);
  }
}

uint64_t BlockPool::BlockHash(int32_t block) const {
  KVSERVE_CHECK(block >= 0 && block < impl_->num_blocks);
  return impl_->hash[block];
}

void BlockPool::SetBlockHash(int32_t block, uint64_t hash) {
  KVSERVE_CHECK(block >= 0 && block < impl_->num_blocks);
  if (impl_->refcount[block] == 0) {
    KVSERVE_CHECK(hash == 0);
    if (impl_->IsCached(block)) {
      impl_->RemoveCached(block);
      impl_->free_list.push_back(block);
    }
  }
  impl_->hash[block] = hash;
}

void BlockPool::SetEvictionListener(EvictionListener listener) {
  impl_->on_evict = std::move(listener);
}

const BlockPoolOptions& BlockPool::options() const { return impl_->options; }
int32_t BlockPool::num_blocks() const { return impl_->num_blocks; }
int32_t BlockPool::num_used_blocks() const {
  return impl_->num_blocks - num_available_blocks();
}
int32_t BlockPool::num_free_blocks() const {
  return static_cast<int32_t>(impl_->free_list.size());
}
int32_t BlockPool::num_cached_blocks() const { return impl_->num_cached; }
int32_t BlockPool::num_available_blocks() const {
  return num_free_blocks() + impl_->num_cached;
}
int32_t BlockPool::num_shared_blocks() const { return impl_->num_shared; }
int64_t BlockPool::bytes_per_block() const {
  return 2 * impl_->options.n_layers * impl_->block_bytes;
}
int64_t BlockPool::row_bytes() const {
  return DTypeRowBytes(impl_->options.dtype, impl_->options.head_dim);
}
int64_t BlockPool::bytes_per_token() const {
  return 2LL * impl_->options.n_layers * impl_->options.n_kv_heads *
         row_bytes();
}
int64_t BlockPool::capacity_bytes() const {
  return impl_->num_blocks * bytes_per_block();
}
int64_t BlockPool::used_bytes() const {
  return int64_t{num_used_blocks()} * bytes_per_block();
}

void* BlockPool::KeyBlock(int layer, int32_t block) {
  return impl_->Key(layer, block);
}
void* BlockPool::ValueBlock(int layer, int32_t block) {
  return impl_->Value(layer, block);
}
const void* BlockPool::KeyBlock(int layer, int32_t block) const {
  return impl_->Key(layer, block);
}
const void* BlockPool::ValueBlock(int layer, int32_t block) const {
  return impl_->Value(layer, block);
}

}  // namespace kvserve
