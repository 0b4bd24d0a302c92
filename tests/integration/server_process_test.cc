// The process helpers the integration tests rely on, checked against stand-in
// processes (shell scripts, an in-test HTTP responder) rather than kvserve.
#include "tests/testing/server_process.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvserve::testing {
namespace {

// Writes an executable shell script and returns its path.
std::string WriteScript(const std::string& name, const std::string& body) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/",
                                        name, "_", getpid(), ".sh");
  std::ofstream(path) << "#!/bin/sh\n" << body;
  chmod(path.c_str(), 0755);
  return path;
}

TEST(ServerProcessTest, ParsesReadyLineAndStopsOnSignal) {
  const std::string script = WriteScript("fake_server", R"(
echo "loading model" >&2
trap 'echo "got TERM $*" >&2; exit 0' TERM
echo "kvserve: listening grpc=127.0.0.1:1234 metrics=127.0.0.1:5678" >&2
while true; do sleep 0.05; done
)");
  ServerProcess::Options options;
  options.binary = script;
  options.extra_flags = {"--threads=1"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->grpc_port(), 1234);
  EXPECT_EQ((*server)->metrics_port(), 5678);
  EXPECT_EQ((*server)->grpc_address(), "127.0.0.1:1234");
  EXPECT_TRUE((*server)->running());
  EXPECT_TRUE(absl::StrContains((*server)->stderr_text(), "loading model"));

  ASSERT_TRUE((*server)->SendSignal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> exit = (*server)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->success()) << exit->ToString();
  EXPECT_FALSE((*server)->running());
  EXPECT_FALSE((*server)->SendSignal(SIGTERM).ok());
  unlink(script.c_str());
}

TEST(ServerProcessTest, PassesListenFlagsAfterExtraFlags) {
  const std::string script = WriteScript("fake_server_args", R"(
echo "args: $*" >&2
echo "kvserve: listening grpc=127.0.0.1:1 metrics=127.0.0.1:2" >&2
exec sleep 30
)");
  ServerProcess::Options options;
  options.binary = script;
  options.extra_flags = {"--threads=1"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(absl::StrContains(
      (*server)->stderr_text(),
      "args: --threads=1 --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0"))
      << (*server)->stderr_text();
  // The destructor kills a server that is still running.
  const pid_t pid = (*server)->pid();
  server->reset();
  EXPECT_NE(kill(pid, 0), 0);
  unlink(script.c_str());
}

TEST(ServerProcessTest, ReportsExitBeforeReady) {
  const std::string script =
      WriteScript("fake_server_fails", "echo 'bad flag --x' >&2\nexit 3\n");
  ServerProcess::Options options;
  options.binary = script;
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "exit code 3"))
      << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), "bad flag --x"));
  unlink(script.c_str());
}

TEST(ServerProcessTest, TimesOutWithoutReadyLine) {
  const std::string script =
      WriteScript("fake_server_silent", "echo 'thinking' >&2\nexec sleep 30\n");
  ServerProcess::Options options;
  options.binary = script;
  options.ready_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  unlink(script.c_str());
}

TEST(ServerProcessTest, MissingBinaryIsNotFound) {
  ServerProcess::Options options;
  options.binary = "/nonexistent/kvserve";
  EXPECT_EQ(ServerProcess::Start(options).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RunCommandTest, CapturesOutputAndExitCode) {
  absl::StatusOr<CommandResult> result =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->out, "out\n");
  EXPECT_EQ(result->err, "err\n");
  EXPECT_TRUE(result->status.exited);
  EXPECT_EQ(result->status.code, 3);
}

TEST(RunCommandTest, KillsCommandsPastTheirTimeout) {
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> result =
      RunCommand({"/bin/sleep", "30"}, absl::Milliseconds(200));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Answers one HTTP request on a loopback port with `response`.
class OneShotHttpServer {
 public:
  explicit OneShotHttpServer(std::string response) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    listen(fd_, 1);
    thread_ = std::thread([this, response] {
      const int client = accept(fd_, nullptr, nullptr);
      if (client < 0) return;
      char buffer[4096];
      std::string request;
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = recv(client, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
      }
      request_ = request;
      (void)!send(client, response.data(), response.size(), MSG_NOSIGNAL);
      close(client);
    });
  }
  ~OneShotHttpServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  // Read after the response arrived.
  const std::string& request() const { return request_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string request_;
  std::thread thread_;
};

TEST(HttpGetTest, ReturnsTheBodyOfA200) {
  OneShotHttpServer server(
      "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nkvserve_x 1\n");
  absl::StatusOr<std::string> body = HttpGet(server.port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "kvserve_x 1\n");
  EXPECT_TRUE(absl::StartsWith(server.request(), "GET /metrics HTTP/1.0\r\n"))
      << server.request();
}

TEST(HttpGetTest, DecodesChunkedBodies) {
  OneShotHttpServer server(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n");
  absl::StatusOr<std::string> body = HttpGet(server.port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "abcdefg");
}

TEST(HttpGetTest, FailsOnErrorStatusAndClosedPort) {
  OneShotHttpServer server("HTTP/1.0 404 Not Found\r\n\r\nnope");
  absl::StatusOr<std::string> body = HttpGet(server.port(), "/nothing");
  ASSERT_FALSE(body.ok());
  EXPECT_TRUE(absl::StrContains(body.status().message(), "404"));
  // Port 1 on loopback has no listener: connection refused, not a hang.
  EXPECT_FALSE(HttpGet(1, "/metrics", absl::Seconds(2)).ok());
}

}  // namespace
}  // namespace kvserve::testing
