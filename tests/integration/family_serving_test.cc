// The real kvserve serving a qwen2 GGUF (q/k/v biases, split-halves RoPE)
// through the real client: greedy tokens from the golden's prompt equal
// llama.cpp's in ../shared/golden/families, by the goldens' rule (they agree
// until the first disagreement, allowed only at a near tie).
#include <filesystem>

#include "tests/integration/integration_util.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

TEST(FamilyServingTest, Qwen2GreedyMatchesTheGolden) {
  const std::string model =
      SharedDir() + "/models/families/synth-small-qwen2-f32.gguf";
  const std::string golden =
      SharedDir() + "/golden/families/synth-small-qwen2-f32.json";
  if (!std::filesystem::exists(model) || !std::filesystem::exists(golden)) {
    GTEST_SKIP() << "needs " << model << " and " << golden;
  }
  std::optional<ReferenceRun> ref = ReadGoldenRun(golden);
  ASSERT_TRUE(ref.has_value()) << "cannot read " << golden;
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--model=" + model);
  auto server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client::Connect((*server)->grpc_address());
  ASSERT_TRUE(client.ok()) << client.status();

  auto info = (*client)->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->architecture(), "qwen2");
  EXPECT_EQ(info->n_heads(), 8);
  EXPECT_EQ(info->n_kv_heads(), 2);
  EXPECT_EQ(info->context_length(), 1024);

  v1::GenerateRequest request;
  for (int32_t id : ref->prompt) {
    request.mutable_prompt()->mutable_tokens()->add_ids(id);
  }
  request.set_max_tokens(ref->tokens.size());
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);
  auto out = GenerateAll(**client, request);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->ids.size(), ref->tokens.size());
  size_t agree = 0;
  while (agree < ref->tokens.size() && out->ids[agree] == ref->tokens[agree]) {
    ++agree;
  }
  if (agree < ref->tokens.size()) {
    EXPECT_LT(ref->gap[agree], 0.1)
        << "token " << agree << " is " << out->ids[agree] << ", the golden's "
        << ref->tokens[agree] << " (not a near tie)";
  }
  EXPECT_EQ(out->final_message.usage().prompt_tokens(),
            static_cast<int64_t>(ref->prompt.size()));
}

}  // namespace
}  // namespace kvserve::testing
