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
#include "kvserve/v1/inference.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"

namespace kvserve {

class InferenceService final : public v1::Inference::CallbackService {
 public:
  // REQUIRES: every argument outlives the service.
  // chat_template_origin: ModelInfo.chat_template ("gguf", "file",
  // "chatml").
  InferenceService(Engine* engine, const ModelWeights* weights,
                   const Tokenizer* tokenizer,
                   const ChatTemplate* chat_template,
                   std::string chat_template_origin, Metrics* metrics,
                   const Authenticator* auth);

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* context,
      const v1::CreateSessionRequest* request, v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* ListSessions(
      grpc::CallbackServerContext* context,
      const v1::ListSessionsRequest* request,
      v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSession(
      grpc::CallbackServerContext* context,
      const v1::DeleteSessionRequest* request,
      v1::DeleteSessionResponse* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const v1::ForkSessionRequest* request,
                                        v1::Session* response) override;
  grpc::ServerUnaryReactor* TruncateSession(
      grpc::CallbackServerContext* context,
      const v1::TruncateSessionRequest* request,
      v1::Session* response) override;
  grpc::ServerUnaryReactor* Append(grpc::CallbackServerContext* context,
                                   const v1::AppendRequest* request,
                                   v1::AppendResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(
      grpc::CallbackServerContext* context,
      const v1::DetokenizeRequest* request,
      v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ApplyChatTemplate(
      grpc::CallbackServerContext* context,
      const v1::ApplyChatTemplateRequest* request,
      v1::ApplyChatTemplateResponse* response) override;

 private:
  absl::StatusOr<Caller> Authenticate(
      const grpc::CallbackServerContext* context,
      std::string_view requested_owner) const;

  Engine* engine_;
  const ModelWeights* weights_;
  const Tokenizer* tokenizer_;
  const ChatTemplate* chat_template_;
  const std::string chat_template_origin_;
  Metrics* metrics_;
  const Authenticator* auth_;
};

}  // namespace kvserve

#endif  // KVSERVE_SERVER_INFERENCE_SERVICE_H_
