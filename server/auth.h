// API keys and the owner of each call.
//
// A keys file (--api_keys_file) has one `OWNER SHA256HEX` pair per line: the
// owner the key stands for and the hex SHA-256 of the key (make one with
// `printf %s KEY | sha256sum`). `#` starts a comment; blank lines are
// skipped. An owner may have several keys (rotation); a key stands for one
// owner. The server holds only digests: a presented key is hashed and its
// digest compared with every entry's by CRYPTO_memcmp, all of them, so the
// time taken says nothing about the key or which entry matched.
//
// With keys, the owner of a call is its key's owner and never the
// request's `owner` field: a field that names another owner is refused
// (PERMISSION_DENIED); empty or the same owner is accepted. Without keys,
// the owner is the request's field as given (the empty owner included).
#ifndef KVSERVE_SERVER_AUTH_H_
#define KVSERVE_SERVER_AUTH_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvserve {

using Sha256Digest = std::array<unsigned char, 32>;

Sha256Digest Sha256(std::string_view data);

// The owner whose keys may list every owner's sessions.
inline constexpr char kAdminOwner[] = "admin";

struct ApiKey {
  std::string owner;
  Sha256Digest sha256;
};

// The entries of a keys file's text. INVALID_ARGUMENT naming `source`:LINE
// and what is wrong with it, for the first bad line: not two fields, an
// owner outside [A-Za-z0-9._@:+-] or longer than 128 bytes, a digest that is
// not 64 hex digits, a digest already on an earlier line.
absl::StatusOr<std::vector<ApiKey>> ParseApiKeys(std::string_view text,
                                                 std::string_view source);
// ParseApiKeys of the file's contents; an unreadable file names the path.
absl::StatusOr<std::vector<ApiKey>> ReadApiKeysFile(const std::string& path);

// Who made a call.
struct Caller {
  std::string owner;
  // With keys only: the key's owner is kAdminOwner.
  bool admin = false;
};

// Turns a call's `authorization` metadata and `owner` field into its Caller.
//
// Thread-safe: Authenticate may run on many threads while Reload replaces
// the keys (a call sees the old keys or the new ones, never a mix).
class Authenticator {
 public:
  // The gRPC metadata key that carries "Bearer KEY" (lowercase, as gRPC
  // requires of metadata keys).
  static constexpr char kMetadataKey[] = "authorization";

  struct Options {
    // Empty: no keys; every call is the owner its request names.
    std::string api_keys_file;
  };

  // INVALID_ARGUMENT (from ReadApiKeysFile) for a bad keys file.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(
      const Options& options);

  // Whether calls need a key (--api_keys_file was given).
  bool keys_required() const { return !options_.api_keys_file.empty(); }
  size_t key_count() const;

  // Re-reads the keys file. On error the current keys stay and the error
  // says why; FAILED_PRECONDITION without a keys file.
  absl::Status Reload();

  // `authorization`: the metadata value, nullopt when the call sent none.
  // With keys: UNAUTHENTICATED for a missing, malformed or unknown key (the
  // message says which, never the key), PERMISSION_DENIED for an
  // `requested_owner` other than the key's.
  // `via` words the UNAUTHENTICATED message for its protocol.
  enum class Via { kGrpcMetadata, kHttpHeader };
  absl::StatusOr<Caller> Authenticate(
      std::optional<std::string_view> authorization,
      std::string_view requested_owner, Via via = Via::kGrpcMetadata) const;

 private:
  using Keys = std::vector<ApiKey>;
  Authenticator(const Options& options, std::shared_ptr<const Keys> keys)
      : options_(options), keys_(std::move(keys)) {}
  std::shared_ptr<const Keys> keys() const;

  const Options options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Keys> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_SERVER_AUTH_H_
