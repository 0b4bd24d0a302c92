// The engine's session commands: each runs on the engine thread, and those
// that write the session's log reply once the write is on disk.
#include <utility>

#include "absl/strings/str_format.h"
#include "core/engine/engine.h"
#include "core/util/quote.h"

namespace kvserve {
namespace {

// Calls back with the session once an initial prefill finishes.
class CreateSessionSink : public TokenSink {
 public:
  explicit CreateSessionSink(
      absl::AnyInvocable<void(absl::StatusOr<GenerateResult>) &&> done)
      : done_(std::move(done)) {}
  void OnToken(GeneratedToken) override {}
  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    std::move(done_)(std::move(result));
    delete this;
  }

 private:
  absl::AnyInvocable<void(absl::StatusOr<GenerateResult>) &&> done_;
};

// A session deleted (or expired) while its write was under way.
absl::Status SessionGone(std::string_view id) {
  return absl::NotFoundError(absl::StrFormat(
      "session %s was deleted while its log was being written", id));
}

// A new session whose log could not be written (a full disk, say): it is
// not kept, and the client may retry (UNAVAILABLE, as for a turn).
absl::Status NotDurable(std::string_view id, const absl::Status& logged) {
  return absl::UnavailableError(absl::StrFormat(
      "session %s could not be made durable, so it was not created: %s", id,
      logged.message()));
}

}  // namespace

SessionTiers::Done Engine::OnEngineThread(
    absl::AnyInvocable<void(absl::Status) &&> then) {
  return [this, then = std::move(then)](absl::Status status) mutable {
    // A status of its own, not a copy sharing the writer's representation:
    // Debian's Abseil counts a Status's references in uninstrumented code,
    // so ThreadSanitizer would see the writer thread free what this one
    // reads. (Writes' statuses carry no payloads.)
    absl::Status own =
        status.ok()
            ? absl::OkStatus()
            : absl::Status(status.code(), std::string(status.message()));
    RunOnEngineThread([then = std::move(then), own = std::move(own)]() mutable {
      std::move(then)(std::move(own));
    });
  };
}

SessionInfo Engine::Describe(const Session& s, bool include_tokens) const {
  SessionInfo info;
  info.id = s.id;
  info.owner = s.owner;
  info.num_tokens = s.tokens.size();
  info.kv_tokens = s.kv.table.num_tokens();
  info.kv_bytes = s.kv.table.num_tokens() * pool_->bytes_per_token();
  info.tier = std::string(TierName(tiers_->TierOf(s)));
  info.create_time = s.create_time;
  info.last_used = s.last_used;
  info.ttl = s.ttl;
  info.busy = s.busy;
  if (include_tokens) {
    info.tokens = s.tokens;
    info.messages = s.messages;
  }
  return info;
}

absl::Status Engine::CheckSessionLimits(std::string_view owner) {
  int64_t total = 0, owned = 0;
  sessions_->ForEach([&](const Session& s) {
    if (s.ephemeral) return;
    ++total;
    if (s.owner == owner) ++owned;
  });
  if (options_.max_sessions > 0 && total >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d sessions exist, the most this server keeps (--max_sessions=%d): "
        "delete some, or give them a TTL",
        total, options_.max_sessions));
  }
  if (options_.max_sessions_per_owner > 0 &&
      owned >= options_.max_sessions_per_owner) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this owner has %d sessions, the most one owner may keep "
        "(--max_sessions_per_owner=%d)",
        owned, options_.max_sessions_per_owner));
  }
  return absl::OkStatus();
}

void Engine::CreateSession(CreateSessionParams params,
                           Callback<SessionInfo> done) {
  // An initial prefill is a request like any other: it waits in the same
  // queue, under the same limits.
  const auto* text = std::get_if<std::string>(&params.initial);
  std::shared_ptr<void> slot;
  if (text == nullptr || !text->empty()) {
    absl::Status rejected = CheckPromptBytes(params.initial);
    if (rejected.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      rejected = QueueStatusLocked();
      if (rejected.ok()) slot = TakeQueuePlaceLocked();
    }
    if (!rejected.ok()) return std::move(done)(rejected);
  }
  if (!params.ttl.has_value()) params.ttl = options_.default_ttl;
  Post([this, params = std::move(params), done = std::move(done),
        slot = std::move(slot)](absl::Status accepted) mutable {
    if (!accepted.ok()) return std::move(done)(accepted);
    if (absl::Status full = CheckSessionLimits(params.owner); !full.ok()) {
      return std::move(done)(full);
    }
    Session* s = nullptr;
    if (params.id.empty()) {
      s = sessions_->Create(params.owner, params.ttl, absl::Now());
    } else if (!IsValidSessionId(params.id)) {
      return std::move(done)(absl::InvalidArgumentError(
          absl::StrFormat("session_id %s is not 32 lowercase hex digits",
                          QuoteClientText(params.id))));
    } else if (tiers_->Exists(params.id)) {
      return std::move(done)(absl::AlreadyExistsError(
          absl::StrFormat("session %s already exists", params.id)));
    } else {
      const absl::Time now = absl::Now();
      s = sessions_->Insert(params.id, params.owner, params.ttl, now, now);
    }
    const auto* text = std::get_if<std::string>(&params.initial);
    if (text != nullptr && text->empty()) {
      return StartSessionLog(*s, std::move(done));
    }
    // The initial input is prefilled like an Append, before the log is
    // started: its first record holds the initial tokens, so a crash
    // mid-create leaves no session rather than an empty one whose
    // CreateSession the client never saw succeed.
    const std::string id = s->id;
    GenerateParams gp;
    gp.session_id = id;
    gp.owner = params.owner;
    gp.prompt = std::move(params.initial);
    gp.parse_special = params.parse_special;
    gp.generate = false;
    auto* sink = new CreateSessionSink(
        [this, id, done = std::move(done)](
            absl::StatusOr<GenerateResult> result) mutable {
          Session* found = sessions_->Get(id);
          if (result.ok() && result->session.has_value() && found != nullptr) {
            return StartSessionLog(*found, std::move(done));
          }
          if (found != nullptr && !found->busy) sessions_->Delete(id);
          if (!result.ok()) return std::move(done)(result.status());
          if (found == nullptr) return std::move(done)(SessionGone(id));
          std::move(done)(absl::InternalError(absl::StrFormat(
              "session %s: the initial prefill returned no session", id)));
        });
    // The prefill keeps the place until the scheduler admits it.
    auto call = std::make_shared<GenerateCall>(std::move(gp), sink);
    call->HoldQueuePlace(std::move(slot));
    Enqueue(Submitted{std::move(call), absl::Now()});
  });
}

void Engine::StartSessionLog(Session& s, Callback<SessionInfo> done) {
  tiers_->StartLog(s, OnEngineThread([this, id = s.id, done = std::move(done)](
                                         absl::Status logged) mutable {
                     Session* s = sessions_->Get(id);
                     if (s == nullptr) return std::move(done)(SessionGone(id));
                     if (!logged.ok()) {
                       sessions_->Delete(id);
                       tiers_->Remove(id);
                       return std::move(done)(NotDurable(id, logged));
                     }
                     std::move(done)(Describe(*s, false));
                   }));
}

void Engine::GetSession(std::string id, std::string owner, bool include_tokens,
                        Callback<SessionInfo> done) {
  Reply<SessionInfo>(std::move(done),
                     [=, this]() -> absl::StatusOr<SessionInfo> {
                       absl::StatusOr<Session*> s = tiers_->Find(id, owner);
                       if (!s.ok()) return s.status();
                       return Describe(**s, include_tokens);
                     });
}

void Engine::ListSessions(std::string owner, bool all_owners,
                          std::string page_token, int page_size,
                          Callback<SessionList> done) {
  Reply<SessionList>(
      std::move(done), [=, this]() -> absl::StatusOr<SessionList> {
        absl::StatusOr<SessionPage> page =
            sessions_->List(owner, all_owners, page_token, page_size);
        if (!page.ok()) return page.status();
        SessionList list;
        for (const Session* s : page->sessions) {
          list.sessions.push_back(Describe(*s, false));
        }
        list.next_page_token = page->next_page_token;
        return list;
      });
}

void Engine::DeleteSession(std::string id, std::string owner,
                           Callback<bool> done) {
  Post([=, this, done = std::move(done)](absl::Status accepted) mutable {
    if (!accepted.ok()) return std::move(done)(accepted);
    absl::StatusOr<Session*> s = tiers_->FindIdle(id, owner);
    if (!s.ok()) return std::move(done)(s.status());
    sessions_->Delete(id);
    if (observer_) observer_->OnEviction("deleted");
    // Replicas sharing the directory see the deletion once this replies.
    tiers_->Remove(
        id,
        OnEngineThread([done = std::move(done)](absl::Status removed) mutable {
          if (!removed.ok() && !absl::IsCancelled(removed)) {
            return std::move(done)(removed);
          }
          std::move(done)(true);
        }));
  });
}

void Engine::ForkSession(std::string id, std::string owner,
                         std::optional<absl::Duration> ttl,
                         Callback<SessionInfo> done) {
  Post([=, this, done = std::move(done)](absl::Status accepted) mutable {
    if (!accepted.ok()) return std::move(done)(accepted);
    absl::StatusOr<Session*> parent = tiers_->Find(id, owner);
    if (!parent.ok()) return std::move(done)(parent.status());
    if (absl::Status full = CheckSessionLimits((*parent)->owner); !full.ok()) {
      return std::move(done)(full);
    }
    if (!ttl.has_value()) ttl = (*parent)->ttl;
    if (!ttl.has_value()) ttl = options_.default_ttl;
    Session* child = sessions_->Create((*parent)->owner, ttl, absl::Now());
    child->tokens = (*parent)->tokens;
    child->messages = (*parent)->messages;
    child->kv = (*parent)->kv.Fork();
    StartSessionLog(*child, std::move(done));
  });
}

void Engine::TruncateSession(std::string id, std::string owner, int64_t tokens,
                             Callback<SessionInfo> done) {
  Post([=, this, done = std::move(done)](absl::Status accepted) mutable {
    if (!accepted.ok()) return std::move(done)(accepted);
    absl::StatusOr<Session*> found = tiers_->FindIdle(id, owner);
    if (!found.ok()) return std::move(done)(found.status());
    Session& s = **found;
    if (tokens < 0 || tokens > static_cast<int64_t>(s.tokens.size())) {
      return std::move(done)(absl::InvalidArgumentError(
          absl::StrFormat("tokens must be in [0, %d] for session %s, got %d",
                          s.tokens.size(), QuoteClientText(id), tokens)));
    }
    // The conversation no longer matches a cut history: the next chat turn
    // starts a new one (rendered against what is kept).
    if (tokens < static_cast<int64_t>(s.tokens.size())) s.messages.clear();
    s.tokens.resize(tokens);
    if (s.kv.table.num_tokens() > tokens) s.kv.Truncate(tokens);
    s.last_used = absl::Now();
    tiers_->Truncate(s, OnEngineThread([this, id, done = std::move(done)](
                                           absl::Status logged) mutable {
                       if (!logged.ok()) return std::move(done)(logged);
                       Session* s = sessions_->Get(id);
                       if (s == nullptr)
                         return std::move(done)(SessionGone(id));
                       std::move(done)(Describe(*s, false));
                     }));
  });
}

}  // namespace kvserve
