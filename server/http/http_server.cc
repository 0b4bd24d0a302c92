#include "server/http/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/chat/chat_prompt.h"
#include "core/util/quote.h"
#include "core/util/status_reason.h"
#include "server/http/openai_json.h"
#include "server/http/sse.h"
#include "server/http/token_queue.h"
#include "server/settings.h"

namespace kvserve::http {
namespace {

// How often a waiting handler looks whether the server is stopping.
constexpr std::chrono::milliseconds kPollInterval{100};

constexpr char kJsonContentType[] = "application/json";
constexpr char kSessionHeader[] = "x-session-id";

// Records one request's metrics, once: at Finish(), or as INTERNAL when
// dropped without it (a handler that threw).
class RequestRecord {
 public:
  RequestRecord(Metrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(absl::Now()) {
    metrics_->RequestStarted();
  }
  ~RequestRecord() {
    Finish(absl::InternalError("the handler ended without a response"));
  }
  RequestRecord(const RequestRecord&) = delete;
  RequestRecord& operator=(const RequestRecord&) = delete;

  void Finish(const absl::Status& status) {
    if (finished_) return;
    finished_ = true;
    metrics_->RequestFinished();
    metrics_->RecordRequest(method_, absl::StatusCodeToString(status.code()),
                            absl::ToDoubleSeconds(absl::Now() - start_));
    if (absl::IsResourceExhausted(status)) {
      const std::string reason = ReasonOf(status);
      metrics_->RecordRejected(reason.empty() ? std::string(kReasonKvCacheFull)
                                              : reason);
    }
  }

 private:
  Metrics* const metrics_;
  const char* const method_;
  const absl::Time start_;
  bool finished_ = false;
};

bool WriteJson(Responder& res, int status, const Json& json,
               const HeaderList& headers = {}) {
  return res.Send(status, kJsonContentType, Dump(json), headers);
}

bool WriteError(Responder& res, const absl::Status& status) {
  return WriteJson(res, HttpStatus(status.code()), ErrorJson(status));
}

// The body as a JSON object; an empty body is {} when `empty_ok`.
absl::StatusOr<Json> Body(const HttpRequest& req, bool empty_ok = false) {
  if (empty_ok && req.body.empty()) return Json::object();
  return ParseBody(req.body);
}

// Runs an engine method that answers through a Callback<T> and waits for
// the answer. The promise lives in the callback, which the engine owns
// until it has run.
template <typename T, typename Start>
absl::StatusOr<T> Await(Start start) {
  std::promise<absl::StatusOr<T>> promise;
  std::future<absl::StatusOr<T>> future = promise.get_future();
  start(Callback<T>(
      [promise = std::move(promise)](absl::StatusOr<T> result) mutable {
        promise.set_value(std::move(result));
      }));
  return future.get();
}

// One generation request, on its worker.
struct Generation {
  // The engine holds the queue by a raw pointer until OnFinish: whatever
  // ends the request (an exception too) waits for that.
  ~Generation() {
    if (call == nullptr) return;
    call->Cancel();  // a no-op once it finished
    queue->WaitFinished();
  }

  std::shared_ptr<TokenQueue> queue;
  std::shared_ptr<GenerateCall> call;
  ResponseMeta meta;
  bool logprobs = false;
  bool include_usage = false;
  std::unique_ptr<RequestRecord> record;

  // echo: the prompt's text, sent before what is generated.
  std::string echo;
  // What has been generated so far.
  std::string text;
  std::vector<TokenLogprobEntry> entries;  // when logprobs
  int32_t prev_id = -1;

  // Streaming: the event the handler waited for before answering 200.
  std::optional<TokenQueue::Event> first;
  bool role_sent = false;
  bool done = false;
  // How the stream ended, for the metrics; stays CANCELLED unless the
  // result was written.
  absl::Status status = absl::CancelledError("the client went away");

  // Adds a token to text and entries; returns its logprob entry, if any.
  std::optional<TokenLogprobEntry> Add(const Tokenizer& tokenizer,
                                       const GeneratedToken& token) {
    std::optional<TokenLogprobEntry> entry;
    if (logprobs && token.logprobs.has_value()) {
      entry = MakeLogprobEntry(tokenizer, prev_id, token,
                               static_cast<int64_t>(text.size()));
      entries.push_back(*entry);
    }
    prev_id = token.token_id;
    text += token.text;
    return entry;
  }

  std::optional<std::vector<TokenLogprobEntry>> AllEntries() const {
    if (!logprobs) return std::nullopt;
    return entries;
  }
};

}  // namespace

class HttpServer::Handlers {
 public:
  Handlers(const Options& options, const Deps& deps,
           const std::atomic<bool>* serving)
      : options_(options),
        deps_(deps),
        serving_(serving),
        created_(absl::ToUnixSeconds(absl::Now())) {}

  // The route of a request, from its header: /health answered now, an
  // unknown route 404, a failed authentication 401/403 (its body never
  // read), else the handler to run with the body.
  Admission Admit(const HttpRequest& req) {
    const std::string_view path = req.path;
    if (req.method == "GET" && path == "/health") {
      const absl::Status status =
          serving_->load()
              ? absl::OkStatus()
              : absl::UnavailableError("the server is shutting down");
      return Answer(status.ok() ? 200 : HttpStatus(status.code()),
                    status.ok() ? Json{{"status", "ok"}} : ErrorJson(status));
    }
    constexpr std::string_view kModels = "/v1/models/";
    constexpr std::string_view kSessions = "/sessions/";
    if (req.method == "POST" && path == "/v1/chat/completions") {
      return Generating(req, Endpoint::kChatCompletions);
    }
    if (req.method == "POST" && path == "/v1/completions") {
      return Generating(req, Endpoint::kCompletions);
    }
    if (req.method == "GET" && path == "/v1/models") {
      return Unary(req, "GET /v1/models", &Handlers::Models, "");
    }
    if (req.method == "GET" && path.substr(0, kModels.size()) == kModels &&
        path.size() > kModels.size()) {
      return Unary(req, "GET /v1/models/{id}", &Handlers::Model,
                   path.substr(kModels.size()));
    }
    if (req.method == "POST" && path == "/tokenize") {
      return Unary(req, "POST /tokenize", &Handlers::Tokenize, "");
    }
    if (req.method == "POST" && path == "/detokenize") {
      return Unary(req, "POST /detokenize", &Handlers::Detokenize, "");
    }
    if (req.method == "POST" && path == "/apply-template") {
      return Unary(req, "POST /apply-template", &Handlers::ApplyTemplate, "");
    }
    if (req.method == "POST" && path == "/sessions") {
      return Unary(req, "POST /sessions", &Handlers::CreateSession, "");
    }
    if (req.method == "DELETE" &&
        path.substr(0, kSessions.size()) == kSessions &&
        path.size() > kSessions.size() &&
        path.find('/', kSessions.size()) == std::string_view::npos) {
      return Unary(req, "DELETE /sessions/{id}", &Handlers::DeleteSession,
                   path.substr(kSessions.size()));
    }
    return Answer(404, ErrorJson(404,
                                 absl::StrCat("no route for ",
                                              QuoteClientText(req.method), " ",
                                              QuoteClientText(req.path)),
                                 "not_found"));
  }

  void Stop() { stopping_.store(true); }

 private:
  using UnaryBody = absl::StatusOr<Json> (Handlers::*)(const HttpRequest&,
                                                       const Caller&,
                                                       std::string_view match);

  static Admission Answer(int status, const Json& json) {
    Admission a;
    a.status = status;
    a.body = Dump(json);
    return a;
  }

  // Authenticates from the header; a refusal is answered (and recorded
  // under `method`) without reading the body.
  std::optional<Admission> Refused(const HttpRequest& req, const char* method,
                                   Caller* caller) const {
    absl::StatusOr<Caller> c = Authenticate(req);
    if (c.ok()) {
      *caller = *std::move(c);
      return std::nullopt;
    }
    RequestRecord record(deps_.metrics, method);
    record.Finish(c.status());
    return Answer(HttpStatus(c.status().code()), ErrorJson(c.status()));
  }

  // A route answering one JSON object: run `body`, write the result or the
  // error, record metrics.
  Admission Unary(const HttpRequest& req, const char* method, UnaryBody body,
                  std::string_view match) {
    Caller caller;
    if (std::optional<Admission> refused = Refused(req, method, &caller)) {
      return *std::move(refused);
    }
    Admission a;
    a.run = [this, method, body, caller = std::move(caller),
             match = std::string(match)](HttpRequest& req, Responder& res) {
      RequestRecord record(deps_.metrics, method);
      absl::StatusOr<Json> out = (this->*body)(req, caller, match);
      if (out.ok()) {
        WriteJson(res, 200, *out);
      } else {
        WriteError(res, out.status());
      }
      record.Finish(out.status());
    };
    return a;
  }

  Admission Generating(const HttpRequest& req, Endpoint endpoint) {
    const char* const method = endpoint == Endpoint::kChatCompletions
                                   ? "POST /v1/chat/completions"
                                   : "POST /v1/completions";
    Caller caller;
    if (std::optional<Admission> refused = Refused(req, method, &caller)) {
      return *std::move(refused);
    }
    Admission a;
    a.run = [this, endpoint, method, caller = std::move(caller)](
                HttpRequest& req, Responder& res) {
      Generate(endpoint, method, caller, req, res);
    };
    return a;
  }

  absl::StatusOr<Caller> Authenticate(const HttpRequest& req) const {
    return deps_.auth->Authenticate(req.Header("authorization"), "",
                                    Authenticator::Via::kHttpHeader);
  }

  const std::string& model_name() const { return deps_.weights->name; }

  absl::StatusOr<Json> Models(const HttpRequest&, const Caller&,
                              std::string_view) {
    return ModelListJson(model_name(), created_, deps_.engine->max_context());
  }

  absl::StatusOr<Json> Model(const HttpRequest&, const Caller&,
                             std::string_view id) {
    if (absl::Status s = CheckModel(std::string(id), model_name()); !s.ok()) {
      return s;
    }
    return ModelJson(model_name(), created_, deps_.engine->max_context());
  }

  absl::StatusOr<Json> Tokenize(const HttpRequest& req, const Caller&,
                                std::string_view) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<TokenizeRequest> r = ParseTokenizeRequest(*body);
    if (!r.ok()) return r.status();
    return TokenizeJson(*deps_.tokenizer,
                        deps_.tokenizer->Encode(r->content, r->options),
                        r->with_pieces);
  }

  absl::StatusOr<Json> Detokenize(const HttpRequest& req, const Caller&,
                                  std::string_view) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseDetokenizeRequest(*body, deps_.tokenizer->vocab_size());
    if (!ids.ok()) return ids.status();
    return Json{{"content", http::Detokenize(*deps_.tokenizer, *ids)}};
  }

  absl::StatusOr<Json> ApplyTemplate(const HttpRequest& req, const Caller&,
                                     std::string_view) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<ChatTemplateInput> input = ParseApplyTemplateRequest(*body);
    if (!input.ok()) return input.status();
    // Under --max_prompt_bytes, as a chat completion.
    absl::StatusOr<ChatPrompt> prompt = deps_.engine->ApplyChatTemplate(*input);
    if (!prompt.ok()) return prompt.status();
    return Json{{"prompt", prompt->text}};
  }

  absl::StatusOr<Json> CreateSession(const HttpRequest& req,
                                     const Caller& caller, std::string_view) {
    absl::StatusOr<Json> body = Body(req, /*empty_ok=*/true);
    if (!body.ok()) return body.status();
    absl::StatusOr<std::optional<absl::Duration>> ttl =
        ParseCreateSessionRequest(*body);
    if (!ttl.ok()) return ttl.status();
    absl::StatusOr<SessionInfo> info =
        Await<SessionInfo>([&](Callback<SessionInfo> done) {
          CreateSessionParams params;
          params.owner = caller.owner;
          params.ttl = *ttl;
          deps_.engine->CreateSession(std::move(params), std::move(done));
        });
    if (!info.ok()) return info.status();
    return Json{{"id", info->id}, {"object", "session"}};
  }

  absl::StatusOr<Json> DeleteSession(const HttpRequest&, const Caller& caller,
                                     std::string_view match) {
    const std::string id(match);
    absl::StatusOr<bool> deleted = Await<bool>([&](Callback<bool> done) {
      deps_.engine->DeleteSession(id, caller.owner, std::move(done));
    });
    if (!deleted.ok()) return deleted.status();
    return Json{{"id", id}, {"object", "session"}, {"deleted", true}};
  }

  // The next event of `g`, cancelling its call once the server stops or
  // its client leaves.
  TokenQueue::Event Wait(Generation& g, Responder& res) {
    while (true) {
      if (std::optional<TokenQueue::Event> event =
              g.queue->Next(kPollInterval)) {
        return *std::move(event);
      }
      if (stopping_.load() || res.ClientGone()) g.call->Cancel();
    }
  }

  // The GenerateParams of a request, or why it cannot run.
  absl::StatusOr<GenerationRequest> Prepare(Endpoint endpoint,
                                            const Caller& caller,
                                            const HttpRequest& req) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<GenerationRequest> r =
        endpoint == Endpoint::kChatCompletions
            ? ParseChatRequest(*body, options_.default_max_tokens)
            : ParseCompletionRequest(*body, options_.default_max_tokens);
    if (!r.ok()) return r.status();
    if (absl::Status s = CheckModel(r->model, model_name()); !s.ok()) return s;
    if (std::optional<std::string_view> id = req.Header(kSessionHeader);
        id.has_value() && !id->empty()) {
      r->params.session_id = std::string(*id);
    }
    r->params.owner = caller.owner;
    if (auto* chat = std::get_if<ChatInput>(&r->params.prompt)) {
      chat->tools_json = r->tools_json;
    }
    return r;
  }

  void Generate(Endpoint endpoint, const char* method, const Caller& caller,
                const HttpRequest& req, Responder& res) {
    Generation g;
    g.record = std::make_unique<RequestRecord>(deps_.metrics, method);
    absl::StatusOr<GenerationRequest> r = Prepare(endpoint, caller, req);
    if (!r.ok()) {
      WriteError(res, r.status());
      g.record->Finish(r.status());
      return;
    }
    g.meta = ResponseMeta{
        .endpoint = endpoint,
        .id = NewResponseId(endpoint == Endpoint::kChatCompletions ? "chatcmpl-"
                                                                   : "cmpl-"),
        .created = absl::ToUnixSeconds(absl::Now()),
        .model = model_name()};
    g.logprobs = r->logprobs;
    g.include_usage = r->stream && r->include_usage;
    if (r->echo) {
      const auto* ids = std::get_if<std::vector<int32_t>>(&r->params.prompt);
      g.echo = ids != nullptr ? http::Detokenize(*deps_.tokenizer, *ids)
                              : std::get<std::string>(r->params.prompt);
    }
    g.queue = std::make_shared<TokenQueue>();
    g.call =
        std::make_shared<GenerateCall>(std::move(r->params), g.queue.get());
    deps_.engine->Submit(g.call);
    if (!r->stream) {
      Respond(g, res);
      return;
    }
    // Errors before the first token (an unknown session, a full queue)
    // are HTTP errors; once a token came, the answer is a 200 stream.
    g.first = Wait(g, res);
    if (auto* result = std::get_if<absl::StatusOr<GenerateResult>>(&*g.first);
        result != nullptr && !result->ok()) {
      WriteError(res, result->status());
      g.record->Finish(result->status());
      return;
    }
    HeaderList headers = {{"Cache-Control", "no-cache"}};
    if (!g.call->params().session_id.empty()) {
      headers.emplace_back(kSessionHeader, g.call->params().session_id);
    }
    bool ok = res.StartStream(200, kSseContentType, headers);
    while (ok && !g.done) ok = StreamStep(g, res);
    if (ok) ok = res.EndStream();
    if (!ok) {
      g.call->Cancel();  // a no-op once it finished
      if (!g.done) g.status = absl::CancelledError("the client went away");
    }
    g.queue->WaitFinished();
    g.record->Finish(g.status);
  }

  // The non-streaming answer, once the engine finished.
  void Respond(Generation& g, Responder& res) {
    while (true) {
      TokenQueue::Event event = Wait(g, res);
      if (auto* token = std::get_if<GeneratedToken>(&event)) {
        g.Add(*deps_.tokenizer, *token);
        if (res.ClientGone()) g.call->Cancel();
        continue;
      }
      const auto& result = std::get<absl::StatusOr<GenerateResult>>(event);
      if (!result.ok()) {
        WriteError(res, result.status());
        g.record->Finish(result.status());
        return;
      }
      HeaderList headers;
      if (!result->session_id.empty()) {
        headers.emplace_back(kSessionHeader, result->session_id);
      }
      // Cut short because its client left (and nobody read the answer):
      // counted as cancelled, as a gRPC call whose client left is.
      const bool delivered =
          !g.call->cancelled() &&
          WriteJson(res, 200,
                    CompletionJson(g.meta, g.echo + g.text + result->text,
                                   *result, g.AllEntries()),
                    headers);
      g.record->Finish(delivered
                           ? absl::OkStatus()
                           : absl::CancelledError("the client went away"));
      return;
    }
  }

  // One step of a stream: waits for the next event (at most kPollInterval)
  // and writes its SSE events. False: the client is gone (the caller
  // cancels the generation).
  bool StreamStep(Generation& g, Responder& res) {
    std::string out;
    const bool chat = g.meta.endpoint == Endpoint::kChatCompletions;
    if (!g.role_sent) {
      g.role_sent = true;
      if (chat) {
        out +=
            SseEvent(ChunkJson(g.meta, {{"role", "assistant"}, {"content", ""}},
                               std::nullopt, "", g.include_usage));
      } else if (!g.echo.empty()) {
        out += SseEvent(ChunkJson(g.meta, {{"content", g.echo}}, std::nullopt,
                                  "", g.include_usage));
      }
    }
    std::optional<TokenQueue::Event> event;
    if (g.first.has_value()) {
      event = std::move(g.first);
      g.first.reset();
    } else {
      event = g.queue->Next(kPollInterval);
    }
    if (!event.has_value()) {
      if (stopping_.load()) g.call->Cancel();
      if (res.ClientGone()) return false;
    } else if (auto* token = std::get_if<GeneratedToken>(&*event)) {
      std::optional<TokenLogprobEntry> entry = g.Add(*deps_.tokenizer, *token);
      if (!token->text.empty() || entry.has_value()) {
        std::optional<std::vector<TokenLogprobEntry>> logprobs;
        if (entry.has_value()) logprobs.emplace(1, *std::move(entry));
        out += SseEvent(ChunkJson(g.meta, {{"content", token->text}}, logprobs,
                                  "", g.include_usage));
      }
    } else {
      const auto& result = std::get<absl::StatusOr<GenerateResult>>(*event);
      if (result.ok()) {
        if (!result->text.empty()) {
          out += SseEvent(ChunkJson(g.meta, {{"content", result->text}},
                                    std::nullopt, "", g.include_usage));
        }
        out += SseEvent(ChunkJson(g.meta, Json::object(), std::nullopt,
                                  OpenAiFinishReason(result->finish_reason),
                                  g.include_usage));
        if (g.include_usage) {
          out += SseEvent(UsageChunkJson(g.meta, result->usage));
        }
      } else {
        out += SseEvent(ErrorJson(result.status()));
      }
      out += kSseDone;
      g.done = true;
      g.status = result.status();
    }
    return out.empty() || res.Write(std::move(out));
  }

  const Options& options_;
  const Deps& deps_;
  const std::atomic<bool>* const serving_;
  const int64_t created_;  // the models' `created`: when the server started
  std::atomic<bool> stopping_{false};
};

HttpServer::HttpServer(const Options& options, const Deps& deps)
    : options_(options), deps_(deps) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    const Options& options, const Deps& deps) {
  absl::StatusOr<HostPort> hp = ParseHostPort(options.listen);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<HttpServer> s(new HttpServer(options, deps));
  s->handlers_ =
      std::make_unique<Handlers>(s->options_, s->deps_, &s->serving_);
  HttpTransport::Options transport;
  transport.listen = options.listen;
  transport.tls = options.tls;
  transport.limits.max_body_bytes = options.max_body_bytes;
  transport.workers = std::max(1, options.threads);
  transport.max_connections = std::max(1, options.max_connections);
  Handlers* handlers = s->handlers_.get();
  absl::StatusOr<std::unique_ptr<HttpTransport>> t = HttpTransport::Create(
      transport,
      [handlers](const HttpRequest& req) { return handlers->Admit(req); });
  if (!t.ok()) return t.status();
  s->transport_ = *std::move(t);
  s->port_ = s->transport_->port();
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() { transport_->Start(); }

void HttpServer::Stop() {
  if (transport_ == nullptr) return;
  handlers_->Stop();
  transport_->Stop();
}

}  // namespace kvserve::http
