// The one place where gRPC status codes are made from absl::Status, and how
// client text is shown in a status message.
#ifndef KVSERVE_SERVER_STATUS_H_
#define KVSERVE_SERVER_STATUS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kvserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ... for metric labels.
std::string GrpcCodeName(grpc::StatusCode code);

// The most bytes of client input a status message repeats: a message is
// sent as metadata, and a long one would turn the answer into
// RESOURCE_EXHAUSTED ("metadata size exceeds limit").
inline constexpr size_t kMaxQuotedClientBytes = 64;

// `text` as an error message shows it: in double quotes, its first
// kMaxQuotedClientBytes bytes C-escaped (absl::CHexEscape, so the result is
// printable ASCII), then "…" if it was longer.
std::string QuoteClientText(std::string_view text);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_STATUS_H_
