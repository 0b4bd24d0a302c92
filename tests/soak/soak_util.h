// Pieces of the soak driver that are not about the workload: the outcome
// tally and latency samples, a server's memory from /proc, a size-limited
// tmpfs for the session directory, and `kvctl generate` as a child process
// that can be killed mid-stream (a real TCP disconnect).
#ifndef KVSERVE_TESTS_SOAK_SOAK_UTIL_H_
#define KVSERVE_TESTS_SOAK_SOAK_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvserve::soak {

// How one call ended, as the suite judges it.
enum class Outcome {
  kOk,       // completed with the expected tokens
  kRefused,  // RESOURCE_EXHAUSTED
  kFault,    // ended by a fault the suite injected, with the expected code
  kFailed,   // anything else: a wrong token, an unexpected code, a timeout
};

// Thread-safe tally of the whole run.
class Tally {
 public:
  // `kind` names the operation ("generate", "turn", "cancel", ...); for a
  // kFault, `detail` names how it ended ("CANCELLED", "DEADLINE_EXCEEDED").
  void Count(absl::string_view kind, Outcome outcome,
             absl::string_view detail = "");
  // A failure (counted under `kind`) with its explanation; the first five
  // of each kind are kept for the report.
  void Fail(absl::string_view kind, std::string message);
  void Ttft(absl::Duration d);
  void Itl(absl::Duration d);
  void SessionsLost(int64_t n, std::string why);
  void TurnsLost(int64_t n, std::string why);
  void SessionCorrupt(std::string why);
  // A failed check that is not one call (exit status, pool accounting).
  void CheckFailed(std::string message);

  struct Snapshot {
    int64_t ok = 0, refused = 0, fault = 0, failed = 0;
    int64_t sessions_lost = 0, turns_lost = 0, sessions_corrupt = 0;
    int64_t checks_failed = 0;
    std::map<std::string, std::map<std::string, int64_t>> by_kind;
    std::map<std::string, int64_t> faults;  // detail -> count
    std::vector<std::string> messages;
    double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
    int64_t ttft_samples = 0, itl_samples = 0;
  };
  Snapshot Take() const;

 private:
  void Keep(std::string message);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  Snapshot s_;                    // guarded by mu_ (percentiles unset)
  std::vector<double> ttft_ms_;   // guarded by mu_
  std::vector<double> itl_ms_;    // guarded by mu_
  int64_t dropped_messages_ = 0;  // guarded by mu_
  std::map<std::string, int> kept_by_kind_;  // guarded by mu_
};

// VmRSS and VmHWM of a process, in bytes; nullopt when it is gone.
struct Memory {
  int64_t rss = 0;
  int64_t hwm = 0;
};
std::optional<Memory> ReadMemory(pid_t pid);

std::string Mib(int64_t bytes);  // "123.4 MiB"

// A tmpfs of `bytes` mounted on a fresh directory, unmounted (lazily, so an
// open file cannot keep it) and removed on destruction.
class Tmpfs {
 public:
  // The reason as an error when mounting is not permitted.
  static absl::StatusOr<std::unique_ptr<Tmpfs>> Mount(int64_t bytes);
  ~Tmpfs();
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

  const std::string& path() const { return path_; }
  // Fills the free space with a file outside `subdir` (the session
  // directory lives in a subdirectory); returns the bytes written.
  int64_t Fill();
  // Removes the filler.
  void Unfill();

 private:
  explicit Tmpfs(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// `kvctl --json generate ...` with its stdout on a pipe, in its own process
// group; killed with SIGKILL on destruction.
class KvctlStream {
 public:
  static absl::StatusOr<std::unique_ptr<KvctlStream>> Start(
      const std::vector<std::string>& argv);
  ~KvctlStream();
  KvctlStream(const KvctlStream&) = delete;
  KvctlStream& operator=(const KvctlStream&) = delete;

  // Reads until `n` token lines arrived, the output ended, or `deadline`.
  // Returns the token ids read so far (all of them).
  std::vector<int32_t> ReadTokens(int n, absl::Time deadline);
  // SIGKILL, then reaps it (bounded). Returns the wait status text.
  std::string Kill();
  // Waits for the exit (bounded); the exit code, or -1.
  int Wait(absl::Time deadline);
  const std::string& output() const { return out_; }

 private:
  KvctlStream() = default;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  std::vector<int32_t> ids_;
  size_t parsed_ = 0;  // bytes of out_ already split into lines
  bool eof_ = false;
  bool reaped_ = false;
};

}  // namespace kvserve::soak

#endif  // KVSERVE_TESTS_SOAK_SOAK_UTIL_H_
