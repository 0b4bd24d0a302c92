// Requests and responses of the raw (ByteBuffer) methods of the service.
//
// gRPC's callback API answers a request it cannot parse UNIMPLEMENTED with
// an empty message; proto3 parsing fails on a `string` field that is not
// valid UTF-8. So the service takes its methods raw and parses them here:
// a request that fails is INVALID_ARGUMENT naming the field,
// "prompt.messages.messages[1].content is not valid UTF-8", or "malformed
// request" when the bytes are not the message at all. The fields stay
// `string` in the proto (as `bytes` they would change every Python and Node
// client's types).
//
// Thread-safety: the functions are thread-safe.
#ifndef KVSERVE_SERVER_RAW_REQUEST_H_
#define KVSERVE_SERVER_RAW_REQUEST_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace kvserve {

// Parses `bytes` into `request` (which is cleared first). On failure,
// INVALID_ARGUMENT: the path of the first `string` field (in field-number
// order, depth first) that is not valid UTF-8, else "malformed request".
// protobuf's own error log for the failed parse is silenced.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          google::protobuf::Message* request);
absl::Status ParseRequest(std::string_view bytes,
                          google::protobuf::Message* request);

// `response` in its wire form, as gRPC sends it.
absl::StatusOr<grpc::ByteBuffer> SerializeResponse(
    const google::protobuf::Message& response);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_RAW_REQUEST_H_
