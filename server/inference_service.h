// InferenceService: kvserve.v1.Inference on gRPC's callback API. Thin and
// stateless: authenticate -> validate -> call the engine -> convert the
// status (status.h) -> record metrics. All state lives in the engine.
//
// Every method first resolves its caller (auth.h): with API keys a call
// without a valid key ends UNAUTHENTICATED, and the owner passed to the
// engine is always the caller's, never taken from the request unchecked.
// The check sits here, not in a server-wide interceptor, so that
// grpc.health.v1 and reflection (probes, generic tools) need no key.
//
// Session ids are checked here: looking up one that cannot name a session
// is NOT_FOUND like any unknown id, and no message repeats more than 64
// bytes of what a client sent (QuoteClientText, status.h). A Generate whose
// client stops reading is cancelled by the StreamWatchdog.
//
// Thread-safety: methods run on gRPC's threads and never block; results
// arrive on the engine thread.
#ifndef KVSERVE_SERVER_INFERENCE_SERVICE_H_
#define KVSERVE_SERVER_INFERENCE_SERVICE_H_

#include <string>
#include <string_view>

#include "core/chat/chat_template.h"
#include "core/engine/engine.h"
#include "core/model/weights.h"
#include "core/tokenizer/tokenizer.h"
#include "grpcpp/support/byte_buffer.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/stream_watchdog.h"

namespace kvserve {

// Base<Raw...>: Base with every method in Raw... raw (ByteBuffer in and
// out), as First<Second<...<Base>>>. On v1::Inference::Service, with every
// method raw, none is synchronous.
template <typename Base, template <typename> class... Raw>
struct WithRawMethods {
  using type = Base;
};
template <typename Base, template <typename> class First,
          template <typename> class... Rest>
struct WithRawMethods<Base, First, Rest...> {
  using type = First<typename WithRawMethods<Base, Rest...>::type>;
};

// Every method is raw (raw_request.h): gRPC's own parse would answer a
// request with a string field that is not UTF-8 UNIMPLEMENTED, without
// naming the field.
using RawInferenceService = WithRawMethods<
    v1::Inference::Service, v1::Inference::WithRawCallbackMethod_GetModelInfo,
    v1::Inference::WithRawCallbackMethod_CreateSession,
    v1::Inference::WithRawCallbackMethod_GetSession,
    v1::Inference::WithRawCallbackMethod_ListSessions,
    v1::Inference::WithRawCallbackMethod_DeleteSession,
    v1::Inference::WithRawCallbackMethod_ForkSession,
    v1::Inference::WithRawCallbackMethod_TruncateSession,
    v1::Inference::WithRawCallbackMethod_Append,
    v1::Inference::WithRawCallbackMethod_Generate,
    v1::Inference::WithRawCallbackMethod_Tokenize,
    v1::Inference::WithRawCallbackMethod_Detokenize,
    v1::Inference::WithRawCallbackMethod_ApplyChatTemplate>::type;

class InferenceService final : public RawInferenceService {
 public:
  // REQUIRES: every argument outlives the service.
  // chat_template_origin: ModelInfo.chat_template ("gguf", "file",
  // "chatml").
  InferenceService(Engine* engine, const ModelWeights* weights,
                   const Tokenizer* tokenizer, std::string chat_template_origin,
                   Metrics* metrics, const Authenticator* auth,
                   const StreamWatchdog::Options& streams = {});

  // Each request is the method's kvserve.v1 request message and each
  // response its response message, serialized.
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* TruncateSession(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Append(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ApplyChatTemplate(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;

 private:
  // The caller; INVALID_ARGUMENT for an owner label over 256 bytes.
  absl::StatusOr<Caller> Authenticate(
      const grpc::CallbackServerContext* context,
      std::string_view requested_owner) const;
  // A Generate's parameters from its request bytes, one per choice, with
  // its tools put to use (ToolsFromProto): `parse` is set to how the
  // replies are read.
  absl::StatusOr<std::vector<GenerateParams>> GenerateParamsFrom(
      const grpc::CallbackServerContext* context,
      const grpc::ByteBuffer& request,
      std::optional<constrain::ParseOptions>* parse) const;

  Engine* engine_;
  const ModelWeights* weights_;
  const Tokenizer* tokenizer_;
  const std::string chat_template_origin_;
  Metrics* metrics_;
  const Authenticator* auth_;
  StreamWatchdog streams_;
};

}  // namespace kvserve

#endif  // KVSERVE_SERVER_INFERENCE_SERVICE_H_
