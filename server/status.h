// The one place where gRPC status codes are made from absl::Status. Client
// text in a message: QuoteClientText (core/util/quote.h, included here).
#ifndef KVSERVE_SERVER_STATUS_H_
#define KVSERVE_SERVER_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "core/util/quote.h"
#include "grpcpp/support/status.h"

namespace kvserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ... for metric labels.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_STATUS_H_
