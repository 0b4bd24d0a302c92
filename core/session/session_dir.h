// SessionDir: sessions on disk, so they survive a restart or a crash.
//
//   <id>.log  the session as append-only records; each record is
//             [u32 payload bytes][u64 XXH64 of the payload][payload]. A log
//             starts with a header record (owner, TTL, creation time) and
//             an identical copy of it, then history records, each "keep
//             the first `base` tokens, then append these", which may end
//             with a conversation section: "keep the first `base` chat
//             messages, then append these" (chat sessions only). A start
//             holds the history in records of kStartChunkTokens tokens, the
//             conversation in the last one; each later write appends one
//             record. Every append is fsynced before it returns.
//             Replay reads the header, or its copy when the header is
//             damaged, and stops at the first torn or corrupt record:
//             one damaged byte loses the record holding it and those after
//             it, never a record before it (a crash mid-append loses only
//             that append). Logs of the first format (one header record
//             holding the history too, no copy) are read as well.
//             A log is rewritten (compacted) by writing <id>.log.tmp,
//             fsyncing it and renaming it over the log, so a crash
//             mid-rewrite leaves the old log intact.
//   <id>.kv   a KV snapshot (KvSnapshot), written to <id>.kv.tmp, fsynced
//             and renamed over the old one.
//
// Ids are checked to be 32 lowercase hex digits before they name a file.
// Thread-safety: a SessionDir holds only its path, and its methods may run
// on several threads at once (SessionTiers reads on the engine thread while
// its writer thread writes), except that writes to one session's files must
// not overlap (two snapshot writes share <id>.kv.tmp). A reader sees what
// the file system holds at that moment.
#ifndef KVSERVE_CORE_SESSION_SESSION_DIR_H_
#define KVSERVE_CORE_SESSION_SESSION_DIR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/chat/chat_message.h"

namespace kvserve {

struct StoredSession {
  std::string id{};
  std::string owner{};
  std::optional<absl::Duration> ttl{};
  absl::Time create_time{};
  std::vector<int32_t> tokens{};
  std::vector<ChatMessage> messages{};  // a chat session's conversation
  int64_t log_bytes = 0;                // the log's size when it was read
  // Bytes up to the end of the last record replayed: less than log_bytes
  // when the log ends in a torn or corrupt record (which hides any record
  // appended after it).
  int64_t replayed_bytes = 0;
  int64_t records_replayed = 0;  // history records (not headers)
  // Where the first torn or corrupt record (a header, its copy, or a
  // history record) starts; -1 when there is none.
  int64_t damaged_at = -1;
};

class SessionDir {
 public:
  // Creates the directory (and its parents) if missing.
  static absl::StatusOr<std::unique_ptr<SessionDir>> Open(std::string path);

  static bool IsValidId(std::string_view id);

  // History records of a log's start hold at most this many tokens.
  static constexpr int64_t kStartChunkTokens = 8192;

  // The records Create and Append write, encoded; a log grows by exactly
  // their sizes, so a writer can know the size it will have.
  // StartRecords: the header, its copy and the history records.
  static std::string StartRecords(const StoredSession& session);
  // StartRecords(session).size() for a session with this owner, this many
  // tokens and these messages, without encoding it.
  static int64_t StartRecordsBytes(std::string_view owner, int64_t n_tokens,
                                   absl::Span<const ChatMessage> messages);
  // message_base >= 0 adds the conversation section ("keep the first
  // message_base messages, then `messages`").
  static std::string AppendRecord(int64_t base,
                                  absl::Span<const int32_t> tokens,
                                  int64_t message_base = -1,
                                  absl::Span<const ChatMessage> messages = {});
  // Writes an encoded record and fsyncs it: `start` replaces the log with
  // it atomically (written to <id>.log.tmp, fsynced, renamed over the log,
  // the directory fsynced: a crash leaves the old log or the new one, never
  // a truncated one), otherwise it is appended. Returns the log's size in
  // bytes.
  absl::StatusOr<int64_t> WriteRecord(std::string_view id,
                                      std::string_view record, bool start);

  // Starts (or replaces) a session's log with its StartRecords.
  // Returns the log's size in bytes.
  absl::StatusOr<int64_t> Create(const StoredSession& session);
  // Appends "keep the first `base` tokens, then `tokens`". Returns the
  // log's size in bytes.
  absl::StatusOr<int64_t> Append(std::string_view id, int64_t base,
                                 absl::Span<const int32_t> tokens);
  // The log's size in bytes, or -1 when there is none. Another process
  // sharing the directory (a replica) that appended changes it.
  int64_t LogSize(std::string_view id) const;
  // Deletes the log and any snapshot (and their temporary files).
  absl::Status Remove(std::string_view id);

  // Replaces the session's KV snapshot atomically (a temporary file, fsync,
  // rename, fsync of the directory).
  absl::Status WriteSnapshot(std::string_view id, std::string_view bytes);
  // The snapshot's bytes; NOT_FOUND when there is none.
  absl::StatusOr<std::string> ReadSnapshot(std::string_view id) const;
  // Whether a snapshot file exists (a stat: nothing is read).
  bool HasSnapshot(std::string_view id) const;
  // The snapshot's size in bytes (a stat), or -1 when there is none.
  int64_t SnapshotBytes(std::string_view id) const;
  // Deletes the snapshot, if any (it no longer matches the history).
  void RemoveSnapshot(std::string_view id);
  // Replays a log. NOT_FOUND when there is none; DATA_LOSS when its header
  // and the header's copy are both unreadable.
  absl::StatusOr<StoredSession> Load(std::string_view id) const;
  // Ids of every log in the directory.
  std::vector<std::string> List() const;
  // Deletes <id>.kv.tmp and <id>.log.tmp files last modified before
  // `older_than` (left by a crash mid-write; Open does this with a minute's
  // margin for a replica's write in progress). Returns how many went.
  int RemoveStrayTemporaries(absl::Time older_than) const;

  std::string LogPath(std::string_view id) const;
  std::string SnapshotPath(std::string_view id) const;
  const std::string& path() const { return path_; }

 private:
  explicit SessionDir(std::string path) : path_(std::move(path)) {}
  const std::string path_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_SESSION_SESSION_DIR_H_
