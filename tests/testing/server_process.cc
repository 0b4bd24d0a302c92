#include "tests/testing/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

constexpr char kReadyPrefix[] = "kvserve: listening ";

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

ExitStatus FromWaitStatus(int wait_status) {
  ExitStatus status;
  if (WIFEXITED(wait_status)) {
    status.exited = true;
    status.code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    status.signal = WTERMSIG(wait_status);
  }
  return status;
}

// Milliseconds left until `deadline`, for poll(); at least 0.
int MillisLeft(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits for `pid` until `deadline`; nullopt if it still runs.
std::optional<ExitStatus> WaitPid(pid_t pid, absl::Time deadline) {
  while (true) {
    int wait_status = 0;
    const pid_t r = waitpid(pid, &wait_status, WNOHANG);
    if (r == pid) return FromWaitStatus(wait_status);
    if (r < 0 && errno != EINTR) return ExitStatus{};  // not our child (gone)
    if (absl::Now() >= deadline) return std::nullopt;
    usleep(5000);
  }
}

struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;  // -1 unless captured
  int stderr_fd = -1;
};

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// This process's environment with the "NAME=VALUE" entries of `extra`
// added, or replacing the variables of the same name.
std::vector<std::string> MergedEnvironment(
    const std::vector<std::string>& extra) {
  auto name_of = [](absl::string_view entry) {
    return entry.substr(0, entry.find('='));
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view name = name_of(*e);
    if (std::none_of(extra.begin(), extra.end(), [&](const std::string& x) {
          return name_of(x) == name;
        })) {
      env.emplace_back(*e);
    }
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Starts argv[0] with stdin from /dev/null and stderr (and stdout if
// `capture_stdout`) on pipes whose read ends are returned.
absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv,
                            bool capture_stdout,
                            const std::vector<std::string>& extra_env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Everything the child needs is prepared before fork(): after it, only
  // async-signal-safe calls are allowed in a multi-threaded process.
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  const std::vector<std::string> env_strings = MergedEnvironment(extra_env);
  std::vector<char*> envp;
  for (const std::string& entry : env_strings) {
    envp.push_back(const_cast<char*>(entry.c_str()));
  }
  envp.push_back(nullptr);
  int err_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  if (capture_stdout && pipe2(out_pipe, O_CLOEXEC) != 0) {
    CloseFd(&err_pipe[0]);
    CloseFd(&err_pipe[1]);
    return ErrnoError("pipe2");
  }
  const int dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const std::string exec_failed =
      absl::StrCat("cannot execute ", argv[0], ": ");
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    // Its own process group, so that killing it also kills its children.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (dev_null >= 0) dup2(dev_null, STDIN_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    if (capture_stdout) dup2(out_pipe[1], STDOUT_FILENO);
    execve(args[0], args.data(), envp.data());
    const char* reason = std::strerror(errno);
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    (void)!write(STDERR_FILENO, reason, std::strlen(reason));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  const int fork_errno = errno;
  if (dev_null >= 0) close(dev_null);
  CloseFd(&err_pipe[1]);
  CloseFd(&out_pipe[1]);
  if (pid < 0) {
    CloseFd(&err_pipe[0]);
    CloseFd(&out_pipe[0]);
    errno = fork_errno;
    return ErrnoError("fork");
  }
  return Child{pid, out_pipe[0], err_pipe[0]};
}

// The port of "HOST:PORT" (the part after the last ':'), or 0.
int PortOf(absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return 0;
  }
  return port;
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (exited) return absl::StrCat("exit code ", code);
  if (signal != 0) return absl::StrCat("killed by signal ", signal);
  return "unknown exit status";
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    std::vector<std::string> extra_flags) {
  Options options;
  options.extra_flags = std::move(extra_flags);
  return Start(options);
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const Options& options) {
  std::vector<std::string> argv;
  argv.push_back(options.binary.empty() ? BinDir() + "/kvserve"
                                        : options.binary);
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no server binary at ", argv[0], " (build it first)"));
  }
  for (const std::string& flag : options.extra_flags) argv.push_back(flag);
  argv.push_back("--listen=" + options.listen);
  argv.push_back("--metrics_listen=127.0.0.1:0");

  absl::StatusOr<Child> child =
      Spawn(argv, /*capture_stdout=*/false, options.env);
  if (!child.ok()) return child.status();
  auto server = absl::WrapUnique(new ServerProcess());
  server->pid_ = child->pid;
  server->stderr_fd_ = child->stderr_fd;
  server->reader_ = std::thread([s = server.get()] { s->ForwardStderr(); });

  std::unique_lock<std::mutex> lock(server->mu_);
  const bool done = server->ready_cv_.wait_for(
      lock, absl::ToChronoNanoseconds(options.ready_timeout),
      [&] { return server->ready_ || server->stderr_eof_; });
  if (server->ready_) return server;
  const std::string output = server->stderr_text_;
  lock.unlock();
  if (!done) {
    return absl::DeadlineExceededError(absl::StrCat(
        "kvserve printed no ready line within ",
        absl::FormatDuration(options.ready_timeout), "; stderr:\n", output));
  }
  absl::StatusOr<ExitStatus> exit = server->WaitExit(absl::Seconds(5));
  return absl::FailedPreconditionError(absl::StrCat(
      "kvserve closed stderr before it was ready (",
      exit.ok() ? exit->ToString() : "still running", "); stderr:\n", output));
}

void ServerProcess::ForwardStderr() {
  std::string pending;
  char buffer[4096];
  while (!stop_reader_.load()) {
    pollfd fd = {stderr_fd_, POLLIN, 0};
    const int n = poll(&fd, 1, 100);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    const ssize_t got = read(stderr_fd_, buffer, sizeof(buffer));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;
    pending.append(buffer, static_cast<size_t>(got));
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline + 1);
      pending.erase(0, newline + 1);
      const std::string forwarded = absl::StrCat("[kvserve] ", line);
      (void)!write(STDERR_FILENO, forwarded.data(), forwarded.size());
      std::lock_guard<std::mutex> lock(mu_);
      stderr_text_.append(line);
      if (!ready_ && absl::StartsWith(line, kReadyPrefix)) {
        int grpc = 0, metrics = 0;
        for (absl::string_view field : absl::StrSplit(
                 absl::StripAsciiWhitespace(
                     absl::string_view(line).substr(strlen(kReadyPrefix))),
                 ' ', absl::SkipEmpty())) {
          if (absl::ConsumePrefix(&field, "grpc=")) grpc = PortOf(field);
          if (absl::ConsumePrefix(&field, "metrics=")) metrics = PortOf(field);
        }
        if (grpc != 0 && metrics != 0) {
          grpc_port_ = grpc;
          metrics_port_ = metrics;
          ready_ = true;
          ready_cv_.notify_all();
        }
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending.empty()) {
    const std::string forwarded = absl::StrCat("[kvserve] ", pending, "\n");
    (void)!write(STDERR_FILENO, forwarded.data(), forwarded.size());
    stderr_text_.append(pending);
  }
  stderr_eof_ = true;
  ready_cv_.notify_all();
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exit_status_.has_value()) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    exit_status_ = WaitPid(pid_, absl::Now() + absl::Seconds(10));
  }
  stop_reader_.store(true);
  if (reader_.joinable()) reader_.join();
  CloseFd(&stderr_fd_);
}

std::string ServerProcess::grpc_address() const {
  return absl::StrCat("127.0.0.1:", grpc_port_);
}

absl::Status ServerProcess::SendSignal(int signal) {
  if (exit_status_.has_value()) {
    return absl::FailedPreconditionError("the server has already exited");
  }
  if (kill(pid_, signal) != 0) return ErrnoError("kill");
  return absl::OkStatus();
}

absl::StatusOr<ExitStatus> ServerProcess::WaitExit(absl::Duration timeout) {
  if (!exit_status_.has_value()) {
    exit_status_ = WaitPid(pid_, absl::Now() + timeout);
  }
  if (!exit_status_.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "kvserve still running after ", absl::FormatDuration(timeout)));
  }
  return *exit_status_;
}

bool ServerProcess::running() { return !WaitExit(absl::ZeroDuration()).ok(); }

std::string ServerProcess::stderr_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stderr_text_;
}

int ServerProcess::http_port() const {
  constexpr char kHttpReady[] = "kvserve: HTTP listening on ";
  const std::string err = stderr_text();
  const size_t at = err.find(kHttpReady);
  if (at == std::string::npos) return 0;
  const size_t start = at + strlen(kHttpReady);
  return PortOf(absl::string_view(err).substr(
      start, err.find_first_of(" \n", start) - start));
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         const std::vector<std::string>& env) {
  absl::StatusOr<Child> child = Spawn(argv, /*capture_stdout=*/true, env);
  if (!child.ok()) return child.status();
  const absl::Time deadline = absl::Now() + timeout;
  CommandResult result;
  int fds[2] = {child->stdout_fd, child->stderr_fd};
  std::string* sinks[2] = {&result.out, &result.err};
  char buffer[4096];
  while ((fds[0] >= 0 || fds[1] >= 0) && absl::Now() < deadline) {
    pollfd polls[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    const int n = poll(polls, 2, std::min(MillisLeft(deadline), 100));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 ||
          (polls[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        continue;
      }
      const ssize_t got = read(fds[i], buffer, sizeof(buffer));
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        CloseFd(&fds[i]);
      }
    }
  }
  CloseFd(&fds[0]);
  CloseFd(&fds[1]);
  std::optional<ExitStatus> status = WaitPid(child->pid, deadline);
  if (!status.has_value()) {
    kill(-child->pid, SIGKILL);
    kill(child->pid, SIGKILL);
    WaitPid(child->pid, absl::Now() + absl::Seconds(10));
    return absl::DeadlineExceededError(absl::StrCat(
        argv[0], " still running after ", absl::FormatDuration(timeout),
        "; stdout:\n", result.out, "\nstderr:\n", result.err));
  }
  result.status = *status;
  return result;
}

absl::StatusOr<std::string> HttpGet(int port, absl::string_view path,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoError("socket");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
          0 &&
      errno != EINPROGRESS) {
    return ErrnoError(absl::StrCat("connect to 127.0.0.1:", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1:", port,
                   "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, MillisLeft(deadline)) <= 0) {
      return absl::DeadlineExceededError("HTTP request: connect/send timeout");
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      errno = error;
      return ErrnoError(absl::StrCat("connect to 127.0.0.1:", port));
    }
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return ErrnoError("send");
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[8192];
  while (true) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, MillisLeft(deadline)) <= 0) {
      return absl::DeadlineExceededError("HTTP response timeout");
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return ErrnoError("recv");
    }
    response.append(buffer, static_cast<size_t>(n));
  }
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("malformed HTTP response: ", response.substr(0, 200)));
  }
  const absl::string_view headers(response.data(), header_end);
  const absl::string_view status_line = headers.substr(0, headers.find("\r\n"));
  std::vector<absl::string_view> parts =
      absl::StrSplit(status_line, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts[1] != "200") {
    return absl::InternalError(
        absl::StrCat("HTTP GET ", path, ": ", status_line));
  }
  std::string body = response.substr(header_end + 4);
  if (absl::StrContains(absl::AsciiStrToLower(headers),
                        "transfer-encoding: chunked")) {
    std::string decoded;
    absl::string_view rest = body;
    while (true) {
      const size_t line_end = rest.find("\r\n");
      if (line_end == absl::string_view::npos) break;
      size_t size = 0;
      const std::string size_hex(rest.substr(0, line_end));
      size = std::strtoul(size_hex.c_str(), nullptr, 16);
      rest.remove_prefix(line_end + 2);
      if (size == 0 || rest.size() < size) break;
      decoded.append(rest.data(), size);
      rest.remove_prefix(std::min(rest.size(), size + 2));
    }
    body = std::move(decoded);
  }
  return body;
}

}  // namespace kvserve::testing
