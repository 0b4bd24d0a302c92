#include "core/session/session_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_format.h"
#include "core/session/session_store.h"
#include "core/util/little_endian.h"
#include "core/util/quote.h"
#include "core/util/xxhash64.h"

namespace kvserve {
namespace {

// The header's payload prefix: owner, TTL and creation time follow. The
// first format's header (kLogMagicV1) held the history too.
constexpr char kLogMagic[] = "KVSLOG2";
constexpr char kLogMagicV1[] = "KVSLOG1";
constexpr size_t kMagicBytes = sizeof(kLogMagic) - 1;
// A record's [u32 payload bytes][u64 XXH64 of the payload] before it.
constexpr size_t kRecordHead = 12;
// A damaged header's copy is looked for this far into the log.
constexpr size_t kHeaderCopySearchBytes = 1 << 20;

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrFormat("%s %s: %s", what, path, std::strerror(errno)));
}

// A bounds-checked reader over a payload.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool U64(uint64_t* v) {
    if (data_.size() - pos_ < 8) return false;
    *v = GetU64(data_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (data_.size() - pos_ < n) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Done() const { return pos_ == data_.size(); }
  // Consumes the null-content marker when it comes next.
  bool NullContent() {
    if (data_.size() - pos_ < 8 ||
        GetU64(data_.data() + pos_) != ~uint64_t{0}) {
      return false;
    }
    pos_ += 8;
    return true;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

void PutTokens(std::string& out, absl::Span<const int32_t> tokens) {
  PutU64(out, tokens.size());
  for (int32_t t : tokens) PutU32(out, static_cast<uint32_t>(t));
}

bool GetTokens(Reader& r, std::vector<int32_t>* tokens) {
  uint64_t n;
  std::string_view bytes;
  if (!r.U64(&n) || n > (1u << 26) || !r.Bytes(n * 4, &bytes)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    tokens->push_back(static_cast<int32_t>(GetU32(bytes.data() + 4 * i)));
  }
  return true;
}

void PutString(std::string& out, std::string_view text) {
  PutU64(out, text.size());
  out += text;
}

bool GetString(Reader& r, std::string* text) {
  uint64_t n;
  std::string_view bytes;
  if (!r.U64(&n) || !r.Bytes(n, &bytes)) return false;
  *text = std::string(bytes);
  return true;
}

// A message's content length when the content is null (ChatMessage::
// content_null); no bytes follow.
constexpr uint64_t kNullContent = ~uint64_t{0};

// The optional conversation section that ends a record: "keep the first
// `base` messages, then append these".
void PutMessages(std::string& out, int64_t base,
                 absl::Span<const ChatMessage> messages) {
  PutU64(out, base);
  PutU64(out, messages.size());
  for (const ChatMessage& m : messages) {
    for (const std::string* field :
         {&m.role, &m.content, &m.name, &m.tool_call_id, &m.tool_calls_json}) {
      if (field == &m.content && m.content_null) {
        PutU64(out, kNullContent);
      } else {
        PutString(out, *field);
      }
    }
  }
}

// Applies a record's conversation section, if it has one.
bool GetMessages(Reader& r, std::vector<ChatMessage>* messages) {
  if (r.Done()) return true;
  uint64_t base, n;
  if (!r.U64(&base) || base > messages->size() || !r.U64(&n) ||
      n > (1u << 24)) {
    return false;
  }
  messages->resize(base);
  for (uint64_t i = 0; i < n; ++i) {
    ChatMessage m;
    for (std::string* field :
         {&m.role, &m.content, &m.name, &m.tool_call_id, &m.tool_calls_json}) {
      if (field == &m.content && r.NullContent()) {
        m.content_null = true;
        continue;
      }
      if (!GetString(r, field)) return false;
    }
    messages->push_back(std::move(m));
  }
  return r.Done();
}

// [u32 payload bytes][u64 XXH64 of the payload][payload]
std::string Record(std::string_view payload) {
  std::string record;
  record.reserve(kRecordHead + payload.size());
  PutU32(record, payload.size());
  PutU64(record, Xxh64(payload.data(), payload.size(), 0));
  record += payload;
  return record;
}

// The payload of the record at `offset` if it is whole and its checksum
// holds.
std::optional<std::string_view> RecordAt(std::string_view log, size_t offset) {
  if (offset > log.size() || log.size() - offset < kRecordHead) {
    return std::nullopt;
  }
  const uint32_t n = GetU32(log.data() + offset);
  if (log.size() - offset - kRecordHead < n) return std::nullopt;  // torn
  const std::string_view payload = log.substr(offset + kRecordHead, n);
  if (Xxh64(payload.data(), payload.size(), 0) !=
      GetU64(log.data() + offset + 4)) {
    return std::nullopt;  // corrupt
  }
  return payload;
}

std::string HeaderPayload(const StoredSession& session) {
  std::string payload = kLogMagic;
  PutString(payload, session.owner);
  PutU64(payload, session.ttl.has_value()
                      ? absl::ToInt64Nanoseconds(*session.ttl)
                      : ~uint64_t{0});
  PutU64(payload, absl::ToUnixNanos(session.create_time));
  return payload;
}

// Reads a header (either format) into `session`; false when it is none.
bool ParseHeader(std::string_view payload, StoredSession* session) {
  Reader r(payload);
  std::string_view magic;
  uint64_t ttl, created;
  if (!r.Bytes(kMagicBytes, &magic) ||
      (magic != kLogMagic && magic != kLogMagicV1) ||
      !GetString(r, &session->owner) || !r.U64(&ttl) || !r.U64(&created)) {
    return false;
  }
  session->tokens.clear();
  session->messages.clear();
  if (magic == kLogMagicV1 && (!GetTokens(r, &session->tokens) ||
                               !GetMessages(r, &session->messages))) {
    return false;
  }
  if (magic == kLogMagic && !r.Done()) return false;
  session->ttl.reset();
  if (ttl != ~uint64_t{0}) session->ttl = absl::Nanoseconds(ttl);
  session->create_time = absl::FromUnixNanos(created);
  return true;
}

// Applies a history record to `session`; false when it cannot apply.
bool ApplyHistory(std::string_view payload, StoredSession* session) {
  Reader r(payload);
  uint64_t base;
  std::vector<int32_t> tokens;
  std::vector<ChatMessage> messages = session->messages;
  if (!r.U64(&base) || base > session->tokens.size() ||
      !GetTokens(r, &tokens) || !GetMessages(r, &messages)) {
    return false;
  }
  session->messages = std::move(messages);
  session->tokens.resize(base);
  session->tokens.insert(session->tokens.end(), tokens.begin(), tokens.end());
  return true;
}

absl::Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("cannot fsync directory", dir);
  return absl::OkStatus();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    bytes.remove_prefix(n);
  }
  return absl::OkStatus();
}

// Writes `bytes` to `path` atomically: a temporary file, fsync, rename, and
// an fsync of the directory.
absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("cannot fsync", tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError("cannot rename onto", path);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return FsyncDir(DirOf(path));
}

// A whole file; NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrFormat("%s does not exist", path));
    }
    return ErrnoError("cannot open", path);
  }
  std::string data;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(st.st_size);
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = ErrnoError("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    data.append(buffer, n);
  }
  ::close(fd);
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionDir>> SessionDir::Open(std::string path) {
  if (path.empty()) return absl::InvalidArgumentError("empty session_dir");
  // mkdir -p.
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
        return ErrnoError("cannot create session directory", prefix);
      }
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      ::access(path.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("session_dir %s is not a writable directory", path));
  }
  std::unique_ptr<SessionDir> dir(new SessionDir(std::move(path)));
  dir->RemoveStrayTemporaries(absl::Now() - absl::Minutes(1));
  return dir;
}

int SessionDir::RemoveStrayTemporaries(absl::Time older_than) const {
  int removed = 0;
  DIR* dir = ::opendir(path_.c_str());
  if (dir == nullptr) return 0;
  while (const dirent* e = ::readdir(dir)) {
    // <id>.kv.tmp or <id>.log.tmp: a write a crash interrupted. Younger
    // ones may be a replica's write in progress.
    std::string_view name = e->d_name;
    if (name.size() < 36 || !IsValidId(name.substr(0, 32))) continue;
    const std::string_view rest = name.substr(32);
    if (rest != ".kv.tmp" && rest != ".log.tmp") continue;
    const std::string file = absl::StrFormat("%s/%s", path_, name);
    struct stat st;
    if (::stat(file.c_str(), &st) != 0 ||
        absl::FromTimeT(st.st_mtime) >= older_than) {
      continue;
    }
    if (::unlink(file.c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

bool SessionDir::IsValidId(std::string_view id) { return IsValidSessionId(id); }

std::string SessionDir::LogPath(std::string_view id) const {
  return absl::StrFormat("%s/%s.log", path_, id);
}

std::string SessionDir::SnapshotPath(std::string_view id) const {
  return absl::StrFormat("%s/%s.kv", path_, id);
}

std::string SessionDir::StartRecords(const StoredSession& session) {
  const std::string header = Record(HeaderPayload(session));
  std::string records = header + header;
  const int64_t n = session.tokens.size();
  const bool chat = !session.messages.empty();
  for (int64_t begin = 0; begin < n || (begin == 0 && chat);
       begin += kStartChunkTokens) {
    const int64_t end = std::min(n, begin + kStartChunkTokens);
    const bool last = end == n;
    records += AppendRecord(
        begin, absl::MakeConstSpan(session.tokens).subspan(begin, end - begin),
        last && chat ? 0 : -1, session.messages);
  }
  return records;
}

int64_t SessionDir::StartRecordsBytes(std::string_view owner, int64_t n_tokens,
                                      absl::Span<const ChatMessage> messages) {
  // Two headers ([u32 size][u64 hash], magic, owner, TTL, creation time),
  // then per history record [u32 size][u64 hash], its base and tokens, and
  // in the last the conversation section, as StartRecords writes them.
  int64_t bytes = 2 * (kRecordHead + kMagicBytes + 8 + owner.size() + 8 + 8);
  int64_t records = (n_tokens + kStartChunkTokens - 1) / kStartChunkTokens;
  if (!messages.empty()) {
    records = std::max<int64_t>(records, 1);
    bytes += 16;
    for (const ChatMessage& m : messages) {
      bytes += 5 * 8 + m.role.size() + m.content.size() + m.name.size() +
               m.tool_call_id.size() + m.tool_calls_json.size();
    }
  }
  return bytes + records * (kRecordHead + 8 + 8) + 4 * n_tokens;
}

std::string SessionDir::AppendRecord(int64_t base,
                                     absl::Span<const int32_t> tokens,
                                     int64_t message_base,
                                     absl::Span<const ChatMessage> messages) {
  std::string payload;
  PutU64(payload, base);
  PutTokens(payload, tokens);
  if (message_base >= 0) PutMessages(payload, message_base, messages);
  return Record(payload);
}

absl::StatusOr<int64_t> SessionDir::WriteRecord(std::string_view id,
                                                std::string_view record,
                                                bool start) {
  if (!IsValidId(id)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid session id \"%s\"", id));
  }
  const std::string path = LogPath(id);
  if (start) {
    // Never truncated in place: a crash mid-write leaves the old log (and
    // a stray <id>.log.tmp), not an empty one.
    if (absl::Status s = WriteFileAtomically(path, record); !s.ok()) return s;
    return static_cast<int64_t>(record.size());
  }
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND, 0600);
  if (fd < 0) return ErrnoError("cannot open", path);
  absl::Status s = WriteAll(fd, record, path);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("cannot fsync", path);
  struct stat st;
  if (s.ok() && ::fstat(fd, &st) != 0) s = ErrnoError("cannot stat", path);
  ::close(fd);
  if (!s.ok()) return s;
  return static_cast<int64_t>(st.st_size);
}

int64_t SessionDir::LogSize(std::string_view id) const {
  if (!IsValidId(id)) return -1;
  struct stat st;
  if (::stat(LogPath(id).c_str(), &st) != 0) return -1;
  return st.st_size;
}

absl::StatusOr<int64_t> SessionDir::Create(const StoredSession& session) {
  return WriteRecord(session.id, StartRecords(session), /*start=*/true);
}

absl::StatusOr<int64_t> SessionDir::Append(std::string_view id, int64_t base,
                                           absl::Span<const int32_t> tokens) {
  return WriteRecord(id, AppendRecord(base, tokens), /*start=*/false);
}

absl::Status SessionDir::Remove(std::string_view id) {
  if (!IsValidId(id)) return absl::OkStatus();
  // The temporary files too, left by a crash mid-write.
  for (const std::string& path :
       {LogPath(id), LogPath(id) + ".tmp", SnapshotPath(id),
        SnapshotPath(id) + ".tmp"}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError("cannot remove", path);
    }
  }
  return absl::OkStatus();
}

absl::Status SessionDir::WriteSnapshot(std::string_view id,
                                       std::string_view bytes) {
  if (!IsValidId(id)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid session id \"%s\"", id));
  }
  return WriteFileAtomically(SnapshotPath(id), bytes);
}

absl::StatusOr<std::string> SessionDir::ReadSnapshot(
    std::string_view id) const {
  if (!IsValidId(id)) {
    return absl::NotFoundError(
        absl::StrFormat("no KV snapshot for session %s", QuoteClientText(id)));
  }
  return ReadFile(SnapshotPath(id));
}

bool SessionDir::HasSnapshot(std::string_view id) const {
  struct stat st;
  return IsValidId(id) && ::stat(SnapshotPath(id).c_str(), &st) == 0;
}

int64_t SessionDir::SnapshotBytes(std::string_view id) const {
  struct stat st;
  if (!IsValidId(id) || ::stat(SnapshotPath(id).c_str(), &st) != 0) return -1;
  return st.st_size;
}

void SessionDir::RemoveSnapshot(std::string_view id) {
  if (IsValidId(id)) ::unlink(SnapshotPath(id).c_str());
}

absl::StatusOr<StoredSession> SessionDir::Load(std::string_view id) const {
  if (!IsValidId(id)) {
    return absl::NotFoundError(
        absl::StrFormat("session %s not found", QuoteClientText(id)));
  }
  absl::StatusOr<std::string> data = ReadFile(LogPath(id));
  if (!data.ok()) {
    if (absl::IsNotFound(data.status())) {
      return absl::NotFoundError(
          absl::StrFormat("session %s not found", QuoteClientText(id)));
    }
    return data.status();
  }
  const std::string_view log = *data;
  StoredSession session;
  session.id = std::string(id);
  session.log_bytes = log.size();
  // The header, or its copy when the header is damaged. The copy follows
  // the header, so the first header found whole is the copy.
  size_t pos = 0;
  std::optional<std::string_view> header = RecordAt(log, 0);
  if (header.has_value() && ParseHeader(*header, &session)) {
    pos = kRecordHead + header->size();
    if (header->substr(0, kMagicBytes) == kLogMagic) {
      if (log.substr(pos, pos) != log.substr(0, pos)) session.damaged_at = pos;
      pos *= 2;
    }
  } else {
    session.damaged_at = 0;
    const size_t limit = std::min(log.size(), kHeaderCopySearchBytes);
    for (size_t at = log.find(kLogMagic, 2 * kRecordHead); at < limit;
         at = log.find(kLogMagic, at + 1)) {
      header = RecordAt(log, at - kRecordHead);
      if (header.has_value() && ParseHeader(*header, &session)) {
        pos = at + header->size();
        break;
      }
    }
    if (pos == 0) {
      return absl::DataLossError(absl::StrFormat(
          "session log %s has no readable header, nor a readable copy of it",
          LogPath(id)));
    }
  }
  session.replayed_bytes = std::min(pos, log.size());
  while (pos < log.size()) {
    const std::optional<std::string_view> record = RecordAt(log, pos);
    if (!record.has_value() || !ApplyHistory(*record, &session)) {
      if (session.damaged_at < 0) session.damaged_at = pos;
      break;
    }
    pos += kRecordHead + record->size();
    session.replayed_bytes = pos;
    ++session.records_replayed;
  }
  return session;
}

std::vector<std::string> SessionDir::List() const {
  std::vector<std::string> ids;
  DIR* dir = ::opendir(path_.c_str());
  if (dir == nullptr) return ids;
  while (const dirent* e = ::readdir(dir)) {
    std::string_view name = e->d_name;
    if (name.size() == 36 && name.substr(32) == ".log" &&
        IsValidId(name.substr(0, 32))) {
      ids.emplace_back(name.substr(0, 32));
    }
  }
  ::closedir(dir);
  return ids;
}

}  // namespace kvserve
