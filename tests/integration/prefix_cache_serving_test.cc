// The prefix cache through the real server and client (built-in model,
// 128-token blocks): a prompt re-sent without a session reuses the blocks of
// its first run, and under memory pressure those cached blocks are given up
// before any live session is spilled.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/integration/integration_util.h"

namespace kvserve::testing {
namespace {

// One server, its client and its model's shape.
struct Served {
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<Client> client;
  v1::ModelInfo info;

  static Served Start(std::vector<std::string> flags) {
    Served s;
    std::vector<std::string> all = TestServerFlags();
    all.insert(all.end(), flags.begin(), flags.end());
    auto server = ServerProcess::Start(all);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return s;
    s.server = *std::move(server);
    s.client = *Client::Connect(s.server->grpc_address());
    auto info = s.client->GetModelInfo();
    EXPECT_TRUE(info.ok()) << info.status();
    if (info.ok()) s.info = *info;
    return s;
  }

  int64_t block_bytes() const {
    return info.kv_bytes_per_token() * info.kv_block_tokens();
  }
  int64_t num_blocks() const {
    return info.kv_cache_capacity_bytes() / block_bytes();
  }

  // `n` token ids drawn from `seed`, never a special token.
  std::vector<int32_t> Tokens(int n, int seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(3, info.vocab_size() - 1);
    std::vector<int32_t> out;
    while (static_cast<int>(out.size()) < n) {
      const int32_t t = id(rng);
      if (t != info.bos_token_id() && t != info.eos_token_id()) {
        out.push_back(t);
      }
    }
    return out;
  }

  // A greedy Generate of 4 tokens on an ephemeral session (`id` empty) or a
  // session.
  Generated Generate(const std::vector<int32_t>& prompt,
                     const std::string& id = "") {
    v1::GenerateRequest request = GreedyRequest(4);
    request.set_session_id(id);
    if (!prompt.empty()) SetTokens(prompt, request.mutable_prompt());
    // Bounded: an engine that cannot find room must fail, not hang.
    CallOptions options;
    options.timeout = absl::Seconds(60);
    auto out = GenerateAll(*client, request, options);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : Generated{};
  }

  std::string Create(const std::vector<int32_t>& initial) {
    v1::CreateSessionRequest request;
    SetTokens(initial, request.mutable_initial());
    auto session = client->CreateSession(request);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? session->session_id() : "";
  }

  std::string Tier(const std::string& id) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    auto s = client->GetSession(request);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->tier() : "";
  }

  std::string Scrape() {
    auto text = HttpGet(server->metrics_port(), "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
  static double Value(const std::string& exposition, const std::string& name,
                      const std::vector<std::string>& labels = {}) {
    return MetricSum(exposition, name, labels).value_or(-1);
  }
  // A scrape in which `name` has reached `at_least` (the engine publishes
  // its stats after the command that changed them has replied), or the
  // last one after 5 s.
  std::string ScrapeWhen(const std::string& name,
                         const std::vector<std::string>& labels,
                         double at_least) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    std::string e = Scrape();
    while (Value(e, name, labels) < at_least && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      e = Scrape();
    }
    return e;
  }
};

constexpr char kBlocks[] = "kvserve_kv_cache_blocks";
constexpr int kPromptTokens = 601;  // 4 full blocks of 128 and a partial one

TEST(PrefixCacheServingTest, AnEphemeralPromptSentTwiceReusesItsBlocks) {
  Served s = Served::Start({});
  ASSERT_NE(s.client, nullptr);
  ASSERT_EQ(s.info.kv_block_tokens(), 128);
  const std::vector<int32_t> prompt = s.Tokens(kPromptTokens, 1);
  const Generated first = s.Generate(prompt);
  EXPECT_EQ(first.final_message.usage().cached_prompt_tokens(), 0);
  const Generated second = s.Generate(prompt);
  EXPECT_EQ(second.final_message.usage().prompt_tokens(),
            first.final_message.usage().prompt_tokens());
  EXPECT_GE(second.final_message.usage().cached_prompt_tokens(), 512);
  // The reused KV gives the tokens computing it gave.
  EXPECT_EQ(second.ids, first.ids);
  EXPECT_EQ(second.ids.size(), 4u);
}

TEST(PrefixCacheServingTest, MetricsShowCachedBlocksAndPrefixCacheTokens) {
  Served s = Served::Start({});
  ASSERT_NE(s.client, nullptr);
  const std::vector<int32_t> prompt = s.Tokens(kPromptTokens, 2);
  s.Generate(prompt);
  // The 4 full blocks outlive the ephemeral session, as cached blocks.
  std::string e = s.ScrapeWhen(kBlocks, {"state=\"cached\""}, 4);
  EXPECT_GE(s.Value(e, kBlocks, {"state=\"cached\""}), 4);
  EXPECT_EQ(s.Value(e, kBlocks, {"state=\"used\""}) +
                s.Value(e, kBlocks, {"state=\"free\""}) +
                s.Value(e, kBlocks, {"state=\"cached\""}),
            s.num_blocks());
  EXPECT_EQ(s.Value(e, "kvserve_kv_cache_used_bytes"),
            s.Value(e, kBlocks, {"state=\"used\""}) * s.block_bytes());
  const double queried0 = s.Value(e, "kvserve_prefix_cache_queries_total");
  EXPECT_GE(queried0, kPromptTokens - 1);
  EXPECT_EQ(s.Value(e, "kvserve_prefix_cache_hits_total"), 0);

  s.Generate(prompt);
  e = s.ScrapeWhen("kvserve_prefix_cache_hits_total", {}, 512);
  EXPECT_GE(s.Value(e, "kvserve_prefix_cache_hits_total"), 512);
  EXPECT_GE(s.Value(e, "kvserve_prefix_cache_queries_total"),
            queried0 + kPromptTokens - 1);
  EXPECT_GE(s.Value(e, "kvserve_cached_prompt_tokens_total"), 512);
}

TEST(PrefixCacheServingTest, CachedBlocksGoBeforeALiveSessionIsSpilled) {
  // 12 blocks: a 300-token session holds 3, an ephemeral 601-token prompt
  // with its 4 generated tokens 5, of which 4 stay cached after it.
  const int64_t block_bytes = 128 * 2048;  // the built-in model, f32 KV
  Served s =
      Served::Start({"--kv_cache_bytes=" + std::to_string(12 * block_bytes)});
  ASSERT_NE(s.client, nullptr);
  ASSERT_EQ(s.block_bytes(), block_bytes);
  ASSERT_EQ(s.num_blocks(), 12);
  const std::string session = s.Create(s.Tokens(300, 100));
  ASSERT_EQ(s.Tier(session), "ram");

  // Six distinct prompts register 24 blocks: far more than the 9 the
  // session leaves, so cached blocks are reused, the oldest first.
  std::vector<std::vector<int32_t>> prompts;
  double most_cached = 0;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(s.Tokens(kPromptTokens, 200 + i));
    const Generated g = s.Generate(prompts.back());
    EXPECT_EQ(g.ids.size(), 4u) << "prompt " << i;
    EXPECT_EQ(s.Tier(session), "ram") << "after prompt " << i;
    const std::string e = s.ScrapeWhen(kBlocks, {"state=\"cached\""}, 4);
    most_cached =
        std::max(most_cached, s.Value(e, kBlocks, {"state=\"cached\""}));
  }
  const std::string e = s.Scrape();
  EXPECT_EQ(
      s.Value(e, "kvserve_session_evictions_total", {"reason=\"memory\""}), 0);
  EXPECT_EQ(s.Value(e, "kvserve_preemptions_total"), 0);
  EXPECT_GE(most_cached, 8);  // two prompts' blocks kept at once

  // The newest prompt is still cached; the oldest was given up.
  EXPECT_GE(
      s.Generate(prompts.back()).final_message.usage().cached_prompt_tokens(),
      512);
  EXPECT_EQ(
      s.Generate(prompts.front()).final_message.usage().cached_prompt_tokens(),
      0);
  // The session kept its KV all along: its next turn computes only the
  // new tokens.
  const Generated turn = s.Generate(s.Tokens(20, 300), session);
  EXPECT_GE(turn.final_message.usage().cached_prompt_tokens(), 300);
  EXPECT_EQ(s.Tier(session), "ram");
}

}  // namespace
}  // namespace kvserve::testing
