#include "core/session/session_store.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "core/util/check.h"
#include "core/util/quote.h"

namespace kvserve {

bool IsValidSessionId(std::string_view id) {
  return id.size() == 32 &&
         id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

SessionStore::SessionStore(BlockPool* pool) : pool_(pool) {}

Session* SessionStore::Create(std::string owner,
                              std::optional<absl::Duration> ttl,
                              absl::Time now) {
  std::string id;
  do {
    id = absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(bitgen_),
                         absl::Uniform<uint64_t>(bitgen_));
  } while (sessions_.contains(id));
  return Insert(std::move(id), std::move(owner), ttl, now, now);
}

Session* SessionStore::Insert(std::string id, std::string owner,
                              std::optional<absl::Duration> ttl,
                              absl::Time create_time, absl::Time now) {
  if (sessions_.contains(id)) return nullptr;
  auto session = std::make_unique<Session>(id, pool_);
  // Each owner's prompts are cached apart (CachedKv::salt).
  session->kv.salt = owner.empty() ? 0 : absl::Hash<std::string>{}(owner) | 1;
  session->owner = std::move(owner);
  session->ttl = ttl;
  session->create_time = create_time;
  session->last_used = now;
  Session* raw = session.get();
  sessions_.emplace(std::move(id), std::move(session));
  return raw;
}

Session* SessionStore::Get(std::string_view id) {
  auto it = sessions_.find(absl::string_view(id.data(), id.size()));
  return it == sessions_.end() ? nullptr : it->second.get();
}

absl::StatusOr<Session*> SessionStore::Lookup(std::string_view id,
                                              std::string_view owner) {
  auto it = sessions_.find(absl::string_view(id.data(), id.size()));
  if (it == sessions_.end() || it->second->owner != owner) {
    return absl::NotFoundError(
        absl::StrFormat("session %s not found", QuoteClientText(id)));
  }
  return it->second.get();
}

void SessionStore::Delete(std::string_view id) {
  auto it = sessions_.find(absl::string_view(id.data(), id.size()));
  if (it == sessions_.end()) return;
  KVSERVE_CHECK(!it->second->busy);
  sessions_.erase(it);
}

absl::StatusOr<SessionPage> SessionStore::List(std::string_view owner,
                                               bool all_owners,
                                               std::string_view page_token,
                                               int page_size) const {
  if (page_size < 0 || page_size > 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("page_size must be in [0, 1000], got %d", page_size));
  }
  if (page_size == 0) page_size = 100;
  std::vector<const Session*> matching;
  for (const auto& [id, s] : sessions_) {
    if (id > page_token && (all_owners || s->owner == owner) && !s->ephemeral) {
      matching.push_back(s.get());
    }
  }
  std::sort(matching.begin(), matching.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  SessionPage page;
  if (static_cast<int>(matching.size()) > page_size) {
    matching.resize(page_size);
    page.next_page_token = matching.back()->id;
  }
  page.sessions = std::move(matching);
  return page;
}

std::vector<std::string> SessionStore::ExpireIdle(absl::Time now) {
  std::vector<std::string> expired;
  for (const auto& [id, s] : sessions_) {
    if (!s->busy && s->ttl.has_value() && now - s->last_used > *s->ttl) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) sessions_.erase(id);
  return expired;
}

Session* SessionStore::LeastRecentlyUsedIdleWithKv() {
  Session* victim = nullptr;
  for (const auto& [id, s] : sessions_) {
    if (s->busy || s->kv.table.blocks().empty()) continue;
    if (victim == nullptr || s->last_used < victim->last_used) {
      victim = s.get();
    }
  }
  return victim;
}

}  // namespace kvserve
