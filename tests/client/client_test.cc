// kvserve::Client against an in-process fake Inference service: metadata,
// deadlines, status mapping, streaming, cancellation and health.
#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/clock.h"

namespace kvserve {
namespace {

// Records each call's x-session-id, authorization and deadline; Generate
// streams what the test scripted.
class FakeInference final : public v1::Inference::Service {
 public:
  struct Seen {
    std::optional<std::string> session_id;  // the metadata, if sent
    std::optional<std::string> authorization;
    std::chrono::system_clock::time_point deadline;
  };

  grpc::Status GetModelInfo(grpc::ServerContext* context,
                            const v1::GetModelInfoRequest*,
                            v1::ModelInfo* response) override {
    Record("GetModelInfo", context);
    response->set_n_heads(8);
    return grpc::Status::OK;
  }
  grpc::Status CreateSession(grpc::ServerContext* context,
                             const v1::CreateSessionRequest*,
                             v1::Session* response) override {
    Record("CreateSession", context);
    response->set_session_id("new");
    return grpc::Status::OK;
  }
  grpc::Status GetSession(grpc::ServerContext* context,
                          const v1::GetSessionRequest* request,
                          v1::Session* response) override {
    Record("GetSession", context);
    if (request->session_id() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no session \"missing\"");
    }
    response->set_session_id(request->session_id());
    return grpc::Status::OK;
  }
  grpc::Status ListSessions(grpc::ServerContext* context,
                            const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse*) override {
    Record("ListSessions", context);
    return grpc::Status::OK;
  }
  grpc::Status DeleteSession(grpc::ServerContext* context,
                             const v1::DeleteSessionRequest*,
                             v1::DeleteSessionResponse*) override {
    Record("DeleteSession", context);
    return grpc::Status::OK;
  }
  grpc::Status ForkSession(grpc::ServerContext* context,
                           const v1::ForkSessionRequest*,
                           v1::Session*) override {
    Record("ForkSession", context);
    return grpc::Status::OK;
  }
  grpc::Status TruncateSession(grpc::ServerContext* context,
                               const v1::TruncateSessionRequest*,
                               v1::Session*) override {
    Record("TruncateSession", context);
    return grpc::Status::OK;
  }
  grpc::Status Append(grpc::ServerContext* context, const v1::AppendRequest*,
                      v1::AppendResponse*) override {
    Record("Append", context);
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "later");
  }
  grpc::Status Tokenize(grpc::ServerContext* context,
                        const v1::TokenizeRequest*,
                        v1::TokenizeResponse*) override {
    Record("Tokenize", context);
    return grpc::Status::OK;
  }

  // The prompt text picks the script: "3 tokens", "no final", "fail after 1",
  // or "endless" (until the client cancels, at most 10 s).
  grpc::Status Generate(
      grpc::ServerContext* context, const v1::GenerateRequest* request,
      grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    Record("Generate", context);
    const std::string& script = request->prompt().text();
    v1::GenerateResponse token;
    token.mutable_token()->set_text("x");
    if (script == "endless") {
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      for (int i = 0; !context->IsCancelled() && absl::Now() < deadline; ++i) {
        token.mutable_token()->set_token_id(i);
        writer->Write(token);
        absl::SleepFor(absl::Milliseconds(2));
      }
      saw_cancel_.store(context->IsCancelled());
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    const int tokens = script == "fail after 1" ? 1 : 3;
    for (int i = 0; i < tokens; ++i) {
      token.mutable_token()->set_token_id(10 + i);
      writer->Write(token);
    }
    if (script == "fail after 1") {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    }
    if (script != "no final") {
      v1::GenerateResponse final_message;
      final_message.mutable_final()->set_finish_reason(
          v1::FINISH_REASON_LENGTH);
      final_message.mutable_final()->mutable_usage()->set_generated_tokens(
          tokens);
      writer->Write(final_message);
    }
    return grpc::Status::OK;
  }

  std::optional<Seen> seen(const std::string& method) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = seen_.find(method);
    if (it == seen_.end()) return std::nullopt;
    return it->second;
  }
  bool saw_cancel() const { return saw_cancel_.load(); }

 private:
  void Record(const std::string& method, grpc::ServerContext* context) {
    Seen seen;
    seen.deadline = context->deadline();
    const auto& metadata = context->client_metadata();
    auto it = metadata.find(kSessionIdMetadataKey);
    if (it != metadata.end()) {
      seen.session_id = std::string(it->second.data(), it->second.size());
    }
    it = metadata.find(kAuthorizationMetadataKey);
    if (it != metadata.end()) {
      seen.authorization = std::string(it->second.data(), it->second.size());
    }
    std::lock_guard<std::mutex> lock(mu_);
    seen_[method] = seen;
  }

  std::mutex mu_;
  std::map<std::string, Seen> seen_;
  std::atomic<bool> saw_cancel_{false};
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(address_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(1));
    }
  }

  FakeInference service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, SessionScopedCallsSendTheSessionId) {
  v1::GetSessionRequest get;
  get.set_session_id("s1");
  ASSERT_TRUE(client_->GetSession(get).ok());
  v1::DeleteSessionRequest del;
  del.set_session_id("s2");
  ASSERT_TRUE(client_->DeleteSession(del).ok());
  v1::ForkSessionRequest fork;
  fork.set_session_id("s3");
  ASSERT_TRUE(client_->ForkSession(fork).ok());
  v1::TruncateSessionRequest truncate;
  truncate.set_session_id("s4");
  ASSERT_TRUE(client_->TruncateSession(truncate).ok());
  v1::AppendRequest append;
  append.set_session_id("s5");
  EXPECT_FALSE(client_->Append(append).ok());
  v1::GenerateRequest generate;
  generate.set_session_id("s6");
  ASSERT_TRUE(client_->Generate(generate, nullptr).ok());

  const std::map<std::string, std::string> expected = {
      {"GetSession", "s1"},      {"DeleteSession", "s2"}, {"ForkSession", "s3"},
      {"TruncateSession", "s4"}, {"Append", "s5"},        {"Generate", "s6"}};
  for (const auto& [method, id] : expected) {
    std::optional<FakeInference::Seen> seen = service_.seen(method);
    ASSERT_TRUE(seen.has_value()) << method;
    EXPECT_EQ(seen->session_id, id) << method;
  }
}

TEST_F(ClientTest, CreateSessionNamesTheSessionAndRoutesByItsId) {
  ASSERT_TRUE(client_->CreateSession(v1::CreateSessionRequest()).ok());
  std::optional<FakeInference::Seen> seen = service_.seen("CreateSession");
  ASSERT_TRUE(seen.has_value() && seen->session_id.has_value());
  EXPECT_EQ(seen->session_id->size(), 32u);
  EXPECT_EQ(seen->session_id->find_first_not_of("0123456789abcdef"),
            std::string::npos);
  ASSERT_TRUE(client_->CreateSession(v1::CreateSessionRequest()).ok());
  EXPECT_NE(service_.seen("CreateSession")->session_id, seen->session_id);
  v1::CreateSessionRequest named;
  named.set_session_id(std::string(32, 'a'));
  ASSERT_TRUE(client_->CreateSession(named).ok());
  EXPECT_EQ(service_.seen("CreateSession")->session_id, std::string(32, 'a'));
}

TEST_F(ClientTest, CallsWithoutASessionSendNoSessionId) {
  ASSERT_TRUE(client_->GetModelInfo().ok());
  ASSERT_TRUE(client_->ListSessions(v1::ListSessionsRequest()).ok());
  ASSERT_TRUE(client_->Tokenize(v1::TokenizeRequest()).ok());
  ASSERT_TRUE(client_->Generate(v1::GenerateRequest(), nullptr).ok());
  for (const char* method :
       {"GetModelInfo", "ListSessions", "Tokenize", "Generate"}) {
    std::optional<FakeInference::Seen> seen = service_.seen(method);
    ASSERT_TRUE(seen.has_value()) << method;
    EXPECT_FALSE(seen->session_id.has_value()) << method;
  }
}

TEST_F(ClientTest, WithoutAnApiKeyNoAuthorizationIsSent) {
  ASSERT_TRUE(client_->GetModelInfo().ok());
  ASSERT_TRUE(service_.seen("GetModelInfo").has_value());
  EXPECT_FALSE(service_.seen("GetModelInfo")->authorization.has_value());
}

TEST_F(ClientTest, AnApiKeyIsSentOnEveryCallAndSessionsAreNotNamed) {
  ConnectOptions options;
  options.api_key = "s3cret-key";
  absl::StatusOr<std::unique_ptr<Client>> keyed =
      Client::Connect(address_, options);
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  Client& client = **keyed;
  ASSERT_TRUE(client.GetModelInfo().ok());
  ASSERT_TRUE(client.CreateSession(v1::CreateSessionRequest()).ok());
  v1::GetSessionRequest get;
  get.set_session_id("s1");
  ASSERT_TRUE(client.GetSession(get).ok());
  ASSERT_TRUE(client.ListSessions(v1::ListSessionsRequest()).ok());
  ASSERT_TRUE(client.Tokenize(v1::TokenizeRequest()).ok());
  ASSERT_TRUE(client.Generate(v1::GenerateRequest(), nullptr).ok());
  EXPECT_TRUE(client.Health().ok());
  for (const char* method : {"GetModelInfo", "CreateSession", "GetSession",
                             "ListSessions", "Tokenize", "Generate"}) {
    std::optional<FakeInference::Seen> seen = service_.seen(method);
    ASSERT_TRUE(seen.has_value()) << method;
    EXPECT_EQ(seen->authorization, "Bearer s3cret-key") << method;
  }
  // A server with API keys names its sessions itself.
  EXPECT_FALSE(service_.seen("CreateSession")->session_id.has_value());
}

TEST_F(ClientTest, StatusCodeAndMessageArePreserved) {
  v1::GetSessionRequest get;
  get.set_session_id("missing");
  absl::StatusOr<v1::Session> session = client_->GetSession(get);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(session.status().message(), "no session \"missing\"");
  v1::AppendRequest append;
  append.set_session_id("s");
  absl::StatusOr<v1::AppendResponse> appended = client_->Append(append);
  EXPECT_EQ(appended.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(appended.status().message(), "later");
}

TEST_F(ClientTest, DeadlinesDefaultTo30SecondsForUnaryAndNoneForGenerate) {
  const auto now = std::chrono::system_clock::now();
  ASSERT_TRUE(client_->GetModelInfo().ok());
  std::optional<FakeInference::Seen> seen = service_.seen("GetModelInfo");
  ASSERT_TRUE(seen.has_value());
  EXPECT_GT(seen->deadline, now + std::chrono::seconds(25));
  EXPECT_LT(seen->deadline, now + std::chrono::seconds(31));

  CallOptions options;
  options.timeout = absl::Seconds(3);
  ASSERT_TRUE(client_->GetModelInfo(options).ok());
  seen = service_.seen("GetModelInfo");
  EXPECT_LT(seen->deadline, now + std::chrono::seconds(4));

  ASSERT_TRUE(client_->Generate(v1::GenerateRequest(), nullptr).ok());
  seen = service_.seen("Generate");
  ASSERT_TRUE(seen.has_value());
  EXPECT_GT(seen->deadline, now + std::chrono::hours(24 * 365));
}

TEST_F(ClientTest, GenerateStreamsTokensAndReturnsTheFinalMessage) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("3 tokens");
  std::vector<int32_t> ids;
  absl::StatusOr<v1::GenerateFinal> final_message =
      client_->Generate(request, [&](const v1::GeneratedToken& token) {
        ids.push_back(token.token_id());
        return true;
      });
  ASSERT_TRUE(final_message.ok()) << final_message.status();
  EXPECT_EQ(ids, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(final_message->finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(final_message->usage().generated_tokens(), 3);
  EXPECT_EQ(FinishReasonName(final_message->finish_reason()), "length");
}

TEST_F(ClientTest, GenerateWithoutFinalMessageIsAnError) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("no final");
  EXPECT_EQ(client_->Generate(request, nullptr).status().code(),
            absl::StatusCode::kInternal);
}

TEST_F(ClientTest, GenerateReturnsTheServersErrorAfterTokens) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("fail after 1");
  int tokens = 0;
  absl::StatusOr<v1::GenerateFinal> result =
      client_->Generate(request, [&](const v1::GeneratedToken&) {
        ++tokens;
        return true;
      });
  EXPECT_EQ(tokens, 1);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(result.status().message(), "queue full");
}

TEST_F(ClientTest, CallbackCancelsTheStream) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("endless");
  int tokens = 0;
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::GenerateFinal> result = client_->Generate(
      request, [&](const v1::GeneratedToken&) { return ++tokens < 2; });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(tokens, 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The server saw the cancellation (bounded wait for its handler).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!service_.saw_cancel() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(service_.saw_cancel());
}

TEST_F(ClientTest, CancellationFromAnotherThread) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("endless");
  Cancellation cancellation;
  std::atomic<int> tokens{0};
  std::thread canceller([&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (tokens.load() < 3 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    cancellation.Cancel();
  });
  CallOptions options;
  options.cancellation = &cancellation;
  absl::StatusOr<v1::GenerateFinal> result = client_->Generate(
      request,
      [&](const v1::GeneratedToken&) {
        tokens.fetch_add(1);
        return true;
      },
      options);
  canceller.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_GE(tokens.load(), 3);
  EXPECT_TRUE(cancellation.cancelled());
  // Later calls with it fail at once, without reaching the server.
  EXPECT_EQ(client_->Tokenize(v1::TokenizeRequest(), options).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_FALSE(service_.seen("Tokenize").has_value());
}

TEST_F(ClientTest, HealthFollowsTheServingStatus) {
  absl::StatusOr<ServingStatus> status = client_->Health();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
  server_->GetHealthCheckService()->SetServingStatus(false);
  status = client_->Health();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kNotServing);
  EXPECT_EQ(ServingStatusName(*status), "NOT_SERVING");
}

TEST(ClientConnectTest, RejectsKeysThatCannotBeSentWithoutEchoingThem) {
  for (const char* key :
       {"with\nnewline", " padded", "tab\tkey", "caf\xc3\xa9"}) {
    ConnectOptions options;
    options.api_key = key;
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect("127.0.0.1:1", options);
    ASSERT_FALSE(client.ok()) << key;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(client.status().message().find(key), absl::string_view::npos);
  }
}

TEST(ClientConnectTest, TlsFilesAreReadAtConnect) {
  ConnectOptions options;
  options.tls_ca_file = "/nonexistent/ca.crt";
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect("127.0.0.1:1", options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("/nonexistent/ca.crt"),
            absl::string_view::npos)
      << client.status();
  options = ConnectOptions();
  options.tls_cert_file = "/etc/hostname";  // without --tls_key
  client = Client::Connect("127.0.0.1:1", options);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("both --tls_cert and --tls_key"),
            absl::string_view::npos)
      << client.status();
}

TEST(ClientConnectTest, RejectsBadAddressesAndReportsUnreachableServers) {
  EXPECT_EQ(Client::Connect("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Connect("host :1").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  CallOptions options;
  options.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  EXPECT_EQ((*client)->Health(options).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace kvserve
