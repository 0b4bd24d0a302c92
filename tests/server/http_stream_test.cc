// The pieces of an HTTP stream: SSE framing and the TokenQueue that hands
// tokens from the engine thread to the handler thread.
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/http/openai_json.h"
#include "server/http/sse.h"
#include "server/http/token_queue.h"

namespace kvserve::http {
namespace {

using std::chrono::milliseconds;

TEST(SseEventTest, OneDataLineEndedByABlankLine) {
  const std::string event = SseEvent(Json{{"text", "two\nlines"}, {"n", 1}});
  // Keys in the order built (Json is ordered).
  EXPECT_EQ(event, "data: {\"text\":\"two\\nlines\",\"n\":1}\n\n");
  // Exactly one newline pair, at the end: the JSON's newline is escaped.
  EXPECT_EQ(event.find('\n'), event.size() - 2);
}

TEST(SseEventTest, DoneMarker) {
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
  EXPECT_STREQ(kSseContentType, "text/event-stream");
}

TEST(TokenQueueTest, TokensInOrderThenTheResultOnce) {
  TokenQueue queue;
  queue.sink(0)->OnToken(
      GeneratedToken{.token_id = 1, .text = "a", .logprobs = {}});
  queue.sink(0)->OnToken(
      GeneratedToken{.token_id = 2, .text = "b", .logprobs = {}});
  GenerateResult result;
  result.finish_reason = FinishReason::kStop;
  queue.sink(0)->OnFinish(result);

  std::optional<TokenQueue::Event> e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<GeneratedToken>(e->what).token_id, 1);
  e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<GeneratedToken>(e->what).text, "b");
  e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  const auto& r = std::get<absl::StatusOr<GenerateResult>>(e->what);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish_reason, FinishReason::kStop);
  EXPECT_FALSE(queue.Next(milliseconds(0)).has_value());
  queue.WaitFinished();  // returns at once
}

TEST(TokenQueueTest, NextTimesOutWhenNothingCame) {
  TokenQueue queue;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(queue.Next(milliseconds(30)).has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(25));
  queue.sink(0)->OnFinish(absl::CancelledError("x"));
}

TEST(TokenQueueTest, AnErrorIsTheLastEvent) {
  TokenQueue queue;
  queue.sink(0)->OnFinish(absl::NotFoundError("no session"));
  std::optional<TokenQueue::Event> e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<absl::StatusOr<GenerateResult>>(e->what).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenQueueTest, AWaitingThreadWakesForTokensAndTheFinish) {
  TokenQueue queue;
  std::thread engine([&] {
    std::this_thread::sleep_for(milliseconds(20));
    queue.sink(0)->OnToken(
        GeneratedToken{.token_id = 9, .text = "z", .logprobs = {}});
    std::this_thread::sleep_for(milliseconds(20));
    queue.sink(0)->OnFinish(GenerateResult{});
  });
  std::optional<TokenQueue::Event> e = queue.Next(milliseconds(5000));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<GeneratedToken>(e->what).token_id, 9);
  queue.WaitFinished();
  e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(std::holds_alternative<absl::StatusOr<GenerateResult>>(e->what));
  engine.join();
}

// Several choices share one queue: each event names its choice, each
// choice's events keep their order, and WaitFinished waits for them all.
TEST(TokenQueueTest, ChoicesInterleaveAndAllMustFinish) {
  TokenQueue queue(3);
  queue.sink(2)->OnToken(
      GeneratedToken{.token_id = 5, .text = "", .logprobs = {}});
  queue.sink(0)->OnToken(
      GeneratedToken{.token_id = 6, .text = "", .logprobs = {}});
  queue.sink(2)->OnFinish(absl::NotFoundError("x"));
  queue.sink(1)->OnFinish(GenerateResult{});
  std::vector<std::pair<int, bool>> seen;  // index, is a result
  while (std::optional<TokenQueue::Event> e = queue.Next(milliseconds(0))) {
    seen.emplace_back(
        e->index,
        std::holds_alternative<absl::StatusOr<GenerateResult>>(e->what));
  }
  EXPECT_EQ(seen, (std::vector<std::pair<int, bool>>{
                      {2, false}, {0, false}, {2, true}, {1, true}}));
  std::thread engine([&] {
    std::this_thread::sleep_for(milliseconds(30));
    queue.sink(0)->OnFinish(GenerateResult{});
  });
  const auto start = std::chrono::steady_clock::now();
  queue.WaitFinished();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(25));
  engine.join();
}

}  // namespace
}  // namespace kvserve::http
