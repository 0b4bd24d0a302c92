#include "core/session/session_tiers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "core/session/session_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

constexpr int kBlock = 4;
constexpr int kVocab = 100;
constexpr int kMaxContext = 64;
const char kId[] = "0123456789abcdef0123456789abcdef";

// Warn may be called from the writer thread. The tests' own locks are
// std::mutex, as the tiers' are: TSan (make tsan-test) cannot see Debian's
// uninstrumented Abseil synchronization.
class Warnings {
 public:
  void Add(std::string_view message) {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.emplace_back(message);
  }
  bool Contains(std::string_view text) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& m : messages_) {
      if (m.find(text) != std::string::npos) return true;
    }
    return false;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mu_);
};

// One server process: its own pool, store, prefix cache and tiers.
struct Node {
  explicit Node(const std::string& session_dir, int64_t max_bytes = 0) {
    pool = *BlockPool::Create({.n_layers = 2,
                               .n_kv_heads = 2,
                               .head_dim = 4,
                               .block_tokens = kBlock,
                               .dtype = DType::kF32,
                               .capacity_bytes = 64 * 512});
    store = std::make_unique<SessionStore>(pool.get());
    cache = std::make_unique<PrefixCache>(pool.get());
    SessionTiersOptions options{.session_dir = session_dir,
                                .snapshot_key = {.model_fingerprint = "m1",
                                                 .dtype = DType::kF32,
                                                 .n_layers = 2,
                                                 .n_kv_heads = 2,
                                                 .head_dim = 4},
                                .vocab_size = kVocab,
                                .max_context = kMaxContext,
                                .session_dir_max_bytes = max_bytes,
                                .on_evicted =
                                    [this](std::string_view reason) {
                                      evictions.push_back(std::string(reason));
                                    },
                                .on_log_recovered = [this] { ++recoveries; }};
    auto t = SessionTiers::Create(
        options, store.get(), cache.get(),
        [this](std::string_view message) { warnings.Add(message); });
    EXPECT_TRUE(t.ok()) << t.status();
    tiers = *std::move(t);
  }

  Session* NewSession(std::vector<int32_t> tokens, std::string owner = "alice",
                      std::optional<absl::Duration> ttl = std::nullopt) {
    Session* s = store->Create(std::move(owner), ttl, absl::Now());
    s->tokens = std::move(tokens);
    return s;
  }

  // Computes KV for all of s.tokens: K of (layer, pos, i) is
  // token * 1000 + pos * 10 + layer + i / 8, V its negation.
  void Compute(Session& s) {
    const int64_t start = s.kv.table.num_tokens();
    ASSERT_TRUE(cache->Extend(s.kv, s.tokens.size()).ok());
    for (int layer = 0; layer < 2; ++layer) {
      for (size_t p = start; p < s.tokens.size(); ++p) {
        float k[8], v[8];
        for (int i = 0; i < 8; ++i) {
          k[i] = s.tokens[p] * 1000.0f + p * 10.0f + layer + i / 8.0f;
          v[i] = -k[i];
        }
        s.kv.table.WriteKv(layer, p, k, v);
      }
    }
    cache->Register(s.tokens, s.kv);
  }

  // The raw K and V bytes of the first n held positions (all when n < 0),
  // in (layer, pos) order.
  std::string KvBytes(const Session& s, int64_t n = -1) {
    if (n < 0) n = s.kv.table.num_tokens();
    std::string out;
    const int64_t row = 4 * sizeof(float);
    for (int layer = 0; layer < 2; ++layer) {
      for (int64_t p = 0; p < n; ++p) {
        const int32_t block = s.kv.table.blocks()[p / kBlock];
        for (const void* base :
             {pool->KeyBlock(layer, block), pool->ValueBlock(layer, block)}) {
          for (int h = 0; h < 2; ++h) {
            out.append(static_cast<const char*>(base) +
                           (h * kBlock + p % kBlock) * row,
                       row);
          }
        }
      }
    }
    return out;
  }

  // Brings s's KV back from its snapshot, at most `limit` positions.
  int64_t Restore(Session& s, int64_t limit) {
    SnapshotRead read = tiers->ReadSnapshot(s, limit);
    if (read.positions == 0) return 0;
    EXPECT_TRUE(cache->Extend(s.kv, read.positions).ok());
    tiers->Restore(s, read);
    return read.positions;
  }

  Warnings warnings;  // outlives tiers, whose writer may warn while draining
  std::vector<std::string> evictions;  // on_evicted's reasons
  int recoveries = 0;                  // on_log_recovered's calls
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<SessionStore> store;
  std::unique_ptr<PrefixCache> cache;
  std::unique_ptr<SessionTiers> tiers;
};

// Records how and where a Done callback ran.
class Probe {
 public:
  SessionTiers::Done Done(std::function<void()> also = nullptr) {
    return [this, also = std::move(also)](absl::Status status) {
      if (also) also();
      // Notified under the lock: a waiter may destroy the probe as soon as
      // it sees ran_.
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      thread_ = std::this_thread::get_id();
      ran_ = true;
      ran_cv_.notify_all();
    };
  }
  bool ran() {
    std::lock_guard<std::mutex> lock(mu_);
    return ran_;
  }
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(ran_cv_.wait_for(lock, std::chrono::seconds(30),
                                 [this] { return ran_; }));
    return status_;
  }
  std::thread::id thread() {
    (void)Wait();
    std::lock_guard<std::mutex> lock(mu_);
    return thread_;
  }

 private:
  std::mutex mu_;
  std::condition_variable ran_cv_;
  bool ran_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread::id thread_ ABSL_GUARDED_BY(mu_);
};

std::vector<int32_t> Range(int n, int first = 1) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class SessionTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvserve_session_tiers_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    path_ = root_ + "/sessions";
    node_ = std::make_unique<Node>(path_);
    dir_ = *SessionDir::Open(path_);  // this test's own view of the files
  }
  void TearDown() override {
    node_.reset();
    std::system(("rm -rf " + root_).c_str());
  }

  std::vector<int32_t> TokensOnDisk(std::string_view id) {
    absl::StatusOr<StoredSession> s = dir_->Load(id);
    return s.ok() ? s->tokens : std::vector<int32_t>{-1};
  }

  std::string root_, path_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<SessionDir> dir_;
};

TEST_F(SessionTiersTest, TierNames) {
  EXPECT_EQ(TierName(Tier::kRam), "ram");
  EXPECT_EQ(TierName(Tier::kDisk), "disk");
  EXPECT_EQ(TierName(Tier::kTokens), "tokens");
}

TEST_F(SessionTiersTest, MemoryOnlyRunsDoneAtOnceAndNeverSnapshots) {
  Node node("");
  EXPECT_FALSE(node.tiers->durable());
  Session* s = node.NewSession({});
  EXPECT_EQ(node.tiers->TierOf(*s), Tier::kRam);  // nothing to hold
  const std::thread::id me = std::this_thread::get_id();
  for (int call = 0; call < 3; ++call) {
    Probe probe;
    s->tokens = Range(6 - call);
    if (call == 0) node.tiers->StartLog(*s, probe.Done());
    if (call == 1) node.tiers->Log(*s, probe.Done());
    if (call == 2) node.tiers->Truncate(*s, probe.Done());
    ASSERT_TRUE(probe.ran()) << call;  // before the call returned
    EXPECT_TRUE(probe.Wait().ok());
    EXPECT_EQ(probe.thread(), me);
  }
  node.Compute(*s);
  EXPECT_EQ(node.tiers->TierOf(*s), Tier::kRam);
  EXPECT_TRUE(node.tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(s->kv.table.num_tokens(), 0);
  EXPECT_EQ(node.pool->num_used_blocks(), 0);
  EXPECT_EQ(node.tiers->TierOf(*s), Tier::kTokens);
  EXPECT_EQ(node.tiers->ReadSnapshot(*s, 100).positions, 0);
  EXPECT_FALSE(node.tiers->SpillLeastRecentlyUsed());
  node.tiers->Remove(s->id);
  EXPECT_TRUE(node.tiers->Find(s->id, "alice").ok());
}

TEST_F(SessionTiersTest, ARestartFindsLoggedSessions) {
  const absl::Time created = absl::FromUnixSeconds(1700000000);
  Session* a = node_->NewSession({1, 2, 3}, "alice", absl::Seconds(90));
  a->create_time = created;
  node_->tiers->StartLog(*a, [](absl::Status) {});
  a->tokens.insert(a->tokens.end(), {4, 5});
  node_->tiers->Log(*a, [](absl::Status) {});
  a->tokens.resize(4);
  node_->tiers->Truncate(*a, [](absl::Status) {});
  a->tokens.push_back(9);
  node_->tiers->Log(*a, [](absl::Status) {});
  Session* b = node_->NewSession({7}, "bob");
  node_->tiers->StartLog(*b, [](absl::Status) {});
  const std::string a_id = a->id, b_id = b->id;
  node_.reset();  // drains the writer

  Node restarted(path_);
  restarted.tiers->LoadAll();
  EXPECT_EQ(restarted.store->size(), 2);
  absl::StatusOr<Session*> ra = restarted.tiers->Find(a_id, "alice");
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_EQ((*ra)->tokens, (std::vector<int32_t>{1, 2, 3, 4, 9}));
  EXPECT_EQ((*ra)->owner, "alice");
  EXPECT_EQ((*ra)->ttl, absl::Seconds(90));
  EXPECT_EQ((*ra)->create_time, created);
  EXPECT_EQ(restarted.tiers->TierOf(**ra), Tier::kTokens);
  absl::StatusOr<Session*> rb = restarted.tiers->Find(b_id, "bob");
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ((*rb)->tokens, std::vector<int32_t>{7});
  EXPECT_EQ((*rb)->ttl, std::nullopt);
  // Another owner's session is not found, and is not loaded twice.
  EXPECT_EQ(restarted.tiers->Find(a_id, "bob").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(restarted.store->size(), 2);
  EXPECT_EQ(restarted.warnings.size(), 0u);
}

TEST_F(SessionTiersTest, FindLoadsASessionOnFirstUse) {
  ASSERT_TRUE(dir_->Create(StoredSession{.id = kId,
                                         .owner = "carol",
                                         .create_time = absl::Now(),
                                         .tokens = {5, 6}})
                  .ok());
  absl::StatusOr<Session*> s = node_->tiers->Find(kId, "carol");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(node_->tiers->Find(kId, "dave").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->tiers->Find("fedcba9876543210fedcba9876543210", "")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionTiersTest, DoneRunsOnTheWriterOnceTheDataIsOnDisk) {
  Session* s = node_->NewSession({1, 2, 3});
  const std::string id = s->id;
  std::vector<int32_t> seen_at_start, seen_at_log;
  node_->tiers->PauseWritesForTesting(true);
  Probe started, logged;
  node_->tiers->StartLog(
      *s, started.Done([&] { seen_at_start = TokensOnDisk(id); }));
  s->tokens.push_back(4);
  node_->tiers->Log(*s, logged.Done([&] { seen_at_log = TokensOnDisk(id); }));
  // Queued, not written: the engine thread did not wait for the disk.
  EXPECT_FALSE(started.ran());
  EXPECT_FALSE(logged.ran());
  EXPECT_EQ(dir_->LogSize(id), -1);
  node_->tiers->PauseWritesForTesting(false);
  EXPECT_TRUE(started.Wait().ok());
  EXPECT_TRUE(logged.Wait().ok());
  EXPECT_EQ(seen_at_start, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(seen_at_log, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_NE(logged.thread(), std::this_thread::get_id());
}

TEST_F(SessionTiersTest, WritesRunInTheOrderQueued) {
  Session* a = node_->NewSession({1});
  Session* b = node_->NewSession({2});
  std::mutex mu;
  std::vector<int> order;
  auto record = [&](int i) {
    return [&, i](absl::Status status) {
      EXPECT_TRUE(status.ok()) << status;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    };
  };
  node_->tiers->PauseWritesForTesting(true);
  node_->tiers->StartLog(*a, record(0));
  node_->tiers->StartLog(*b, record(1));
  for (int i = 2; i < 40; ++i) {
    Session* s = i % 3 == 0 ? b : a;
    s->tokens.push_back(i);
    node_->tiers->Log(*s, record(i));
  }
  node_->tiers->PauseWritesForTesting(false);
  node_->tiers->Flush();
  std::vector<int> want(40);
  std::iota(want.begin(), want.end(), 0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, want);
  EXPECT_EQ(TokensOnDisk(a->id), a->tokens);
  EXPECT_EQ(TokensOnDisk(b->id), b->tokens);
}

TEST_F(SessionTiersTest, LogWithNothingNewWaitsForEarlierWrites) {
  Session* s = node_->NewSession({1, 2});
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->tiers->Flush();
  Probe idle;
  node_->tiers->Log(*s, idle.Done());
  EXPECT_TRUE(idle.ran());  // nothing queued: at once
  node_->tiers->PauseWritesForTesting(true);
  s->tokens.push_back(3);
  Probe append, barrier;
  node_->tiers->Log(*s, append.Done());
  node_->tiers->Log(*s, barrier.Done());
  EXPECT_FALSE(barrier.ran());  // the append is not on disk yet
  node_->tiers->PauseWritesForTesting(false);
  EXPECT_TRUE(barrier.Wait().ok());
  EXPECT_TRUE(append.ran());
  EXPECT_EQ(TokensOnDisk(s->id), (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(SessionTiersTest, SpillSnapshotsAndRestoresIdenticalKv) {
  Session* s = node_->NewSession(Range(10));
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->Compute(*s);
  const std::string before = node_->KvBytes(*s);
  const std::string before_9 = node_->KvBytes(*s, 9);
  EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kRam);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(s->kv.table.num_tokens(), 0);
  EXPECT_EQ(node_->pool->num_used_blocks(), 0);
  EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kDisk);
  node_->tiers->Flush();
  EXPECT_TRUE(dir_->HasSnapshot(s->id));

  // A generating request leaves the last position to recompute.
  EXPECT_EQ(node_->Restore(*s, 9), 9);
  EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kRam);
  EXPECT_EQ(node_->KvBytes(*s), before_9);
  s->kv.Clear();
  EXPECT_EQ(node_->Restore(*s, 100), 10);
  EXPECT_EQ(node_->KvBytes(*s), before);
  EXPECT_EQ(node_->warnings.size(), 0u);
}

TEST_F(SessionTiersTest, AQueuedSnapshotIsRestorableBeforeItIsWritten) {
  Session* s = node_->NewSession(Range(7));
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->tiers->Flush();
  node_->Compute(*s);
  const std::string before = node_->KvBytes(*s);
  node_->tiers->PauseWritesForTesting(true);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_FALSE(dir_->HasSnapshot(s->id));  // not written yet
  EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kDisk);
  EXPECT_EQ(node_->Restore(*s, 100), 7);
  EXPECT_EQ(node_->KvBytes(*s), before);
  node_->tiers->PauseWritesForTesting(false);
  node_->tiers->Flush();
  EXPECT_TRUE(dir_->HasSnapshot(s->id));
  // Written now, the same bytes come from the file.
  s->kv.Clear();
  EXPECT_EQ(node_->Restore(*s, 100), 7);
  EXPECT_EQ(node_->KvBytes(*s), before);
}

TEST_F(SessionTiersTest, HasSnapshotStatsWithoutReading) {
  ASSERT_TRUE(dir_->Create(StoredSession{.id = kId, .tokens = {1, 2}}).ok());
  // A FIFO with no writer: any read of it blocks.
  const std::string fifo = dir_->SnapshotPath(kId);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto probe = std::async(std::launch::async, [&] {
    const bool has = dir_->HasSnapshot(kId);
    absl::StatusOr<Session*> s = node_->tiers->Find(kId, "");
    return has && s.ok() && node_->tiers->TierOf(**s) == Tier::kDisk;
  });
  const bool in_time =
      probe.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!in_time) {
    // Unblock the reader so that the test ends.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_TRUE(in_time) << "HasSnapshot or Find read the snapshot";
  EXPECT_TRUE(probe.get());
  EXPECT_FALSE(dir_->HasSnapshot("fedcba9876543210fedcba9876543210"));
  ::unlink(fifo.c_str());
}

TEST_F(SessionTiersTest, ACorruptSnapshotIsIgnoredWithAWarningAndRemoved) {
  Session* s = node_->NewSession(Range(6));
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->Compute(*s);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  node_->tiers->Flush();
  {
    std::fstream f(dir_->SnapshotPath(s->id),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x55');
  }
  const std::string id = s->id;
  node_ = std::make_unique<Node>(path_);  // a restart reads the file
  absl::StatusOr<Session*> found = node_->tiers->Find(id, "alice");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(node_->tiers->TierOf(**found), Tier::kDisk);
  EXPECT_EQ(node_->Restore(**found, 100), 0);
  EXPECT_TRUE(node_->warnings.Contains("KV snapshot ignored"));
  EXPECT_EQ(node_->tiers->TierOf(**found), Tier::kTokens);
  node_->tiers->Flush();
  EXPECT_FALSE(dir_->HasSnapshot(id));
}

TEST_F(SessionTiersTest, AnotherProcessAppendingMakesFindReload) {
  Session* s = node_->NewSession(Range(10));
  const std::string id = s->id;
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->Compute(*s);
  node_->tiers->Flush();

  Node replica(path_);
  absl::StatusOr<Session*> r = replica.tiers->Find(id, "alice");
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->tokens.resize(6);
  replica.tiers->Truncate(**r, [](absl::Status) {});
  (*r)->tokens.insert((*r)->tokens.end(), {50, 51});
  replica.tiers->Log(**r, [](absl::Status) {});
  replica.tiers->Flush();

  absl::StatusOr<Session*> found = node_->tiers->Find(id, "alice");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, s);
  std::vector<int32_t> want = Range(6);
  want.insert(want.end(), {50, 51});
  EXPECT_EQ(s->tokens, want);
  EXPECT_EQ(s->kv.table.num_tokens(), 6);  // the common prefix

  // This process's next append lands after the replica's.
  s->tokens.push_back(60);
  node_->tiers->Log(*s, [](absl::Status) {});
  node_->tiers->Flush();
  want.push_back(60);
  EXPECT_EQ(TokensOnDisk(id), want);

  ASSERT_TRUE(replica.tiers->Find(id, "alice").ok());  // sees 60
  replica.tiers->Remove(id);
  replica.store->Delete(id);
  replica.tiers->Flush();
  EXPECT_EQ(node_->tiers->Find(id, "alice").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->store->size(), 0);
  EXPECT_EQ(node_->pool->num_used_blocks(), 0);
}

TEST_F(SessionTiersTest, FindTrustsItsOwnQueuedAndFinishedWrites) {
  node_->tiers->PauseWritesForTesting(true);
  Session* s = node_->NewSession({1, 2, 3});
  node_->tiers->StartLog(*s, [](absl::Status) {});
  s->tokens.push_back(4);
  node_->tiers->Log(*s, [](absl::Status) {});
  // The log is not on disk yet: the session is neither dropped nor reloaded.
  absl::StatusOr<Session*> found = node_->tiers->Find(s->id, "alice");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  node_->tiers->PauseWritesForTesting(false);
  node_->tiers->Flush();
  // Written: the log's size is what this process expects, so Find does not
  // re-read it (which would replace the history in memory).
  s->tokens = {7, 7, 7, 7};
  ASSERT_TRUE(node_->tiers->Find(s->id, "alice").ok());
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{7, 7, 7, 7}));
}

TEST_F(SessionTiersTest, RemoveCancelsQueuedWritesAndLeavesNoFiles) {
  Session* s = node_->NewSession(Range(8));
  const std::string id = s->id;
  node_->tiers->PauseWritesForTesting(true);
  Probe started, logged;
  node_->tiers->StartLog(*s, started.Done());
  node_->Compute(*s);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  s->tokens.push_back(9);
  node_->tiers->Log(*s, logged.Done());
  node_->tiers->Remove(id);
  node_->store->Delete(id);
  node_->tiers->PauseWritesForTesting(false);
  EXPECT_EQ(started.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(logged.Wait().code(), absl::StatusCode::kCancelled);
  node_->tiers->Flush();
  EXPECT_EQ(dir_->LogSize(id), -1);
  EXPECT_FALSE(dir_->HasSnapshot(id));
  EXPECT_TRUE(dir_->List().empty());
  EXPECT_EQ(node_->warnings.size(), 0u);
}

TEST_F(SessionTiersTest, AQueuedRemoveKeepsFindFromLoadingTheLog) {
  Session* s = node_->NewSession({1, 2});
  const std::string id = s->id;
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->tiers->Flush();
  node_->tiers->PauseWritesForTesting(true);
  node_->tiers->Remove(id);
  node_->store->Delete(id);
  ASSERT_GE(dir_->LogSize(id), 0);  // still on disk
  EXPECT_EQ(node_->tiers->Find(id, "alice").status().code(),
            absl::StatusCode::kNotFound);
  node_->tiers->PauseWritesForTesting(false);
  node_->tiers->Flush();
  EXPECT_EQ(dir_->LogSize(id), -1);
  EXPECT_EQ(node_->store->size(), 0);
}

TEST_F(SessionTiersTest, TheDestructorFinishesQueuedWrites) {
  Session* s = node_->NewSession({1, 2, 3});
  const std::string id = s->id;
  Probe probe;
  node_->tiers->PauseWritesForTesting(true);
  node_->tiers->StartLog(*s, probe.Done());
  node_->Compute(*s);
  node_->tiers->SnapshotAll();
  node_.reset();
  EXPECT_TRUE(probe.ran());
  EXPECT_TRUE(probe.Wait().ok());
  EXPECT_EQ(TokensOnDisk(id), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(dir_->HasSnapshot(id));
}

TEST_F(SessionTiersTest, SnapshotAllSurvivesARestart) {
  Session* a = node_->NewSession(Range(9));
  Session* b = node_->NewSession(Range(5, 20));
  for (Session* s : {a, b}) {
    node_->tiers->StartLog(*s, [](absl::Status) {});
    node_->Compute(*s);
  }
  const std::string a_id = a->id, a_kv = node_->KvBytes(*a);
  const std::string b_id = b->id, b_kv = node_->KvBytes(*b);
  node_->tiers->SnapshotAll();
  EXPECT_EQ(a->kv.table.num_tokens(), 9);  // still held
  node_ = std::make_unique<Node>(path_);
  node_->tiers->LoadAll();
  for (const auto& [id, kv] : {std::pair(a_id, a_kv), std::pair(b_id, b_kv)}) {
    Session* s = *node_->tiers->Find(id, "alice");
    EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kDisk);
    EXPECT_EQ(node_->Restore(*s, 100), static_cast<int64_t>(s->tokens.size()));
    EXPECT_EQ(node_->KvBytes(*s), kv);
    // Restore registered the full blocks: a new process's cache held none.
    CachedKv other(node_->pool.get());
    other.salt = s->kv.salt;  // the same owner's
    EXPECT_EQ(node_->cache->Match(s->tokens, other),
              static_cast<int64_t>(s->tokens.size()) / kBlock * kBlock);
  }
}

TEST_F(SessionTiersTest, TruncateDropsTheSnapshot) {
  Session* s = node_->NewSession(Range(8));
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->Compute(*s);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  s->tokens.resize(5);
  Probe probe;
  node_->tiers->Truncate(*s, probe.Done());
  EXPECT_TRUE(probe.Wait().ok());
  EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kTokens);
  node_->tiers->Flush();
  EXPECT_FALSE(dir_->HasSnapshot(s->id));
  EXPECT_EQ(TokensOnDisk(s->id), Range(5));
  EXPECT_EQ(node_->warnings.size(), 0u);
}

TEST_F(SessionTiersTest, TierOfFollowsTheKv) {
  Session* durable = node_->NewSession(Range(5));
  node_->tiers->StartLog(*durable, [](absl::Status) {});
  Session* memory_only = node_->NewSession(Range(5));  // never logged
  EXPECT_EQ(node_->tiers->TierOf(*durable), Tier::kTokens);
  for (Session* s : {durable, memory_only}) {
    node_->Compute(*s);
    EXPECT_EQ(node_->tiers->TierOf(*s), Tier::kRam);
  }
  EXPECT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(node_->tiers->TierOf(*durable), Tier::kDisk);
  EXPECT_EQ(node_->tiers->TierOf(*memory_only), Tier::kTokens);
  node_->tiers->Flush();
  EXPECT_FALSE(dir_->HasSnapshot(memory_only->id));
}

TEST_F(SessionTiersTest, SpillTakesTheLeastRecentlyUsedIdleSessionWithKv) {
  const absl::Time t0 = absl::Now();
  Session* oldest_busy = node_->NewSession(Range(4));
  Session* old_without_kv = node_->NewSession(Range(4));
  Session* old = node_->NewSession(Range(4));
  Session* recent = node_->NewSession(Range(4));
  for (Session* s : {oldest_busy, old, recent}) node_->Compute(*s);
  oldest_busy->last_used = t0 - absl::Seconds(40);
  oldest_busy->busy = true;
  old_without_kv->last_used = t0 - absl::Seconds(30);
  old->last_used = t0 - absl::Seconds(20);
  recent->last_used = t0 - absl::Seconds(10);

  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(old->kv.table.num_tokens(), 0);
  EXPECT_EQ(recent->kv.table.num_tokens(), 4);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(recent->kv.table.num_tokens(), 0);
  EXPECT_FALSE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(oldest_busy->kv.table.num_tokens(), 4);
}

TEST_F(SessionTiersTest, SessionsThisModelCannotServeAreNotLoaded) {
  const char kOutOfVocab[] = "00000000000000000000000000000001";
  const char kTooLong[] = "00000000000000000000000000000002";
  const char kGood[] = "00000000000000000000000000000003";
  ASSERT_TRUE(
      dir_->Create(StoredSession{.id = kOutOfVocab, .tokens = {1, kVocab}})
          .ok());
  ASSERT_TRUE(
      dir_->Create(StoredSession{.id = kTooLong, .tokens = Range(kMaxContext)})
          .ok());
  ASSERT_TRUE(
      dir_->Append(kTooLong, kMaxContext, std::vector<int32_t>{1}).ok());
  ASSERT_TRUE(dir_->Create(StoredSession{.id = kGood, .tokens = {1}}).ok());
  node_->tiers->LoadAll();
  EXPECT_EQ(node_->store->size(), 1);
  EXPECT_TRUE(node_->store->Lookup(kGood, "").ok());
  EXPECT_TRUE(node_->warnings.Contains("outside this model's vocabulary"));
  EXPECT_TRUE(node_->warnings.Contains("more than the maximum context"));
  EXPECT_EQ(node_->tiers->Find(kOutOfVocab, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->tiers->Find(kTooLong, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_GE(dir_->LogSize(kTooLong), 0);  // left for a model that can
}

TEST_F(SessionTiersTest, ATornLogTailIsRewrittenSoLaterAppendsReplay) {
  ASSERT_TRUE(dir_->Create(StoredSession{.id = kId, .tokens = {1, 2}}).ok());
  const int64_t good = dir_->LogSize(kId);
  ASSERT_TRUE(dir_->Append(kId, 2, std::vector<int32_t>{3, 4, 5}).ok());
  ASSERT_EQ(truncate(dir_->LogPath(kId).c_str(), good + 7), 0);  // a crash
  absl::StatusOr<Session*> s = node_->tiers->Find(kId, "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(node_->warnings.Contains("torn or corrupt"));
  (*s)->tokens.push_back(6);
  node_->tiers->Log(**s, [](absl::Status) {});
  node_->tiers->Flush();
  EXPECT_EQ(TokensOnDisk(kId), (std::vector<int32_t>{1, 2, 6}));
}

// Flips one bit of the byte at `offset` in `path`.
void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  const char c = static_cast<char>(f.get());
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

// Issue 35 item 5: a damaged log is replayed as far as it holds, warned of
// (the session, the byte, what was kept), counted, and rewritten whole.
TEST_F(SessionTiersTest, ADamagedLogIsWarnedOfCountedAndRewritten) {
  ASSERT_TRUE(
      dir_->Create(StoredSession{.id = kId, .owner = "bob", .tokens = {1, 2}})
          .ok());
  ASSERT_TRUE(dir_->Append(kId, 2, std::vector<int32_t>{3}).ok());
  const int64_t second = dir_->LogSize(kId);
  ASSERT_TRUE(dir_->Append(kId, 3, std::vector<int32_t>{4}).ok());
  const int64_t size = dir_->LogSize(kId);
  FlipByte(dir_->LogPath(kId), 5);            // the header
  FlipByte(dir_->LogPath(kId), second + 14);  // the last record
  absl::StatusOr<Session*> s = node_->tiers->Find(kId, "bob");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ((*s)->owner, "bob");
  EXPECT_TRUE(node_->warnings.Contains(absl::StrFormat(
      "session %s: its log is damaged at byte 0 of %d", kId, size)))
      << node_->warnings.size();
  EXPECT_TRUE(node_->warnings.Contains(absl::StrFormat(
      "kept 2 records (3 tokens, 0 messages) and dropped the %d bytes from "
      "byte %d",
      size - second, second)));
  EXPECT_EQ(node_->recoveries, 1);
  node_->tiers->Flush();
  absl::StatusOr<StoredSession> disk = dir_->Load(kId);
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(disk->damaged_at, -1);
  EXPECT_EQ(disk->tokens, (std::vector<int32_t>{1, 2, 3}));

  // A damaged header copy loses nothing, and is rewritten too.
  FlipByte(dir_->LogPath(kId), SessionDir::StartRecordsBytes("bob", 0, {}) / 2);
  node_ = std::make_unique<Node>(path_);  // a restart
  node_->tiers->LoadAll();
  EXPECT_TRUE(
      node_->warnings.Contains("all of them, the header read from "
                               "its copy"));
  EXPECT_EQ(node_->recoveries, 1);
  node_->tiers->Flush();
  EXPECT_EQ(dir_->Load(kId)->damaged_at, -1);
  EXPECT_EQ(TokensOnDisk(kId), (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(SessionTiersTest, AFailedLogWriteIsWarnedAndTheLogRewritten) {
  Session* s = node_->NewSession({1, 2});
  const std::string id = s->id;
  node_->tiers->StartLog(*s, [](absl::Status) {});
  node_->tiers->Flush();
  node_->tiers->PauseWritesForTesting(true);
  s->tokens.push_back(3);
  Probe failed;
  node_->tiers->Log(*s, failed.Done());
  // A directory in the log's place makes the append fail.
  const std::string log = dir_->LogPath(id);
  ASSERT_EQ(::unlink(log.c_str()), 0);
  ASSERT_EQ(::mkdir(log.c_str(), 0700), 0);
  node_->tiers->PauseWritesForTesting(false);
  EXPECT_FALSE(failed.Wait().ok());
  node_->tiers->Flush();
  EXPECT_TRUE(node_->warnings.Contains(id));
  ASSERT_EQ(::rmdir(log.c_str()), 0);
  // The next call rewrites the whole log from memory.
  s->tokens.push_back(4);
  Probe next;
  node_->tiers->Log(*s, next.Done());
  EXPECT_TRUE(next.Wait().ok());
  node_->tiers->Flush();
  EXPECT_EQ(TokensOnDisk(id), (std::vector<int32_t>{1, 2, 3, 4}));
  ASSERT_TRUE(node_->tiers->Find(id, "alice").ok());
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
}

// The case: generate/truncate rounds on a 2-token session left a
// 111 KB log. Compaction keeps it within a block and replays the same.
TEST_F(SessionTiersTest, CompactionBoundsTheLogOfATruncatedSession) {
  Session* s = node_->NewSession({1, 2});
  s->messages = {ChatMessage{.role = "system", .content = "be brief"}};
  node_->tiers->StartLog(*s, [](absl::Status) {});
  int64_t appended_bytes = dir_->LogSize(s->id);
  for (int round = 0; round < 60; ++round) {
    s->tokens = Range(40);  // a turn of 38 generated tokens
    s->messages.push_back(ChatMessage{.role = "user", .content = "hi"});
    Probe logged;
    node_->tiers->Log(*s, logged.Done());
    ASSERT_TRUE(logged.Wait().ok());
    s->tokens.resize(2);
    s->messages.resize(1);
    Probe truncated;
    node_->tiers->Truncate(*s, truncated.Done());
    ASSERT_TRUE(truncated.Wait().ok());
    appended_bytes +=
        SessionDir::AppendRecord(2, Range(38, 3), 1,
                                 {ChatMessage{.role = "user", .content = "hi"}})
            .size() +
        SessionDir::AppendRecord(2, {}, 1, {}).size();
  }
  node_->tiers->Flush();
  const int64_t size = dir_->LogSize(s->id);
  EXPECT_GT(appended_bytes, 10000);  // what an append-only log would hold
  EXPECT_LE(size, 4096);             // one file-system block
  EXPECT_EQ(TokensOnDisk(s->id), (std::vector<int32_t>{1, 2}));
  absl::StatusOr<StoredSession> stored = dir_->Load(s->id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->messages.size(), 1u);
  EXPECT_EQ(stored->messages[0].content, "be brief");
  EXPECT_EQ(stored->owner, "alice");
  EXPECT_EQ(stored->replayed_bytes, size);
  // The tiers' view of the size stays exact: no reload, no warning.
  const std::string id = s->id;
  ASSERT_TRUE(node_->tiers->Find(id, "alice").ok());
  EXPECT_EQ(node_->store->Get(id), s);
  EXPECT_EQ(node_->warnings.size(), 0u);
  // And a restart replays the compacted log.
  node_ = std::make_unique<Node>(path_);
  absl::StatusOr<Session*> again = node_->tiers->Find(id, "alice");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->tokens, (std::vector<int32_t>{1, 2}));
  ASSERT_EQ((*again)->messages.size(), 1u);
}

TEST_F(SessionTiersTest, ASmallLogIsOnlyAppendedTo) {
  Session* s = node_->NewSession({1, 2});
  node_->tiers->StartLog(*s, [](absl::Status) {});
  int64_t expected =
      SessionDir::StartRecordsBytes(s->owner, s->tokens.size(), {});
  for (int round = 0; round < 5; ++round) {
    s->tokens.push_back(3);
    node_->tiers->Log(*s, [](absl::Status) {});
    s->tokens.resize(2);
    node_->tiers->Truncate(*s, [](absl::Status) {});
    expected += (28 + 4) + 28;
  }
  node_->tiers->Flush();
  EXPECT_EQ(dir_->LogSize(s->id), expected);  // far below 4 KiB: no rewrite
}

// Quota tests: sessions of 8 tokens owned by "alice".
class SessionTiersQuotaTest : public SessionTiersTest {
 protected:
  static constexpr int kTokens = 8;
  void SetUp() override {
    SessionTiersTest::SetUp();
    log_bytes_ = SessionDir::StartRecordsBytes("alice", kTokens, {});
    // A snapshot's size, from an unlimited node.
    Session* s = node_->NewSession(Range(kTokens));
    node_->tiers->StartLog(*s, [](absl::Status) {});
    node_->Compute(*s);
    ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
    node_->tiers->Flush();
    snapshot_bytes_ = dir_->SnapshotBytes(s->id);
    ASSERT_GT(snapshot_bytes_, log_bytes_);
    ASSERT_EQ(dir_->LogSize(s->id), log_bytes_);
    node_->tiers->Remove(s->id);
    node_->tiers->Flush();
  }

  // A node whose quota holds `logs` logs and `snapshots` snapshots.
  void Limit(int logs, int snapshots) {
    quota_ = logs * log_bytes_ + snapshots * snapshot_bytes_ + 10;
    node_ = std::make_unique<Node>(path_, quota_);
  }

  Session* Logged(absl::Duration age,
                  std::optional<absl::Duration> ttl = std::nullopt) {
    Session* s = node_->NewSession(Range(kTokens), "alice", ttl);
    Probe probe;
    node_->tiers->StartLog(*s, probe.Done());
    EXPECT_TRUE(probe.Wait().ok());
    s->last_used = absl::Now() - age;
    return s;
  }

  int64_t log_bytes_ = 0, snapshot_bytes_ = 0, quota_ = 0;
};

TEST_F(SessionTiersQuotaTest, LeastRecentlyUsedSnapshotsGoFirst) {
  Limit(3, 2);
  Session* old = Logged(absl::Seconds(30));
  Session* mid = Logged(absl::Seconds(20));
  Session* recent = Logged(absl::Seconds(10));
  for (Session* s : {old, mid, recent}) node_->Compute(*s);
  // LRU order: old, then mid, then recent; the third snapshot makes room
  // by dropping the least recently used one.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  node_->tiers->Flush();
  EXPECT_EQ(node_->tiers->TierOf(*old), Tier::kTokens);
  EXPECT_EQ(node_->tiers->TierOf(*mid), Tier::kDisk);
  EXPECT_EQ(node_->tiers->TierOf(*recent), Tier::kDisk);
  EXPECT_FALSE(dir_->HasSnapshot(old->id));
  EXPECT_TRUE(dir_->HasSnapshot(mid->id));
  EXPECT_TRUE(dir_->HasSnapshot(recent->id));
  EXPECT_EQ(node_->store->size(), 3);  // no session lost
  EXPECT_EQ(node_->warnings.size(), 0u);
}

TEST_F(SessionTiersQuotaTest, ASnapshotThatCannotFitIsNotWritten) {
  Limit(2, 1);
  Session* old = Logged(absl::Seconds(20));
  Session* recent = Logged(absl::Seconds(10));
  node_->Compute(*old);
  node_->Compute(*recent);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());  // old's fits
  // recent's does not, and old's snapshot goes only for a more recently
  // used session's: swap their ages, and recent's is not written.
  recent->last_used = absl::Now() - absl::Seconds(30);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());
  EXPECT_EQ(recent->kv.table.num_tokens(), 0);  // the KV is freed all the same
  EXPECT_EQ(node_->tiers->TierOf(*recent), Tier::kTokens);
  EXPECT_EQ(node_->tiers->TierOf(*old), Tier::kDisk);
  node_->tiers->Flush();
  EXPECT_FALSE(dir_->HasSnapshot(recent->id));
  EXPECT_TRUE(dir_->HasSnapshot(old->id));
  EXPECT_EQ(node_->tiers->ReadSnapshot(*recent, 100).positions, 0);
}

TEST_F(SessionTiersQuotaTest, ExpiredSessionsGoAfterSnapshots) {
  // Dropping an idle session's snapshot makes room: the expired one stays.
  Limit(2, 1);
  Session* expired = Logged(absl::Seconds(60), absl::Seconds(5));
  Session* live = Logged(absl::Seconds(50));
  node_->Compute(*live);
  ASSERT_TRUE(node_->tiers->SpillLeastRecentlyUsed());  // live's snapshot
  Session* fresh = Logged(absl::ZeroDuration());
  node_->tiers->Flush();
  EXPECT_FALSE(dir_->HasSnapshot(live->id));
  EXPECT_NE(node_->store->Get(expired->id), nullptr);
  EXPECT_EQ(TokensOnDisk(fresh->id), Range(kTokens));
  EXPECT_THAT(node_->evictions, ::testing::IsEmpty());

  // With no snapshot left to drop, the expired session goes.
  Limit(2, 0);
  expired = Logged(absl::Seconds(60), absl::Seconds(5));
  live = Logged(absl::Seconds(50));
  const std::string expired_id = expired->id;
  fresh = Logged(absl::ZeroDuration());
  node_->tiers->Flush();
  EXPECT_EQ(node_->store->Get(expired_id), nullptr);
  EXPECT_EQ(dir_->LogSize(expired_id), -1);
  // Counted like the engine's own sweep of expired sessions.
  EXPECT_THAT(node_->evictions, ::testing::ElementsAre("ttl"));
  EXPECT_EQ(TokensOnDisk(live->id), Range(kTokens));
  EXPECT_EQ(TokensOnDisk(fresh->id), Range(kTokens));
  EXPECT_EQ(node_->warnings.size(), 0u);
}

TEST_F(SessionTiersQuotaTest, ANewSessionIsRefusedWhenLiveLogsFillIt) {
  Limit(2, 0);
  Logged(absl::Seconds(20));
  Session* b = Logged(absl::Seconds(10));
  Session* refused = node_->NewSession(Range(kTokens));
  Probe probe;
  node_->tiers->StartLog(*refused, probe.Done());
  ASSERT_TRUE(probe.ran());  // at once: nothing was queued
  const absl::Status status = probe.Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find(
                absl::StrFormat("--session_dir_max_bytes=%d", quota_)),
            std::string::npos)
      << status;
  node_->tiers->Flush();
  EXPECT_EQ(dir_->LogSize(refused->id), -1);
  // A live session's turn is written over the quota, with one warning.
  for (int turn = 0; turn < 3; ++turn) {
    b->tokens.push_back(turn + 1);
    Probe logged;
    node_->tiers->Log(*b, logged.Done());
    EXPECT_TRUE(logged.Wait().ok());
  }
  node_->tiers->Flush();
  EXPECT_EQ(TokensOnDisk(b->id).size(), kTokens + 3u);
  EXPECT_EQ(node_->warnings.size(), 1u);
  EXPECT_TRUE(node_->warnings.Contains("--session_dir_max_bytes="));
}

TEST_F(SessionTiersTest, ABadDirectoryIsAnError) {
  std::ofstream(root_ + "/file") << "x";
  SessionStore store(node_->pool.get());
  PrefixCache cache(node_->pool.get());
  auto tiers = SessionTiers::Create({.session_dir = root_ + "/file",
                                     .vocab_size = kVocab,
                                     .max_context = kMaxContext},
                                    &store, &cache, nullptr);
  EXPECT_FALSE(tiers.ok());
}

}  // namespace
}  // namespace kvserve
