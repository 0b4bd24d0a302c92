#include "server/status.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

std::string GrpcCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

std::string QuoteClientText(std::string_view text) {
  const bool truncated = text.size() > kMaxQuotedClientBytes;
  const std::string_view shown = text.substr(0, kMaxQuotedClientBytes);
  return absl::StrCat("\"", absl::CHexEscape({shown.data(), shown.size()}),
                      truncated ? "…" : "", "\"");
}

}  // namespace kvserve
