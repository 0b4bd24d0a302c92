// SessionStore: the server's sessions. A session is a conversation's token
// history (BOS included) and the KV cache of a prefix of it.
//
// Invariant: kv.table.num_tokens() <= tokens.size(); positions [0,
// kv.table.num_tokens()) of the cache hold the K/V of those tokens.
//
// Thread-safety: not thread-safe. The engine thread owns the store (every
// session call reaches it through the engine's queue), so session state and
// KV blocks are only ever touched by that one thread.
#ifndef KVSERVE_CORE_SESSION_SESSION_STORE_H_
#define KVSERVE_CORE_SESSION_SESSION_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/chat/chat_message.h"
#include "core/kv/prefix_cache.h"

namespace kvserve {

struct Session {
  Session(std::string id, BlockPool* pool) : id(std::move(id)), kv(pool) {}

  const std::string id;  // 32 hex digits: 128 random bits
  std::string owner;     // empty: anyone may use it
  std::vector<int32_t> tokens;
  // A chat session's conversation (chat turns append to it; the tokens are
  // its rendering). Empty for a session used with text or tokens only.
  std::vector<ChatMessage> messages;
  CachedKv kv;
  std::optional<absl::Duration> ttl;  // idle time before deletion
  absl::Time create_time;
  absl::Time last_used;
  bool busy = false;       // a Generate or Append is running on it
  bool ephemeral = false;  // deleted when its only request ends
  // Where its history and KV are kept on disk is SessionTiers' business.
};

struct SessionPage {
  std::vector<const Session*> sessions;
  std::string next_page_token;  // empty on the last page
};

// 32 lowercase hex digits, the form of every session id.
bool IsValidSessionId(std::string_view id);

class SessionStore {
 public:
  // REQUIRES: pool outlives the store.
  explicit SessionStore(BlockPool* pool);

  Session* Create(std::string owner, std::optional<absl::Duration> ttl,
                  absl::Time now);
  // A session with a known id (restored from disk); null if it exists.
  Session* Insert(std::string id, std::string owner,
                  std::optional<absl::Duration> ttl, absl::Time create_time,
                  absl::Time now);

  // NOT_FOUND for an unknown id, and for a session of another owner (so
  // ids of others' sessions are not revealed). Owners match exactly: the
  // empty owner (no API keys, no owner given) is an owner like any other.
  absl::StatusOr<Session*> Lookup(std::string_view id, std::string_view owner);
  // The session with this id whoever owns it, or null: for the engine's own
  // bookkeeping, never to answer a client.
  Session* Get(std::string_view id);

  // Frees the session's blocks at once. REQUIRES: the session is not busy.
  void Delete(std::string_view id);

  // Sessions of `owner` (of every owner when all_owners) in id order,
  // after `page_token`. INVALID_ARGUMENT for a page_size outside [0, 1000].
  absl::StatusOr<SessionPage> List(std::string_view owner, bool all_owners,
                                   std::string_view page_token,
                                   int page_size) const;

  // Deletes idle sessions whose TTL has passed; returns their ids.
  std::vector<std::string> ExpireIdle(absl::Time now);

  // The least-recently-used idle session holding KV blocks, or null.
  Session* LeastRecentlyUsedIdleWithKv();

  template <typename F>
  void ForEach(F f) {
    for (auto& [id, s] : sessions_) f(*s);
  }

  int64_t size() const { return sessions_.size(); }

 private:
  BlockPool* pool_;
  absl::BitGen bitgen_;  // seeded from the OS's entropy
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_SESSION_SESSION_STORE_H_
