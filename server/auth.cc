#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/status.h"

namespace kvserve {
namespace {

constexpr size_t kMaxOwnerBytes = 128;

bool IsOwnerChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("._@:+-").find(c) != absl::string_view::npos;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 64 hex digits, either case.
std::optional<Sha256Digest> ParseDigest(absl::string_view hex) {
  Sha256Digest digest;
  if (hex.size() != 2 * digest.size()) return std::nullopt;
  for (size_t i = 0; i < digest.size(); ++i) {
    const int high = HexValue(hex[2 * i]);
    const int low = HexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    digest[i] = static_cast<unsigned char>(high << 4 | low);
  }
  return digest;
}

absl::Status Unauthenticated(absl::string_view why, Authenticator::Via via) {
  if (via == Authenticator::Via::kHttpHeader) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "%s: this server needs the header \"Authorization: Bearer KEY\" on "
        "every request but GET /health",
        why));
  }
  return absl::UnauthenticatedError(absl::StrFormat(
      "%s: this server needs the metadata \"%s: Bearer KEY\" on every "
      "kvserve.v1 call (kvctl --api_key or KVSERVE_API_KEY)",
      why, Authenticator::kMetadataKey));
}

}  // namespace

Sha256Digest Sha256(std::string_view data) {
  Sha256Digest digest;
  unsigned int size = 0;
  // EVP_Digest cannot fail for SHA-256 on a buffer in memory.
  EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(),
             nullptr);
  return digest;
}

absl::StatusOr<std::vector<ApiKey>> ParseApiKeys(std::string_view text,
                                                 std::string_view source) {
  std::vector<ApiKey> keys;
  std::vector<int> line_of;  // the line of each key, for duplicates
  int line_number = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: %s (expected OWNER SHA256HEX, the hex SHA-256 of the key: "
          "printf %%s KEY | sha256sum)",
          source, line_number, why));
    };
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    if (fields.size() == 3 && fields[2] == "-") {
      return bad(
          "3 fields: drop the \"-\" that sha256sum prints after the "
          "hash");
    }
    if (fields.size() != 2) {
      return bad(absl::StrFormat("%d fields", fields.size()));
    }
    const absl::string_view owner = fields[0];
    if (owner.size() > kMaxOwnerBytes) {
      return bad(
          absl::StrFormat("the owner is longer than %d bytes", kMaxOwnerBytes));
    }
    for (char c : owner) {
      if (!IsOwnerChar(c)) {
        return bad(absl::StrFormat(
            "the owner \"%s\" has a character outside [A-Za-z0-9._@:+-]",
            absl::CHexEscape(owner)));
      }
    }
    std::optional<Sha256Digest> digest = ParseDigest(fields[1]);
    if (!digest.has_value()) {
      return bad(absl::StrFormat(
          "the second field is not 64 hex digits (it has %d characters)",
          fields[1].size()));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].sha256 == *digest) {
        return bad(absl::StrFormat(
            "the same key hash as line %d: a key stands for one owner",
            line_of[i]));
      }
    }
    keys.push_back(ApiKey{std::string(owner), *digest});
    line_of.push_back(line_number);
  }
  return keys;
}

absl::StatusOr<std::vector<ApiKey>> ReadApiKeysFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot read the API keys file %s: %s", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot read the API keys file %s", path));
  }
  return ParseApiKeys(text.str(), path);
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(
    const Options& options) {
  auto keys = std::make_shared<Keys>();
  if (!options.api_keys_file.empty()) {
    absl::StatusOr<Keys> read = ReadApiKeysFile(options.api_keys_file);
    if (!read.ok()) return read.status();
    *keys = *std::move(read);
  }
  return std::unique_ptr<Authenticator>(
      new Authenticator(options, std::move(keys)));
}

std::shared_ptr<const Authenticator::Keys> Authenticator::keys() const {
  absl::MutexLock lock(&mu_);
  return keys_;
}

size_t Authenticator::key_count() const { return keys()->size(); }

absl::Status Authenticator::Reload() {
  if (!keys_required()) {
    return absl::FailedPreconditionError(
        "no --api_keys_file: there are no keys to reload");
  }
  absl::StatusOr<Keys> read = ReadApiKeysFile(options_.api_keys_file);
  if (!read.ok()) return read.status();
  auto keys = std::make_shared<const Keys>(*std::move(read));
  absl::MutexLock lock(&mu_);
  keys_ = std::move(keys);
  return absl::OkStatus();
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    std::optional<std::string_view> authorization,
    std::string_view requested_owner, Via via) const {
  if (!keys_required()) return Caller{std::string(requested_owner), false};
  if (!authorization.has_value())
    return Unauthenticated("missing API key", via);
  absl::string_view value(authorization->data(), authorization->size());
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return Unauthenticated(
        absl::StrFormat("the %s is not \"Bearer KEY\"",
                        via == Via::kHttpHeader ? "Authorization header"
                                                : "authorization metadata"),
        via);
  }
  const absl::string_view key =
      absl::StripAsciiWhitespace(value.substr(kScheme.size()));
  if (key.empty()) return Unauthenticated("empty API key", via);
  const Sha256Digest digest = Sha256(std::string_view(key.data(), key.size()));
  // Every entry is compared, in constant time, whatever matched before.
  const std::shared_ptr<const Keys> keys = this->keys();
  const ApiKey* match = nullptr;
  for (const ApiKey& entry : *keys) {
    if (CRYPTO_memcmp(entry.sha256.data(), digest.data(), digest.size()) == 0) {
      match = &entry;
    }
  }
  if (match == nullptr) return Unauthenticated("the API key is not valid", via);
  if (!requested_owner.empty() && requested_owner != match->owner) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "the request names owner %s, which is not its API key's owner: with "
        "API keys the key decides the owner (leave owner empty)",
        QuoteClientText(requested_owner)));
  }
  return Caller{match->owner, match->owner == kAdminOwner};
}

}  // namespace kvserve
