// The engine's limits (each refusal names its flag and value) and its prep
// thread: text is tokenized off the engine thread, so a slow tokenization
// does not stop other requests.
#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"
#include "tests/testing/engine_waiters.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

using testing::Waiter;
using WaitingSink = testing::CollectingSink;

// The built-in tokenizer, whose Encode of text containing "slow" waits
// until Release().
class GatedTokenizer : public testing::ForwardingTokenizer {
 public:
  using ForwardingTokenizer::ForwardingTokenizer;
  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override {
    if (text.find("slow") != std::string_view::npos) {
      std::unique_lock<std::mutex> lock(mu_);
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return released_; });
    }
    return base()->Encode(text, options);
  }

  void WaitEntered() const {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return entered_; });
  }
  void Release() const {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  mutable bool entered_ = false;
  mutable bool released_ = false;
};

class EngineLimitsTest : public ::testing::Test {
 protected:
  void Start(EngineOptions options, const Tokenizer* tokenizer = nullptr) {
    engine_.reset();
    auto engine = Engine::Create(
        options, loaded_->weights.get(),
        tokenizer ? tokenizer : loaded_->tokenizer.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  absl::StatusOr<SessionInfo> Create(std::string owner, Input initial = "",
                                     std::optional<absl::Duration> ttl = {}) {
    Waiter<SessionInfo> w;
    CreateSessionParams params;
    params.owner = std::move(owner);
    params.initial = std::move(initial);
    params.ttl = ttl;
    engine_->CreateSession(std::move(params), w.callback());
    return w.Wait();
  }
  std::unique_ptr<WaitingSink> Submit(std::string session_id, Input prompt,
                                      int max_tokens = 2) {
    GenerateParams p;
    p.session_id = std::move(session_id);
    p.prompt = std::move(prompt);
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    auto sink = std::make_unique<WaitingSink>();
    engine_->Submit(std::make_shared<GenerateCall>(std::move(p), sink.get()));
    return sink;
  }

  const LoadedModel* const loaded_ = &testing::BuiltinModel();
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineLimitsTest, APromptPastMaxPromptBytesIsRefusedNamingIt) {
  EngineOptions options;
  options.max_prompt_bytes = 16;
  Start(options);
  absl::StatusOr<GenerateResult> ok = Submit("", std::string(16, 'a'))->Wait();
  EXPECT_TRUE(ok.ok()) << ok.status();

  absl::StatusOr<GenerateResult> text =
      Submit("", std::string(17, 'a'))->Wait();
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("--max_prompt_bytes=16"));
  EXPECT_THAT(text.status().message(), HasSubstr("17 bytes"));

  // A chat turn counts its messages' text.
  ChatInput chat{{ChatMessage{.role = "user", .content = "0123456789"},
                  ChatMessage{.role = "user", .content = "0123456789"}}};
  absl::StatusOr<GenerateResult> messages = Submit("", chat)->Wait();
  ASSERT_FALSE(messages.ok());
  EXPECT_THAT(messages.status().message(), HasSubstr("--max_prompt_bytes=16"));

  // And so does a CreateSession's initial prefill.
  absl::StatusOr<SessionInfo> created = Create("", std::string(40, 'b'));
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("--max_prompt_bytes=16"));
}

TEST_F(EngineLimitsTest, TheDefaultPromptLimitFollowsTheContext) {
  EngineOptions options;
  options.max_context = 64;
  Start(options);
  const size_t limit = kPromptBytesPerToken * 64;
  absl::StatusOr<GenerateResult> over =
      Submit("", std::string(limit + 1, 'a'))->Wait();
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(),
              HasSubstr(absl::StrFormat("--max_prompt_bytes=%d", limit)));
}

// The "N requests wait" of a queue-full refusal.
int64_t Waiting(const absl::Status& s) {
  int64_t n = -1;
  const absl::string_view m = s.message();
  const size_t at = m.find(": ");
  const size_t end = m.find(" requests wait");
  if (at == absl::string_view::npos || end == absl::string_view::npos ||
      !absl::SimpleAtoi(m.substr(at + 2, end - at - 2), &n)) {
    ADD_FAILURE() << "no count in: " << s;
  }
  return n;
}

// A request holds its queue place from Submit until the scheduler first
// admits it, wherever it is meanwhile: one counter, no gap. Requests taken
// by the engine thread but not yet handed to the prep thread or the
// scheduler were counted nowhere, so 1,000 concurrent Generates against
// --max_queued_requests=256 were refused saying "330 requests wait".
TEST_F(EngineLimitsTest, TheQueueNeverHoldsMoreThanItsLimit) {
  EngineOptions options;
  options.max_queued_requests = 8;
  options.max_running = 1;
  Start(options);
  std::atomic<int64_t> most_waiting{0};
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::unique_ptr<WaitingSink>> sinks;
      for (int i = 0; i < 150; ++i) {
        sinks.push_back(Submit("", absl::StrFormat("t%d request %d", t, i), 1));
      }
      for (auto& sink : sinks) {
        absl::StatusOr<GenerateResult> r = sink->Wait();
        if (r.ok()) {
          accepted.fetch_add(1);
        } else if (r.status().code() == absl::StatusCode::kResourceExhausted) {
          int64_t n = Waiting(r.status());
          int64_t seen = most_waiting.load();
          while (n > seen && !most_waiting.compare_exchange_weak(seen, n)) {
          }
        } else {
          ADD_FAILURE() << r.status();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(accepted.load(), 0);
  EXPECT_LE(most_waiting.load(), 8);
}

// Places are given back however a request ends: a queue filled by
// requests held in the prep thread refuses the next one, and once they
// finish the same number is accepted again.
TEST_F(EngineLimitsTest, QueuePlacesAreGivenBackWhenRequestsEnd) {
  GatedTokenizer gated(loaded_->tokenizer.get());
  EngineOptions options;
  options.max_queued_requests = 3;
  Start(options, &gated);
  std::vector<std::unique_ptr<WaitingSink>> held;
  held.push_back(Submit("", "slow"));
  gated.WaitEntered();
  held.push_back(Submit("", "a"));
  held.push_back(Submit("", "b"));
  absl::StatusOr<GenerateResult> refused = Submit("", "c")->Wait();
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Waiting(refused.status()), 3);
  gated.Release();
  for (auto& sink : held) EXPECT_TRUE(sink->Wait().ok());
  // A failing request gives its place back too.
  EXPECT_FALSE(Submit("no-such-session", "x")->Wait().ok());
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<WaitingSink>> again;
    for (int i = 0; i < 3; ++i) again.push_back(Submit("", "d"));
    for (auto& sink : again) EXPECT_TRUE(sink->Wait().ok());
  }
}

TEST_F(EngineLimitsTest, ACreateSessionPrefillWaitsInTheRequestQueue) {
  EngineOptions options;
  options.max_queued_requests = 0;  // every request is refused
  Start(options);
  absl::StatusOr<GenerateResult> generate = Submit("", "hi")->Wait();
  ASSERT_FALSE(generate.ok());
  EXPECT_EQ(generate.status().code(), absl::StatusCode::kResourceExhausted);

  absl::StatusOr<SessionInfo> prefilled = Create("", "hello");
  ASSERT_FALSE(prefilled.ok());
  EXPECT_EQ(prefilled.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(prefilled.status().message(),
              HasSubstr("--max_queued_requests=0"));
  // Without a prefill there is nothing to queue.
  EXPECT_TRUE(Create("").ok());
}

TEST_F(EngineLimitsTest, SessionsAreLimitedInAllAndPerOwner) {
  EngineOptions options;
  options.max_sessions = 3;
  options.max_sessions_per_owner = 2;
  Start(options);
  absl::StatusOr<SessionInfo> a1 = Create("a");
  ASSERT_TRUE(a1.ok()) << a1.status();
  ASSERT_TRUE(Create("a").ok());
  absl::StatusOr<SessionInfo> a3 = Create("a");
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(a3.status().message(), HasSubstr("--max_sessions_per_owner=2"));
  // A fork is a new session of the parent's owner.
  Waiter<SessionInfo> fork;
  engine_->ForkSession(a1->id, "a", std::nullopt, fork.callback());
  absl::StatusOr<SessionInfo> forked = fork.Wait();
  ASSERT_FALSE(forked.ok());
  EXPECT_THAT(forked.status().message(),
              HasSubstr("--max_sessions_per_owner=2"));

  ASSERT_TRUE(Create("b").ok());
  absl::StatusOr<SessionInfo> b2 = Create("b");
  ASSERT_FALSE(b2.ok());
  EXPECT_THAT(b2.status().message(), HasSubstr("--max_sessions=3"));
  // Ephemeral sessions are not counted.
  absl::StatusOr<GenerateResult> stateless = Submit("", "hi")->Wait();
  EXPECT_TRUE(stateless.ok()) << stateless.status();
  // Deleting one makes room.
  Waiter<bool> deleted;
  engine_->DeleteSession(a1->id, "a", deleted.callback());
  ASSERT_TRUE(deleted.Wait().ok());
  EXPECT_TRUE(Create("b").ok());
}

TEST_F(EngineLimitsTest, ASessionWithoutATtlGetsTheDefault) {
  EngineOptions options;
  options.default_ttl = absl::Minutes(5);
  Start(options);
  absl::StatusOr<SessionInfo> plain = Create("");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->ttl, absl::Minutes(5));
  absl::StatusOr<SessionInfo> own = Create("", "", absl::Seconds(30));
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->ttl, absl::Seconds(30));
}

TEST_F(EngineLimitsTest, TextIsTokenizedOffTheEngineThread) {
  GatedTokenizer gated(loaded_->tokenizer.get());
  Start({}, &gated);
  absl::StatusOr<SessionInfo> other = Create("");
  ASSERT_TRUE(other.ok());
  std::unique_ptr<WaitingSink> slow = Submit("", "a slow prompt");
  gated.WaitEntered();
  // While that tokenization is stuck, a request with token ids runs to its
  // end: the engine thread is not the one waiting.
  absl::StatusOr<GenerateResult> quick =
      Submit(other->id, std::vector<int32_t>{1, 72, 105}, 4)->Wait();
  ASSERT_TRUE(quick.ok()) << quick.status();
  EXPECT_EQ(quick->usage.generated_tokens, 4);
  EXPECT_FALSE(slow->Done());
  gated.Release();
  absl::StatusOr<GenerateResult> done = slow->Wait();
  EXPECT_TRUE(done.ok()) << done.status();
}

TEST_F(EngineLimitsTest, ARequestStillBeingPreparedAtShutdownIsUnavailable) {
  GatedTokenizer gated(loaded_->tokenizer.get());
  Start({}, &gated);
  std::unique_ptr<WaitingSink> slow = Submit("", "slow");
  gated.WaitEntered();
  std::thread stop([this] { engine_.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gated.Release();
  stop.join();
  absl::StatusOr<GenerateResult> result = slow->Wait();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvserve
