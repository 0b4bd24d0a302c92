#include "server/inference_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/chat/chat_prompt.h"
#include "core/quant/quant.h"
#include "core/session/session_store.h"
#include "core/text/utf8_stream_decoder.h"
#include "core/util/cpu_features.h"
#include "core/util/status_reason.h"
#include "server/convert.h"
#include "server/raw_request.h"
#include "server/status.h"

namespace kvserve {
namespace {

// The longest owner label a request may carry.
constexpr size_t kMaxOwnerLabelBytes = 256;

// The label of kvserve_requests_rejected_total for a RESOURCE_EXHAUSTED:
// the reason the engine attached (core/util/status_reason.h); one without
// a reason ran out of KV cache.
std::string RejectionReason(const absl::Status& status) {
  std::string reason = ReasonOf(status);
  return reason.empty() ? std::string(kReasonKvCacheFull) : reason;
}

// Finishes one unary RPC exactly once: serializes the response it holds
// into gRPC's buffer and records the metrics. Copies share the call.
template <typename Response>
class UnaryCall {
 public:
  UnaryCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* out,
            Metrics* metrics, const char* method)
      : state_(
            std::make_shared<State>(State{.reactor = context->DefaultReactor(),
                                          .out = out,
                                          .metrics = metrics,
                                          .method = method,
                                          .start = absl::Now(),
                                          .response = {}})) {
    metrics->RequestStarted();
  }

  // Filled by the method; sent when it finishes OK.
  Response* response() const { return &state_->response; }

  grpc::ServerUnaryReactor* Finish(absl::Status status) const {
    State& c = *state_;
    if (status.ok()) {
      absl::StatusOr<grpc::ByteBuffer> bytes = SerializeResponse(c.response);
      if (bytes.ok()) {
        *c.out = *std::move(bytes);
      } else {
        status = bytes.status();
      }
    }
    grpc::Status s = ToGrpcStatus(status);
    c.metrics->RequestFinished();
    c.metrics->RecordRequest(c.method, GrpcCodeName(s.error_code()),
                             absl::ToDoubleSeconds(absl::Now() - c.start));
    if (absl::IsResourceExhausted(status)) {
      c.metrics->RecordRejected(RejectionReason(status));
    }
    c.reactor->Finish(s);
    return c.reactor;
  }
  grpc::ServerUnaryReactor* reactor() const { return state_->reactor; }

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
  struct State {
    grpc::ServerUnaryReactor* reactor;
    grpc::ByteBuffer* out;
    Metrics* metrics;
    const char* method;
    absl::Time start;
    Response response;
  };
  std::shared_ptr<State> state_;
};

// The one entry of every unary method: parses the request bytes as a
// Request and runs `body(request, call)`, which returns call.Finish(...) or
// call.reactor(); a request that does not parse finishes here.
template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request_bytes,
                                     grpc::ByteBuffer* response_bytes,
                                     Metrics* metrics, const char* method,
                                     Body body) {
  UnaryCall<Response> call(context, response_bytes, metrics, method);
  Request request;
  if (absl::Status s = ParseRequest(*request_bytes, &request); !s.ok()) {
    return call.Finish(s);
  }
  return body(request, call);
}

// NOT_FOUND for an id that cannot name a session, as for an unknown one.
absl::Status CheckLookupId(std::string_view id) {
  if (IsValidSessionId(id)) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("session ", QuoteClientText(id), " not found"));
}

// Streams one Generate: one write outstanding, the next from OnWriteDone;
// each choice's final message is written like a token, and Finish follows,
// once, after every choice's OnFinish and every write before it. The first
// choice that fails cancels the others, and its status ends the stream.
//
// As soon as Finish is started, gRPC may run OnDone, which drops gRPC's
// reference, on another thread; the engine's OnFinish is no gRPC reaction,
// so gRPC does not wait for it to return. Hence every caller decides under
// mu_ what to start (NextLocked) and starts it only after releasing mu_
// (Run, static: with nothing to start, `this` may already be gone), as the
// last thing it does with `this`. The reactor is deleted when
// gRPC (OnDone) and the watchdog (while it cancels) have both let go.
//
// The StreamWatchdog cancels a stream whose write stalls, or the oldest of
// too many finished ones still writing: Cancel keeps Finish from starting
// while it calls TryCancel, so that the context lives throughout.
// Lock order: mu_, then the watchdog's.
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                              public StreamWatchdog::Stream {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, Engine* engine,
                  const Tokenizer* tokenizer, Metrics* metrics,
                  StreamWatchdog* watchdog)
      : context_(context),
        engine_(engine),
        tokenizer_(tokenizer),
        metrics_(metrics),
        watchdog_(watchdog),
        start_(absl::Now()) {
    metrics_->RequestStarted();
  }

  // One GenerateCall per choice (choice 0 first, carrying the others);
  // `parse`: how each choice's reply is read (nullopt: not at all).
  void Start(absl::StatusOr<std::vector<GenerateParams>> choices,
             const std::optional<constrain::ParseOptions>& parse) {
    if (!choices.ok()) {
      OnFinish(0, choices.status());
      return;
    }
    replies_.resize(choices->size());
    if (parse.has_value()) {
      for (auto& reply : replies_) reply.emplace(*parse);
    }
    std::vector<std::shared_ptr<GenerateCall>> calls;
    for (size_t i = 0; i < choices->size(); ++i) {
      sinks_.push_back(std::make_unique<ChoiceSink>(this, i));
      calls.push_back(std::make_shared<GenerateCall>(std::move((*choices)[i]),
                                                     sinks_.back().get()));
      if (i > 0) calls[0]->AddChoice(calls[i]);
    }
    {
      absl::MutexLock lock(&mu_);
      calls_ = calls;
      unfinished_ = calls.size();
    }
    engine_->Submit(calls[0]);
  }

  // From a choice's TokenSink, on the engine thread.
  void OnToken(int index, GeneratedToken token) {
    v1::GenerateResponse response;
    ToProto(token, *tokenizer_, response.mutable_token());
    if (replies_[index].has_value()) {
      // A control token may be a format's marker ("[TOOL_CALLS]").
      constrain::ReplyDelta delta;
      if (!token.control.empty()) {
        delta = replies_[index]->PushControl(token.control);
      }
      delta.Append(replies_[index]->Push(token.text));
      ToProto(delta, response.mutable_token()->mutable_delta());
    }
    response.set_index(index);
    absl::StatusOr<grpc::ByteBuffer> bytes = SerializeResponse(response);
    Next next;
    {
      absl::MutexLock lock(&mu_);
      if (bytes.ok()) {
        queue_.push_back(*std::move(bytes));
      } else if (status_.ok()) {
        status_ = bytes.status();
        CancelCallsLocked();
      }
      next = NextLocked();
    }
    Run(this, next);
  }

  void OnFinish(int index, absl::StatusOr<GenerateResult> result) {
    absl::Status status = result.status();
    std::optional<grpc::ByteBuffer> final_bytes;
    if (result.ok() && result->finish_reason == FinishReason::kCancelled) {
      status = absl::CancelledError("the request was cancelled");
    } else if (result.ok()) {
      v1::GenerateResponse response;
      v1::GenerateFinal* final = response.mutable_final();
      ToProto(*result, final);
      if (std::optional<constrain::ReplyStream>& reply = replies_[index];
          reply.has_value()) {
        constrain::ReplyDelta end = reply->Push(result->text);
        end.Append(reply->Finish());
        ToProto(end, final->mutable_delta());
        ToProto(reply->sent(), final->mutable_reply());
        if (!reply->sent().calls.empty() &&
            (result->finish_reason == FinishReason::kStop ||
             result->finish_reason == FinishReason::kEos)) {
          final->set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
        }
      }
      response.set_index(index);
      absl::StatusOr<grpc::ByteBuffer> bytes = SerializeResponse(response);
      if (bytes.ok()) {
        final_bytes = *std::move(bytes);
      } else {
        status = bytes.status();
      }
    }
    Next next;
    {
      absl::MutexLock lock(&mu_);
      if (status_.ok() && !status.ok()) {
        status_ = status;
        CancelCallsLocked();  // the stream fails as a whole
      }
      if (status_.ok() && final_bytes.has_value()) {
        queue_.push_back(*std::move(final_bytes));
      }
      if (--unfinished_ == 0) {
        engine_done_ = true;
        if (!queue_.empty() || writing_) watchdog_->Unflushed(this);
      }
      next = NextLocked();
    }
    Run(this, next);
  }

  // gRPC reactions.
  void OnWriteDone(bool ok) override {
    Next next;
    {
      absl::MutexLock lock(&mu_);
      watchdog_->WriteDone(this);
      writing_ = false;
      if (!ok) {
        broken_ = true;  // the client is gone: stop generating
        queue_.clear();
        CancelCallsLocked();
      }
      next = NextLocked();
    }
    Run(this, next);
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    CancelCallsLocked();
  }

  void OnDone() override {
    watchdog_->Remove(this);
    metrics_->RequestFinished();
    metrics_->RecordRequest("Generate", GrpcCodeName(code_),
                            absl::ToDoubleSeconds(absl::Now() - start_));
    Unref();
  }

  // StreamWatchdog::Stream, on the watchdog's thread.
  void Ref() override { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() override {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  void Cancel(const std::string& why) override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      watchdog_cancelling_ = true;
      if (status_.ok()) status_ = absl::CancelledError(why);
      queue_.clear();
      CancelCallsLocked();
    }
    // May run reactions (OnWriteDone) on this thread; none starts Finish.
    context_->TryCancel();
    Next next;
    {
      absl::MutexLock lock(&mu_);
      watchdog_cancelling_ = false;
      next = NextLocked();
    }
    Run(this, next);
  }

 private:
  // One choice's TokenSink: hands its events to the reactor with its index
  // (and touches nothing after: the reactor may be gone once it returns).
  class ChoiceSink final : public TokenSink {
   public:
    ChoiceSink(GenerateReactor* reactor, int index)
        : reactor_(reactor), index_(index) {}
    void OnToken(GeneratedToken token) override {
      reactor_->OnToken(index_, std::move(token));
    }
    void OnFinish(absl::StatusOr<GenerateResult> result) override {
      reactor_->OnFinish(index_, std::move(result));
    }

   private:
    GenerateReactor* const reactor_;
    const int index_;
  };

  void CancelCallsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& call : calls_) call->Cancel();
  }

  // What to start once mu_ is released.
  struct Next {
    enum class Op { kNothing, kWrite, kFinish };
    Op op = Op::kNothing;
    // kWrite: current_, which no one else touches until the write is done.
    const grpc::ByteBuffer* message = nullptr;
    grpc::Status status;  // kFinish
  };

  Next NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || watchdog_cancelling_) return {};
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      watchdog_->WriteStarted(this);
      return {.op = Next::Op::kWrite, .message = &current_, .status = {}};
    }
    if (!engine_done_) return {};
    finished_ = true;
    watchdog_->Remove(this);  // flushed
    absl::Status status = status_;
    if (status.ok() && (broken_ || context_->IsCancelled())) {
      status = absl::CancelledError("the request was cancelled");
    }
    grpc::Status s = ToGrpcStatus(status);
    code_ = s.error_code();
    if (absl::IsResourceExhausted(status)) {
      metrics_->RecordRejected(RejectionReason(status));
    }
    return {
        .op = Next::Op::kFinish, .message = nullptr, .status = std::move(s)};
  }

  // REQUIRES: self's mu_ not held. Static, and `self` used only to start
  // what NextLocked gave this caller: with kNothing another thread may have
  // finished the stream and deleted the reactor already (a member call on
  // it would be undefined, as UBSan reported); after kFinish it may be gone.
  static void Run(GenerateReactor* self, const Next& next) {
    switch (next.op) {
      case Next::Op::kNothing:
        return;
      case Next::Op::kWrite:
        self->StartWrite(next.message);
        return;
      case Next::Op::kFinish:
        self->Finish(next.status);
        return;
    }
  }

  grpc::CallbackServerContext* const context_;
  Engine* const engine_;
  const Tokenizer* const tokenizer_;
  Metrics* const metrics_;
  StreamWatchdog* const watchdog_;
  const absl::Time start_;
  // gRPC's reference (dropped in OnDone) and the watchdog's while it
  // cancels.
  std::atomic<int> refs_{1};

  // Made by Start before any choice is submitted; never changed after.
  std::vector<std::unique_ptr<ChoiceSink>> sinks_;
  // Each choice's reply, when parsed: touched only from its sink's events,
  // on the engine thread (sized in Start, before the calls are submitted).
  std::vector<std::optional<constrain::ReplyStream>> replies_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<GenerateCall>> calls_ ABSL_GUARDED_BY(mu_);
  int unfinished_ ABSL_GUARDED_BY(mu_) = 1;  // choices before OnFinish
  // Serialized GenerateResponses not yet written; the final one last.
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer current_ ABSL_GUARDED_BY(mu_);
  // The first failure: the engine's, or why the watchdog cancelled.
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool engine_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed
  // The watchdog is calling TryCancel: Finish must wait.
  bool watchdog_cancelling_ ABSL_GUARDED_BY(mu_) = false;
  // Set under mu_ before Finish; read by OnDone, which gRPC runs after it.
  grpc::StatusCode code_ = grpc::StatusCode::OK;
};

// Finishes an Append once the engine has prefilled it, with the session
// as the engine left it (GenerateResult::session).
class AppendSink final : public TokenSink {
 public:
  explicit AppendSink(UnaryCall<v1::AppendResponse> call) : call_(call) {}

  void OnToken(GeneratedToken) override {}
  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    if (!result.ok()) {
      call_.Finish(result.status());
    } else if (!result->session.has_value()) {
      call_.Finish(absl::InternalError(
          "the engine finished an Append without the session's state "
          "(GenerateResult::session is empty)"));
    } else {
      ToProto(result->usage, call_.response()->mutable_usage());
      ToProto(*result->session, call_.response()->mutable_session());
      call_.Finish(absl::OkStatus());
    }
    delete this;  // the engine never touches a sink after OnFinish
  }

 private:
  UnaryCall<v1::AppendResponse> call_;
};

}  // namespace

InferenceService::InferenceService(Engine* engine, const ModelWeights* weights,
                                   const Tokenizer* tokenizer,
                                   std::string chat_template_origin,
                                   Metrics* metrics, const Authenticator* auth,
                                   const StreamWatchdog::Options& streams)
    : engine_(engine),
      weights_(weights),
      tokenizer_(tokenizer),
      chat_template_origin_(std::move(chat_template_origin)),
      metrics_(metrics),
      auth_(auth),
      streams_(streams) {}

absl::StatusOr<Caller> InferenceService::Authenticate(
    const grpc::CallbackServerContext* context,
    std::string_view requested_owner) const {
  if (requested_owner.size() > kMaxOwnerLabelBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("owner has %d bytes, more than the limit of %d",
                        requested_owner.size(), kMaxOwnerLabelBytes));
  }
  std::optional<std::string_view> authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find(Authenticator::kMetadataKey);
      it != metadata.end()) {
    authorization.emplace(it->second.data(), it->second.size());
  }
  return auth_->Authenticate(authorization, requested_owner);
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::GetModelInfoRequest, v1::ModelInfo>(
      context, request, response, metrics_, "GetModelInfo",
      [&](const v1::GetModelInfoRequest&,
          const UnaryCall<v1::ModelInfo>& call) {
        if (absl::StatusOr<Caller> caller = Authenticate(context, "");
            !caller.ok()) {
          return call.Finish(caller.status());
        }
        v1::ModelInfo* info = call.response();
        const ModelConfig& c = weights_->config;
        info->set_name(weights_->name);
        info->set_architecture(weights_->architecture);
        info->set_n_layers(c.n_layers);
        info->set_n_heads(c.n_heads);
        info->set_n_kv_heads(c.n_kv_heads);
        info->set_head_dim(c.head_dim);
        info->set_dim(c.dim);
        info->set_hidden_dim(c.hidden_dim);
        info->set_vocab_size(c.vocab_size);
        info->set_context_length(engine_->max_context());
        const quant::TypeInfo* wq_type =
            quant::Info(weights_->layers.front().wq.type);
        info->set_weight_dtype(wq_type != nullptr ? std::string(wq_type->name)
                                                  : "unknown");
        info->set_kv_dtype(std::string(DTypeName(engine_->options().kv_dtype)));
        info->set_kv_bytes_per_token(engine_->kv_bytes_per_token());
        info->set_kv_cache_capacity_bytes(engine_->kv_capacity_bytes());
        info->set_kv_block_tokens(engine_->options().kv_block_tokens);
        info->set_fingerprint(weights_->fingerprint);
        info->set_bos_token_id(tokenizer_->bos_id());
        info->set_eos_token_id(tokenizer_->eos_id());
        info->set_weight_bytes(weights_->TotalBytes());
        info->set_cpu(CpuFeatureString(Cpu()));
        info->set_isa(std::string(IsaLevelName(EffectiveIsa())));
        info->set_chat_template(chat_template_origin_);
        const constrain::ReplyFormat& format = engine_->reply_format();
        info->set_tool_call_format(
            std::string(constrain::ToolCallFormatName(format.tools)));
        info->set_reasoning(format.reasoning);
        return call.Finish(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* InferenceService::CreateSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::CreateSessionRequest, v1::Session>(
      context, request, response, metrics_, "CreateSession",
      [&](const v1::CreateSessionRequest& request,
          const UnaryCall<v1::Session>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        const std::string& id = request.session_id();
        // An id already taken by another owner would answer ALREADY_EXISTS,
        // and so reveal that the session exists.
        if (auth_->keys_required() && !id.empty()) {
          return call.Finish(absl::InvalidArgumentError(
              "client-chosen session ids are refused when --api_keys_file is "
              "set"));
        }
        if (!id.empty() && !IsValidSessionId(id)) {
          return call.Finish(absl::InvalidArgumentError(
              absl::StrCat("session_id ", QuoteClientText(id),
                           " is not 32 lowercase hex digits")));
        }
        auto ttl =
            TtlFromProto(request.has_ttl_seconds(), request.ttl_seconds());
        if (!ttl.ok()) return call.Finish(ttl.status());
        CreateSessionParams params{
            .id = id,
            .owner = caller->owner,
            .ttl = *ttl,
            .initial = FromProto(request.initial()),
            .parse_special = request.initial().parse_special()};
        engine_->CreateSession(
            std::move(params),
            call.Reply<SessionInfo>(
                [out = call.response()](const SessionInfo& info) {
                  ToProto(info, out);
                }));
        return call.reactor();
      });
}

grpc::ServerUnaryReactor* InferenceService::GetSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::GetSessionRequest, v1::Session>(
      context, request, response, metrics_, "GetSession",
      [&](const v1::GetSessionRequest& request,
          const UnaryCall<v1::Session>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        if (absl::Status s = CheckLookupId(request.session_id()); !s.ok()) {
          return call.Finish(s);
        }
        engine_->GetSession(
            request.session_id(), caller->owner, request.include_tokens(),
            call.Reply<SessionInfo>(
                [out = call.response()](const SessionInfo& info) {
                  ToProto(info, out);
                }));
        return call.reactor();
      });
}

grpc::ServerUnaryReactor* InferenceService::ListSessions(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::ListSessionsRequest, v1::ListSessionsResponse>(
      context, request, response, metrics_, "ListSessions",
      [&](const v1::ListSessionsRequest& request,
          const UnaryCall<v1::ListSessionsResponse>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        engine_->ListSessions(
            caller->owner, /*all_owners=*/caller->admin, request.page_token(),
            request.page_size(),
            call.Reply<SessionList>(
                [out = call.response()](const SessionList& list) {
                  for (const SessionInfo& info : list.sessions) {
                    ToProto(info, out->add_sessions());
                  }
                  out->set_next_page_token(list.next_page_token);
                }));
        return call.reactor();
      });
}

grpc::ServerUnaryReactor* InferenceService::DeleteSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::DeleteSessionRequest, v1::DeleteSessionResponse>(
      context, request, response, metrics_, "DeleteSession",
      [&](const v1::DeleteSessionRequest& request,
          const UnaryCall<v1::DeleteSessionResponse>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        if (absl::Status s = CheckLookupId(request.session_id()); !s.ok()) {
          return call.Finish(s);
        }
        engine_->DeleteSession(request.session_id(), caller->owner,
                               call.Reply<bool>([](bool) {}));
        return call.reactor();
      });
}

grpc::ServerUnaryReactor* InferenceService::ForkSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::ForkSessionRequest, v1::Session>(
      context, request, response, metrics_, "ForkSession",
      [&](const v1::ForkSessionRequest& request,
          const UnaryCall<v1::Session>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        if (absl::Status s = CheckLookupId(request.session_id()); !s.ok()) {
          return call.Finish(s);
        }
        auto ttl =
            TtlFromProto(request.has_ttl_seconds(), request.ttl_seconds());
        if (!ttl.ok()) return call.Finish(ttl.status());
        engine_->ForkSession(
            request.session_id(), caller->owner, *ttl,
            call.Reply<SessionInfo>(
                [out = call.response()](const SessionInfo& info) {
                  ToProto(info, out);
                }));
        return call.reactor();
      });
}

grpc::ServerUnaryReactor* InferenceService::TruncateSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::TruncateSessionRequest, v1::Session>(
      context, request, response, metrics_, "TruncateSession",
      [&](const v1::TruncateSessionRequest& request,
          const UnaryCall<v1::Session>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        if (absl::Status s = CheckLookupId(request.session_id()); !s.ok()) {
          return call.Finish(s);
        }
        engine_->TruncateSession(
            request.session_id(), caller->owner, request.tokens(),
            call.Reply<SessionInfo>(
                [out = call.response()](const SessionInfo& info) {
                  ToProto(info, out);
                }));
        return call.reactor();
      });
}

grpc::ServerUnaryReactor* InferenceService::Append(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::AppendRequest, v1::AppendResponse>(
      context, request, response, metrics_, "Append",
      [&](const v1::AppendRequest& request,
          const UnaryCall<v1::AppendResponse>& call) {
        absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
        if (!caller.ok()) return call.Finish(caller.status());
        if (request.session_id().empty()) {
          return call.Finish(
              absl::InvalidArgumentError("Append needs a session_id"));
        }
        if (absl::Status s = CheckLookupId(request.session_id()); !s.ok()) {
          return call.Finish(s);
        }
        GenerateParams params;
        params.session_id = request.session_id();
        params.owner = caller->owner;
        params.prompt = FromProto(request.input());
        params.parse_special = request.input().parse_special();
        params.generate = false;
        auto* sink = new AppendSink(call);
        engine_->Submit(
            std::make_shared<GenerateCall>(std::move(params), sink));
        return call.reactor();
      });
}

absl::StatusOr<std::vector<GenerateParams>>
InferenceService::GenerateParamsFrom(
    const grpc::CallbackServerContext* context, const grpc::ByteBuffer& bytes,
    std::optional<constrain::ParseOptions>* parse) const {
  v1::GenerateRequest request;
  if (absl::Status s = ParseRequest(bytes, &request); !s.ok()) return s;
  absl::StatusOr<Caller> caller = Authenticate(context, request.owner());
  if (!caller.ok()) return caller.status();
  if (!request.session_id().empty()) {
    if (absl::Status s = CheckLookupId(request.session_id()); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::vector<GenerateParams>> choices =
      ChoicesFromProto(request, engine_->options().default_max_tokens);
  if (!choices.ok()) return choices;
  for (GenerateParams& p : *choices) p.owner = caller->owner;
  absl::StatusOr<std::optional<constrain::ParseOptions>> tools =
      ToolsFromProto(request, engine_->reply_format(), *choices);
  if (!tools.ok()) return tools.status();
  *parse = *std::move(tools);
  return choices;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto* reactor =
      new GenerateReactor(context, engine_, tokenizer_, metrics_, &streams_);
  std::optional<constrain::ParseOptions> parse;
  absl::StatusOr<std::vector<GenerateParams>> choices =
      GenerateParamsFrom(context, *request, &parse);
  reactor->Start(std::move(choices), parse);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::TokenizeRequest, v1::TokenizeResponse>(
      context, request, response, metrics_, "Tokenize",
      [&](const v1::TokenizeRequest& request,
          const UnaryCall<v1::TokenizeResponse>& call) {
        if (absl::StatusOr<Caller> caller = Authenticate(context, "");
            !caller.ok()) {
          return call.Finish(caller.status());
        }
        v1::TokenizeResponse* out = call.response();
        const bool bos = request.add_bos();
        for (int32_t id : tokenizer_->Encode(
                 request.text(), EncodeOptions{.add_bos = bos,
                                 .add_dummy_prefix = bos,
                                 .parse_special = request.parse_special()})) {
          out->add_token_ids(id);
          Utf8StreamDecoder utf8;
          out->add_pieces(utf8.Push(tokenizer_->Piece(id)) + utf8.Flush());
        }
        return call.Finish(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* InferenceService::ApplyChatTemplate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::ApplyChatTemplateRequest,
                    v1::ApplyChatTemplateResponse>(
      context, request, response, metrics_, "ApplyChatTemplate",
      [&](const v1::ApplyChatTemplateRequest& request,
          const UnaryCall<v1::ApplyChatTemplateResponse>& call) {
        if (absl::StatusOr<Caller> caller = Authenticate(context, "");
            !caller.ok()) {
          return call.Finish(caller.status());
        }
        ChatTemplateInput input;
        for (const v1::ChatMessage& m : request.messages()) {
          input.messages.push_back(FromProto(m));
        }
        input.add_generation_prompt = request.add_generation_prompt();
        input.tools_json = request.tools_json();
        // Under Generate's --max_prompt_bytes (2.2 MB cost a second on this
        // thread and 580 MB).
        absl::StatusOr<ChatPrompt> prompt = engine_->ApplyChatTemplate(input);
        if (!prompt.ok()) return call.Finish(prompt.status());
        v1::ApplyChatTemplateResponse* out = call.response();
        out->set_text(std::move(prompt->text));
        out->mutable_token_ids()->Add(prompt->token_ids.begin(),
                                      prompt->token_ids.end());
        return call.Finish(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::DetokenizeRequest, v1::DetokenizeResponse>(
      context, request, response, metrics_, "Detokenize",
      [&](const v1::DetokenizeRequest& request,
          const UnaryCall<v1::DetokenizeResponse>& call) {
        if (absl::StatusOr<Caller> caller = Authenticate(context, "");
            !caller.ok()) {
          return call.Finish(caller.status());
        }
        Utf8StreamDecoder utf8;
        std::string text;
        int32_t prev = -1;
        for (int32_t id : request.token_ids()) {
          if (id < 0 || id >= tokenizer_->vocab_size()) {
            return call.Finish(absl::InvalidArgumentError(
                absl::StrFormat("token id %d is outside the vocabulary [0, %d)",
                                id, tokenizer_->vocab_size())));
          }
          text += utf8.Push(tokenizer_->DecodeToken(prev, id));
          prev = id;
        }
        call.response()->set_text(text + utf8.Flush());
        return call.Finish(absl::OkStatus());
      });
}

}  // namespace kvserve
