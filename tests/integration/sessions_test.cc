// Sessions through the real server and client on stories260K (greedy,
// exact tokens): every way a session's KV can be kept, shared, spilled,
// dropped or restored gives the tokens of a session that never was.
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/integration/integration_util.h"
#include "tests/integration/served.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

constexpr char kPrompt[] = "Once upon a time";

CallOptions CancelWith(Cancellation* cancel) {
  CallOptions options;
  options.cancellation = cancel;
  return options;
}

class SessionsTest : public ::testing::Test {
 public:
  void SetUp() override {
    auto json = ReadWholeFile(SharedDir() + "/golden/stories260K_greedy.json");
    if (!json) GTEST_SKIP() << "no " << SharedDir() << "/golden: skipped";
    golden_ = JsonIntArray(*json, "generated_token_ids");
    ASSERT_EQ(golden_.size(), 64u);
  }
  std::vector<int32_t> Golden(int from, int to) {
    return {golden_.begin() + from, golden_.begin() + to};
  }
  std::string TempDir() {
    char tmpl[] = "/tmp/kvserve_sessions_test_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dirs_.push_back(tmpl);
    return tmpl;
  }
  void TearDown() override {
    for (const std::string& d : dirs_) std::system(("rm -rf " + d).c_str());
  }
  std::vector<int32_t> golden_;
  std::vector<std::string> dirs_;
};

TEST_F(SessionsTest, ForkThenContinueEqualsContinuingTheParent) {
  Served s = Served::Start({});
  const std::string parent = s.Create(kPrompt);
  EXPECT_EQ(s.Continue(parent, 8).ids, Golden(0, 8));
  v1::ForkSessionRequest fork;
  fork.set_session_id(parent);
  auto child = s.client->ForkSession(fork);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->num_tokens(), 13);
  EXPECT_EQ(s.Continue(child->session_id(), 8).ids, Golden(8, 16));
  EXPECT_EQ(s.Continue(parent, 8).ids, Golden(8, 16));
  // The fork's history is its own.
  EXPECT_EQ(s.Continue(child->session_id(), 8).ids, Golden(16, 24));
  EXPECT_EQ(s.Get(parent).num_tokens(), 21);
}

TEST_F(SessionsTest, ForkingALongSessionAllocatesAtMostOneBlock) {
  // The built-in model (context 2048) and a 2000-token session.
  Served s = Served::Start({}, /*stories=*/false);
  const std::string parent = s.Create(std::string(1999, 'a'));
  ASSERT_EQ(s.Get(parent).num_tokens(), 2000);
  const double before =
      s.MetricAtLeast("kvserve_kv_cache_blocks", {"state=\"used\""}, 124);
  v1::ForkSessionRequest fork;
  fork.set_session_id(parent);
  auto child = s.client->ForkSession(fork);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_GE(
      s.MetricAtLeast("kvserve_kv_cache_blocks", {"state=\"shared\""}, 124),
      124);
  EXPECT_EQ(s.Metric("kvserve_kv_cache_blocks", {"state=\"used\""}), before);
}

TEST_F(SessionsTest, TruncateThenContinueEqualsAFreshSessionOfThePrefix) {
  Served s = Served::Start({});
  const std::string id = s.Create(kPrompt);
  EXPECT_EQ(s.Continue(id, 20).ids, Golden(0, 20));
  v1::TruncateSessionRequest truncate;
  truncate.set_session_id(id);
  truncate.set_tokens(11);  // the 5 prompt tokens and 6 generated ones
  auto t = s.client->TruncateSession(truncate);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_tokens(), 11);
  EXPECT_EQ(s.Continue(id, 10).ids, Golden(6, 16));
  truncate.set_tokens(99);
  EXPECT_EQ(s.client->TruncateSession(truncate).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Three sessions of different prompts whose KV cannot all stay in a pool
// of 8 blocks: each turn evicts the least recently used one.
void RunCrowdedConversation(Served& s, std::vector<std::vector<int32_t>>* out,
                            std::vector<std::string>* tiers) {
  const std::vector<std::string> prompts = {kPrompt, "The cat sat on",
                                            "Tom and Sue went"};
  std::vector<std::string> ids;
  for (const auto& p : prompts) ids.push_back(s.Create(p));
  out->assign(prompts.size(), {});
  for (int turn = 0; turn < 3; ++turn) {
    for (size_t i = 0; i < ids.size(); ++i) {
      Generated g = s.Continue(ids[i], 12);
      (*out)[i].insert((*out)[i].end(), g.ids.begin(), g.ids.end());
      if (turn == 2) tiers->push_back(s.Get(ids[0]).tier());
    }
  }
}

TEST_F(SessionsTest, SpillToDiskAndRestoreEqualsNeverSpilled) {
  std::vector<std::vector<int32_t>> roomy, crowded;
  std::vector<std::string> roomy_tiers, crowded_tiers;
  {
    Served s = Served::Start({});
    RunCrowdedConversation(s, &roomy, &roomy_tiers);
  }
  Served s = Served::Start({"--kv_cache_bytes=163840",  // 8 blocks of 16
                            "--session_dir=" + TempDir()});
  RunCrowdedConversation(s, &crowded, &crowded_tiers);
  EXPECT_EQ(crowded, roomy);
  EXPECT_EQ(roomy[0], Golden(0, 36));
  EXPECT_EQ(crowded_tiers.back(), "disk");
  EXPECT_GT(s.Metric("kvserve_session_evictions_total", {"reason=\"memory\""}),
            0);
  // Restored from the snapshot, not recomputed.
  Generated g =
      s.Continue(s.client->ListSessions({})->sessions(0).session_id(), 1);
  EXPECT_GT(g.final_message.usage().cached_prompt_tokens(), 16);
}

TEST_F(SessionsTest, DroppedKvIsRebuiltFromTokens) {
  std::vector<std::vector<int32_t>> roomy, crowded;
  std::vector<std::string> tiers;
  {
    Served s = Served::Start({});
    RunCrowdedConversation(s, &roomy, &tiers);
  }
  tiers.clear();
  Served s = Served::Start({"--kv_cache_bytes=163840"});
  RunCrowdedConversation(s, &crowded, &tiers);
  EXPECT_EQ(crowded, roomy);
  EXPECT_EQ(tiers.back(), "tokens");
}

void RestartContinues(SessionsTest* t, int signal,
                      const std::vector<int32_t>& expect) {
  const std::string dir = t->TempDir();
  std::string id;
  {
    Served s = Served::Start({"--session_dir=" + dir});
    id = s.Create(kPrompt);
    EXPECT_EQ(s.Continue(id, 10).ids,
              std::vector<int32_t>(expect.begin(), expect.begin() + 10));
    ASSERT_TRUE(s.server->SendSignal(signal).ok());
    auto exit = s.server->WaitExit(absl::Seconds(20));
    ASSERT_TRUE(exit.ok()) << exit.status();
    if (signal == SIGTERM) {
      EXPECT_TRUE(exit->success()) << exit->ToString();
    }
  }
  Served s = Served::Start({"--session_dir=" + dir});
  ASSERT_NE(s.client, nullptr);
  v1::Session session = s.Get(id);
  EXPECT_EQ(session.num_tokens(), 15);
  EXPECT_EQ(session.tier(), signal == SIGTERM ? "disk" : "tokens");
  Generated g = s.Continue(id, 10);
  EXPECT_EQ(g.ids,
            std::vector<int32_t>(expect.begin() + 10, expect.begin() + 20));
  if (signal == SIGTERM) {
    EXPECT_EQ(g.final_message.usage().cached_prompt_tokens(), 14);
  }
  auto list = s.client->ListSessions({});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->sessions_size(), 1);
}

TEST_F(SessionsTest, GracefulRestartKeepsSessionsAndTheirKv) {
  RestartContinues(this, SIGTERM, golden_);
}

TEST_F(SessionsTest, KillNineLosesNoCompletedTurn) {
  RestartContinues(this, SIGKILL, golden_);
}

// Issue 35 item 5: one flipped byte in a session log's header lost the
// session ("no readable header"). Flipped in the header and in the second
// turn's record, the restarted server keeps the first turn, warns naming
// the session and the byte, counts the recovery, and continues as if the
// second turn had never been.
TEST_F(SessionsTest, ADamagedLogKeepsTheTurnsBeforeTheDamage) {
  const std::string dir = TempDir();
  std::string id;
  int64_t first_turn_end = 0;
  {
    Served s = Served::Start({"--session_dir=" + dir});
    id = s.Create(kPrompt);
    EXPECT_EQ(s.Continue(id, 10).ids, Golden(0, 10));
    first_turn_end = std::filesystem::file_size(dir + "/" + id + ".log");
    s.Continue(id, 10);
    ASSERT_EQ(s.Get(id).num_tokens(), 25);
    ASSERT_TRUE(s.server->SendSignal(SIGKILL).ok());
    ASSERT_TRUE(s.server->WaitExit(absl::Seconds(20)).ok());
  }
  {
    std::fstream log(dir + "/" + id + ".log",
                     std::ios::in | std::ios::out | std::ios::binary);
    for (int64_t offset : {int64_t{3}, first_turn_end + 14}) {
      log.seekg(offset);
      const char c = static_cast<char>(log.get());
      log.seekp(offset);
      log.put(static_cast<char>(c ^ 0x10));
    }
  }
  Served s = Served::Start({"--session_dir=" + dir});
  ASSERT_NE(s.client, nullptr);
  EXPECT_EQ(s.Get(id).num_tokens(), 15);
  EXPECT_EQ(s.Continue(id, 10).ids, Golden(10, 20));
  EXPECT_EQ(s.Metric("kvserve_session_log_recoveries_total"), 1);
  const std::string warned = s.server->stderr_text();
  EXPECT_NE(warned.find("session " + id + ": its log is damaged at byte 0"),
            std::string::npos)
      << warned;
  EXPECT_NE(warned.find(absl::StrCat("dropped the ")), std::string::npos)
      << warned;
}

TEST_F(SessionsTest, ClientChosenIdsAreCheckedAndUnique) {
  const std::string dir = TempDir();
  Served s = Served::Start({"--session_dir=" + dir});
  v1::CreateSessionRequest request;
  request.set_session_id("0123456789abcdef0123456789abcdef");
  auto created = s.client->CreateSession(request);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->session_id(), request.session_id());
  EXPECT_EQ(s.client->CreateSession(request).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Taken on disk too, by a session this process has not loaded.
  Served other = Served::Start({"--session_dir=" + dir});
  EXPECT_EQ(other.client->CreateSession(request).status().code(),
            absl::StatusCode::kAlreadyExists);
  request.set_session_id("../../etc/passwd");
  EXPECT_EQ(s.client->CreateSession(request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionsTest, AContextLargerThanTheWholePoolFailsClearly) {
  Served s = Served::Start({"--kv_cache_bytes=40960"});  // 2 blocks of 16
  v1::GenerateRequest r = GreedyRequest(4);
  r.mutable_prompt()->set_text(
      "Once upon a time there was a little girl who liked to play outside "
      "with her big red ball in the park");
  auto out = GenerateAll(*s.client, r);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(out.status().message().find("--kv_cache_bytes"),
            absl::string_view::npos);
  // A context that fits still runs.
  r.mutable_prompt()->set_text(kPrompt);
  out = GenerateAll(*s.client, r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->ids, Golden(0, 4));
}

TEST_F(SessionsTest, AFullContextEndsGenerationAndThenRefusesMore) {
  Served s = Served::Start({"--max_context=40"});
  const std::string id = s.Create(kPrompt);
  Generated g = s.Continue(id, 100);
  EXPECT_EQ(g.final_message.finish_reason(), v1::FINISH_REASON_CONTEXT_FULL);
  EXPECT_EQ(g.ids.size(), 35u);
  EXPECT_EQ(s.Get(id).num_tokens(), 40);
  v1::GenerateRequest more = GreedyRequest(1);
  more.set_session_id(id);
  auto out = GenerateAll(*s.client, more);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.Get(id).num_tokens(), 40);  // nothing was appended
}

TEST_F(SessionsTest, AFailedCreateLeavesNoSessionBehind) {
  const std::string dir = TempDir();
  Served s = Served::Start({"--session_dir=" + dir});
  v1::CreateSessionRequest request;
  request.mutable_initial()->set_text(std::string(600, 'x'));  // > 512 tokens
  EXPECT_EQ(s.client->CreateSession(request).status().code(),
            absl::StatusCode::kOutOfRange);
  auto list = s.client->ListSessions({});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->sessions_size(), 0);
  Served restarted = Served::Start({"--session_dir=" + dir});
  list = restarted.client->ListSessions({});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->sessions_size(), 0);
}

TEST_F(SessionsTest, ReplicasSharingADirectoryHandASessionBackAndForth) {
  const std::string dir = TempDir();
  Served a = Served::Start({"--session_dir=" + dir});
  Served b = Served::Start({"--session_dir=" + dir});
  const std::string id = a.Create(kPrompt);
  EXPECT_EQ(a.Continue(id, 4).ids, Golden(0, 4));
  EXPECT_EQ(b.Continue(id, 4).ids, Golden(4, 8));   // loaded from a's files
  EXPECT_EQ(a.Continue(id, 4).ids, Golden(8, 12));  // sees b's turn
  EXPECT_EQ(b.Continue(id, 4).ids, Golden(12, 16));
  v1::DeleteSessionRequest del;
  del.set_session_id(id);
  ASSERT_TRUE(b.client->DeleteSession(del).ok());
  v1::GetSessionRequest get;
  get.set_session_id(id);
  EXPECT_EQ(a.client->GetSession(get).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionsTest, PreemptionUnderMemoryPressureChangesNoOutput) {
  // 4 streams of 70 tokens need 20 blocks of 16; the pool has 8, so the
  // engine preempts and recomputes, and every stream still completes.
  const std::vector<std::string> prompts = {kPrompt, "The cat sat on",
                                            "Tom and Sue went", "One day"};
  std::vector<std::vector<int32_t>> alone, crowded(prompts.size());
  {
    Served s = Served::Start({});
    for (const auto& p : prompts) alone.push_back(s.Continue("", 64, p).ids);
  }
  Served s = Served::Start({"--kv_cache_bytes=163840"});
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back(
        [&, i] { crowded[i] = s.Continue("", 64, prompts[i]).ids; });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(crowded, alone);
  EXPECT_GT(s.Metric("kvserve_preemptions_total"), 0);
}

TEST_F(SessionsTest, AnOlderPrefillAndANewerDecodeShareATinyPool) {
  // Built-in model (a token per byte, 2 KiB of KV per token): A's 201-token
  // prompt is prefilled 2 tokens a step while B, admitted later, decodes;
  // A needs 15 blocks of 16, B 5, the pool has 17. However the two
  // interleave, each gets the tokens it gets alone. (Whether a preemption
  // happens depends on timing; PreemptionUnderMemoryPressure forces one.)
  const std::string long_prompt(200, 'a');
  std::vector<int32_t> a_alone, b_alone, a_crowded, b_crowded;
  {
    Served s = Served::Start({}, /*stories=*/false);
    a_alone = s.Continue("", 24, long_prompt).ids;
    b_alone = s.Continue("", 60, "Hello").ids;
  }
  Served s = Served::Start({"--kv_cache_bytes=557056", "--max_batch_tokens=2"},
                           /*stories=*/false);
  ASSERT_TRUE(s.client->GetModelInfo().ok());  // connected before the race
  std::thread a([&] { a_crowded = s.Continue("", 24, long_prompt).ids; });
  absl::SleepFor(absl::Milliseconds(5));
  std::thread b([&] { b_crowded = s.Continue("", 60, "Hello").ids; });
  a.join();
  b.join();
  EXPECT_EQ(a_crowded, a_alone);
  EXPECT_EQ(b_crowded, b_alone);
}

TEST_F(SessionsTest, BatchedWithFifteenOthersEqualsAlone) {
  Served s = Served::Start({"--threads=1"});
  const std::vector<std::string> prompts = {
      kPrompt,       "The cat",     "Lily and Ben", "One day",
      "The sun was", "A big dog",   "Tom had a",    "Mom said",
      "The bird",    "In the park", "Sara liked",   "The little",
      "Once there",  "The boy",     "A girl",       "Max"};
  std::vector<std::vector<int32_t>> alone, together(prompts.size());
  for (const auto& p : prompts) {
    v1::GenerateRequest r = GreedyRequest(48);
    r.mutable_prompt()->set_text(p);
    alone.push_back(GenerateAll(*s.client, r)->ids);
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r = GreedyRequest(48);
      r.mutable_prompt()->set_text(prompts[i]);
      auto out = GenerateAll(*s.client, r);
      if (out.ok()) together[i] = out->ids;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, alone);
  EXPECT_EQ(alone[0], Golden(0, 48));
  // They really ran together: some step held more than one sequence.
  auto text = HttpGet(s.server->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok());
  EXPECT_LT(MetricSum(*text, "kvserve_batch_size_bucket", {"le=\"1\""}),
            MetricSum(*text, "kvserve_batch_size_count"));
}

TEST_F(SessionsTest, ConcurrentGenerateOnOneSessionIsFailedPrecondition) {
  Served s = Served::Start({});
  const std::string id = s.Create(kPrompt);
  std::atomic<bool> started{false};
  Cancellation cancel;
  std::thread long_one([&] {
    v1::GenerateRequest r = GreedyRequest(400);
    r.set_session_id(id);
    (void)s.client->Generate(
        r,
        [&](const v1::GeneratedToken&) {
          started = true;
          return true;
        },
        CancelWith(&cancel));
  });
  while (!started) absl::SleepFor(absl::Milliseconds(1));
  v1::GenerateRequest r = GreedyRequest(4);
  r.set_session_id(id);
  auto second = GenerateAll(*s.client, r);
  cancel.Cancel();
  long_one.join();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(id), absl::string_view::npos);
}

TEST_F(SessionsTest, AFullQueueIsResourceExhaustedNamingTheLimit) {
  Served s = Served::Start({"--max_running=1", "--max_queued_requests=1"},
                           /*stories=*/false);
  std::atomic<int> tokens{0};
  Cancellation cancel;
  std::vector<std::thread> busy;
  auto start_one = [&] {
    busy.emplace_back([&] {
      v1::GenerateRequest r = GreedyRequest(2000);
      r.mutable_prompt()->set_text(kPrompt);
      (void)s.client->Generate(
          r,
          [&](const v1::GeneratedToken&) {
            ++tokens;
            return true;
          },
          CancelWith(&cancel));
    });
  };
  start_one();  // runs
  while (tokens == 0) absl::SleepFor(absl::Milliseconds(1));
  start_one();  // waits in the queue
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (s.Metric("kvserve_requests_in_flight") < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(50));
  v1::GenerateRequest r = GreedyRequest(4);
  r.mutable_prompt()->set_text(kPrompt);
  auto third = GenerateAll(*s.client, r);
  r.set_max_tokens(0);  // bad input is reported as such, queue full or not
  auto bad = GenerateAll(*s.client, r);
  cancel.Cancel();
  for (auto& t : busy) t.join();
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(third.status().message().find("max_queued_requests"),
            absl::string_view::npos);
  EXPECT_GE(s.Metric("kvserve_requests_rejected_total"), 1);
}

TEST_F(SessionsTest, HundredSessionsWithOneSystemPromptShareItsBlocks) {
  Served s = Served::Start({}, /*stories=*/false);
  const std::string system(999, 's');  // BOS + 999 byte tokens = 1000
  for (int i = 0; i < 100; ++i) {
    s.Create(system + absl::StrCat(" user ", i));
  }
  // 62 full blocks of the shared prefix plus each session's own tail.
  const double used = s.Metric("kvserve_kv_cache_blocks", {"state=\"used\""});
  EXPECT_LE(used, 62 + 100 * 2);
  EXPECT_GE(s.Metric("kvserve_kv_cache_blocks", {"state=\"shared\""}), 62);
  EXPECT_GE(s.Metric("kvserve_cached_prompt_tokens_total"), 99 * 992);
}

}  // namespace
}  // namespace kvserve::testing
