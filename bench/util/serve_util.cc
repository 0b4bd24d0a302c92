#include "bench/util/serve_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::bench {
namespace {

constexpr char kReadyPrefix[] = "kvserve: listening ";

// The port of "HOST:PORT" at the start of `s` up to a space, or 0.
int PortOf(const std::string& s) {
  const std::string address = s.substr(0, s.find(' '));
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return 0;
  }
  return port;
}

}  // namespace

RandomModelOptions BenchModelOptions(int context_length) {
  RandomModelOptions o;
  o.n_layers = 6;
  o.dim = 1024;
  o.n_heads = 16;
  o.n_kv_heads = 4;
  o.hidden_dim = 2816;
  o.context_length = context_length;
  o.dtype = "f32";
  o.name = "kvserve-bench";
  return o;
}

absl::Status WriteBenchModel(const RandomModelOptions& options,
                             const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufWriter>> writer = MakeRandomModel(options);
  if (!writer.ok()) return writer.status();
  return (*writer)->WriteFile(path);
}

int64_t DecodeWeightBytes(const ModelWeights& w) {
  // Every matrix but the embedding table, of which a step reads one row
  // per token (unless it is also the output matrix).
  const bool tied = w.output.data == w.token_embd.data;
  return w.TotalBytes() - (tied ? 0 : w.token_embd.bytes());
}

absl::StatusOr<ScratchDir> ScratchDir::Create(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/",
                                     prefix, "XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return ScratchDir(pattern);
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<std::unique_ptr<KvserveProcess>> KvserveProcess::Start(
    const std::vector<std::string>& flags, absl::Duration ready_timeout,
    bool verbose, std::string binary) {
  if (binary.empty()) binary = std::string(KVSERVE_BIN_DIR) + "/kvserve";
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no server binary at ", binary, " (build it first)"));
  }
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--listen=127.0.0.1:0");
  argv.push_back("--metrics_listen=127.0.0.1:0");
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);

  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const int dev_null = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    if (dev_null >= 0) {
      dup2(dev_null, STDIN_FILENO);
      dup2(dev_null, STDOUT_FILENO);
    }
    dup2(err_pipe[1], STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  if (dev_null >= 0) close(dev_null);
  close(err_pipe[1]);
  if (pid < 0) {
    close(err_pipe[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  std::unique_ptr<KvserveProcess> p(new KvserveProcess());
  p->pid_ = pid;
  p->stderr_fd_ = err_pipe[0];
  p->verbose_ = verbose;
  p->reader_ = std::thread([raw = p.get()] { raw->ReadStderr(); });

  const absl::Time deadline = absl::Now() + ready_timeout;
  while (absl::Now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(p->mu_);
      const size_t at = p->stderr_text_.find(kReadyPrefix);
      const size_t eol = at == std::string::npos
                             ? std::string::npos
                             : p->stderr_text_.find('\n', at);
      if (eol != std::string::npos) {
        const std::string line = p->stderr_text_.substr(at, eol - at);
        const size_t g = line.find("grpc="), m = line.find("metrics=");
        if (g != std::string::npos && m != std::string::npos) {
          p->grpc_port_ = PortOf(line.substr(g + 5));
          p->metrics_port_ = PortOf(line.substr(m + 8));
        }
        if (p->grpc_port_ > 0) return p;
      }
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->exited_ = true;
      p->wait_status_ = status;
      return absl::FailedPreconditionError(absl::StrCat(
          "kvserve exited before it was ready; stderr:\n", p->stderr_text()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "kvserve printed no ready line within ",
      absl::FormatDuration(ready_timeout), "; stderr:\n", p->stderr_text()));
}

void KvserveProcess::ReadStderr() {
  char buffer[4096];
  while (true) {
    const ssize_t got = read(stderr_fd_, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (verbose_) (void)!write(STDERR_FILENO, buffer, got);
    std::lock_guard<std::mutex> lock(mu_);
    stderr_text_.append(buffer, got);
  }
}

bool KvserveProcess::Stop(absl::Duration grace) {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (!exited_) {
      const pid_t r = waitpid(pid_, &wait_status_, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        exited_ = true;
        break;
      }
      if (absl::Now() >= deadline) {
        kill(-pid_, SIGKILL);
        kill(pid_, SIGKILL);
        waitpid(pid_, &wait_status_, 0);
        exited_ = true;
        wait_status_ = -1;
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  if (reader_.joinable()) reader_.join();
  if (stderr_fd_ >= 0) close(stderr_fd_);
  stderr_fd_ = -1;
  return wait_status_ >= 0 && WIFEXITED(wait_status_) &&
         WEXITSTATUS(wait_status_) == 0;
}

KvserveProcess::~KvserveProcess() { Stop(absl::Seconds(5)); }

std::string KvserveProcess::grpc_address() const {
  return absl::StrCat("127.0.0.1:", grpc_port_);
}

std::string KvserveProcess::stderr_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stderr_text_;
}

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * values.size());
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(i, values.size() - 1)];
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double s = 0;
  for (double v : values) s += v;
  return s / values.size();
}

}  // namespace kvserve::bench
