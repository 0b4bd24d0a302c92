#include "tests/soak/soak_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/memory/memory.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace kvserve::soak {
namespace {

// The nearest-rank percentile of unsorted samples, in place.
double Percentile(std::vector<double>* v, double p) {
  if (v->empty()) return 0;
  const size_t rank = static_cast<size_t>(
      std::ceil(p / 100.0 * static_cast<double>(v->size())));
  const size_t i = std::min(v->size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(v->begin(), v->begin() + static_cast<ptrdiff_t>(i),
                   v->end());
  return (*v)[i];
}

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kFault:
      return "fault";
    case Outcome::kFailed:
      return "failed";
  }
  return "?";
}

}  // namespace

void Tally::Count(absl::string_view kind, Outcome outcome,
                  absl::string_view detail) {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.by_kind[std::string(kind)][OutcomeName(outcome)];
  switch (outcome) {
    case Outcome::kOk:
      ++s_.ok;
      break;
    case Outcome::kRefused:
      ++s_.refused;
      break;
    case Outcome::kFault:
      ++s_.fault;
      ++s_.faults[absl::StrCat(kind, ": ", detail)];
      break;
    case Outcome::kFailed:
      ++s_.failed;
      break;
  }
}

void Tally::Keep(std::string message) {
  // The first few of each kind (the text before the first ':'), so that one
  // frequent failure does not hide the others.
  const std::string kind = message.substr(0, message.find(':'));
  if (++kept_by_kind_[kind] <= 5 && s_.messages.size() < 100) {
    s_.messages.push_back(std::move(message));
  } else {
    ++dropped_messages_;
  }
}

void Tally::Fail(absl::string_view kind, std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.failed;
  ++s_.by_kind[std::string(kind)]["failed"];
  Keep(absl::StrCat(kind, ": ", message));
}

void Tally::Ttft(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_ms_.push_back(absl::ToDoubleMilliseconds(d));
}

void Tally::Itl(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_ms_.push_back(absl::ToDoubleMilliseconds(d));
}

void Tally::SessionsLost(int64_t n, std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.sessions_lost += n;
  Keep(absl::StrCat("session lost: ", why));
}

void Tally::TurnsLost(int64_t n, std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.turns_lost += n;
  Keep(absl::StrCat(n, " turn(s) lost: ", why));
}

void Tally::SessionCorrupt(std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.sessions_corrupt;
  Keep(absl::StrCat("session corrupt: ", why));
}

void Tally::CheckFailed(std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.checks_failed;
  Keep(absl::StrCat("check failed: ", message));
}

Tally::Snapshot Tally::Take() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot out = s_;
  std::vector<double> ttft = ttft_ms_, itl = itl_ms_;
  out.ttft_samples = static_cast<int64_t>(ttft.size());
  out.itl_samples = static_cast<int64_t>(itl.size());
  out.ttft_p50_ms = Percentile(&ttft, 50);
  out.ttft_p99_ms = Percentile(&ttft, 99);
  out.itl_p50_ms = Percentile(&itl, 50);
  out.itl_p99_ms = Percentile(&itl, 99);
  if (dropped_messages_ > 0) {
    out.messages.push_back(
        absl::StrCat("(", dropped_messages_, " more not shown)"));
  }
  return out;
}

std::optional<Memory> ReadMemory(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return std::nullopt;
  Memory m;
  bool found = false;
  std::string line;
  while (std::getline(in, line)) {
    int64_t* field = nullptr;
    absl::string_view rest(line);
    if (absl::ConsumePrefix(&rest, "VmRSS:")) field = &m.rss;
    if (absl::ConsumePrefix(&rest, "VmHWM:")) field = &m.hwm;
    if (field == nullptr) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(rest, ' ', absl::SkipWhitespace());
    int64_t kib = 0;
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kib)) {
      *field = kib * 1024;
      found = true;
    }
  }
  if (!found) return std::nullopt;  // a zombie has no Vm* lines
  return m;
}

std::string Mib(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

absl::StatusOr<std::unique_ptr<Tmpfs>> Tmpfs::Mount(int64_t bytes) {
  char tmpl[] = "/tmp/kvserve_soak_tmpfs_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  const std::string options = absl::StrCat("size=", bytes, ",mode=0700");
  if (mount("tmpfs", tmpl, "tmpfs", 0, options.c_str()) != 0) {
    const int err = errno;
    rmdir(tmpl);
    return absl::PermissionDeniedError(absl::StrCat(
        "mount -t tmpfs -o ", options, " ", tmpl, ": ", strerror(err)));
  }
  return absl::WrapUnique(new Tmpfs(tmpl));
}

Tmpfs::~Tmpfs() {
  Unfill();
  umount2(path_.c_str(), MNT_DETACH);
  rmdir(path_.c_str());
}

int64_t Tmpfs::Fill() {
  const std::string file = path_ + "/filler";
  const int fd =
      open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  std::vector<char> chunk(1 << 16, 'x');
  int64_t written = 0;
  // Big chunks first, then single pages, so that not even a small log
  // record still fits.
  for (size_t size : {chunk.size(), size_t{4096}, size_t{512}, size_t{1}}) {
    while (true) {
      const ssize_t n = write(fd, chunk.data(), size);
      if (n <= 0) break;
      written += n;
    }
  }
  close(fd);
  return written;
}

void Tmpfs::Unfill() { unlink((path_ + "/filler").c_str()); }

absl::StatusOr<std::unique_ptr<KvctlStream>> KvctlStream::Start(
    const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  const int dev_null = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (dev_null >= 0) {
      dup2(dev_null, STDIN_FILENO);
      dup2(dev_null, STDERR_FILENO);
    }
    dup2(out[1], STDOUT_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  if (dev_null >= 0) close(dev_null);
  close(out[1]);
  if (pid < 0) {
    close(out[0]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  auto s = absl::WrapUnique(new KvctlStream());
  s->pid_ = pid;
  s->fd_ = out[0];
  return s;
}

std::vector<int32_t> KvctlStream::ReadTokens(int n, absl::Time deadline) {
  char buffer[4096];
  while (static_cast<int>(ids_.size()) < n && !eof_) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) break;
    pollfd p = {fd_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    const ssize_t got = read(fd_, buffer, sizeof(buffer));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      eof_ = true;
      break;
    }
    out_.append(buffer, static_cast<size_t>(got));
    size_t newline;
    while ((newline = out_.find('\n', parsed_)) != std::string::npos) {
      absl::string_view line(out_.data() + parsed_, newline - parsed_);
      parsed_ = newline + 1;
      const size_t key = line.find("\"token_id\":");
      if (key == absl::string_view::npos) continue;
      absl::string_view rest = line.substr(key + 11);
      while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
      const size_t end = rest.find_first_not_of("-0123456789");
      int32_t id = 0;
      if (absl::SimpleAtoi(rest.substr(0, end), &id)) ids_.push_back(id);
    }
  }
  return ids_;
}

std::string KvctlStream::Kill() {
  if (reaped_) return "already exited";
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  const int code = Wait(absl::Now() + absl::Seconds(10));
  return code == -1 ? "killed" : absl::StrCat("exit code ", code);
}

int KvctlStream::Wait(absl::Time deadline) {
  while (!reaped_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (r < 0 && errno != EINTR) {
      reaped_ = true;
      return -1;
    }
    if (absl::Now() >= deadline) return -2;
    usleep(2000);
  }
  return -1;
}

KvctlStream::~KvctlStream() {
  if (!reaped_) Kill();
  if (fd_ >= 0) close(fd_);
}

}  // namespace kvserve::soak
