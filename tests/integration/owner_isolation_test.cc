// Owners without API keys: the owner label a request names must match the
// session's exactly; the empty owner is an owner like any other, so a
// session of "a" is NOT_FOUND for "" and for "b" on every session RPC, with
// and without a session directory (where a miss in memory is looked up on
// disk).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {
namespace {

class OwnerIsolationTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    std::vector<std::string> flags = TestServerFlags();
    if (GetParam()) flags.push_back("--session_dir=" + dir_.File("sessions"));
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(flags);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = *ConnectClient(*server_);
  }

  ScratchDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(OwnerIsolationTest, ASessionOfOneOwnerIsNotFoundForOthers) {
  v1::CreateSessionRequest create;
  create.set_owner("a");
  create.mutable_initial()->set_text("Once upon a time");
  absl::StatusOr<v1::Session> session = client_->CreateSession(create);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::string id = session->session_id();

  for (const std::string owner : {"", "b", "A", "a "}) {
    v1::GetSessionRequest get;
    get.set_session_id(id);
    get.set_owner(owner);
    v1::DeleteSessionRequest del;
    del.set_session_id(id);
    del.set_owner(owner);
    v1::ForkSessionRequest fork;
    fork.set_session_id(id);
    fork.set_owner(owner);
    v1::TruncateSessionRequest truncate;
    truncate.set_session_id(id);
    truncate.set_tokens(1);
    truncate.set_owner(owner);
    v1::AppendRequest append;
    append.set_session_id(id);
    append.set_owner(owner);
    append.mutable_input()->set_text(" more");
    v1::GenerateRequest generate = GreedyRequest(2);
    generate.set_session_id(id);
    generate.set_owner(owner);
    for (const auto& [rpc, status] :
         std::vector<std::pair<std::string, absl::Status>>{
             {"GetSession", client_->GetSession(get).status()},
             {"DeleteSession", client_->DeleteSession(del)},
             {"ForkSession", client_->ForkSession(fork).status()},
             {"TruncateSession", client_->TruncateSession(truncate).status()},
             {"Append", client_->Append(append).status()},
             {"Generate", GenerateAll(*client_, generate).status()},
         }) {
      EXPECT_EQ(status.code(), absl::StatusCode::kNotFound)
          << rpc << " as owner \"" << owner << "\": " << status;
    }
    v1::ListSessionsRequest list;
    list.set_owner(owner);
    absl::StatusOr<v1::ListSessionsResponse> listed =
        client_->ListSessions(list);
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->sessions_size(), 0) << "owner \"" << owner << "\"";
  }

  // The owner itself still has it, unchanged.
  v1::GetSessionRequest get;
  get.set_session_id(id);
  get.set_owner("a");
  absl::StatusOr<v1::Session> after = client_->GetSession(get);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->num_tokens(), session->num_tokens());
  v1::ListSessionsRequest list;
  list.set_owner("a");
  absl::StatusOr<v1::ListSessionsResponse> listed = client_->ListSessions(list);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->sessions_size(), 1);
  EXPECT_EQ(listed->sessions(0).session_id(), id);
  // Without keys "admin" is an owner like any other: it lists nothing.
  list.set_owner("admin");
  EXPECT_EQ(client_->ListSessions(list)->sessions_size(), 0);
  // The server is still up (another owner's call once crashed it with
  // --session_dir).
  EXPECT_TRUE(server_->running());
}

INSTANTIATE_TEST_SUITE_P(SessionDir, OwnerIsolationTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WithSessionDir" : "InMemory";
                         });

}  // namespace
}  // namespace kvserve::testing
