// Conversions between the API's protobuf messages and core's plain types,
// with request validation (INVALID_ARGUMENT naming the field).
#ifndef KVSERVE_SERVER_CONVERT_H_
#define KVSERVE_SERVER_CONVERT_H_

#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/engine/requests.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve {

Input FromProto(const v1::Input& input);

// Validates a Generate (or, with generate=false, an Append) request.
absl::StatusOr<GenerateParams> FromProto(const v1::GenerateRequest& request,
                                         int default_max_tokens);

absl::StatusOr<std::optional<absl::Duration>> TtlFromProto(bool has_ttl,
                                                           int64_t ttl_seconds);

void ToProto(const SessionInfo& info, v1::Session* out);
void ToProto(const Usage& usage, v1::Usage* out);
void ToProto(const GeneratedToken& token, const Tokenizer& tokenizer,
             v1::GeneratedToken* out);
void ToProto(const GenerateResult& result, v1::GenerateFinal* out);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_CONVERT_H_
