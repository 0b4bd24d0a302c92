// Fuzzes SessionDir::Load on an arbitrary <id>.log (session_dir.h): it must
// never crash, replays records up to the first torn or corrupt one, and
// reports how many bytes it replayed and where the damage is. A loaded
// session written back as a fresh start (StartRecords) loads as the same
// session (owner, tokens, conversation), undamaged.
//
// Records carry an XXH64 of their payload, which mutations almost always
// break; when the first input byte is odd the fuzzer rewrites every
// record's checksum before writing the file, so that the payload decoders
// (tokens, messages, bases) see mutated payloads too.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "core/session/session_dir.h"
#include "core/util/xxhash64.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

constexpr char kId[] = "0123456789abcdef0123456789abcdef";

std::unique_ptr<SessionDir>& Dir() {
  static std::unique_ptr<SessionDir> dir;
  return dir;
}

// [u32 payload bytes][u64 XXH64 of the payload][payload], as written.
void FixChecksums(std::string& log) {
  size_t pos = 0;
  while (log.size() - pos >= 12) {
    uint32_t n;
    std::memcpy(&n, log.data() + pos, 4);
    if (log.size() - pos - 12 < n) break;
    const uint64_t sum = Xxh64(log.data() + pos + 12, n, 0);
    std::memcpy(log.data() + pos + 4, &sum, 8);
    pos += 12 + n;
  }
}

void WriteLog(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FUZZ_CHECK(fd >= 0, "cannot write %s", path.c_str());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    FUZZ_CHECK(n > 0, "write %s failed", path.c_str());
    done += n;
  }
  ::close(fd);
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  std::string tmpl = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  tmpl += "/kvserve_session_fuzz.XXXXXX";
  FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
  absl::StatusOr<std::unique_ptr<SessionDir>> dir = SessionDir::Open(tmpl);
  FUZZ_CHECK(dir.ok(), "%s", dir.status().ToString().c_str());
  Dir() = *std::move(dir);
  // Removed at exit (a crash leaves the folder for the reproducer's sake).
  std::atexit([] {
    const SessionDir& d = *Dir();
    (void)::unlink(d.LogPath(kId).c_str());
    (void)::rmdir(d.path().c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size == 0) return 0;
  std::string log(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0) FixChecksums(log);
  const SessionDir& dir = *Dir();
  WriteLog(dir.LogPath(kId), log);
  absl::StatusOr<StoredSession> s = dir.Load(kId);
  if (!s.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(s.status()), "Load: %s",
               s.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(s->id == kId, "id %s", s->id.c_str());
  FUZZ_CHECK(s->log_bytes == static_cast<int64_t>(log.size()),
             "log_bytes %lld of %zu", static_cast<long long>(s->log_bytes),
             log.size());
  FUZZ_CHECK(s->replayed_bytes > 0 && s->replayed_bytes <= s->log_bytes,
             "replayed %lld of %lld", static_cast<long long>(s->replayed_bytes),
             static_cast<long long>(s->log_bytes));

  FUZZ_CHECK(s->damaged_at <= s->log_bytes &&
                 (s->damaged_at >= 0 || s->replayed_bytes == s->log_bytes),
             "damaged at %lld, replayed %lld of %lld",
             static_cast<long long>(s->damaged_at),
             static_cast<long long>(s->replayed_bytes),
             static_cast<long long>(s->log_bytes));

  // Written back as a fresh start, the session loads unchanged, and the
  // start is as long as StartRecordsBytes says.
  const std::string header = SessionDir::StartRecords(*s);
  FUZZ_CHECK(
      static_cast<int64_t>(header.size()) ==
          SessionDir::StartRecordsBytes(
              s->owner, static_cast<int64_t>(s->tokens.size()), s->messages),
      "StartRecordsBytes %lld, StartRecords %zu",
      static_cast<long long>(SessionDir::StartRecordsBytes(
          s->owner, static_cast<int64_t>(s->tokens.size()), s->messages)),
      header.size());
  WriteLog(dir.LogPath(kId), header);
  absl::StatusOr<StoredSession> again = dir.Load(kId);
  FUZZ_CHECK(again.ok(), "rewritten log: %s",
             again.status().ToString().c_str());
  FUZZ_CHECK(again->owner == s->owner && again->tokens == s->tokens &&
                 again->messages == s->messages &&
                 again->create_time == s->create_time,
             "rewritten log loads differently");
  FUZZ_CHECK(
      again->replayed_bytes == again->log_bytes && again->damaged_at == -1,
      "rewritten log not fully replayed");
  return 0;
}
