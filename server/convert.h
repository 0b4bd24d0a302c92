// Conversions between the API's protobuf messages and core's plain types.
// They check only what core has no rule for: the number and length of stop
// strings and the sign of a TTL (INVALID_ARGUMENT). The ranges of
// max_tokens and the sampling parameters are the engine's to check
// (ValidateGenerateParams, core/engine/engine.h), when the request runs.
#ifndef KVSERVE_SERVER_CONVERT_H_
#define KVSERVE_SERVER_CONVERT_H_

#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/engine/requests.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve {

ChatMessage FromProto(const v1::ChatMessage& message);
Input FromProto(const v1::Input& input);

// A Generate request; max_tokens is default_max_tokens when unset, the
// seed random when unset. INVALID_ARGUMENT for more than 16 stop strings or
// one that is empty or longer than 256 bytes.
absl::StatusOr<GenerateParams> FromProto(const v1::GenerateRequest& request,
                                         int default_max_tokens);

// nullopt when unset (no TTL); INVALID_ARGUMENT when set and not positive.
absl::StatusOr<std::optional<absl::Duration>> TtlFromProto(bool has_ttl,
                                                           int64_t ttl_seconds);

void ToProto(const SessionInfo& info, v1::Session* out);
void ToProto(const Usage& usage, v1::Usage* out);
void ToProto(const GeneratedToken& token, const Tokenizer& tokenizer,
             v1::GeneratedToken* out);
void ToProto(const GenerateResult& result, v1::GenerateFinal* out);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_CONVERT_H_
