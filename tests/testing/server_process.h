// Test helpers that run real binaries: the kvserve server on ephemeral
// loopback ports, one-shot commands such as kvctl, and a plain HTTP GET for
// the metrics endpoint. Plain POSIX; no gRPC here.
#ifndef KVSERVE_TESTS_TESTING_SERVER_PROCESS_H_
#define KVSERVE_TESTS_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvserve::testing {

// How a child process ended.
struct ExitStatus {
  bool exited = false;  // true: returned from main or called exit()
  int code = -1;        // the exit code, when exited
  int signal = 0;       // the terminating signal, when not exited

  bool success() const { return exited && code == 0; }
  std::string ToString() const;
};

// A running `kvserve` listening on 127.0.0.1 with kernel-chosen ports.
//
// Start() passes `--listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0` (or
// Options::listen) after the extra flags and waits for the server's ready
// line on stderr
//   kvserve: listening grpc=127.0.0.1:PORT metrics=127.0.0.1:PORT
// Everything the server writes to stderr is forwarded to this process's
// stderr. The destructor kills the server (SIGKILL) if it still runs; the
// server also dies with the test process (PR_SET_PDEATHSIG).
//
// Thread-compatible: call methods from one thread at a time.
class ServerProcess {
 public:
  struct Options {
    std::vector<std::string> extra_flags;
    // Empty: BinDir() + "/kvserve".
    std::string binary;
    // The --listen address; grpc_address() is 127.0.0.1 and the port
    // whatever the host, so a server on 0.0.0.0 is reached on loopback.
    std::string listen = "127.0.0.1:0";
    // "NAME=VALUE" entries added to (or replacing in) the server's
    // environment.
    std::vector<std::string> env;
    absl::Duration ready_timeout = absl::Seconds(30);
  };

  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const Options& options);
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> extra_flags = {});

  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  // "127.0.0.1:PORT" of the gRPC listener.
  std::string grpc_address() const;

  absl::Status SendSignal(int signal);
  // The exit status once the process ended; DEADLINE_EXCEEDED if it still
  // runs after `timeout` (it is left running).
  absl::StatusOr<ExitStatus> WaitExit(absl::Duration timeout);
  bool running();
  // What the server wrote to stderr so far.
  std::string stderr_text() const;
  // The port of its "kvserve: HTTP listening on HOST:PORT" line (with
  // --http_listen); 0 if there is none.
  int http_port() const;

 private:
  ServerProcess() = default;
  void ForwardStderr();

  pid_t pid_ = -1;
  int stderr_fd_ = -1;  // read end of the server's stderr pipe
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::optional<ExitStatus> exit_status_;

  std::thread reader_;
  std::atomic<bool> stop_reader_{false};
  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::string stderr_text_;  // guarded by mu_
  bool ready_ = false;       // guarded by mu_
  bool stderr_eof_ = false;  // guarded by mu_
};

// The output and status of a finished command.
struct CommandResult {
  ExitStatus status;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv[0] (a path) with the arguments and captures its output. A command
// still running after `timeout` is killed and DEADLINE_EXCEEDED returned.
// `env`: "NAME=VALUE" entries added to (or replacing in) its environment.
absl::StatusOr<CommandResult> RunCommand(
    const std::vector<std::string>& argv,
    absl::Duration timeout = absl::Seconds(30),
    const std::vector<std::string>& env = {});

// GET http://127.0.0.1:port/path (HTTP/1.0); the body of a 200 response.
absl::StatusOr<std::string> HttpGet(int port, absl::string_view path,
                                    absl::Duration timeout = absl::Seconds(10));

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_SERVER_PROCESS_H_
