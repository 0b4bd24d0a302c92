// The Prometheus endpoint of a real kvserve, read with a plain HTTP GET, and
// checked against what the test itself did (counts are deltas, so the test
// holds whatever ran before it on the same server).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"

namespace kvserve::testing {
namespace {

class MetricsTest : public SharedServerTest {
 protected:
  std::string Scrape() {
    absl::StatusOr<std::string> body =
        HttpGet(server().metrics_port(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : "";
  }

  double Value(const std::string& exposition, const std::string& name,
               const std::vector<std::string>& labels = {}) {
    return MetricSum(exposition, name, labels).value_or(-1);
  }

  // Scrapes until `done` holds for the exposition (metrics of a finished
  // call may be recorded just after the client saw its end), within 5 s.
  template <typename Predicate>
  std::string ScrapeUntil(Predicate done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    std::string exposition = Scrape();
    while (!done(exposition) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      exposition = Scrape();
    }
    return exposition;
  }
};

TEST_F(MetricsTest, ServesEveryRequiredFamilyAfterAGeneration) {
  // Labelled families appear with their first series, so generate first.
  v1::GenerateRequest request = GreedyRequest(2);
  request.mutable_prompt()->set_text("Hi");
  ASSERT_TRUE(GenerateAll(client(), request).ok());
  const std::string exposition = ScrapeUntil([](const std::string& e) {
    return HasMetricFamily(e, "kvserve_request_duration_seconds");
  });
  for (const char* family : {
           "kvserve_time_to_first_token_seconds",
           "kvserve_inter_token_latency_seconds",
           "kvserve_generated_tokens_total",
           "kvserve_prompt_tokens_total",
           "kvserve_kv_cache_used_bytes",
           "kvserve_kv_cache_capacity_bytes",
           "kvserve_sessions",
           "kvserve_request_duration_seconds",
       }) {
    EXPECT_TRUE(HasMetricFamily(exposition, family))
        << family << " missing from:\n"
        << exposition;
  }
}

TEST_F(MetricsTest, CapacityMatchesModelInfo) {
  absl::StatusOr<v1::ModelInfo> info = client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(Value(Scrape(), "kvserve_kv_cache_capacity_bytes"),
            static_cast<double>(info->kv_cache_capacity_bytes()));
}

TEST_F(MetricsTest, GenerationIsCounted) {
  const std::string before = Scrape();
  const double ttft0 =
      Value(before, "kvserve_time_to_first_token_seconds_count");
  const double itl0 =
      Value(before, "kvserve_inter_token_latency_seconds_count");
  const double generated0 = Value(before, "kvserve_generated_tokens_total");
  const double prompt0 = Value(before, "kvserve_prompt_tokens_total");
  const std::vector<std::string> generate_ok = {"method=\"Generate\"",
                                                "code=\"OK\""};
  const double requests0 = std::max(
      0.0,
      Value(before, "kvserve_request_duration_seconds_count", generate_ok));
  ASSERT_GE(ttft0, 0);
  ASSERT_GE(generated0, 0);

  v1::GenerateRequest request = GreedyRequest(8);
  request.mutable_prompt()->set_text("Counting tokens");
  absl::StatusOr<Generated> result = GenerateAll(client(), request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ids.size(), 8u);
  const int64_t prompt_tokens = result->final_message.usage().prompt_tokens();
  ASSERT_GT(prompt_tokens, 0);

  const std::string after = ScrapeUntil([&](const std::string& e) {
    return Value(e, "kvserve_request_duration_seconds_count", generate_ok) >
           requests0;
  });
  EXPECT_EQ(Value(after, "kvserve_generated_tokens_total") - generated0, 8);
  EXPECT_EQ(Value(after, "kvserve_prompt_tokens_total") - prompt0,
            prompt_tokens);
  EXPECT_EQ(Value(after, "kvserve_time_to_first_token_seconds_count") - ttft0,
            1);
  // 8 tokens have 7 gaps between them.
  EXPECT_EQ(Value(after, "kvserve_inter_token_latency_seconds_count") - itl0,
            7);
  EXPECT_GT(Value(after, "kvserve_time_to_first_token_seconds_sum"), 0);
  EXPECT_EQ(
      Value(after, "kvserve_request_duration_seconds_count", generate_ok) -
          requests0,
      1);
  // Histograms expose cumulative buckets ending in +Inf.
  EXPECT_EQ(Value(after, "kvserve_time_to_first_token_seconds_bucket",
                  {"le=\"+Inf\""}),
            Value(after, "kvserve_time_to_first_token_seconds_count"));
}

TEST_F(MetricsTest, SessionsAndKvBytesFollowASession) {
  absl::StatusOr<v1::ModelInfo> info = client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const std::string before = Scrape();
  const double sessions0 = Value(before, "kvserve_sessions");
  const double used0 = Value(before, "kvserve_kv_cache_used_bytes");
  ASSERT_GE(sessions0, 0);
  ASSERT_GE(used0, 0);

  v1::CreateSessionRequest create;
  create.mutable_initial()->set_text("Metrics watch this session");
  absl::StatusOr<v1::Session> session = client().CreateSession(create);
  ASSERT_TRUE(session.ok()) << session.status();
  v1::GenerateRequest request = GreedyRequest(6);
  request.set_session_id(session->session_id());
  ASSERT_TRUE(GenerateAll(client(), request).ok());
  v1::GetSessionRequest get;
  get.set_session_id(session->session_id());
  absl::StatusOr<v1::Session> now = client().GetSession(get);
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_GT(now->kv_bytes(), 0);
  // KV holds whole blocks; the last generated token has no KV yet.
  EXPECT_GE(now->kv_bytes(),
            (now->num_tokens() - 1) * info->kv_bytes_per_token());

  const std::string during = ScrapeUntil([&](const std::string& e) {
    return Value(e, "kvserve_sessions") >= sessions0 + 1;
  });
  EXPECT_EQ(Value(during, "kvserve_sessions"), sessions0 + 1);
  EXPECT_GE(Value(during, "kvserve_kv_cache_used_bytes"),
            used0 + static_cast<double>(now->kv_bytes()));
  EXPECT_LE(Value(during, "kvserve_kv_cache_used_bytes"),
            Value(during, "kvserve_kv_cache_capacity_bytes"));

  v1::DeleteSessionRequest del;
  del.set_session_id(session->session_id());
  ASSERT_TRUE(client().DeleteSession(del).ok());
  const std::string after = ScrapeUntil([&](const std::string& e) {
    return Value(e, "kvserve_sessions") <= sessions0;
  });
  EXPECT_EQ(Value(after, "kvserve_sessions"), sessions0);
  EXPECT_EQ(Value(after, "kvserve_kv_cache_used_bytes"), used0);
}

}  // namespace
}  // namespace kvserve::testing
