// API keys (--api_keys_file) through the real server and client: the key
// decides the owner, other owners' sessions are NOT_FOUND on every session
// RPC and missing from List (an admin key lists all), health needs no key,
// and SIGHUP reloads the keys.
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {
namespace {

constexpr char kAliceKey[] = "alice-key-8f14e45fceea167a5a36dedd4bea2543";
constexpr char kBobKey[] = "bob-key-c9f0f895fb98ab9159f51fd0297e236d";
constexpr char kAdminKey[] = "admin-key-45c48cce2e2d7fbdea1afc51c7c6ad26";
constexpr char kWrongKey[] = "zz-not-a-key-zz";

std::string KeyLine(absl::string_view owner, absl::string_view key) {
  return absl::StrCat(owner, " ", Sha256Hex(key), "\n");
}

// One keyed server (with a session directory, so that owner checks also
// run against sessions loaded from disk) shared by the suite.
class ApiKeysTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    const std::string keys = dir_->File("keys");
    if (!WriteTextFile(keys, "# test keys\n" + KeyLine("alice", kAliceKey) +
                                 KeyLine("bob", kBobKey) +
                                 KeyLine("admin", kAdminKey))) {
      return;
    }
    std::vector<std::string> flags = TestServerFlags();
    flags.push_back("--api_keys_file=" + keys);
    flags.push_back("--session_dir=" + dir_->File("sessions"));
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(flags);
    if (server.ok()) server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }

  static std::unique_ptr<Client> As(absl::string_view key) {
    ConnectOptions options;
    options.api_key = std::string(key);
    absl::StatusOr<std::unique_ptr<Client>> client =
        ConnectClient(*server_, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // A new session of the key's owner, prefilled with `text`.
  static std::string Create(Client& client, const std::string& text) {
    v1::CreateSessionRequest request;
    request.mutable_initial()->set_text(text);
    absl::StatusOr<v1::Session> session = client.CreateSession(request);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? session->session_id() : "";
  }

  static std::set<std::string> ListedIds(Client& client) {
    absl::StatusOr<v1::ListSessionsResponse> list =
        client.ListSessions(v1::ListSessionsRequest());
    EXPECT_TRUE(list.ok()) << list.status();
    std::set<std::string> ids;
    if (list.ok()) {
      for (const v1::Session& s : list->sessions()) ids.insert(s.session_id());
    }
    return ids;
  }

  static inline ScratchDir* dir_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

TEST_F(ApiKeysTest, HealthNeedsNoKey) {
  std::unique_ptr<Client> anonymous = As("");
  absl::StatusOr<ServingStatus> health = anonymous->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);
  // kvctl health as the container's HEALTHCHECK runs it.
  absl::StatusOr<CommandResult> result = RunCommand(
      {BinDir() + "/kvctl", "--addr=" + server_->grpc_address(), "health"});
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->status.success()) << result->err;
}

TEST_F(ApiKeysTest, EveryInferenceRpcWithoutAValidKeyIsUnauthenticated) {
  for (const char* key : {"", kWrongKey}) {
    std::unique_ptr<Client> client = As(key);
    const std::string what =
        *key == '\0' ? "missing API key" : "the API key is not valid";
    std::vector<absl::Status> statuses = {
        client->GetModelInfo().status(),
        client->CreateSession(v1::CreateSessionRequest()).status(),
        client->ListSessions(v1::ListSessionsRequest()).status(),
        client->Tokenize(v1::TokenizeRequest()).status(),
        client->Detokenize(v1::DetokenizeRequest()).status(),
        GenerateAll(*client, GreedyRequest(2)).status(),
    };
    v1::GetSessionRequest get;
    get.set_session_id("0123456789abcdef0123456789abcdef");
    statuses.push_back(client->GetSession(get).status());
    for (const absl::Status& status : statuses) {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), what)) << status;
      EXPECT_TRUE(
          absl::StrContains(status.message(), "authorization: Bearer KEY"))
          << status;
      EXPECT_FALSE(absl::StrContains(status.message(), kWrongKey)) << status;
    }
  }
}

TEST_F(ApiKeysTest, TheOwnerComesFromTheKey) {
  std::unique_ptr<Client> alice = As(kAliceKey);
  v1::CreateSessionRequest create;
  create.mutable_initial()->set_text("Once upon a time");
  absl::StatusOr<v1::Session> session = alice->CreateSession(create);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->owner(), "alice");
  EXPECT_EQ(session->session_id().size(), 32u);  // named by the server

  // Naming the key's own owner is fine; another is refused.
  create.set_owner("alice");
  EXPECT_TRUE(alice->CreateSession(create).ok());
  create.set_owner("bob");
  absl::Status refused = alice->CreateSession(create).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  v1::GetSessionRequest get;
  get.set_session_id(session->session_id());
  get.set_owner("bob");
  EXPECT_EQ(alice->GetSession(get).status().code(),
            absl::StatusCode::kPermissionDenied);
  get.clear_owner();
  absl::StatusOr<v1::Session> got = alice->GetSession(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->owner(), "alice");
}

TEST_F(ApiKeysTest, ClientChosenSessionIdsAreRefused) {
  std::unique_ptr<Client> alice = As(kAliceKey);
  v1::CreateSessionRequest create;
  create.set_session_id(NewSessionId());
  absl::Status status = alice->CreateSession(create).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "client-chosen session ids are refused when --api_keys_file is "
            "set");
  // The same for an id that exists (for another owner): nothing tells the
  // two apart.
  std::unique_ptr<Client> bob = As(kBobKey);
  create.set_session_id(Create(*bob, "Once"));
  EXPECT_EQ(alice->CreateSession(create).status(), status);
}

TEST_F(ApiKeysTest, AnotherOwnersSessionIsNotFoundOnEverySessionRpc) {
  std::unique_ptr<Client> alice = As(kAliceKey);
  std::unique_ptr<Client> bob = As(kBobKey);
  std::unique_ptr<Client> admin = As(kAdminKey);
  const std::string id = Create(*alice, "Once upon a time");
  ASSERT_FALSE(id.empty());
  v1::GetSessionRequest get;
  get.set_session_id(id);
  get.set_include_tokens(true);
  const v1::Session before = *alice->GetSession(get);

  for (Client* other : {bob.get(), admin.get()}) {
    v1::DeleteSessionRequest del;
    del.set_session_id(id);
    v1::ForkSessionRequest fork;
    fork.set_session_id(id);
    v1::TruncateSessionRequest truncate;
    truncate.set_session_id(id);
    truncate.set_tokens(1);
    v1::AppendRequest append;
    append.set_session_id(id);
    append.mutable_input()->set_text(" and more");
    v1::GenerateRequest generate = GreedyRequest(2);
    generate.set_session_id(id);
    for (const auto& [rpc, status] :
         std::vector<std::pair<std::string, absl::Status>>{
             {"GetSession", other->GetSession(get).status()},
             {"DeleteSession", other->DeleteSession(del)},
             {"ForkSession", other->ForkSession(fork).status()},
             {"TruncateSession", other->TruncateSession(truncate).status()},
             {"Append", other->Append(append).status()},
             {"Generate", GenerateAll(*other, generate).status()},
         }) {
      EXPECT_EQ(status.code(), absl::StatusCode::kNotFound)
          << rpc << ": " << status;
    }
  }
  // Untouched.
  absl::StatusOr<v1::Session> after = alice->GetSession(get);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->num_tokens(), before.num_tokens());
  EXPECT_EQ(after->token_ids_size(), before.token_ids_size());
}

TEST_F(ApiKeysTest, ListShowsTheCallersSessionsAndAdminSeesAll) {
  std::unique_ptr<Client> alice = As(kAliceKey);
  std::unique_ptr<Client> bob = As(kBobKey);
  std::unique_ptr<Client> admin = As(kAdminKey);
  const std::string a = Create(*alice, "Once");
  const std::string b = Create(*bob, "Once");
  const std::set<std::string> alices = ListedIds(*alice);
  const std::set<std::string> bobs = ListedIds(*bob);
  const std::set<std::string> all = ListedIds(*admin);
  EXPECT_TRUE(alices.count(a));
  EXPECT_FALSE(alices.count(b));
  EXPECT_TRUE(bobs.count(b));
  EXPECT_FALSE(bobs.count(a));
  EXPECT_TRUE(all.count(a));
  EXPECT_TRUE(all.count(b));
  for (const std::string& id : alices) EXPECT_FALSE(bobs.count(id)) << id;
  EXPECT_GE(all.size(), alices.size() + bobs.size());
}

TEST_F(ApiKeysTest, KvctlSendsTheKeyFromTheEnvironmentOrTheFlag) {
  const std::vector<std::string> kvctl = {BinDir() + "/kvctl",
                                          "--addr=" + server_->grpc_address()};
  auto run = [&](std::vector<std::string> args,
                 const std::vector<std::string>& env) {
    args.insert(args.begin(), kvctl.begin(), kvctl.end());
    absl::StatusOr<CommandResult> result =
        RunCommand(args, absl::Seconds(30), env);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  };
  const std::string alice_env = absl::StrCat("KVSERVE_API_KEY=", kAliceKey);
  CommandResult created = run({"session", "create", "Once"}, {alice_env});
  ASSERT_TRUE(created.status.success()) << created.err;
  const std::string id = std::string(absl::StripTrailingAsciiWhitespace(
      created.out.substr(created.out.rfind('\n', created.out.size() - 2) + 1)));
  ASSERT_EQ(id.size(), 32u) << created.out;

  CommandResult listed =
      run({absl::StrCat("--api_key=", kAliceKey), "session", "list"}, {});
  EXPECT_TRUE(listed.status.success()) << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, id)) << listed.out;
  CommandResult as_bob =
      run({"session", "get", id}, {absl::StrCat("KVSERVE_API_KEY=", kBobKey)});
  EXPECT_EQ(as_bob.status.code, 5) << as_bob.err;  // NOT_FOUND

  CommandResult wrong =
      run({"info"}, {absl::StrCat("KVSERVE_API_KEY=", kWrongKey)});
  EXPECT_EQ(wrong.status.code, 10) << wrong.err;  // UNAUTHENTICATED
  EXPECT_TRUE(absl::StrContains(wrong.err, "UNAUTHENTICATED")) << wrong.err;
  EXPECT_FALSE(absl::StrContains(wrong.err, kWrongKey)) << wrong.err;
  // The flag wins over the environment.
  CommandResult flag_wins = run({absl::StrCat("--api_key=", kAliceKey), "info"},
                                {absl::StrCat("KVSERVE_API_KEY=", kWrongKey)});
  EXPECT_TRUE(flag_wins.status.success()) << flag_wins.err;
}

TEST(ApiKeysReloadTest, SighupPicksUpNewKeysDropsRemovedOnesKeepsOldOnError) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string keys = dir.File("keys");
  ASSERT_TRUE(WriteTextFile(keys, KeyLine("alice", kAliceKey)));
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--api_keys_file=" + keys);
  absl::StatusOr<std::unique_ptr<ServerProcess>> started =
      ServerProcess::Start(flags);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  EXPECT_TRUE(absl::StrContains(server.stderr_text(),
                                absl::StrCat("1 API keys from ", keys)));
  auto model_info_as = [&](absl::string_view key) {
    ConnectOptions options;
    options.api_key = std::string(key);
    return (*ConnectClient(server, options))->GetModelInfo().status();
  };
  EXPECT_TRUE(model_info_as(kAliceKey).ok());
  EXPECT_EQ(model_info_as(kBobKey).code(), absl::StatusCode::kUnauthenticated);

  ASSERT_TRUE(
      WriteTextFile(keys, "# alice's key revoked\n" + KeyLine("bob", kBobKey)));
  ASSERT_TRUE(server.SendSignal(SIGHUP).ok());
  ASSERT_TRUE(WaitForStderr(server, "SIGHUP: reloaded 1 API keys"))
      << server.stderr_text();
  EXPECT_TRUE(model_info_as(kBobKey).ok());
  EXPECT_EQ(model_info_as(kAliceKey).code(),
            absl::StatusCode::kUnauthenticated);

  ASSERT_TRUE(WriteTextFile(keys, KeyLine("carol", "carol-key") + "oops\n"));
  ASSERT_TRUE(server.SendSignal(SIGHUP).ok());
  ASSERT_TRUE(WaitForStderr(server, "API keys not reloaded"))
      << server.stderr_text();
  EXPECT_TRUE(absl::StrContains(server.stderr_text(), keys + ":2: "))
      << server.stderr_text();
  EXPECT_TRUE(model_info_as(kBobKey).ok());
  EXPECT_EQ(model_info_as("carol-key").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(server.running());
}

}  // namespace
}  // namespace kvserve::testing
