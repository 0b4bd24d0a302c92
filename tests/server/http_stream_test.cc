// The pieces of an HTTP stream: SSE framing and the TokenQueue that hands
// tokens from the engine thread to the handler thread.
#include <chrono>
#include <string>
#include <thread>
#include <variant>

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
  queue.OnToken(GeneratedToken{.token_id = 1, .text = "a", .logprobs = {}});
  queue.OnToken(GeneratedToken{.token_id = 2, .text = "b", .logprobs = {}});
  GenerateResult result;
  result.finish_reason = FinishReason::kStop;
  queue.OnFinish(result);

  std::optional<TokenQueue::Event> e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<GeneratedToken>(*e).token_id, 1);
  e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<GeneratedToken>(*e).text, "b");
  e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  const auto& r = std::get<absl::StatusOr<GenerateResult>>(*e);
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
  queue.OnFinish(absl::CancelledError("x"));
}

TEST(TokenQueueTest, AnErrorIsTheLastEvent) {
  TokenQueue queue;
  queue.OnFinish(absl::NotFoundError("no session"));
  std::optional<TokenQueue::Event> e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<absl::StatusOr<GenerateResult>>(*e).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenQueueTest, AWaitingThreadWakesForTokensAndTheFinish) {
  TokenQueue queue;
  std::thread engine([&] {
    std::this_thread::sleep_for(milliseconds(20));
    queue.OnToken(GeneratedToken{.token_id = 9, .text = "z", .logprobs = {}});
    std::this_thread::sleep_for(milliseconds(20));
    queue.OnFinish(GenerateResult{});
  });
  std::optional<TokenQueue::Event> e = queue.Next(milliseconds(5000));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(std::get<GeneratedToken>(*e).token_id, 9);
  queue.WaitFinished();
  e = queue.Next(milliseconds(0));
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(std::holds_alternative<absl::StatusOr<GenerateResult>>(*e));
  engine.join();
}

}  // namespace
}  // namespace kvserve::http
