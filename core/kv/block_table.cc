#include "core/kv/block_table.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/kv/kv_rows.h"
#include "core/util/check.h"

namespace kvserve {
BlockTable::BlockTable(BlockPool* pool) : pool_(pool) {}

BlockTable::~BlockTable() { Clear(); }

BlockTable::BlockTable(BlockTable&& other) noexcept
    : pool_(other.pool_),
      blocks_(std::move(other.blocks_)),
      num_tokens_(other.num_tokens_) {
  other.blocks_.clear();
  other.num_tokens_ = 0;
}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    Clear();
    pool_ = other.pool_;
    blocks_ = std::move(other.blocks_);
    num_tokens_ = other.num_tokens_;
    other.blocks_.clear();
    other.num_tokens_ = 0;
  }
  return *this;
}

absl::Status BlockTable::Extend(int64_t new_num_tokens) {
  if (new_num_tokens < num_tokens_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BlockTable::Extend to %d positions, below the current %d",
        new_num_tokens, num_tokens_));
  }
  if (new_num_tokens == num_tokens_) return absl::OkStatus();
  const int64_t bt = pool_->options().block_tokens;
  // The last block receives new positions when it is partly filled; if it is
  // shared it is replaced by a private copy first.
  const bool copy_last =
      num_tokens_ % bt != 0 && pool_->RefCount(blocks_.back()) > 1;
  const int64_t new_blocks =
      (new_num_tokens + bt - 1) / bt - static_cast<int64_t>(blocks_.size());
  const int64_t needed = new_blocks + (copy_last ? 1 : 0);
  // Cached blocks count: Allocate reuses them once no block is free.
  if (needed > pool_->num_available_blocks()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache full: %d more blocks needed, %d free or cached", needed,
        pool_->num_available_blocks()));
  }
  if (copy_last) {
    absl::StatusOr<int32_t> copy = pool_->Allocate();
    KVSERVE_CHECK(copy.ok());
    pool_->CopyBlock(blocks_.back(), *copy);
    pool_->Unref(blocks_.back());
    blocks_.back() = *copy;
  }
  for (int64_t i = 0; i < new_blocks; ++i) {
    absl::StatusOr<int32_t> block = pool_->Allocate();
    KVSERVE_CHECK(block.ok());
    blocks_.push_back(*block);
  }
  num_tokens_ = new_num_tokens;
  return absl::OkStatus();
}

void BlockTable::WriteKv(int layer, int64_t pos, const float* k,
                         const float* v) {
  KVSERVE_CHECK(pos >= 0 && pos < num_tokens_);
  const BlockPoolOptions& o = pool_->options();
  const int32_t block = blocks_[pos / o.block_tokens];
  KVSERVE_CHECK(pool_->RefCount(block) == 1);
  const int64_t slot = pos % o.block_tokens;
  char* kb = static_cast<char*>(pool_->KeyBlock(layer, block));
  char* vb = static_cast<char*>(pool_->ValueBlock(layer, block));
  for (int h = 0; h < o.n_kv_heads; ++h) {
    const int64_t offset = pool_->GroupOffset(h);
    StoreKvRowAt(o.dtype, k + h * o.head_dim, o.head_dim, o.block_tokens, slot,
                 kb + offset);
    StoreKvRowAt(o.dtype, v + h * o.head_dim, o.head_dim, o.block_tokens, slot,
                 vb + offset);
  }
}

void BlockTable::Truncate(int64_t n) {
  KVSERVE_CHECK(n >= 0 && n <= num_tokens_);
  const int64_t bt = pool_->options().block_tokens;
  const size_t keep = static_cast<size_t>((n + bt - 1) / bt);
  while (blocks_.size() > keep) {
    pool_->Unref(blocks_.back());
    blocks_.pop_back();
  }
  num_tokens_ = n;
}

void BlockTable::AppendSharedBlock(int32_t block) {
  const int64_t bt = pool_->options().block_tokens;
  KVSERVE_CHECK(num_tokens_ % bt == 0);
  pool_->Ref(block);
  blocks_.push_back(block);
  num_tokens_ += bt;
}

BlockTable BlockTable::Fork() const {
  BlockTable fork(pool_);
  for (int32_t block : blocks_) pool_->Ref(block);
  fork.blocks_ = blocks_;
  fork.num_tokens_ = num_tokens_;
  return fork;
}

void BlockTable::Clear() {
  if (pool_ != nullptr) {
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
      pool_->Unref(*it);
    }
  }
  blocks_.clear();
  num_tokens_ = 0;
}

void BlockTable::Adopt(std::vector<int32_t> blocks, int64_t num_tokens) {
  KVSERVE_CHECK(blocks_.empty() && num_tokens_ == 0);
  const int64_t bt = pool_->options().block_tokens;
  KVSERVE_CHECK(static_cast<int64_t>(blocks.size()) ==
                (num_tokens + bt - 1) / bt);
  blocks_ = std::move(blocks);
  num_tokens_ = num_tokens;
}

}  // namespace kvserve
