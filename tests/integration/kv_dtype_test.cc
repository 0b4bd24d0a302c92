// KV caches of every element type through the real server on the built-in
// model (head_dim 32: one q8_0 / q4_0 block per head row): what
// GetModelInfo and the metrics say a token costs, and that every way a
// session's KV is kept, shared, spilled or restored gives the tokens of a
// session that never was, in that type (greedy, exact tokens).
#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/integration_util.h"
#include "tests/integration/served.h"

namespace kvserve::testing {
namespace {

class KvDtypeTest : public ::testing::TestWithParam<std::string> {
 public:
  void TearDown() override {
    for (const std::string& d : dirs_) std::system(("rm -rf " + d).c_str());
  }
  std::string TempDir() {
    char tmpl[] = "/tmp/kvserve_kv_dtype_test_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dirs_.push_back(tmpl);
    return tmpl;
  }
  // The built-in model with this test's KV type and `flags`.
  Served Start(std::vector<std::string> flags = {}) {
    flags.push_back("--kv_dtype=" + GetParam());
    return Served::Start(flags, /*stories=*/false);
  }
  // Bytes of one position's K and V row of a head in this type.
  static int64_t RowBytes(const std::string& dtype, int head_dim) {
    if (dtype == "f32") return 4 * head_dim;
    if (dtype == "bf16") return 2 * head_dim;
    return head_dim / 32 * (dtype == "q8_0" ? 34 : 18);
  }

 private:
  std::vector<std::string> dirs_;
};

TEST_P(KvDtypeTest, ModelInfoAndMetricsSayWhatATokenCosts) {
  Served s = Start();
  ASSERT_NE(s.client, nullptr);
  absl::StatusOr<v1::ModelInfo> info = s.client->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kv_dtype(), GetParam());
  const int64_t per_token = 2 * int64_t{info->n_layers()} * info->n_kv_heads() *
                            RowBytes(GetParam(), info->head_dim());
  EXPECT_EQ(info->kv_bytes_per_token(), per_token);
  // The bounds against bf16: q8_0 0.53x (34 of 64 bytes), q4_0
  // 0.29x (18 of 64).
  const double vs_bf16 = static_cast<double>(per_token) /
                         (2 * info->n_layers() * info->n_kv_heads() *
                          RowBytes("bf16", info->head_dim()));
  if (GetParam() == "q8_0") {
    EXPECT_LE(vs_bf16, 0.532);
  } else if (GetParam() == "q4_0") {
    EXPECT_LE(vs_bf16, 0.29);
  }
  EXPECT_EQ(s.Metric("kvserve_kv_cache_bytes_per_token",
                     {absl::StrCat("dtype=\"", GetParam(), "\"")}),
            per_token);
  EXPECT_EQ(s.Continue(s.Create("Once upon a time"), 8).ids.size(), 8u);
}

TEST_P(KvDtypeTest, ForkThenContinueEqualsContinuingTheParent) {
  Served s = Start();
  const std::string parent = s.Create("Once upon a time");
  s.Continue(parent, 8);
  v1::ForkSessionRequest fork;
  fork.set_session_id(parent);
  auto child = s.client->ForkSession(fork);
  ASSERT_TRUE(child.ok()) << child.status();
  // The child's first block is copied on write; both read the shared ones.
  const std::vector<int32_t> from_child =
      s.Continue(child->session_id(), 24).ids;
  EXPECT_EQ(s.Continue(parent, 24).ids, from_child);
}

// A second session of the same long prompt adopts the first one's blocks
// from the prefix cache and continues as the first did.
TEST_P(KvDtypeTest, APrefixCacheHitContinuesAsTheFirstSession) {
  Served s = Start();
  const std::string text(120, 'a');
  const Generated first = s.Continue(s.Create(text), 8);
  const Generated second = s.Continue(s.Create(text), 8);
  EXPECT_EQ(second.ids, first.ids);
  EXPECT_GE(s.Metric("kvserve_prefix_cache_hits_total"), 96);
}

// Three sessions whose KV cannot all stay in a pool of 8 blocks: each turn
// spills the least recently used one to disk; restored from its snapshot
// (quantized rows copied as stored), every session continues as in a
// roomy pool.
TEST_P(KvDtypeTest, SpillToDiskAndRestoreEqualsNeverSpilled) {
  auto converse = [](Served& s, std::vector<std::string>* tiers) {
    std::vector<std::string> ids;
    for (const char* p :
         {"Once upon a time", "The cat sat on", "Tom and Sue"}) {
      ids.push_back(s.Create(p));
    }
    std::vector<std::vector<int32_t>> out(ids.size());
    for (int turn = 0; turn < 3; ++turn) {
      for (size_t i = 0; i < ids.size(); ++i) {
        const Generated g = s.Continue(ids[i], 12);
        out[i].insert(out[i].end(), g.ids.begin(), g.ids.end());
        if (turn == 2) tiers->push_back(s.Get(ids[0]).tier());
      }
    }
    return out;
  };
  std::vector<std::string> roomy_tiers, crowded_tiers;
  std::vector<std::vector<int32_t>> roomy;
  int64_t per_token = 0;
  {
    Served s = Start();
    roomy = converse(s, &roomy_tiers);
    per_token = s.client->GetModelInfo()->kv_bytes_per_token();
  }
  Served s = Start({absl::StrCat("--kv_cache_bytes=", 8 * 16 * per_token),
                    "--session_dir=" + TempDir()});
  EXPECT_EQ(converse(s, &crowded_tiers), roomy);
  EXPECT_EQ(crowded_tiers.back(), "disk");
  // A session on disk comes back whole from its snapshot, not recomputed.
  auto list = s.client->ListSessions({});
  ASSERT_TRUE(list.ok()) << list.status();
  int on_disk = 0;
  for (const v1::Session& session : list->sessions()) {
    if (session.tier() != "disk") continue;
    ++on_disk;
    const Generated g = s.Continue(session.session_id(), 1);
    EXPECT_EQ(g.final_message.usage().cached_prompt_tokens(),
              session.num_tokens() - 1);
    break;
  }
  EXPECT_EQ(on_disk, 1);
}

// SIGTERM writes every session's KV to disk; after the restart the session
// continues from its restored KV as if the server had kept running.
TEST_P(KvDtypeTest, AGracefulRestartKeepsTheKv) {
  std::vector<int32_t> uninterrupted;
  {
    Served s = Start();
    const std::string id = s.Create("Once upon a time");
    uninterrupted = s.Continue(id, 10).ids;
    const std::vector<int32_t> more = s.Continue(id, 10).ids;
    uninterrupted.insert(uninterrupted.end(), more.begin(), more.end());
  }
  const std::string dir = TempDir();
  std::string id;
  int64_t tokens = 0;
  {
    Served s = Start({"--session_dir=" + dir});
    id = s.Create("Once upon a time");
    EXPECT_EQ(s.Continue(id, 10).ids,
              std::vector<int32_t>(uninterrupted.begin(),
                                   uninterrupted.begin() + 10));
    tokens = s.Get(id).num_tokens();
    ASSERT_TRUE(s.server->SendSignal(SIGTERM).ok());
    auto exit = s.server->WaitExit(absl::Seconds(20));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_TRUE(exit->success()) << exit->ToString();
  }
  Served s = Start({"--session_dir=" + dir});
  ASSERT_NE(s.client, nullptr);
  EXPECT_EQ(s.Get(id).tier(), "disk");
  const Generated g = s.Continue(id, 10);
  EXPECT_EQ(g.ids, std::vector<int32_t>(uninterrupted.begin() + 10,
                                        uninterrupted.end()));
  EXPECT_EQ(g.final_message.usage().cached_prompt_tokens(), tokens - 1);
}

INSTANTIATE_TEST_SUITE_P(Types, KvDtypeTest,
                         ::testing::Values("f32", "bf16", "q8_0", "q4_0"));

}  // namespace
}  // namespace kvserve::testing
