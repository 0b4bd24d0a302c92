#include "server/convert.h"

#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Decodes id 7 to a lone lead byte of a 3-byte UTF-8 sequence, every other
// id to "<id>".
class FakeTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view,
                              const EncodeOptions&) const override {
    return {};
  }
  std::string DecodeToken(int32_t, int32_t id) const override {
    return id == 7 ? "\xe2" : "<" + std::to_string(id) + ">";
  }
  std::string Piece(int32_t id) const override { return std::to_string(id); }
  int32_t vocab_size() const override { return 100; }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  bool IsEndOfGeneration(int32_t id) const override { return id == 2; }
};

TEST(InputFromProtoTest, TextTokensOrNothing) {
  v1::Input input;
  Input in = FromProto(input);
  ASSERT_TRUE(std::holds_alternative<std::string>(in));
  EXPECT_EQ(std::get<std::string>(in), "");

  input.set_text("Once upon");
  in = FromProto(input);
  ASSERT_TRUE(std::holds_alternative<std::string>(in));
  EXPECT_EQ(std::get<std::string>(in), "Once upon");

  input.mutable_tokens()->add_ids(1);
  input.mutable_tokens()->add_ids(42);
  in = FromProto(input);
  ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(in));
  EXPECT_THAT(std::get<std::vector<int32_t>>(in), ElementsAre(1, 42));

  // Empty token ids are still token ids, not text.
  input.mutable_tokens()->clear_ids();
  in = FromProto(input);
  ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(in));
  EXPECT_TRUE(std::get<std::vector<int32_t>>(in).empty());
}

TEST(GenerateFromProtoTest, EveryField) {
  v1::GenerateRequest request;
  request.set_session_id("abc");
  request.set_owner("alice");
  request.mutable_prompt()->set_text("Hi");
  request.set_max_tokens(12);
  request.mutable_sampling()->set_temperature(0.7f);
  request.mutable_sampling()->set_top_k(40);
  request.mutable_sampling()->set_top_p(0.9f);
  request.mutable_sampling()->set_seed(123456789012345ULL);
  request.mutable_sampling()->set_min_p(0.05f);
  request.mutable_sampling()->set_presence_penalty(0.5f);
  request.mutable_sampling()->set_frequency_penalty(-0.5f);
  request.mutable_sampling()->set_repeat_penalty(1.2f);
  request.mutable_sampling()->set_repeat_last_n(-1);
  (*request.mutable_sampling()->mutable_logit_bias())[42] = -100.0f;
  request.add_stop("\n\n");
  request.add_stop("The end");
  request.set_ignore_eos(true);
  request.set_logprobs(3);
  absl::StatusOr<GenerateParams> p = FromProto(request, 256);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->session_id, "abc");
  EXPECT_EQ(p->owner, "alice");
  ASSERT_TRUE(std::holds_alternative<std::string>(p->prompt));
  EXPECT_EQ(std::get<std::string>(p->prompt), "Hi");
  EXPECT_TRUE(p->generate);
  EXPECT_EQ(p->max_tokens, 12);
  EXPECT_EQ(p->sampling.temperature, 0.7f);
  EXPECT_EQ(p->sampling.top_k, 40);
  EXPECT_EQ(p->sampling.top_p, 0.9f);
  EXPECT_EQ(p->sampling.seed, 123456789012345ULL);
  EXPECT_EQ(p->sampling.min_p, 0.05f);
  EXPECT_EQ(p->sampling.penalties.presence_penalty, 0.5f);
  EXPECT_EQ(p->sampling.penalties.frequency_penalty, -0.5f);
  EXPECT_EQ(p->sampling.penalties.repeat_penalty, 1.2f);
  EXPECT_EQ(p->sampling.penalties.repeat_last_n, -1);
  EXPECT_EQ(p->sampling.penalties.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{42, -100.0f}}));
  EXPECT_THAT(p->stop, ElementsAre("\n\n", "The end"));
  EXPECT_TRUE(p->ignore_eos);
  EXPECT_EQ(p->logprobs, 3);
}

TEST(GenerateFromProtoTest, UnsetFieldsTakeTheDefaults) {
  v1::GenerateRequest request;
  absl::StatusOr<GenerateParams> p = FromProto(request, 256);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->session_id, "");
  EXPECT_EQ(p->owner, "");
  EXPECT_EQ(p->max_tokens, 256);
  const SamplingOptions defaults;
  EXPECT_EQ(p->sampling.temperature, defaults.temperature);
  EXPECT_EQ(p->sampling.top_k, defaults.top_k);
  EXPECT_EQ(p->sampling.top_p, defaults.top_p);
  EXPECT_EQ(p->sampling.min_p, 0.0f);
  EXPECT_FALSE(p->sampling.penalties.active());
  EXPECT_TRUE(p->stop.empty());
  EXPECT_FALSE(p->ignore_eos);
  EXPECT_EQ(p->logprobs, -1);
  // An unset seed is random: two requests (almost surely) differ.
  absl::StatusOr<GenerateParams> q = FromProto(request, 256);
  ASSERT_TRUE(q.ok());
  EXPECT_NE(p->sampling.seed, q->sampling.seed);
}

TEST(GenerateFromProtoTest, ExplicitZerosAreKept) {
  v1::GenerateRequest request;
  request.set_max_tokens(0);  // the engine rejects it, not the conversion
  request.mutable_sampling()->set_seed(0);
  request.mutable_sampling()->set_top_k(0);
  request.set_logprobs(0);
  absl::StatusOr<GenerateParams> p = FromProto(request, 256);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_tokens, 0);
  EXPECT_EQ(p->sampling.seed, 0u);
  EXPECT_EQ(p->sampling.top_k, 0);
  EXPECT_EQ(p->logprobs, 0);
}

TEST(GenerateFromProtoTest, StopStringLimits) {
  v1::GenerateRequest request;
  for (int i = 0; i < 16; ++i) request.add_stop(std::string(256, 'a' + i));
  EXPECT_TRUE(FromProto(request, 8).ok());

  request.add_stop("x");  // the 17th
  absl::StatusOr<GenerateParams> p = FromProto(request, 8);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("at most 16 stop strings"));
  EXPECT_THAT(p.status().message(), HasSubstr("got 17"));

  request.clear_stop();
  request.add_stop(std::string(257, 'a'));
  p = FromProto(request, 8);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("stop strings"));
  EXPECT_THAT(p.status().message(), HasSubstr("got 257"));

  request.clear_stop();
  request.add_stop("");
  p = FromProto(request, 8);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("got 0"));
}

TEST(TtlFromProtoTest, UnsetPositiveAndInvalid) {
  absl::StatusOr<std::optional<absl::Duration>> ttl = TtlFromProto(false, -5);
  ASSERT_TRUE(ttl.ok());
  EXPECT_FALSE(ttl->has_value());

  ttl = TtlFromProto(true, 90);
  ASSERT_TRUE(ttl.ok());
  ASSERT_TRUE(ttl->has_value());
  EXPECT_EQ(**ttl, absl::Seconds(90));

  for (int64_t bad : {int64_t{0}, int64_t{-1}}) {
    ttl = TtlFromProto(true, bad);
    EXPECT_EQ(ttl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ttl.status().message(), HasSubstr("ttl_seconds"));
    EXPECT_THAT(ttl.status().message(), HasSubstr(std::to_string(bad)));
  }
}

TEST(TtlFromProtoTest, HundredYearsAtMost) {
  // 100 years is kept exactly; one second more, or INT64_MAX (once stored
  // as saturated nanoseconds: 9223372036 s after a restart), is refused
  // naming the limit.
  absl::StatusOr<std::optional<absl::Duration>> ttl =
      TtlFromProto(true, kMaxTtlSeconds);
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(**ttl, absl::Seconds(int64_t{100} * 365 * 86400));
  EXPECT_LT(absl::ToInt64Nanoseconds(**ttl),
            std::numeric_limits<int64_t>::max());

  for (int64_t bad :
       {kMaxTtlSeconds + 1, std::numeric_limits<int64_t>::max()}) {
    ttl = TtlFromProto(true, bad);
    EXPECT_EQ(ttl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ttl.status().message(), HasSubstr("at most 3153600000"));
    EXPECT_THAT(ttl.status().message(), HasSubstr(std::to_string(bad)));
  }
}

TEST(SessionToProtoTest, EveryField) {
  SessionInfo info;
  info.id = "0123abcd";
  info.owner = "bob";
  info.num_tokens = 1234;
  info.kv_tokens = 1000;
  info.kv_bytes = int64_t{5} << 32;
  info.tier = "disk";
  info.create_time = absl::FromUnixNanos(1700000000123456789);
  info.last_used = absl::FromUnixNanos(1700000100000000001);
  info.ttl = absl::Seconds(3600);
  info.busy = true;
  info.tokens = {1, 450, 3};
  v1::Session out;
  ToProto(info, &out);
  EXPECT_EQ(out.session_id(), "0123abcd");
  EXPECT_EQ(out.owner(), "bob");
  EXPECT_EQ(out.num_tokens(), 1234);
  EXPECT_EQ(out.kv_bytes(), int64_t{5} << 32);
  EXPECT_EQ(out.tier(), "disk");
  EXPECT_EQ(out.create_time().seconds(), 1700000000);
  EXPECT_EQ(out.create_time().nanos(), 123456789);
  EXPECT_EQ(out.last_used_time().seconds(), 1700000100);
  EXPECT_EQ(out.last_used_time().nanos(), 1);
  ASSERT_TRUE(out.has_ttl_seconds());
  EXPECT_EQ(out.ttl_seconds(), 3600);
  EXPECT_TRUE(out.busy());
  EXPECT_THAT(out.token_ids(), ElementsAre(1, 450, 3));
}

TEST(SessionToProtoTest, NoTtlAndNoTokens) {
  SessionInfo info;
  info.id = "x";
  v1::Session out;
  ToProto(info, &out);
  EXPECT_FALSE(out.has_ttl_seconds());
  EXPECT_EQ(out.token_ids_size(), 0);
  EXPECT_FALSE(out.busy());
  // Times are always set (the epoch for a default SessionInfo).
  EXPECT_TRUE(out.has_create_time());
  EXPECT_EQ(out.create_time().seconds(), 0);
  EXPECT_TRUE(out.has_last_used_time());
}

TEST(UsageToProtoTest, EveryField) {
  v1::Usage out;
  ToProto(Usage{.prompt_tokens = 23,
                .cached_prompt_tokens = 22,
                .generated_tokens = int64_t{1} << 33},
          &out);
  EXPECT_EQ(out.prompt_tokens(), 23);
  EXPECT_EQ(out.cached_prompt_tokens(), 22);
  EXPECT_EQ(out.generated_tokens(), int64_t{1} << 33);
}

TEST(TokenToProtoTest, WithoutLogprobs) {
  FakeTokenizer tokenizer;
  GeneratedToken token{.token_id = 42, .text = " there", .logprobs = {}};
  v1::GeneratedToken out;
  ToProto(token, tokenizer, &out);
  EXPECT_EQ(out.token_id(), 42);
  EXPECT_EQ(out.text(), " there");
  EXPECT_FALSE(out.has_logprob());
  EXPECT_EQ(out.top_logprobs_size(), 0);
}

TEST(TokenToProtoTest, LogprobsWithTheAlternativesText) {
  FakeTokenizer tokenizer;
  GeneratedToken token;
  token.token_id = 9;
  token.text = "";
  token.logprobs = Logprobs{.chosen = -0.25f,
                            .top = {{.token_id = 9, .logprob = -0.25f},
                                    {.token_id = 7, .logprob = -3.5f}}};
  v1::GeneratedToken out;
  ToProto(token, tokenizer, &out);
  EXPECT_EQ(out.token_id(), 9);
  EXPECT_EQ(out.text(), "");
  ASSERT_TRUE(out.has_logprob());
  EXPECT_EQ(out.logprob(), -0.25f);
  ASSERT_EQ(out.top_logprobs_size(), 2);
  EXPECT_EQ(out.top_logprobs(0).token_id(), 9);
  EXPECT_EQ(out.top_logprobs(0).logprob(), -0.25f);
  EXPECT_EQ(out.top_logprobs(0).text(), "<9>");
  EXPECT_EQ(out.top_logprobs(1).token_id(), 7);
  EXPECT_EQ(out.top_logprobs(1).logprob(), -3.5f);
  // A lone partial UTF-8 character becomes U+FFFD (proto strings must be
  // valid UTF-8).
  EXPECT_EQ(out.top_logprobs(1).text(), "\xef\xbf\xbd");
}

TEST(ResultToProtoTest, EveryField) {
  GenerateResult result;
  result.finish_reason = FinishReason::kStop;
  result.usage = {
      .prompt_tokens = 5, .cached_prompt_tokens = 4, .generated_tokens = 3};
  result.timings = {
      .queue_seconds = 0.001, .prefill_seconds = 0.25, .decode_seconds = 1.5};
  result.session_id = "abc";
  result.text = "tail";
  v1::GenerateFinal out;
  ToProto(result, &out);
  EXPECT_EQ(out.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(out.usage().prompt_tokens(), 5);
  EXPECT_EQ(out.usage().cached_prompt_tokens(), 4);
  EXPECT_EQ(out.usage().generated_tokens(), 3);
  EXPECT_EQ(out.timings().queue_seconds(), 0.001);
  EXPECT_EQ(out.timings().prefill_seconds(), 0.25);
  EXPECT_EQ(out.timings().decode_seconds(), 1.5);
  EXPECT_EQ(out.session_id(), "abc");
  EXPECT_EQ(out.text(), "tail");
}

TEST(ResultToProtoTest, EveryFinishReason) {
  const std::pair<FinishReason, v1::FinishReason> reasons[] = {
      {FinishReason::kLength, v1::FINISH_REASON_LENGTH},
      {FinishReason::kStop, v1::FINISH_REASON_STOP},
      {FinishReason::kEos, v1::FINISH_REASON_EOS},
      {FinishReason::kContextFull, v1::FINISH_REASON_CONTEXT_FULL},
      {FinishReason::kCancelled, v1::FINISH_REASON_CANCELLED},
  };
  for (const auto& [reason, expected] : reasons) {
    GenerateResult result;
    result.finish_reason = reason;
    v1::GenerateFinal out;
    ToProto(result, &out);
    EXPECT_EQ(out.finish_reason(), expected) << static_cast<int>(reason);
  }
}

TEST(ResultToProtoTest, AnEphemeralSessionHasNoId) {
  GenerateResult result;
  v1::GenerateFinal out;
  ToProto(result, &out);
  EXPECT_EQ(out.session_id(), "");
  EXPECT_EQ(out.text(), "");
  EXPECT_TRUE(out.has_usage());
  EXPECT_TRUE(out.has_timings());
}

}  // namespace
}  // namespace kvserve
