// Process set-up for the server binary: flags from the environment,
// listen addresses, termination and reload (SIGHUP) signals.
#ifndef KVSERVE_SERVER_SETTINGS_H_
#define KVSERVE_SERVER_SETTINGS_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve {

// Sets every registered flag NAME whose variable <prefix><NAME in capitals>
// is in the environment. INVALID_ARGUMENT names the variable and the error.
absl::Status ApplyEnvironmentFlags(std::string_view prefix);

struct HostPort {
  std::string host;  // as given, brackets kept for IPv6 ("[::1]")
  int port = 0;      // 0: pick a free port
};
// "127.0.0.1:50051", "[::1]:0", "0.0.0.0:9464".
absl::StatusOr<HostPort> ParseHostPort(std::string_view address);

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and the threads
// it starts later; WaitForTerminationSignal then receives them.
void BlockTerminationSignals();
// Returns SIGTERM or SIGINT once one arrives; each SIGHUP before it calls
// `on_hangup` (if set) on the waiting thread and keeps waiting.
int WaitForTerminationSignal(const std::function<void()>& on_hangup = nullptr);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_SETTINGS_H_
