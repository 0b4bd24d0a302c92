// stories260K served by the real kvserve, driven by the real client: greedy
// output equals the reference implementation's, from both file formats.
#include <fstream>

#include "absl/strings/str_replace.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

struct Format {
  const char* name;
  std::vector<std::string> flags;
};

// Names the case in test listings (ctest shows parameters).
void PrintTo(const Format& c, std::ostream* os) { *os << c.name; }

class GoldenGenerateTest : public ::testing::TestWithParam<Format> {
 protected:
  void SetUp() override {
    auto json = ReadWholeFile(SharedDir() + "/golden/stories260K_greedy.json");
    if (!json) GTEST_SKIP() << "no " << SharedDir() << "/golden: skipped";
    golden_ids_ = JsonIntArray(*json, "generated_token_ids");
    golden_text_ = JsonString(*json, "generated_text").value_or("");
    std::vector<std::string> flags = TestServerFlags();
    for (const std::string& f : GetParam().flags) {
      flags.push_back(absl::StrReplaceAll(f, {{"$SHARED", SharedDir()}}));
    }
    auto server = ServerProcess::Start(flags);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = *Client::Connect(server_->grpc_address());
  }

  std::vector<int32_t> golden_ids_;
  std::string golden_text_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(GoldenGenerateTest, GreedyMatchesTheReference) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("Once upon a time");
  request.set_max_tokens(64);
  request.mutable_sampling()->set_temperature(0);
  auto out = GenerateAll(*client_, request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->ids, golden_ids_);
  EXPECT_EQ(out->text, golden_text_);
  EXPECT_EQ(out->final_message.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(out->final_message.usage().prompt_tokens(), 5);
}

TEST_P(GoldenGenerateTest, KvctlPrintsTheGoldenText) {
  auto result = RunCommand(
      {BinDir() + "/kvctl", "--addr=" + server_->grpc_address(), "generate",
       "--temperature=0", "--max_tokens=64", "Once upon a time"},
      absl::Seconds(60));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->status.success()) << result->err;
  EXPECT_EQ(result->out, golden_text_ + "\n");
}

TEST_P(GoldenGenerateTest, ATurnAtATimeMatchesTheReference) {
  // The prompt, then 8 turns of 8 tokens each, continuing one session.
  v1::CreateSessionRequest create;
  create.mutable_initial()->set_text("Once upon a time");
  auto session = client_->CreateSession(create);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<int32_t> ids;
  for (int turn = 0; turn < 8; ++turn) {
    v1::GenerateRequest request;
    request.set_session_id(session->session_id());
    request.set_max_tokens(8);
    request.mutable_sampling()->set_temperature(0);
    auto out = GenerateAll(*client_, request);
    ASSERT_TRUE(out.ok()) << out.status();
    ids.insert(ids.end(), out->ids.begin(), out->ids.end());
    // Only the last generated token of the previous turn is recomputed.
    if (turn > 0) {
      EXPECT_EQ(out->final_message.usage().cached_prompt_tokens(),
                out->final_message.usage().prompt_tokens() - 1);
    }
  }
  EXPECT_EQ(ids, golden_ids_);
}

TEST_P(GoldenGenerateTest, LogprobsListTheReferenceTopFive) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("Once upon a time");
  request.set_max_tokens(1);
  request.mutable_sampling()->set_temperature(0);
  request.set_logprobs(5);
  std::vector<v1::GeneratedToken> tokens;
  auto final_message = client_->Generate(request, [&](const auto& t) {
    tokens.push_back(t);
    return true;
  });
  ASSERT_TRUE(final_message.ok()) << final_message.status();
  ASSERT_EQ(tokens.size(), 1u);
  const v1::GeneratedToken& t = tokens[0];
  ASSERT_EQ(t.top_logprobs_size(), 5);
  // The golden top-5 logits at this position: 432, 383, 322, 353, 323.
  const std::vector<int32_t> want = {432, 383, 322, 353, 323};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.top_logprobs(i).token_id(), want[i]);
    if (i > 0) {
      EXPECT_LE(t.top_logprobs(i).logprob(), t.top_logprobs(i - 1).logprob());
    }
  }
  EXPECT_EQ(t.top_logprobs(0).text(), ",");
  ASSERT_TRUE(t.has_logprob());
  EXPECT_FLOAT_EQ(t.logprob(), t.top_logprobs(0).logprob());
  // Logprob differences are logit differences: 17.7993984 - 14.2812586.
  EXPECT_NEAR(t.top_logprobs(0).logprob() - t.top_logprobs(1).logprob(),
              3.5181398, 1e-4);
}

TEST_P(GoldenGenerateTest, StopStringsMatchAcrossTokens) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("Once upon a time");
  request.set_max_tokens(64);
  request.mutable_sampling()->set_temperature(0);
  request.add_stop("tle gi");  // spans " little" and " girl"
  auto out = GenerateAll(*client_, request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->final_message.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(out->text, ", there was a lit");
  // Generation stopped at the token that completed the stop string.
  ASSERT_LT(out->ids.size(), 10u);
  EXPECT_EQ(out->ids,
            std::vector<int32_t>(golden_ids_.begin(),
                                 golden_ids_.begin() + out->ids.size()));
  EXPECT_EQ(out->final_message.usage().generated_tokens(),
            static_cast<int64_t>(out->ids.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Stories260K, GoldenGenerateTest,
    ::testing::Values(Format{"gguf",
                             {"--model=$SHARED/models/stories260K.gguf"}},
                      Format{"llama2c",
                             {"--model=$SHARED/models/stories260K.bin",
                              "--tokenizer=$SHARED/models/tok512.bin"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvserve::testing
