#include "core/model/fingerprint.h"

#include "absl/strings/str_format.h"

namespace kvserve {

std::string Fingerprint::Hex() const {
  return absl::StrFormat("%016x", state_);
}

}  // namespace kvserve
