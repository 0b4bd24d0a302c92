#include "core/session/session_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "core/model/fingerprint.h"
#include "core/session/session_store.h"

namespace kvserve {
namespace {

constexpr char kLogMagic[] = "KVSLOG1";  // first record's payload prefix

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrFormat("%s %s: %s", what, path, std::strerror(errno)));
}

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
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

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

void PutTokens(std::string& out, absl::Span<const int32_t> tokens) {
  PutU64(out, tokens.size());
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(u >> (8 * i)));
  }
}

bool GetTokens(Reader& r, std::vector<int32_t>* tokens) {
  uint64_t n;
  std::string_view bytes;
  if (!r.U64(&n) || n > (1u << 26) || !r.Bytes(n * 4, &bytes)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) {
      u |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[4 * i + b]))
           << (8 * b);
    }
    tokens->push_back(static_cast<int32_t>(u));
  }
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
  return std::unique_ptr<SessionDir>(new SessionDir(std::move(path)));
}

bool SessionDir::IsValidId(std::string_view id) { return IsValidSessionId(id); }

std::string SessionDir::LogPath(std::string_view id) const {
  return absl::StrFormat("%s/%s.log", path_, id);
}

std::string SessionDir::SnapshotPath(std::string_view id) const {
  return absl::StrFormat("%s/%s.kv", path_, id);
}

absl::StatusOr<int64_t> SessionDir::AppendRecord(std::string_view id,
                                                 const std::string& payload,
                                                 bool truncate) {
  if (!IsValidId(id)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid session id \"%s\"", id));
  }
  const std::string path = LogPath(id);
  const int fd = ::open(
      path.c_str(),
      O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND), 0600);
  if (fd < 0) return ErrnoError("cannot open", path);
  std::string record;
  const uint32_t n = payload.size();
  for (int i = 0; i < 4; ++i) record.push_back(static_cast<char>(n >> (8 * i)));
  PutU64(record, Xxh64(payload.data(), payload.size(), 0));
  record += payload;
  absl::Status s = WriteAll(fd, record, path);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("cannot fsync", path);
  struct stat st;
  if (s.ok() && ::fstat(fd, &st) != 0) s = ErrnoError("cannot stat", path);
  ::close(fd);
  if (s.ok() && truncate) s = FsyncDir(path_);
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
  std::string payload = kLogMagic;
  PutU64(payload, session.owner.size());
  payload += session.owner;
  PutU64(payload, session.ttl.has_value()
                      ? absl::ToInt64Nanoseconds(*session.ttl)
                      : ~uint64_t{0});
  PutU64(payload, absl::ToUnixNanos(session.create_time));
  PutTokens(payload, session.tokens);
  return AppendRecord(session.id, payload, /*truncate=*/true);
}

absl::StatusOr<int64_t> SessionDir::Append(std::string_view id, int64_t base,
                                           absl::Span<const int32_t> tokens) {
  std::string payload;
  PutU64(payload, base);
  PutTokens(payload, tokens);
  return AppendRecord(id, payload, /*truncate=*/false);
}

absl::Status SessionDir::Remove(std::string_view id) {
  if (!IsValidId(id)) return absl::OkStatus();
  for (const std::string& path : {LogPath(id), SnapshotPath(id)}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError("cannot remove", path);
    }
  }
  return absl::OkStatus();
}

void SessionDir::RemoveSnapshot(std::string_view id) {
  if (IsValidId(id)) ::unlink(SnapshotPath(id).c_str());
}

absl::StatusOr<StoredSession> SessionDir::Load(std::string_view id) const {
  if (!IsValidId(id)) {
    return absl::NotFoundError(absl::StrFormat("session %s not found", id));
  }
  absl::StatusOr<std::string> data = ReadFile(LogPath(id));
  if (!data.ok()) {
    if (absl::IsNotFound(data.status())) {
      return absl::NotFoundError(absl::StrFormat("session %s not found", id));
    }
    return data.status();
  }
  StoredSession session;
  session.id = std::string(id);
  session.log_bytes = data->size();
  std::string_view rest = *data;
  bool header = true;
  while (rest.size() >= 12) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(rest[i]))
           << (8 * i);
    }
    const uint64_t sum = GetU64(rest.data() + 4);
    if (rest.size() - 12 < n) break;  // torn
    const std::string_view payload = rest.substr(12, n);
    if (Xxh64(payload.data(), payload.size(), 0) != sum) break;  // corrupt
    rest.remove_prefix(12 + n);
    Reader r(payload);
    if (header) {
      std::string_view magic, owner;
      uint64_t owner_size, ttl, created;
      if (!r.Bytes(sizeof(kLogMagic) - 1, &magic) || magic != kLogMagic ||
          !r.U64(&owner_size) || !r.Bytes(owner_size, &owner) || !r.U64(&ttl) ||
          !r.U64(&created) || !GetTokens(r, &session.tokens) || !r.Done()) {
        break;
      }
      session.owner = std::string(owner);
      if (ttl != ~uint64_t{0}) session.ttl = absl::Nanoseconds(ttl);
      session.create_time = absl::FromUnixNanos(created);
      header = false;
      continue;
    }
    uint64_t base;
    std::vector<int32_t> tokens;
    if (!r.U64(&base) || base > session.tokens.size() ||
        !GetTokens(r, &tokens) || !r.Done()) {
      break;
    }
    session.tokens.resize(base);
    session.tokens.insert(session.tokens.end(), tokens.begin(), tokens.end());
  }
  if (header) {
    return absl::DataLossError(
        absl::StrFormat("session log %s has no readable header", LogPath(id)));
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

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrFormat("%s does not exist", path));
    }
    return ErrnoError("cannot read", path);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace kvserve
