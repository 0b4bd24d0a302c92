// Many short Generates at once (cancelled by their client, refused by the
// engine, turns of durable sessions, ephemeral): the engine thread
// finishes streams while gRPC may already run their OnDone on another
// thread. GenerateReactor used to call Finish() with its mutex
// held, and OnDone could delete the reactor (and the mutex) before the
// engine thread unlocked it; an ASan build (make asan) reports that as a
// heap-use-after-free in the server, which this test then sees as a dead
// server. Fast enough for every build.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {
namespace {

TEST(GenerateFinishRaceTest, ManyShortStreamsEndCleanly) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--max_queued_requests=1024");
  // Turns of a durable session end after their log write, on the engine
  // thread, when no token write is in flight.
  flags.push_back("--session_dir=" + dir.File("sessions"));
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = *ConnectClient(**server);

  constexpr int kThreads = 6;
  constexpr int kStreamsPerThread = 80;
  std::atomic<int> unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      v1::CreateSessionRequest create;
      create.mutable_initial()->set_text("Once");
      absl::StatusOr<v1::Session> session = client->CreateSession(create);
      if (!session.ok()) {
        ++unexpected;
        return;
      }
      for (int i = 0; i < kStreamsPerThread; ++i) {
        v1::GenerateRequest request = GreedyRequest(1 + (i % 3));
        request.mutable_prompt()->set_text(" a");
        absl::StatusCode expected = absl::StatusCode::kOk;
        bool cancel = false;
        switch ((i + t) % 4) {
          case 0:  // cancelled by the client at its first token
            cancel = true;
            expected = absl::StatusCode::kCancelled;
            break;
          case 1:  // refused by the engine before any token
            request.set_session_id(NewSessionId());
            expected = absl::StatusCode::kNotFound;
            break;
          case 2:  // a turn of a durable session
            request.set_session_id(session->session_id());
            break;
          default:  // an ephemeral session
            break;
        }
        absl::StatusOr<v1::GenerateFinal> final_message = client->Generate(
            request, [&](const v1::GeneratedToken&) { return !cancel; });
        if (final_message.status().code() != expected) ++unexpected;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(unexpected.load(), 0);
  ASSERT_TRUE((*server)->running()) << (*server)->stderr_text();
  absl::StatusOr<ServingStatus> health = client->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);
}

}  // namespace
}  // namespace kvserve::testing
