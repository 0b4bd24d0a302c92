#include "server/settings.h"

#include <signal.h>

#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace kvserve {

absl::Status ApplyEnvironmentFlags(std::string_view prefix) {
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string var =
        std::string(prefix) + absl::AsciiStrToUpper(std::string(name));
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s=\"%s\": %s", var, value, error));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  HostPort hp;
  if (colon == std::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address.data() + colon + 1,
                                          address.size() - colon - 1),
                        &hp.port) ||
      hp.port < 0 || hp.port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is not HOST:PORT (e.g. 127.0.0.1:50051)", address));
  }
  hp.host = std::string(address.substr(0, colon));
  return hp;
}

namespace {

sigset_t WaitedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  const sigset_t set = WaitedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal(const std::function<void()>& on_hangup) {
  const sigset_t set = WaitedSignals();
  while (true) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    if (signal != SIGHUP) return signal;
    if (on_hangup) on_hangup();
  }
}

}  // namespace kvserve
