// Served: a real server (build/kvserve, 16-token KV blocks) and its
// client, for the integration tests of sessions and KV caches.
#ifndef KVSERVE_TESTS_INTEGRATION_SERVED_H_
#define KVSERVE_TESTS_INTEGRATION_SERVED_H_

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {

// One server and its client; stories260K unless `stories` is false (then
// the built-in model).
struct Served {
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<Client> client;

  static Served Start(std::vector<std::string> flags, bool stories = true) {
    Served s;
    // Small blocks, so that the block counts below stay easy to reason
    // about (the server's default is larger).
    std::vector<std::string> all = TestServerFlags();
    all.push_back("--kv_block_tokens=16");
    if (stories) {
      all.push_back("--model=" + SharedDir() + "/models/stories260K.gguf");
    }
    all.insert(all.end(), flags.begin(), flags.end());
    auto server = ServerProcess::Start(all);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return s;
    s.server = *std::move(server);
    s.client = *Client::Connect(s.server->grpc_address());
    return s;
  }

  std::string Create(const std::string& text) {
    v1::CreateSessionRequest request;
    request.mutable_initial()->set_text(text);
    auto session = client->CreateSession(request);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? session->session_id() : "";
  }

  // Greedy continuation of a session (or an ephemeral one).
  Generated Continue(const std::string& id, int n,
                     const std::string& text = "") {
    v1::GenerateRequest request = GreedyRequest(n);
    request.set_session_id(id);
    if (!text.empty()) request.mutable_prompt()->set_text(text);
    auto out = GenerateAll(*client, request);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : Generated{};
  }

  v1::Session Get(const std::string& id) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    request.set_include_tokens(true);
    auto s = client->GetSession(request);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::Session();
  }

  double Metric(const std::string& name,
                const std::vector<std::string>& labels = {}) {
    auto text = HttpGet(server->metrics_port(), "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? MetricSum(*text, name, labels).value_or(-1) : -1;
  }
  // The metric once it reaches `at_least` (the engine publishes its gauges
  // after the command that changed them has replied), or its value after
  // 5 s.
  double MetricAtLeast(const std::string& name,
                       const std::vector<std::string>& labels,
                       double at_least) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    double v = Metric(name, labels);
    while (v < at_least && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      v = Metric(name, labels);
    }
    return v;
  }
};

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_INTEGRATION_SERVED_H_
