// SessionTiers: where each session's history and KV live, and all of the
// session directory's I/O.
//
// A session's KV is in one of three tiers: "ram" (blocks in the pool),
// "disk" (a KV snapshot in the session directory, restored on use) or
// "tokens" (history only; re-prefilled on use). With a session directory
// every session is durable: its history is an append-only log there
// (SessionDir), so it survives a restart or a crash, and replicas sharing
// the directory see each other's turns.
//
// The engine thread calls every method; none of them waits for the disk to
// be written (except Flush). Log writes, fsyncs, snapshot writes and
// removals run on a writer thread in the order they were asked for, and
// report through a Done callback that runs on the writer thread (the engine
// posts it back to its own thread). Snapshots being written stay readable
// from memory until they are on disk. Reads (a session's log on first use,
// a snapshot on restore) happen on the calling thread; the page cache
// usually holds them. A KV snapshot is encoded (copied out of the blocks)
// on the calling thread, so its blocks may be freed at once.
//
// Durability state (what is logged, the log's expected size, whether a
// snapshot exists) lives here, keyed by session id, not in Session. While
// this process's own log writes for a session are queued, Find does not
// compare the log's size with another process's view; once they are done,
// the size it expects is exact (a log grows by its records' sizes). A log
// write that failed leaves the log suspect: the next call that touches the
// tiers rewrites it whole from memory (with a warning if that fails too).
// A log read ending in a torn or corrupt record (a crash mid-append) is
// rewritten from what replayed, with a warning, since records appended
// after a bad one would never replay.
// Remove cancels the session's queued writes (their Done gets CANCELLED),
// and until its removal is done Find does not load the session from disk.
//
// Compaction: a log that an append would make more than twice the size of
// a fresh start (SessionDir::StartRecords, and more than 4 KiB) is
// rewritten as that start instead, conversation included (atomically:
// SessionDir), so truncations and many small turns do not grow it without
// bound.
//
// Quota (session_dir_max_bytes): the bytes of the logs and snapshots of the
// sessions this process serves (files of sessions it has not loaded, say a
// replica's, are not counted), once the queued writes are done. A write that
// would exceed it first evicts, in this order, the KV snapshots of idle
// sessions used less recently than the one written, least recently used
// first (those sessions drop to the "tokens" tier), then expired sessions
// (idle past their TTL, not yet swept: deleted, files and all), longest
// expired first. What still does not fit: a snapshot is not written (its KV
// is re-prefilled on use); a new session's log (StartLog) is refused with
// RESOURCE_EXHAUSTED naming the limit; a live session's appends are written
// anyway, with a warning once per crossing of the quota, because refusing a
// turn that has been computed and streamed would throw it away, and a log
// holds at most max_context tokens once compacted.
//
// Thread-safety: the public methods are called from one thread (the
// engine's); the writer thread shares only state guarded by a mutex. Done
// and Warn may run on the writer thread; they must not call back into the
// tiers, and Warn must be safe to call from both threads at once.
#ifndef KVSERVE_CORE_SESSION_SESSION_TIERS_H_
#define KVSERVE_CORE_SESSION_SESSION_TIERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/kv/prefix_cache.h"
#include "core/session/kv_snapshot.h"
#include "core/session/session_store.h"

namespace kvserve {

struct SessionTiersOptions {
  std::string session_dir{};  // created if missing; empty: memory only
  KvSnapshotKey snapshot_key{};
  // Sessions on disk holding other token ids, or more tokens, are not
  // loaded (with a warning).
  int vocab_size = 0;
  int64_t max_context = 0;
  // Quota on the bytes of the directory's logs and snapshots (of the
  // sessions this process serves); 0: none. See "Quota" above.
  int64_t session_dir_max_bytes = 0;
  // Told the reason of each session the tiers delete, on the calling thread:
  // "ttl" for an expired one deleted to make room under the quota (the
  // reason the engine's own sweep of expired sessions reports). May be null.
  std::function<void(std::string_view reason)> on_evicted{};
  // Told of each damaged log read (a torn or corrupt record, or header),
  // on the calling thread, once the tiers have warned of it and queued its
  // rewrite from what could be replayed. May be null.
  std::function<void()> on_log_recovered{};
};

enum class Tier { kRam, kDisk, kTokens };
std::string_view TierName(Tier tier);  // "ram", "disk", "tokens"

// A KV snapshot read for a restore: the scheduler reserves `positions`
// KV positions in the session's table, then calls SessionTiers::Restore.
struct SnapshotRead {
  int64_t from = 0;       // positions the table already held
  int64_t positions = 0;  // its end; 0: nothing to restore
  std::shared_ptr<const std::string> bytes;
};

class SessionTiers {
 public:
  // Runs on the writer thread once a write is on disk (or failed, or was
  // CANCELLED by Remove), or on the calling thread, at once, when there is
  // nothing to wait for.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  // Something went wrong that no request is waiting to hear about. Called
  // from the engine thread or the writer thread.
  using Warn = std::function<void(std::string_view message)>;

  // REQUIRES: store and prefix_cache outlive the tiers. Opens (creates)
  // the session directory, if any, and starts the writer thread.
  // INVALID_ARGUMENT with a directory but no positive vocab_size and
  // max_context.
  static absl::StatusOr<std::unique_ptr<SessionTiers>> Create(
      const SessionTiersOptions& options, SessionStore* store,
      PrefixCache* prefix_cache, Warn warn);
  // Finishes every queued write (running their Done callbacks), then stops
  // the writer thread.
  ~SessionTiers();
  SessionTiers(const SessionTiers&) = delete;
  SessionTiers& operator=(const SessionTiers&) = delete;

  bool durable() const;  // a session directory is in use

  // Loads the sessions of earlier runs found in the directory.
  void LoadAll();

  // A session in memory, or loaded from the directory. A durable idle
  // session whose log another process changed is reloaded first (its KV
  // kept for the common prefix); one whose log another process removed is
  // dropped (NOT_FOUND). NOT_FOUND for another owner's session.
  absl::StatusOr<Session*> Find(std::string_view id, std::string_view owner);
  // Whether the id is taken: a session in memory, or a log in the directory
  // (even one that does not load, so that it is never overwritten). A stat,
  // no read.
  bool Exists(std::string_view id);
  // As Find; FAILED_PRECONDITION while a request runs on the session.
  absl::StatusOr<Session*> FindIdle(std::string_view id,
                                    std::string_view owner);

  Tier TierOf(const Session& s) const;

  // Starts a new session's log holding s.tokens, making it durable.
  // Without a directory, `done` runs at once with OK. RESOURCE_EXHAUSTED
  // (at once, nothing written) when it does not fit the quota.
  void StartLog(Session& s, Done done);
  // Appends the tokens added to s.tokens since the last Log (or since the
  // kept prefix, after a truncation). With nothing to write, `done` runs
  // once the session's log writes queued before are done (at once, with
  // OK, when there are none, or without a directory, or for a session that
  // is not durable). A failed append is also warned about.
  void Log(Session& s, Done done);
  // After s.tokens was shortened: logs the truncation and drops a snapshot
  // that may hold positions past the new end.
  void Truncate(Session& s, Done done);
  // s.tokens was cut to its first n tokens and may grow again before the
  // next Log, which then logs the change from n on. A snapshot that may hold
  // positions past n is dropped.
  void Rewound(Session& s, int64_t n);
  // Deletes a session's files (not the in-memory session), after cancelling
  // its queued writes; a failure is warned about. `done`, if any, runs once
  // the files are gone (at once without a directory).
  void Remove(std::string_view id, Done done = nullptr);

  // Frees the least recently used idle session's KV blocks, snapshotting
  // them first when durable (unless its snapshot already holds those
  // positions). Returns false when no idle session holds KV.
  bool SpillLeastRecentlyUsed();
  // Snapshots every durable session's KV held in RAM (at shutdown; the
  // destructor, or Flush, waits for the writes).
  void SnapshotAll();

  // For a session whose KV is on disk, with a KV table holding fewer
  // positions (none, or blocks the prefix cache still had): reads and
  // checks the snapshot (a bad one is removed, with a warning) and returns
  // the positions it can give past the table's, up to at most `limit`.
  SnapshotRead ReadSnapshot(const Session& s, int64_t limit);
  // Writes positions [read.from, read.positions) into s.kv.table, which the
  // caller extended to hold them, and registers the table with the prefix
  // cache. REQUIRES: s.kv.table.num_tokens() == read.positions (the table
  // ReadSnapshot saw, extended by exactly that much).
  void Restore(Session& s, const SnapshotRead& read);

  // Blocks until every write queued so far is done and its Done has run.
  // Not for the engine's steps: for shutdown and tests.
  void Flush();
  // Tests: while paused, the writer starts no write (so queued writes stay
  // queued; Flush would wait for ever). The destructor resumes it.
  void PauseWritesForTesting(bool paused);

 private:
  struct Impl;
  explicit SessionTiers(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_SESSION_SESSION_TIERS_H_
