// The engine in-process on the built-in model: owners, turns that fail or
// cannot be made durable, and requests that have nothing to compute.
#include "core/engine/engine.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"
#include "tests/testing/engine_waiters.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

using testing::Waiter;
using WaitingSink = testing::CollectingSink;

// The built-in tokenizer without a BOS token.
class NoBosTokenizer : public testing::ForwardingTokenizer {
 public:
  using ForwardingTokenizer::ForwardingTokenizer;
  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override {
    EncodeOptions o = options;
    o.add_bos = false;
    return base()->Encode(text, o);
  }
  int32_t bos_id() const override { return -1; }
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_engine_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(EngineOptions options, const Tokenizer* tokenizer = nullptr) {
    engine_.reset();
    auto engine = Engine::Create(
        options, loaded_->weights.get(),
        tokenizer ? tokenizer : loaded_->tokenizer.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }
  EngineOptions Durable() {
    EngineOptions o;
    o.session_dir = dir_.string();
    o.max_batch_tokens = 64;
    return o;
  }

  absl::StatusOr<SessionInfo> Create(std::string owner, std::string text) {
    Waiter<SessionInfo> w;
    CreateSessionParams params;
    params.owner = std::move(owner);
    params.initial = std::move(text);
    engine_->CreateSession(std::move(params), w.callback());
    return w.Wait();
  }
  absl::StatusOr<GenerateResult> Generate(std::string session_id,
                                          std::string owner, Input prompt,
                                          int max_tokens = 4) {
    GenerateParams p;
    p.session_id = std::move(session_id);
    p.owner = std::move(owner);
    p.prompt = std::move(prompt);
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    WaitingSink sink;
    engine_->Submit(std::make_shared<GenerateCall>(std::move(p), &sink));
    return sink.Wait();
  }
  absl::StatusOr<SessionInfo> Get(std::string id, std::string owner) {
    Waiter<SessionInfo> w;
    engine_->GetSession(std::move(id), std::move(owner), false, w.callback());
    return w.Wait();
  }

  const LoadedModel* const loaded_ = &testing::BuiltinModel();
  std::filesystem::path dir_;
  std::unique_ptr<Engine> engine_;
};

// Crash 1 of the hardening issue: with a session directory another owner's
// session was "not in memory", reloaded, and a null session dereferenced.
TEST_F(EngineTest, AnotherOwnersSessionIsNotFoundOnEveryCall) {
  Start(Durable());
  absl::StatusOr<SessionInfo> s = Create("alice", "hello there");
  ASSERT_TRUE(s.ok()) << s.status();
  for (const std::string owner : {"bob", ""}) {
    SCOPED_TRACE("owner \"" + owner + "\"");
    EXPECT_TRUE(absl::IsNotFound(Get(s->id, owner).status()));
    EXPECT_TRUE(absl::IsNotFound(
        Generate(s->id, owner, std::string(" more")).status()));
    Waiter<bool> del;
    engine_->DeleteSession(s->id, owner, del.callback());
    EXPECT_TRUE(absl::IsNotFound(del.Wait().status()));
    Waiter<SessionInfo> fork;
    engine_->ForkSession(s->id, owner, std::nullopt, fork.callback());
    EXPECT_TRUE(absl::IsNotFound(fork.Wait().status()));
    Waiter<SessionInfo> truncate;
    engine_->TruncateSession(s->id, owner, 1, truncate.callback());
    EXPECT_TRUE(absl::IsNotFound(truncate.Wait().status()));
    Waiter<SessionList> list;
    engine_->ListSessions(owner, false, "", 0, list.callback());
    absl::StatusOr<SessionList> l = list.Wait();
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE(l->sessions.empty());
  }
  // The owner's session is untouched and still works.
  absl::StatusOr<SessionInfo> again = Get(s->id, "alice");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->num_tokens, s->num_tokens);
  EXPECT_TRUE(Generate(s->id, "alice", std::string(" more")).ok());
  Waiter<SessionList> all;
  engine_->ListSessions("", true, "", 0, all.callback());
  EXPECT_EQ(all.Wait()->sessions.size(), 1u);
}

// Crash 4: no BOS and an empty prompt on an empty session spun the engine
// thread for ever with the session busy.
TEST_F(EngineTest, AnEmptyPromptWithoutBosIsRefusedAtOnce) {
  NoBosTokenizer no_bos(loaded_->tokenizer.get());
  Start(EngineOptions(), &no_bos);
  absl::StatusOr<GenerateResult> r = Generate("", "", std::string());
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("empty"));
  absl::StatusOr<SessionInfo> s = Create("", "");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      Generate(s->id, "", std::vector<int32_t>{}).status()));
  // The session is not left busy, and a real prompt works.
  absl::StatusOr<GenerateResult> ok = Generate(s->id, "", std::string("hi"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->usage.generated_tokens, 4);
}

TEST_F(EngineTest, AFailedGenerateLeavesTheSessionAsItWas) {
  EngineOptions o = Durable();
  const ModelConfig& c = loaded_->weights->config;
  o.kv_block_tokens = 16;
  o.kv_cache_bytes = 4 * 16 * c.KvBytesPerToken(o.kv_dtype);  // 64 positions
  Start(o);
  absl::StatusOr<SessionInfo> s = Create("", "a short start");
  ASSERT_TRUE(s.ok()) << s.status();
  // 100 more tokens cannot fit in the pool: RESOURCE_EXHAUSTED.
  std::vector<int32_t> long_prompt(100, 65);
  absl::StatusOr<GenerateResult> r = Generate(s->id, "", long_prompt);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  absl::StatusOr<SessionInfo> after = Get(s->id, "");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->num_tokens, s->num_tokens);
  EXPECT_FALSE(after->busy);
  // Nor after a restart.
  Start(o);
  EXPECT_EQ(Get(s->id, "")->num_tokens, s->num_tokens);
}

// A full disk, made with RLIMIT_FSIZE: the log append fails, the client
// hears it, and memory and disk agree on the history.
TEST_F(EngineTest, ATurnThatCannotBeMadeDurableFailsAndIsNotApplied) {
  Start(Durable());
  absl::StatusOr<SessionInfo> s = Create("", "the start of a story");
  ASSERT_TRUE(s.ok()) << s.status();
  const std::filesystem::path log = dir_ / (s->id + ".log");
  ASSERT_TRUE(std::filesystem::exists(log));
  const auto size = std::filesystem::file_size(log);

  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit tight = old_limit;
  tight.rlim_cur = size + 4;  // not room for another record
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tight), 0);
  absl::StatusOr<GenerateResult> r = Generate(s->id, "", std::string(" then"));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);

  ASSERT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(s->id));
  absl::StatusOr<SessionInfo> after = Get(s->id, "");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->num_tokens, s->num_tokens);
  // The disk has room again: the next turn applies and survives a restart.
  absl::StatusOr<GenerateResult> next =
      Generate(s->id, "", std::string(" then"));
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->session.has_value());
  const int64_t tokens = next->session->num_tokens;
  EXPECT_GT(tokens, s->num_tokens);
  Start(Durable());
  absl::StatusOr<SessionInfo> restarted = Get(s->id, "");
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->num_tokens, tokens);
}

TEST_F(EngineTest, ALogThatDoesNotLoadIsNeverOverwritten) {
  Start(Durable());
  const std::string id(32, 'a');
  std::filesystem::create_directories(dir_);
  const std::filesystem::path log = dir_ / (id + ".log");
  {
    FILE* f = fopen(log.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fputs("not a session log", f);
    fclose(f);
  }
  Waiter<SessionInfo> w;
  CreateSessionParams params;
  params.id = id;
  engine_->CreateSession(std::move(params), w.callback());
  EXPECT_TRUE(absl::IsAlreadyExists(w.Wait().status()));
  EXPECT_EQ(std::filesystem::file_size(log), 17u);
}

TEST_F(EngineTest, OwnersDoNotShareCachedPrompts) {
  Start(EngineOptions());
  std::vector<int32_t> prompt(300);
  for (int i = 0; i < 300; ++i) prompt[i] = 3 + i % 200;
  absl::StatusOr<GenerateResult> a1 = Generate("", "alice", prompt);
  ASSERT_TRUE(a1.ok()) << a1.status();
  absl::StatusOr<GenerateResult> a2 = Generate("", "alice", prompt);
  ASSERT_TRUE(a2.ok()) << a2.status();
  EXPECT_GE(a2->usage.cached_prompt_tokens, 256);
  absl::StatusOr<GenerateResult> b = Generate("", "bob", prompt);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->usage.cached_prompt_tokens, 0);
}

}  // namespace
}  // namespace kvserve
