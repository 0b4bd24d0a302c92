#include "core/session/session_store.h"

#include <set>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

class SessionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = *BlockPool::Create({.n_layers = 1,
                                .n_kv_heads = 1,
                                .head_dim = 8,
                                .block_tokens = 4,
                                .dtype = DType::kF32,
                                .capacity_bytes = 16 * 4 * 2 * 8 * 4});
    store_ = std::make_unique<SessionStore>(pool_.get());
  }
  const absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<SessionStore> store_;
};

TEST_F(SessionStoreTest, IdsAre128BitHexAndDistinct) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = store_->Create("", std::nullopt, now_)->id;
    EXPECT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_EQ(store_->size(), 1000);
}

TEST_F(SessionStoreTest, LookupFindsOnlyLiveSessionsOfTheOwner) {
  Session* s = store_->Create("alice", std::nullopt, now_);
  ASSERT_TRUE(store_->Lookup(s->id, "alice").ok());
  EXPECT_EQ(*store_->Lookup(s->id, "alice"), s);
  // The empty owner is an owner like any other, not a wildcard.
  EXPECT_EQ(store_->Lookup(s->id, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Lookup(s->id, "bob").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get(s->id), s);  // the engine's own lookup
  // Owners' prompts are cached apart.
  Session* bob = store_->Create("bob", std::nullopt, now_);
  Session* anon = store_->Create("", std::nullopt, now_);
  EXPECT_NE(s->kv.salt, bob->kv.salt);
  EXPECT_NE(s->kv.salt, anon->kv.salt);
  EXPECT_EQ(store_->Lookup("0123", "").status().code(),
            absl::StatusCode::kNotFound);
  const std::string id = s->id;
  store_->Delete(id);
  EXPECT_EQ(store_->Lookup(id, "alice").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->size(), 2);
}

TEST_F(SessionStoreTest, DeleteFreesBlocksAtOnce) {
  Session* s = store_->Create("", std::nullopt, now_);
  ASSERT_TRUE(s->kv.table.Extend(10).ok());
  EXPECT_EQ(pool_->num_free_blocks(), pool_->num_blocks() - 3);
  store_->Delete(s->id);
  EXPECT_EQ(pool_->num_free_blocks(), pool_->num_blocks());
}

TEST_F(SessionStoreTest, ListPagesInIdOrderAndFiltersByOwner) {
  for (int i = 0; i < 25; ++i) store_->Create(i % 2 ? "a" : "b", {}, now_);
  std::vector<std::string> seen;
  std::string token;
  do {
    auto page = store_->List("a", false, token, 5);
    ASSERT_TRUE(page.ok());
    EXPECT_LE(page->sessions.size(), 5u);
    for (const Session* s : page->sessions) {
      EXPECT_EQ(s->owner, "a");
      seen.push_back(s->id);
    }
    token = page->next_page_token;
  } while (!token.empty());
  EXPECT_EQ(seen.size(), 12u);
  // Only when asked for every owner (an admin) does the filter go.
  EXPECT_EQ(store_->List("", false, "", 100)->sessions.size(), 0u);
  EXPECT_EQ(store_->List("", true, "", 100)->sessions.size(), 25u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(store_->List("", false, "", 1001).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionStoreTest, ExpiresOnlyIdleSessionsPastTheirTtl) {
  const std::string short_lived =
      store_->Create("", absl::Seconds(10), now_)->id;
  Session* busy = store_->Create("", absl::Seconds(10), now_);
  busy->busy = true;
  Session* forever = store_->Create("", std::nullopt, now_);
  EXPECT_TRUE(store_->ExpireIdle(now_ + absl::Seconds(5)).empty());
  EXPECT_EQ(store_->ExpireIdle(now_ + absl::Seconds(11)),
            std::vector<std::string>{short_lived});
  EXPECT_FALSE(store_->Lookup(short_lived, "").ok());
  EXPECT_TRUE(store_->Lookup(busy->id, "").ok());
  EXPECT_TRUE(store_->Lookup(forever->id, "").ok());
}

TEST_F(SessionStoreTest, FindsTheLeastRecentlyUsedIdleSessionWithKv) {
  Session* old_s = store_->Create("", std::nullopt, now_);
  Session* new_s = store_->Create("", std::nullopt, now_ + absl::Seconds(1));
  for (Session* s : {old_s, new_s}) {
    s->tokens = {1, 2, 3, 4, 5};
    ASSERT_TRUE(s->kv.table.Extend(5).ok());
  }
  EXPECT_EQ(store_->LeastRecentlyUsedIdleWithKv(), old_s);
  old_s->kv.Clear();
  EXPECT_EQ(store_->LeastRecentlyUsedIdleWithKv(), new_s);
  new_s->busy = true;
  EXPECT_EQ(store_->LeastRecentlyUsedIdleWithKv(), nullptr);
}

}  // namespace
}  // namespace kvserve
