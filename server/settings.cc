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

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

}  // namespace kvserve
