#include "server/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Hex(const Sha256Digest& digest) {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
}

std::string Line(const std::string& owner, const std::string& key) {
  return absl::StrCat(owner, " ", Hex(Sha256(key)), "\n");
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Hex(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ParseApiKeysTest, CommentsBlankLinesAndBothHexCases) {
  const std::string upper = absl::AsciiStrToUpper(Hex(Sha256("k2")));
  absl::StatusOr<std::vector<ApiKey>> keys = ParseApiKeys(
      "# owners of the staging keys\n"
      "\n" +
          Line("alice", "k1") + "  bob\t" + upper +
          "   # rotated 2024-05\r\n"
          "   \n" +
          Line("alice", "k3") + Line("admin", "root"),
      "keys.txt");
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 4u);
  EXPECT_EQ((*keys)[0].owner, "alice");
  EXPECT_EQ((*keys)[0].sha256, Sha256("k1"));
  EXPECT_EQ((*keys)[1].owner, "bob");
  EXPECT_EQ((*keys)[1].sha256, Sha256("k2"));
  EXPECT_EQ((*keys)[2].owner, "alice");  // a second key of one owner
  EXPECT_EQ((*keys)[3].owner, "admin");
}

TEST(ParseApiKeysTest, EmptyTextHasNoKeys) {
  absl::StatusOr<std::vector<ApiKey>> keys = ParseApiKeys("# none\n", "f");
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->empty());
}

TEST(ParseApiKeysTest, BadLinesAreNamedWithTheirNumberAndReason) {
  const std::string good = Line("alice", "k1");
  const std::string hex = Hex(Sha256("k9"));
  struct Case {
    std::string bad_line;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{
           {"alice\n", "1 fields"},
           {"alice " + hex + " extra\n", "3 fields"},
           {"alice " + hex + "  -\n", "drop the \"-\" that sha256sum prints"},
           {"alice " + hex.substr(1) + "\n", "not 64 hex digits"},
           {"alice " + hex.substr(1) + "g\n", "not 64 hex digits"},
           {"al/ice " + hex + "\n", "outside [A-Za-z0-9._@:+-]"},
           {std::string(129, 'a') + " " + hex + "\n", "longer than 128"},
           {"bob " + Hex(Sha256("k1")) + "\n", "the same key hash as line 2"},
       }) {
    absl::StatusOr<std::vector<ApiKey>> keys =
        ParseApiKeys("# header\n" + good + c.bad_line + good, "/etc/keys");
    ASSERT_FALSE(keys.ok()) << c.bad_line;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(keys.status().message(), HasSubstr("/etc/keys:3: "))
        << c.bad_line;
    EXPECT_THAT(keys.status().message(), HasSubstr(c.reason)) << c.bad_line;
    EXPECT_THAT(keys.status().message(), HasSubstr("sha256sum"));
  }
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/auth_test_keys_", getpid());
    Write(Line("alice", "alice-key") + Line("admin", "root-key"));
    absl::StatusOr<std::unique_ptr<Authenticator>> auth =
        Authenticator::Create({.api_keys_file = path_});
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
  }
  void TearDown() override { std::remove(path_.c_str()); }

  void Write(const std::string& text) {
    std::ofstream out(path_, std::ios::trunc);
    out << text;
  }
  absl::StatusOr<Caller> As(std::optional<std::string_view> authorization,
                            std::string_view owner = "") {
    return auth_->Authenticate(authorization, owner);
  }

  std::string path_;
  std::unique_ptr<Authenticator> auth_;
};

TEST_F(AuthenticatorTest, TheOwnerComesFromTheKey) {
  absl::StatusOr<Caller> caller = As("Bearer alice-key");
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->owner, "alice");
  EXPECT_FALSE(caller->admin);
  // The scheme is case-insensitive (RFC 6750); the owner field may repeat
  // the key's owner.
  caller = As("bearer alice-key", "alice");
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->owner, "alice");
  caller = As("Bearer root-key");
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->owner, "admin");
  EXPECT_TRUE(caller->admin);
}

TEST_F(AuthenticatorTest, AnotherOwnerInTheRequestIsPermissionDenied) {
  absl::StatusOr<Caller> caller = As("Bearer alice-key", "bob");
  ASSERT_FALSE(caller.ok());
  EXPECT_EQ(caller.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(caller.status().message(), HasSubstr("\"bob\""));
  EXPECT_THAT(caller.status().message(), Not(HasSubstr("alice-key")));
}

TEST_F(AuthenticatorTest, MissingMalformedOrWrongKeysAreUnauthenticated) {
  struct Case {
    std::optional<std::string_view> authorization;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{
           {std::nullopt, "missing API key"},
           {"alice-key", "is not \"Bearer KEY\""},
           {"Basic YWxpY2U6eA==", "is not \"Bearer KEY\""},
           {"Bearer ", "empty API key"},
           {"Bearer not-the-alice-key", "the API key is not valid"},
           {"Bearer alice-key2", "the API key is not valid"},
       }) {
    absl::StatusOr<Caller> caller = As(c.authorization, "alice");
    ASSERT_FALSE(caller.ok()) << c.reason;
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(caller.status().message(), HasSubstr(c.reason));
    EXPECT_THAT(caller.status().message(),
                HasSubstr("authorization: Bearer KEY"));
    EXPECT_THAT(caller.status().message(), Not(HasSubstr("not-the-alice")));
    EXPECT_THAT(caller.status().message(), Not(HasSubstr("key2")));
  }
}

// Over HTTP the message names the Authorization header (it spoke of gRPC
// metadata and kvctl).
TEST_F(AuthenticatorTest, HttpMessagesNameTheAuthorizationHeader) {
  for (std::optional<std::string_view> authorization :
       {std::optional<std::string_view>(),
        std::optional<std::string_view>("Basic YWxpY2U6eA==")}) {
    absl::StatusOr<Caller> caller =
        auth_->Authenticate(authorization, "", Authenticator::Via::kHttpHeader);
    ASSERT_FALSE(caller.ok());
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(caller.status().message(),
                HasSubstr("\"Authorization: Bearer KEY\""));
    EXPECT_THAT(caller.status().message(), Not(HasSubstr("metadata")));
    EXPECT_THAT(caller.status().message(), Not(HasSubstr("kvctl")));
  }
}

TEST_F(AuthenticatorTest, ReloadPicksUpNewKeysAndDropsRemovedOnes) {
  Write(Line("bob", "bob-key"));
  ASSERT_TRUE(auth_->Reload().ok());
  EXPECT_EQ(auth_->key_count(), 1u);
  EXPECT_EQ(As("Bearer bob-key")->owner, "bob");
  EXPECT_EQ(As("Bearer alice-key").status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthenticatorTest, ABadReloadKeepsTheOldKeysAndSaysWhy) {
  Write(Line("bob", "bob-key") + "carol 1234\n");
  absl::Status reload = auth_->Reload();
  EXPECT_EQ(reload.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reload.message(), HasSubstr(path_ + ":2: "));
  EXPECT_EQ(auth_->key_count(), 2u);
  EXPECT_EQ(As("Bearer alice-key")->owner, "alice");
  EXPECT_FALSE(As("Bearer bob-key").ok());

  std::remove(path_.c_str());
  reload = auth_->Reload();
  EXPECT_THAT(reload.message(), HasSubstr("cannot read the API keys file"));
  EXPECT_EQ(As("Bearer alice-key")->owner, "alice");
}

TEST(AuthenticatorWithoutKeysTest, TheRequestNamesTheOwner) {
  absl::StatusOr<std::unique_ptr<Authenticator>> auth =
      Authenticator::Create({});
  ASSERT_TRUE(auth.ok());
  EXPECT_FALSE((*auth)->keys_required());
  for (std::string_view owner : {"", "a", "admin"}) {
    absl::StatusOr<Caller> caller = (*auth)->Authenticate(std::nullopt, owner);
    ASSERT_TRUE(caller.ok());
    EXPECT_EQ(caller->owner, owner);
    // "admin" is an owner like any other without keys.
    EXPECT_FALSE(caller->admin);
  }
  // A key sent to a server without keys is not looked at.
  EXPECT_EQ((*auth)->Authenticate("Bearer x", "b")->owner, "b");
  EXPECT_EQ((*auth)->Reload().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AuthenticatorCreateTest, AMissingOrBadFileIsRefused) {
  absl::StatusOr<std::unique_ptr<Authenticator>> auth =
      Authenticator::Create({.api_keys_file = "/nonexistent/keys"});
  ASSERT_FALSE(auth.ok());
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.status().message(), HasSubstr("/nonexistent/keys"));
}

}  // namespace
}  // namespace kvserve
