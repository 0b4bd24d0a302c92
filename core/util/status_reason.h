// A machine-readable reason carried inside an absl::Status as a payload,
// so callers branch on data, never on the wording of a message.
#ifndef KVSERVE_CORE_UTIL_STATUS_REASON_H_
#define KVSERVE_CORE_UTIL_STATUS_REASON_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/types/optional.h"

namespace kvserve {

inline constexpr char kStatusReasonUrl[] = "kvserve/reason";

// RESOURCE_EXHAUSTED reasons.
inline constexpr std::string_view kReasonQueueFull = "queue_full";
inline constexpr std::string_view kReasonKvCacheFull = "kv_cache_full";

inline absl::Status WithReason(absl::Status status, std::string_view reason) {
  status.SetPayload(kStatusReasonUrl, absl::Cord(absl::string_view(
                                          reason.data(), reason.size())));
  return status;
}

// The reason attached by WithReason; empty when there is none.
inline std::string ReasonOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kStatusReasonUrl);
  return payload.has_value() ? std::string(*payload) : std::string();
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_STATUS_REASON_H_
