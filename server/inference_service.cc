#include "server/inference_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/chat/chat_prompt.h"
#include "core/quant/quant.h"
#include "core/text/utf8_stream_decoder.h"
#include "core/util/cpu_features.h"
#include "core/util/status_reason.h"
#include "server/convert.h"
#include "server/status.h"

namespace kvserve {
namespace {

// The label of kvserve_requests_rejected_total for a RESOURCE_EXHAUSTED:
// the reason the engine attached (core/util/status_reason.h); one without
// a reason ran out of KV cache.
std::string RejectionReason(const absl::Status& status) {
  std::string reason = ReasonOf(status);
  return reason.empty() ? std::string(kReasonKvCacheFull) : reason;
}

// Finishes one unary RPC exactly once and records its metrics.
class UnaryCall {
 public:
  UnaryCall(grpc::CallbackServerContext* context, Metrics* metrics,
            const char* method)
      : reactor_(context->DefaultReactor()),
        metrics_(metrics),
        method_(method),
        start_(absl::Now()) {
    metrics_->RequestStarted();
  }

  grpc::ServerUnaryReactor* Finish(const absl::Status& status) const {
    grpc::Status s = ToGrpcStatus(status);
    metrics_->RequestFinished();
    metrics_->RecordRequest(method_, GrpcCodeName(s.error_code()),
                            absl::ToDoubleSeconds(absl::Now() - start_));
    if (absl::IsResourceExhausted(status)) {
      metrics_->RecordRejected(RejectionReason(status));
    }
    reactor_->Finish(s);
    return reactor_;
  }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

  // A callback that fills the response with `fill` and finishes the call.
  template <typename T, typename Fill>
  Callback<T> Reply(Fill fill) const {
    return [call = *this,
            fill = std::move(fill)](absl::StatusOr<T> result) mutable {
      if (result.ok()) fill(*result);
      call.Finish(result.status());
    };
  }

 private:
  grpc::ServerUnaryReactor* reactor_;
  Metrics* metrics_;
  const char* method_;
  absl::Time start_;
};

// Streams one Generate: one write outstanding, the next from OnWriteDone;
// Finish once, after the engine's OnFinish and the writes before it.
//
// As soon as the final write or Finish is started, gRPC may run OnDone,
// which deletes the reactor, on another thread; the engine's OnFinish is
// no gRPC reaction, so gRPC does not wait for it to return. Hence every
// caller decides under mu_ what to start (NextLocked) and starts it only
// after releasing mu_ (Run), as the last thing it does with `this`.
class GenerateReactor final
    : public grpc::ServerWriteReactor<v1::GenerateResponse>,
      public TokenSink {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, Engine* engine,
                  const Tokenizer* tokenizer, Metrics* metrics)
      : context_(context),
        engine_(engine),
        tokenizer_(tokenizer),
        metrics_(metrics),
        start_(absl::Now()) {
    metrics_->RequestStarted();
  }

  void Start(absl::StatusOr<GenerateParams> params) {
    if (!params.ok()) {
      OnFinish(params.status());
      return;
    }
    call_ = std::make_shared<GenerateCall>(*std::move(params), this);
    engine_->Submit(call_);
  }

  // TokenSink, on the engine thread.
  void OnToken(GeneratedToken token) override {
    v1::GenerateResponse response;
    ToProto(token, *tokenizer_, response.mutable_token());
    Next next;
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(response));
      next = NextLocked();
    }
    Run(next);
  }

  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    Next next;
    {
      absl::MutexLock lock(&mu_);
      if (result.ok()) {
        if (result->finish_reason == FinishReason::kCancelled) {
          status_ = absl::CancelledError("the request was cancelled");
        } else {
          ToProto(*result, final_.mutable_final());
        }
      } else {
        status_ = result.status();
      }
      engine_done_ = true;
      next = NextLocked();
    }
    Run(next);
  }

  // gRPC reactions.
  void OnWriteDone(bool ok) override {
    Next next;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        broken_ = true;  // the client is gone: stop generating
        queue_.clear();
        if (call_) call_->Cancel();
      }
      next = NextLocked();
    }
    Run(next);
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (call_) call_->Cancel();
  }

  void OnDone() override {
    metrics_->RequestFinished();
    metrics_->RecordRequest("Generate", GrpcCodeName(code_),
                            absl::ToDoubleSeconds(absl::Now() - start_));
    delete this;
  }

 private:
  // What to start once mu_ is released.
  struct Next {
    enum class Op { kNothing, kWrite, kWriteAndFinish, kFinish };
    Op op = Op::kNothing;
    // kWrite, kWriteAndFinish: current_ or final_, which no one else
    // touches until the write is done.
    const v1::GenerateResponse* message = nullptr;
    grpc::Status status;  // kFinish
  };

  Next NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return {};
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      return {.op = Next::Op::kWrite,
              .message = &current_,
              .status = grpc::Status::OK};
    }
    if (!engine_done_) return {};
    finished_ = true;
    if (status_.ok() && !broken_ && !context_->IsCancelled()) {
      code_ = grpc::StatusCode::OK;
      return {.op = Next::Op::kWriteAndFinish,
              .message = &final_,
              .status = grpc::Status::OK};
    }
    grpc::Status s = ToGrpcStatus(
        status_.ok() ? absl::CancelledError("the request was cancelled")
                     : status_);
    code_ = s.error_code();
    if (absl::IsResourceExhausted(status_)) {
      metrics_->RecordRejected(RejectionReason(status_));
    }
    return {
        .op = Next::Op::kFinish, .message = nullptr, .status = std::move(s)};
  }

  // REQUIRES: mu_ not held. After a finishing op `this` may be gone.
  void Run(const Next& next) ABSL_LOCKS_EXCLUDED(mu_) {
    switch (next.op) {
      case Next::Op::kNothing:
        return;
      case Next::Op::kWrite:
        StartWrite(next.message);
        return;
      case Next::Op::kWriteAndFinish:
        StartWriteAndFinish(next.message, grpc::WriteOptions(),
                            grpc::Status::OK);
        return;
      case Next::Op::kFinish:
        Finish(next.status);
        return;
    }
  }

  grpc::CallbackServerContext* const context_;
  Engine* const engine_;
  const Tokenizer* const tokenizer_;
  Metrics* const metrics_;
  const absl::Time start_;

  absl::Mutex mu_;
  std::shared_ptr<GenerateCall> call_;  // set before any callback can run
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse current_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse final_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool engine_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // Set under mu_ before the finishing op; read by OnDone, which gRPC runs
  // after that op.
  grpc::StatusCode code_ = grpc::StatusCode::OK;
};

// Finishes an Append once the engine has prefilled it, with the session
// as the engine left it (GenerateResult::session).
class AppendSink final : public TokenSink {
 public:
  AppendSink(UnaryCall call, v1::AppendResponse* response)
      : call_(call), response_(response) {}

  void OnToken(GeneratedToken) override {}
  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    if (!result.ok()) {
      call_.Finish(result.status());
    } else if (!result->session.has_value()) {
      call_.Finish(absl::InternalError(
          "the engine finished an Append without the session's state "
          "(GenerateResult::session is empty)"));
    } else {
      ToProto(result->usage, response_->mutable_usage());
      ToProto(*result->session, response_->mutable_session());
      call_.Finish(absl::OkStatus());
    }
    delete this;  // the engine never touches a sink after OnFinish
  }

 private:
  UnaryCall call_;
  v1::AppendResponse* response_;
};

}  // namespace

InferenceService::InferenceService(Engine* engine, const ModelWeights* weights,
                                   const Tokenizer* tokenizer,
                                   const ChatTemplate* chat_template,
                                   std::string chat_template_origin,
                                   Metrics* metrics, const Authenticator* auth)
    : engine_(engine),
      weights_(weights),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      chat_template_origin_(std::move(chat_template_origin)),
      metrics_(metrics),
      auth_(auth) {}

absl::StatusOr<Caller> InferenceService::Authenticate(
    const grpc::CallbackServerContext* context,
    std::string_view requested_owner) const {
  std::optional<std::string_view> authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find(Authenticator::kMetadataKey);
      it != metadata.end()) {
    authorization.emplace(it->second.data(), it->second.size());
  }
  return auth_->Authenticate(authorization, requested_owner);
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(
    grpc::CallbackServerContext* context, const v1::GetModelInfoRequest*,
    v1::ModelInfo* response) {
  UnaryCall call(context, metrics_, "GetModelInfo");
  if (absl::StatusOr<Caller> caller = Authenticate(context, ""); !caller.ok()) {
    return call.Finish(caller.status());
  }
  const ModelConfig& c = weights_->config;
  response->set_name(weights_->name);
  response->set_architecture("llama");
  response->set_n_layers(c.n_layers);
  response->set_n_heads(c.n_heads);
  response->set_n_kv_heads(c.n_kv_heads);
  response->set_head_dim(c.head_dim);
  response->set_dim(c.dim);
  response->set_hidden_dim(c.hidden_dim);
  response->set_vocab_size(c.vocab_size);
  response->set_context_length(engine_->max_context());
  const quant::TypeInfo* wq_type =
      quant::Info(weights_->layers.front().wq.type);
  response->set_weight_dtype(wq_type != nullptr ? std::string(wq_type->name)
                                                : "unknown");
  response->set_kv_dtype(std::string(DTypeName(engine_->options().kv_dtype)));
  response->set_kv_bytes_per_token(engine_->kv_bytes_per_token());
  response->set_kv_cache_capacity_bytes(engine_->kv_capacity_bytes());
  response->set_kv_block_tokens(engine_->options().kv_block_tokens);
  response->set_fingerprint(weights_->fingerprint);
  response->set_bos_token_id(tokenizer_->bos_id());
  response->set_eos_token_id(tokenizer_->eos_id());
  response->set_weight_bytes(weights_->TotalBytes());
  response->set_cpu(CpuFeatureString(Cpu()));
  response->set_isa(std::string(IsaLevelName(EffectiveIsa())));
  response->set_chat_template(chat_template_origin_);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::CreateSession(
    grpc::CallbackServerContext* context,
    const v1::CreateSessionRequest* request, v1::Session* response) {
  UnaryCall call(context, metrics_, "CreateSession");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  // An id already taken by another owner would answer ALREADY_EXISTS, and
  // so reveal that the session exists.
  if (auth_->keys_required() && !request->session_id().empty()) {
    return call.Finish(absl::InvalidArgumentError(
        "client-chosen session ids are refused when --api_keys_file is set"));
  }
  auto ttl = TtlFromProto(request->has_ttl_seconds(), request->ttl_seconds());
  if (!ttl.ok()) return call.Finish(ttl.status());
  CreateSessionParams params{
      .id = request->session_id(),
      .owner = caller->owner,
      .ttl = *ttl,
      .initial = FromProto(request->initial()),
      .parse_special = request->initial().parse_special()};
  engine_->CreateSession(
      std::move(params),
      call.Reply<SessionInfo>(
          [response](const SessionInfo& info) { ToProto(info, response); }));
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::GetSession(
    grpc::CallbackServerContext* context, const v1::GetSessionRequest* request,
    v1::Session* response) {
  UnaryCall call(context, metrics_, "GetSession");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  engine_->GetSession(
      request->session_id(), caller->owner, request->include_tokens(),
      call.Reply<SessionInfo>(
          [response](const SessionInfo& info) { ToProto(info, response); }));
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::ListSessions(
    grpc::CallbackServerContext* context,
    const v1::ListSessionsRequest* request,
    v1::ListSessionsResponse* response) {
  UnaryCall call(context, metrics_, "ListSessions");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  engine_->ListSessions(
      caller->owner, /*all_owners=*/caller->admin, request->page_token(),
      request->page_size(),
      call.Reply<SessionList>([response](const SessionList& list) {
        for (const SessionInfo& info : list.sessions) {
          ToProto(info, response->add_sessions());
        }
        response->set_next_page_token(list.next_page_token);
      }));
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::DeleteSession(
    grpc::CallbackServerContext* context,
    const v1::DeleteSessionRequest* request, v1::DeleteSessionResponse*) {
  UnaryCall call(context, metrics_, "DeleteSession");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  engine_->DeleteSession(request->session_id(), caller->owner,
                         call.Reply<bool>([](bool) {}));
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::ForkSession(
    grpc::CallbackServerContext* context, const v1::ForkSessionRequest* request,
    v1::Session* response) {
  UnaryCall call(context, metrics_, "ForkSession");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  auto ttl = TtlFromProto(request->has_ttl_seconds(), request->ttl_seconds());
  if (!ttl.ok()) return call.Finish(ttl.status());
  engine_->ForkSession(
      request->session_id(), caller->owner, *ttl,
      call.Reply<SessionInfo>(
          [response](const SessionInfo& info) { ToProto(info, response); }));
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::TruncateSession(
    grpc::CallbackServerContext* context,
    const v1::TruncateSessionRequest* request, v1::Session* response) {
  UnaryCall call(context, metrics_, "TruncateSession");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  engine_->TruncateSession(
      request->session_id(), caller->owner, request->tokens(),
      call.Reply<SessionInfo>(
          [response](const SessionInfo& info) { ToProto(info, response); }));
  return call.reactor();
}

grpc::ServerUnaryReactor* InferenceService::Append(
    grpc::CallbackServerContext* context, const v1::AppendRequest* request,
    v1::AppendResponse* response) {
  UnaryCall call(context, metrics_, "Append");
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) return call.Finish(caller.status());
  if (request->session_id().empty()) {
    return call.Finish(absl::InvalidArgumentError("Append needs a session_id"));
  }
  GenerateParams params;
  params.session_id = request->session_id();
  params.owner = caller->owner;
  params.prompt = FromProto(request->input());
  params.parse_special = request->input().parse_special();
  params.generate = false;
  auto* sink = new AppendSink(call, response);
  engine_->Submit(std::make_shared<GenerateCall>(std::move(params), sink));
  return call.reactor();
}

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  auto* reactor = new GenerateReactor(context, engine_, tokenizer_, metrics_);
  absl::StatusOr<Caller> caller = Authenticate(context, request->owner());
  if (!caller.ok()) {
    reactor->Start(caller.status());
    return reactor;
  }
  absl::StatusOr<GenerateParams> params =
      FromProto(*request, engine_->options().default_max_tokens);
  if (params.ok()) params->owner = caller->owner;
  reactor->Start(std::move(params));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(
    grpc::CallbackServerContext* context, const v1::TokenizeRequest* request,
    v1::TokenizeResponse* response) {
  UnaryCall call(context, metrics_, "Tokenize");
  if (absl::StatusOr<Caller> caller = Authenticate(context, ""); !caller.ok()) {
    return call.Finish(caller.status());
  }
  const bool bos = request->add_bos();
  for (int32_t id : tokenizer_->Encode(
           request->text(), EncodeOptions{.add_bos = bos,
                            .add_dummy_prefix = bos,
                            .parse_special = request->parse_special()})) {
    response->add_token_ids(id);
    Utf8StreamDecoder utf8;
    response->add_pieces(utf8.Push(tokenizer_->Piece(id)) + utf8.Flush());
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ApplyChatTemplate(
    grpc::CallbackServerContext* context,
    const v1::ApplyChatTemplateRequest* request,
    v1::ApplyChatTemplateResponse* response) {
  UnaryCall call(context, metrics_, "ApplyChatTemplate");
  if (absl::StatusOr<Caller> caller = Authenticate(context, ""); !caller.ok()) {
    return call.Finish(caller.status());
  }
  ChatTemplateInput input;
  for (const v1::ChatMessage& m : request->messages()) {
    input.messages.push_back(FromProto(m));
  }
  input.add_generation_prompt = request->add_generation_prompt();
  input.tools_json = request->tools_json();
  absl::StatusOr<ChatPrompt> prompt =
      RenderChatPrompt(*chat_template_, *tokenizer_, input);
  if (!prompt.ok()) return call.Finish(prompt.status());
  response->set_text(std::move(prompt->text));
  response->mutable_token_ids()->Add(prompt->token_ids.begin(),
                                     prompt->token_ids.end());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(
    grpc::CallbackServerContext* context, const v1::DetokenizeRequest* request,
    v1::DetokenizeResponse* response) {
  UnaryCall call(context, metrics_, "Detokenize");
  if (absl::StatusOr<Caller> caller = Authenticate(context, ""); !caller.ok()) {
    return call.Finish(caller.status());
  }
  Utf8StreamDecoder utf8;
  std::string text;
  int32_t prev = -1;
  for (int32_t id : request->token_ids()) {
    if (id < 0 || id >= tokenizer_->vocab_size()) {
      return call.Finish(absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary [0, %d)", id,
                          tokenizer_->vocab_size())));
    }
    text += utf8.Push(tokenizer_->DecodeToken(prev, id));
    prev = id;
  }
  response->set_text(text + utf8.Flush());
  return call.Finish(absl::OkStatus());
}

}  // namespace kvserve
