// SIGTERM stops a real kvserve cleanly (exit 0), idle or mid-stream. Each
// test starts its own server, since each ends it.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"

namespace kvserve::testing {
namespace {

struct Started {
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<Client> client;
};

absl::StatusOr<Started> StartServer() {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(TestServerFlags());
  if (!server.ok()) return server.status();
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect((*server)->grpc_address());
  if (!client.ok()) return client.status();
  return Started{*std::move(server), *std::move(client)};
}

TEST(ShutdownTest, SigtermWhileIdleExitsZero) {
  absl::StatusOr<Started> started = StartServer();
  ASSERT_TRUE(started.ok()) << started.status();
  absl::StatusOr<ServingStatus> health = started->client->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);

  ASSERT_TRUE(started->server->SendSignal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> exit =
      started->server->WaitExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->success()) << exit->ToString();
  // Nothing listens any more.
  CallOptions options;
  options.timeout = absl::Seconds(2);
  EXPECT_FALSE(started->client->Health(options).ok());
}

TEST(ShutdownTest, SigintAlsoExitsZero) {
  absl::StatusOr<Started> started = StartServer();
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(started->server->SendSignal(SIGINT).ok());
  absl::StatusOr<ExitStatus> exit =
      started->server->WaitExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->success()) << exit->ToString();
}

TEST(ShutdownTest, SigtermDuringAStreamEndsItAndExitsZero) {
  absl::StatusOr<Started> started = StartServer();
  ASSERT_TRUE(started.ok()) << started.status();
  Client& client = *started->client;

  v1::GenerateRequest request = GreedyRequest(1000);
  request.mutable_prompt()->set_text("This story never ends");
  std::atomic<int> tokens{0};
  std::atomic<bool> done{false};
  absl::Status stream_status;
  v1::GenerateFinal final_message;
  std::thread stream([&] {
    CallOptions options;
    options.timeout = absl::Seconds(40);  // a bound, never reached if correct
    absl::StatusOr<v1::GenerateFinal> result = client.Generate(
        request,
        [&](const v1::GeneratedToken&) {
          tokens.fetch_add(1);
          return true;
        },
        options);
    stream_status = result.status();
    if (result.ok()) final_message = *result;
    done.store(true);
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (tokens.load() == 0 && !done.load() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_GT(tokens.load(), 0) << "no token streamed";
  ASSERT_FALSE(done.load()) << "the stream ended before SIGTERM";

  ASSERT_TRUE(started->server->SendSignal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> exit =
      started->server->WaitExit(absl::Seconds(30));
  stream.join();
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->success()) << exit->ToString();
  // The stream ended, either with a final message or a shutdown status.
  if (stream_status.ok()) {
    EXPECT_NE(final_message.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_EQ(final_message.usage().generated_tokens(), tokens.load());
  } else {
    EXPECT_TRUE(absl::IsUnavailable(stream_status) ||
                absl::IsCancelled(stream_status))
        << stream_status;
  }
}

}  // namespace
}  // namespace kvserve::testing
