#include "core/session/session_tiers.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/session/session_dir.h"
#include "core/util/check.h"
#include "core/util/quote.h"

namespace kvserve {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kRam:
      return "ram";
    case Tier::kDisk:
      return "disk";
    case Tier::kTokens:
      return "tokens";
  }
  return "unknown";
}

namespace {

// absl's containers look strings up by absl::string_view, which this absl
// build does not alias to std::string_view.
absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

// A log is compacted (rewritten as a fresh start) when appending would make
// it more than twice the start's size and more than this: below one
// file-system block a rewrite frees no disk space, and it costs a directory
// fsync more than an append.
constexpr int64_t kCompactionMinBytes = 4096;

// One write for the writer thread.
struct Write {
  enum class Kind { kLog, kSnapshot, kRemoveSnapshot, kRemove, kBarrier };
  Kind kind = Kind::kBarrier;
  std::string id{};
  std::string record{};  // kLog: an encoded log record
  bool start = false;    // kLog: the record replaces the log
  std::shared_ptr<const std::string> snapshot{};  // kSnapshot
  bool warn = true;                               // a failure is warned about
  SessionTiers::Done done{};                      // may be null
  uint64_t ticket = 0;     // set by the writer: 1, 2, 3, ... in queue order
  bool cancelled = false;  // by Remove: skipped, Done gets CANCELLED
};

// The writer thread: runs writes one at a time in the order queued.
class Writer {
 public:
  Writer(SessionDir* dir, SessionTiers::Warn warn)
      : dir_(dir), warn_(std::move(warn)), thread_([this] { Run(); }) {}

  // Runs every queued write, then stops the thread.
  ~Writer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      paused_ = false;
    }
    changed_.notify_all();
    thread_.join();
  }

  // Returns the write's ticket.
  uint64_t Enqueue(Write w) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ticket = w.ticket = next_ticket_++;
      queue_.push_back(std::move(w));
    }
    changed_.notify_all();
    return ticket;
  }

  // Cancels the session's queued writes (not one already running) and
  // queues the removal of its files.
  void EnqueueRemove(std::string id, SessionTiers::Done done) {
    std::unique_lock<std::mutex> lock(mu_);
    for (Write& w : queue_) {
      if (w.id != id || w.cancelled) continue;
      w.cancelled = true;
      w.record.clear();
      w.snapshot.reset();
    }
    Write remove{.kind = Write::Kind::kRemove, .id = std::move(id)};
    remove.done = std::move(done);
    remove.ticket = next_ticket_++;
    removing_[remove.id] = remove.ticket;
    queue_.push_back(std::move(remove));
    lock.unlock();
    changed_.notify_all();
  }

  // Writes [1, ticket] are done, and no failed log write of the session
  // waits for TakeFailedLogs: the log's size is what the tiers expect.
  bool Settled(std::string_view id, uint64_t ticket) const {
    std::lock_guard<std::mutex> lock(mu_);
    return written_ >= ticket && !failed_logs_.contains(AbslView(id));
  }
  bool Written(uint64_t ticket) const {
    std::lock_guard<std::mutex> lock(mu_);
    return written_ >= ticket;
  }
  // A Remove of the session is queued or running.
  bool Removing(std::string_view id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return removing_.contains(AbslView(id));
  }
  // Sessions whose log writes failed since the last call, each with the
  // ticket of its newest failed write.
  absl::flat_hash_map<std::string, uint64_t> TakeFailedLogs() {
    absl::flat_hash_map<std::string, uint64_t> failed;
    std::lock_guard<std::mutex> lock(mu_);
    failed.swap(failed_logs_);
    return failed;
  }

  void Flush() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t last = next_ticket_ - 1;
    changed_.wait(lock, [this, last] { return finished_ >= last; });
  }

  void SetPaused(bool paused) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      paused_ = paused;
    }
    changed_.notify_all();
  }

 private:
  void Run() {
    while (std::optional<Write> w = Next()) {
      const uint64_t ticket = w->ticket;
      Execute(*std::move(w));
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = ticket;
      }
      changed_.notify_all();
    }
  }

  // The next write, once not paused; none when stopping with nothing left.
  std::optional<Write> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(
        lock, [this] { return stopping_ || (!paused_ && !queue_.empty()); });
    if (queue_.empty()) return std::nullopt;
    Write w = std::move(queue_.front());
    queue_.pop_front();
    return w;
  }

  // Takes `w` by value: its bytes and its Done's captures are gone when this
  // returns, before Flush may return.
  void Execute(Write w) {
    const absl::Status status =
        w.cancelled ? absl::CancelledError(absl::StrFormat(
                          "session %s was removed before this write", w.id))
                    : Perform(w);
    w.snapshot.reset();  // on disk now: ReadSnapshot reads the file
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_ = w.ticket;
      if (!status.ok() && !w.cancelled && w.kind == Write::Kind::kLog) {
        uint64_t& failed = failed_logs_[w.id];
        failed = std::max(failed, w.ticket);
      }
      if (w.kind == Write::Kind::kRemove) {
        auto it = removing_.find(w.id);
        if (it != removing_.end() && it->second == w.ticket) {
          removing_.erase(it);
        }
      }
    }
    if (!status.ok() && !w.cancelled && w.warn) {
      warn_(absl::StrFormat("session %s: %s", w.id, status.message()));
    }
    if (w.done) std::move(w.done)(status);
  }

  absl::Status Perform(const Write& w) {
    switch (w.kind) {
      case Write::Kind::kLog:
        return dir_->WriteRecord(w.id, w.record, w.start).status();
      case Write::Kind::kSnapshot:
        return dir_->WriteSnapshot(w.id, *w.snapshot);
      case Write::Kind::kRemoveSnapshot:
        dir_->RemoveSnapshot(w.id);
        return absl::OkStatus();
      case Write::Kind::kRemove:
        return dir_->Remove(w.id);
      case Write::Kind::kBarrier:
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  SessionDir* const dir_;
  const SessionTiers::Warn warn_;

  // std::mutex, not absl::Mutex: ThreadSanitizer sees these (Debian's
  // Abseil is not instrumented). Guards every field below; changed_ is
  // notified on each change a waiter may be waiting for.
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Write> queue_;
  uint64_t next_ticket_ = 1;
  uint64_t written_ = 0;   // writes [1, written_] done
  uint64_t finished_ = 0;  // ... and their Done run
  // Sessions whose Remove is queued or running, with its ticket.
  absl::flat_hash_map<std::string, uint64_t> removing_;
  absl::flat_hash_map<std::string, uint64_t> failed_logs_;
  bool paused_ = false;
  bool stopping_ = false;

  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace

struct SessionTiers::Impl {
  // What this process knows of a durable session's files.
  struct Durability {
    int64_t logged_tokens = 0;    // tokens [0, logged_tokens) logged or queued
    int64_t logged_messages = 0;  // the same for the conversation's messages
    int64_t log_bytes = 0;        // the log's size once its writes are done
    uint64_t log_start = 0;       // ticket of the write that (re)started it
    uint64_t last_log_write = 0;  // ticket of the newest log write
    bool has_snapshot = false;    // on disk, or queued
    int64_t snapshot_bytes = 0;   // its size (0 without one)
    int64_t snapshot_positions = -1;  // of the history held; -1: unknown
    // The bytes of a snapshot queued and not written yet (the writer holds
    // the only reference until then).
    std::weak_ptr<const std::string> unwritten_snapshot{};
  };

  Impl(const SessionTiersOptions& o, SessionStore* s, PrefixCache* p, Warn w)
      : options(o), store(s), prefix_cache(p), warn(std::move(w)) {}

  Durability* DurabilityOf(std::string_view id) {
    auto it = durable.find(AbslView(id));
    return it == durable.end() ? nullptr : &it->second;
  }

  absl::Status NotFound(std::string_view id) const {
    return absl::NotFoundError(
        absl::StrFormat("session %s not found", QuoteClientText(id)));
  }

  // Why a session read from the directory cannot be served, if it cannot.
  absl::Status Unusable(const StoredSession& stored) const {
    for (int32_t t : stored.tokens) {
      if (t < 0 || t >= options.vocab_size) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "session %s on disk has token %d outside this model's vocabulary "
            "[0, %d); not loaded",
            stored.id, t, options.vocab_size));
      }
    }
    if (static_cast<int64_t>(stored.tokens.size()) > options.max_context) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "session %s on disk holds %d tokens, more than the maximum context "
          "of %d; not loaded",
          stored.id, stored.tokens.size(), options.max_context));
    }
    return absl::OkStatus();
  }

  // Replaces the log with a fresh start holding s.tokens and s.messages.
  void QueueLogStart(const Session& s, Durability& d, bool warn_on_failure,
                     Done done) {
    std::string record =
        SessionDir::StartRecords(StoredSession{.id = s.id,
                                               .owner = s.owner,
                                               .ttl = s.ttl,
                                               .create_time = s.create_time,
                                               .tokens = s.tokens,
                                               .messages = s.messages});
    d.logged_tokens = s.tokens.size();
    d.logged_messages = s.messages.size();
    d.log_bytes = record.size();
    d.log_start = d.last_log_write =
        writer->Enqueue(Write{.kind = Write::Kind::kLog,
                              .id = s.id,
                              .record = std::move(record),
                              .start = true,
                              .warn = warn_on_failure,
                              .done = std::move(done)});
  }

  // Logs "keep the first min(logged, size) tokens, then the rest".
  void QueueLogAppend(const Session& s, Durability& d, bool warn_on_failure,
                      Done done) {
    const int64_t base = std::min<int64_t>(d.logged_tokens, s.tokens.size());
    const int64_t messages = s.messages.size();
    const int64_t message_base = d.logged_messages == messages
                                     ? -1
                                     : std::min(d.logged_messages, messages);
    std::string record = SessionDir::AppendRecord(
        base, absl::MakeConstSpan(s.tokens).subspan(base), message_base,
        absl::MakeConstSpan(s.messages)
            .subspan(std::max<int64_t>(0, message_base)));
    // Truncations (and many small turns) leave records that no longer hold
    // live content: past twice a fresh start, the log is rewritten as one.
    const int64_t compacted =
        SessionDir::StartRecordsBytes(s.owner, s.tokens.size(), s.messages);
    const int64_t appended = d.log_bytes + static_cast<int64_t>(record.size());
    if (appended > 2 * compacted && appended > kCompactionMinBytes) {
      return QueueLogStart(s, d, warn_on_failure, std::move(done));
    }
    d.logged_tokens = s.tokens.size();
    d.logged_messages = messages;
    d.log_bytes += record.size();
    d.last_log_write = writer->Enqueue(Write{.kind = Write::Kind::kLog,
                                             .id = s.id,
                                             .record = std::move(record),
                                             .warn = warn_on_failure,
                                             .done = std::move(done)});
  }

  // Logs what s.tokens gained or lost since the last log write; with
  // nothing to log, `done` waits for the log writes queued before.
  void LogChanges(const Session& s, Durability& d, bool warn_on_failure,
                  Done done) {
    if (d.logged_tokens != static_cast<int64_t>(s.tokens.size()) ||
        d.logged_messages != static_cast<int64_t>(s.messages.size())) {
      return QueueLogAppend(s, d, warn_on_failure, std::move(done));
    }
    if (writer->Written(d.last_log_write)) {
      return std::move(done)(absl::OkStatus());
    }
    writer->Enqueue(Write{
        .kind = Write::Kind::kBarrier, .id = s.id, .done = std::move(done)});
  }

  // A log whose write failed may miss a record, or end in a torn one that
  // hides every later append: rewrite it whole from memory.
  void RepairFailedLogs() {
    if (writer == nullptr) return;
    for (const auto& [id, ticket] : writer->TakeFailedLogs()) {
      Durability* d = DurabilityOf(id);
      if (d == nullptr || ticket < d->log_start) continue;  // superseded
      if (Session* s = store->Get(id)) {
        QueueLogStart(*s, *d, /*warn_on_failure=*/true, nullptr);
      }
    }
  }

  void QueueSnapshot(const Session& s, Durability& d) {
    const int64_t n = s.kv.table.num_tokens();
    if (n == 0 || (d.has_snapshot && d.snapshot_positions >= n)) return;
    auto bytes = std::make_shared<const std::string>(
        EncodeKvSnapshot(options.snapshot_key,
                         absl::MakeConstSpan(s.tokens).first(n), s.kv.table));
    // Over the quota the KV is not kept on disk (it is re-prefilled from
    // the history); a smaller snapshot already there stays.
    if (!MakeRoom(static_cast<int64_t>(bytes->size()) - d.snapshot_bytes, &s)) {
      return;
    }
    d.has_snapshot = true;
    d.snapshot_bytes = bytes->size();
    d.snapshot_positions = n;
    d.unwritten_snapshot = bytes;
    writer->Enqueue(Write{.kind = Write::Kind::kSnapshot,
                          .id = s.id,
                          .snapshot = std::move(bytes)});
  }

  void DropSnapshot(const Session& s, Durability& d) {
    d.has_snapshot = false;
    d.snapshot_bytes = 0;
    d.snapshot_positions = -1;
    d.unwritten_snapshot.reset();
    writer->Enqueue(Write{.kind = Write::Kind::kRemoveSnapshot, .id = s.id});
  }

  // A session of an earlier run (or of another process) that is not in
  // memory.
  absl::StatusOr<Session*> Load(std::string_view id) {
    if (dir == nullptr || writer->Removing(id)) return NotFound(id);
    absl::StatusOr<StoredSession> stored = dir->Load(id);
    if (!stored.ok()) {
      if (!absl::IsNotFound(stored.status())) {
        warn(std::string(stored.status().message()));
      }
      return NotFound(id);
    }
    if (absl::Status bad = Unusable(*stored); !bad.ok()) {
      warn(std::string(bad.message()));
      return NotFound(id);
    }
    Session* s = store->Insert(stored->id, stored->owner, stored->ttl,
                               stored->create_time, absl::Now());
    KVSERVE_CHECK(s != nullptr);
    s->tokens = std::move(stored->tokens);
    s->messages = std::move(stored->messages);
    Durability& d = durable[s->id];
    const int64_t snapshot_bytes = dir->SnapshotBytes(s->id);
    d = Durability{.logged_tokens = static_cast<int64_t>(s->tokens.size()),
                   .logged_messages = static_cast<int64_t>(s->messages.size()),
                   .log_bytes = stored->log_bytes,
                   .has_snapshot = snapshot_bytes >= 0,
                   .snapshot_bytes = std::max<int64_t>(0, snapshot_bytes)};
    RewriteDamagedTail(*s, d, *stored);
    return s;
  }

  // Appends after a torn or corrupt record would never be replayed, and a
  // damaged header copy would leave the next damage unrecoverable: the log
  // is rewritten from what was read.
  void RewriteDamagedTail(const Session& s, Durability& d,
                          const StoredSession& stored) {
    if (stored.damaged_at < 0) return;
    const int64_t dropped = stored.log_bytes - stored.replayed_bytes;
    warn(absl::StrFormat(
        "session %s: its log is damaged at byte %d of %d (torn or corrupt: a "
        "crash mid-write, or the disk); kept %d records (%d tokens, %d "
        "messages)%s; rewriting the log",
        s.id, stored.damaged_at, stored.log_bytes, stored.records_replayed,
        s.tokens.size(), s.messages.size(),
        dropped == 0 ? ", all of them, the header read from its copy"
                     : absl::StrFormat(" and dropped the %d bytes from byte %d",
                                       dropped, stored.replayed_bytes)));
    QueueLogStart(s, d, /*warn_on_failure=*/true, nullptr);
    if (options.on_log_recovered) options.on_log_recovered();
  }

  // Re-reads a log that another process changed. Returns false when the
  // session is gone (its log vanished, or it can no longer be served).
  bool Reload(Session& s, Durability& d) {
    absl::StatusOr<StoredSession> stored = dir->Load(s.id);
    if (!stored.ok()) {
      if (absl::IsNotFound(stored.status())) return false;
      if (absl::IsDataLoss(stored.status())) {
        warn(absl::StrFormat("%s; rewriting it from memory",
                             stored.status().message()));
        QueueLogStart(s, d, /*warn_on_failure=*/true, nullptr);
      } else {
        // Kept as it is; checked again on the next Find.
        warn(std::string(stored.status().message()));
      }
      return true;
    }
    if (absl::Status bad = Unusable(*stored); !bad.ok()) {
      warn(std::string(bad.message()));
      return false;
    }
    // KV stays valid for the common prefix of the two histories.
    const auto diverge =
        std::mismatch(s.tokens.begin(), s.tokens.end(), stored->tokens.begin(),
                      stored->tokens.end());
    const int64_t common = diverge.first - s.tokens.begin();
    if (s.kv.table.num_tokens() > common) s.kv.Truncate(common);
    s.tokens = std::move(stored->tokens);
    s.messages = std::move(stored->messages);
    d.logged_tokens = s.tokens.size();
    d.logged_messages = s.messages.size();
    d.log_bytes = stored->log_bytes;
    if (d.unwritten_snapshot.expired()) {
      const int64_t snapshot_bytes = dir->SnapshotBytes(s.id);
      d.has_snapshot = snapshot_bytes >= 0;
      d.snapshot_bytes = std::max<int64_t>(0, snapshot_bytes);
    }
    d.snapshot_positions = -1;
    RewriteDamagedTail(s, d, *stored);
    return true;
  }

  // The bytes of the logs and snapshots of the sessions this process knows,
  // once their queued writes are done.
  int64_t DirectoryBytes() const {
    int64_t bytes = 0;
    for (const auto& [id, d] : durable) bytes += d.log_bytes + d.snapshot_bytes;
    return bytes;
  }

  // Whether `bytes` more fit under the quota, after evicting what the
  // directory holds that is not needed: first the snapshots of idle
  // sessions used less recently than `for_session` (all, when null), least
  // recently used first (their KV is re-prefilled on use); then expired
  // sessions (idle past their TTL, not yet swept), longest expired first.
  // Never evicts for_session.
  bool MakeRoom(int64_t bytes, const Session* for_session) {
    const int64_t quota = options.session_dir_max_bytes;
    if (quota <= 0) return true;
    int64_t used = DirectoryBytes();
    if (used + bytes <= quota) return true;
    std::vector<Session*> snapshots, expired;
    const absl::Time now = absl::Now();
    store->ForEach([&](Session& s) {
      const Durability* d = DurabilityOf(s.id);
      if (s.busy || &s == for_session || d == nullptr) return;
      if (s.ttl.has_value() && now - s.last_used > *s.ttl) {
        expired.push_back(&s);
      } else if (d->has_snapshot && (for_session == nullptr ||
                                     s.last_used < for_session->last_used)) {
        snapshots.push_back(&s);
      }
    });
    auto least_recently_used = [](const Session* a, const Session* b) {
      return a->last_used < b->last_used;
    };
    std::sort(snapshots.begin(), snapshots.end(), least_recently_used);
    for (Session* s : snapshots) {
      Durability& d = *DurabilityOf(s->id);
      used -= d.snapshot_bytes;
      DropSnapshot(*s, d);
      if (used + bytes <= quota) return true;
    }
    std::sort(expired.begin(), expired.end(),
              [](const Session* a, const Session* b) {
                return a->last_used + *a->ttl < b->last_used + *b->ttl;
              });
    for (Session* s : expired) {
      const Durability& d = *DurabilityOf(s->id);
      used -= d.log_bytes + d.snapshot_bytes;
      const std::string id = s->id;
      durable.erase(AbslView(id));
      writer->EnqueueRemove(id, nullptr);
      store->Delete(id);
      if (options.on_evicted) options.on_evicted("ttl");
      if (used + bytes <= quota) return true;
    }
    return false;
  }

  // After a log grew: evicts what it can to get back under the quota; live
  // sessions' logs are never refused a turn (it has been computed and
  // streamed), so past that the operator is warned, once per crossing.
  void EnforceQuota(const Session& s) {
    const int64_t quota = options.session_dir_max_bytes;
    if (quota <= 0) return;
    if (MakeRoom(0, &s)) {
      over_quota_warned = false;
      return;
    }
    if (over_quota_warned) return;
    over_quota_warned = true;
    warn(std::string(QuotaExceeded().message()));
  }

  absl::Status QuotaExceeded() const {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the session directory is over its quota (--session_dir_max_bytes=%d):"
        " its live sessions' logs hold %d bytes with every idle session's KV "
        "snapshot and every expired session evicted; delete sessions, give "
        "them a TTL, or raise the limit",
        options.session_dir_max_bytes, DirectoryBytes()));
  }

  const SessionTiersOptions options;
  SessionStore* const store;
  PrefixCache* const prefix_cache;
  const Warn warn;
  std::unique_ptr<SessionDir> dir;  // null: memory only
  absl::flat_hash_map<std::string, Durability> durable;
  // Declared after dir: destroyed (drained) before it.
  std::unique_ptr<Writer> writer;  // null: memory only
  bool over_quota_warned = false;  // since the directory last fit its quota
};

absl::StatusOr<std::unique_ptr<SessionTiers>> SessionTiers::Create(
    const SessionTiersOptions& options, SessionStore* store,
    PrefixCache* prefix_cache, Warn warn) {
  if (!warn) warn = [](std::string_view) {};
  auto impl = std::make_unique<Impl>(options, store, prefix_cache, warn);
  if (!options.session_dir.empty()) {
    if (options.vocab_size <= 0 || options.max_context <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "session tiers need a positive vocab_size and max_context, got %d "
          "and %d",
          options.vocab_size, options.max_context));
    }
    absl::StatusOr<std::unique_ptr<SessionDir>> dir =
        SessionDir::Open(options.session_dir);
    if (!dir.ok()) return dir.status();
    impl->dir = *std::move(dir);
    impl->writer = std::make_unique<Writer>(impl->dir.get(), std::move(warn));
  }
  return std::unique_ptr<SessionTiers>(new SessionTiers(std::move(impl)));
}

SessionTiers::SessionTiers(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SessionTiers::~SessionTiers() = default;

bool SessionTiers::durable() const { return impl_->dir != nullptr; }

void SessionTiers::LoadAll() {
  if (impl_->dir == nullptr) return;
  for (const std::string& id : impl_->dir->List()) {
    if (impl_->store->Get(id) == nullptr) (void)impl_->Load(id);
  }
}

absl::StatusOr<Session*> SessionTiers::Find(std::string_view id,
                                            std::string_view owner) {
  Impl& m = *impl_;
  m.RepairFailedLogs();
  // Looked up for any owner first: another owner's session in memory must
  // not be loaded a second time.
  if (Session* in_memory = m.store->Get(id); in_memory == nullptr) {
    absl::StatusOr<Session*> loaded = m.Load(id);
    if (!loaded.ok()) return loaded.status();
  } else if (Impl::Durability* d = m.DurabilityOf(id);
             d != nullptr && !in_memory->busy &&
             m.writer->Settled(id, d->last_log_write)) {
    // Replicas may share the directory: another one may have continued or
    // deleted this session since this process last wrote its log.
    const int64_t size = m.dir->LogSize(id);
    if (size < 0 || (size != d->log_bytes && !m.Reload(*in_memory, *d))) {
      m.durable.erase(AbslView(id));
      m.store->Delete(id);
      return m.NotFound(id);
    }
  }
  return m.store->Lookup(id, owner);
}

bool SessionTiers::Exists(std::string_view id) {
  if (impl_->store->Get(id) != nullptr) return true;
  return impl_->dir != nullptr && impl_->dir->LogSize(id) >= 0;
}

absl::StatusOr<Session*> SessionTiers::FindIdle(std::string_view id,
                                                std::string_view owner) {
  absl::StatusOr<Session*> s = Find(id, owner);
  if (s.ok() && (*s)->busy) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session %s is busy with a Generate or Append; cancel it first",
        QuoteClientText(id)));
  }
  return s;
}

Tier SessionTiers::TierOf(const Session& s) const {
  if (s.kv.table.num_tokens() > 0 || s.tokens.empty()) return Tier::kRam;
  const Impl::Durability* d = impl_->DurabilityOf(s.id);
  return d != nullptr && d->has_snapshot ? Tier::kDisk : Tier::kTokens;
}

void SessionTiers::StartLog(Session& s, Done done) {
  Impl& m = *impl_;
  if (m.writer == nullptr) return std::move(done)(absl::OkStatus());
  m.RepairFailedLogs();
  // A new session is refused, not a live one's turn: nothing is lost yet.
  m.durable.erase(AbslView(s.id));
  if (!m.MakeRoom(
          SessionDir::StartRecordsBytes(s.owner, s.tokens.size(), s.messages),
          &s)) {
    return std::move(done)(m.QuotaExceeded());
  }
  Impl::Durability& d = m.durable[s.id];
  d = Impl::Durability{};
  m.QueueLogStart(s, d, /*warn_on_failure=*/false, std::move(done));
}

void SessionTiers::Log(Session& s, Done done) {
  Impl& m = *impl_;
  if (m.writer == nullptr) return std::move(done)(absl::OkStatus());
  m.RepairFailedLogs();
  Impl::Durability* d = m.DurabilityOf(s.id);
  if (d == nullptr) return std::move(done)(absl::OkStatus());
  m.LogChanges(s, *d, /*warn_on_failure=*/true, std::move(done));
  m.EnforceQuota(s);
}

void SessionTiers::Truncate(Session& s, Done done) {
  Impl& m = *impl_;
  if (m.writer == nullptr) return std::move(done)(absl::OkStatus());
  m.RepairFailedLogs();
  Impl::Durability* d = m.DurabilityOf(s.id);
  if (d == nullptr) return std::move(done)(absl::OkStatus());
  // It may hold positions past the new end; it is rewritten when needed.
  if (d->has_snapshot) m.DropSnapshot(s, *d);
  m.LogChanges(s, *d, /*warn_on_failure=*/false, std::move(done));
}

void SessionTiers::Rewound(Session& s, int64_t n) {
  Impl::Durability* d = impl_->DurabilityOf(s.id);
  if (d == nullptr) return;
  d->logged_tokens = std::min(d->logged_tokens, n);
  if (d->has_snapshot && d->snapshot_positions != -1 &&
      d->snapshot_positions <= n) {
    return;
  }
  if (d->has_snapshot) impl_->DropSnapshot(s, *d);
}

void SessionTiers::Remove(std::string_view id, Done done) {
  Impl& m = *impl_;
  if (m.writer == nullptr) {
    if (done) std::move(done)(absl::OkStatus());
    return;
  }
  m.durable.erase(AbslView(id));
  m.writer->EnqueueRemove(std::string(id), std::move(done));
}

bool SessionTiers::SpillLeastRecentlyUsed() {
  Impl& m = *impl_;
  Session* s = m.store->LeastRecentlyUsedIdleWithKv();
  if (s == nullptr) return false;
  if (Impl::Durability* d = m.DurabilityOf(s->id)) m.QueueSnapshot(*s, *d);
  s->kv.Clear();
  return true;
}

void SessionTiers::SnapshotAll() {
  Impl& m = *impl_;
  if (m.writer == nullptr) return;
  m.RepairFailedLogs();
  // By id: making room under a quota may delete expired sessions. The most
  // recently used go first, so a quota keeps theirs.
  std::vector<std::pair<absl::Time, std::string>> sessions;
  m.store->ForEach([&sessions](const Session& s) {
    sessions.emplace_back(s.last_used, s.id);
  });
  std::sort(sessions.rbegin(), sessions.rend());
  for (const auto& [last_used, id] : sessions) {
    Session* s = m.store->Get(id);
    Impl::Durability* d = m.DurabilityOf(id);
    if (s != nullptr && d != nullptr) m.QueueSnapshot(*s, *d);
  }
}

SnapshotRead SessionTiers::ReadSnapshot(const Session& s, int64_t limit) {
  Impl& m = *impl_;
  Impl::Durability* d = m.DurabilityOf(s.id);
  const int64_t held = s.kv.table.num_tokens();
  if (d == nullptr || !d->has_snapshot || held >= limit) return {};
  // A snapshot still queued is read from memory.
  std::shared_ptr<const std::string> bytes = d->unwritten_snapshot.lock();
  absl::Status read_error;
  if (bytes == nullptr) {
    absl::StatusOr<std::string> read = m.dir->ReadSnapshot(s.id);
    if (read.ok()) {
      bytes = std::make_shared<const std::string>(*std::move(read));
    } else {
      read_error = read.status();
    }
  }
  const absl::StatusOr<int64_t> n =
      bytes != nullptr
          ? CheckKvSnapshot(*bytes, m.options.snapshot_key, s.tokens)
          : absl::StatusOr<int64_t>(read_error);
  if (!n.ok()) {
    m.warn(absl::StrFormat("session %s: KV snapshot ignored, re-prefilling: %s",
                           s.id, n.status().message()));
    m.DropSnapshot(s, *d);
    return {};
  }
  d->snapshot_positions = *n;
  const int64_t positions = std::min(*n, limit);
  if (positions <= held) return {};
  return SnapshotRead{
      .from = held, .positions = positions, .bytes = std::move(bytes)};
}

void SessionTiers::Restore(Session& s, const SnapshotRead& read) {
  if (read.positions <= 0) return;
  KVSERVE_CHECK(s.kv.table.num_tokens() == read.positions);
  RestoreKvSnapshot(*read.bytes, read.from, read.positions, &s.kv.table);
  impl_->prefix_cache->Register(s.tokens, s.kv);
}

void SessionTiers::Flush() {
  if (impl_->writer != nullptr) impl_->writer->Flush();
}

void SessionTiers::PauseWritesForTesting(bool paused) {
  if (impl_->writer != nullptr) impl_->writer->SetPaused(paused);
}

}  // namespace kvserve
