#include "server/http/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/chat/chat_prompt.h"
#include "core/util/quote.h"
#include "core/util/status_reason.h"
#include "httplib.h"
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

void WriteJson(httplib::Response& res, int status, const Json& json) {
  res.status = status;
  res.set_content(Dump(json), kJsonContentType);
}

void WriteError(httplib::Response& res, const absl::Status& status) {
  WriteJson(res, HttpStatus(status.code()), ErrorJson(status));
}

// The body as a JSON object; an empty body is {} when `empty_ok`.
absl::StatusOr<Json> Body(const httplib::Request& req, bool empty_ok = false) {
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

// One generation request, shared by its handler and (streaming) the
// content provider and releaser httplib runs on the same worker thread.
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

  void Register(httplib::Server& s) {
    s.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) {
             Generate(Endpoint::kChatCompletions, req, res);
           });
    s.Post("/v1/completions",
           [this](const httplib::Request& req, httplib::Response& res) {
             Generate(Endpoint::kCompletions, req, res);
           });
    s.Get("/v1/models", Unary("GET /v1/models", &Handlers::Models));
    s.Get("/v1/models/(.+)", Unary("GET /v1/models/{id}", &Handlers::Model));
    s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (serving_->load()) {
        WriteJson(res, 200, {{"status", "ok"}});
      } else {
        WriteError(res, absl::UnavailableError("the server is shutting down"));
      }
    });
    s.Post("/tokenize", Unary("POST /tokenize", &Handlers::Tokenize));
    s.Post("/detokenize", Unary("POST /detokenize", &Handlers::Detokenize));
    s.Post("/apply-template",
           Unary("POST /apply-template", &Handlers::ApplyTemplate));
    s.Post("/sessions", Unary("POST /sessions", &Handlers::CreateSession));
    s.Delete("/sessions/([^/]+)",
             Unary("DELETE /sessions/{id}", &Handlers::DeleteSession));

    // Errors httplib answers itself (no route, body too large) and those of
    // our handlers (a body already set) in one shape.
    s.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty())
            return httplib::Server::HandlerResponse::Unhandled;
          std::string message, code;
          if (res.status == 404) {
            // Client text, quoted to 64 bytes (a 100 KB path gave a
            // 100 KB error).
            message = absl::StrCat("no route for ", QuoteClientText(req.method),
                                   " ", QuoteClientText(req.path));
            code = "not_found";
          } else if (res.status == 413) {
            message = absl::StrFormat("the request body exceeds %d bytes",
                                      options_.max_body_bytes);
            code = "payload_too_large";
          } else {
            message = absl::StrCat("HTTP status ", res.status);
            code = "http_error";
          }
          res.set_content(Dump(ErrorJson(res.status, message, code)),
                          kJsonContentType);
          return httplib::Server::HandlerResponse::Handled;
        }));
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                               std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      WriteError(res, absl::InternalError(what));
    });
  }

  void Stop() { stopping_.store(true); }

 private:
  using UnaryBody = absl::StatusOr<Json> (Handlers::*)(const httplib::Request&,
                                                       const Caller&);

  // A route answering one JSON object: authenticate, run `body`, write the
  // result or the error, record metrics.
  httplib::Server::Handler Unary(const char* method, UnaryBody body) {
    return [this, method, body](const httplib::Request& req,
                                httplib::Response& res) {
      RequestRecord record(deps_.metrics, method);
      absl::StatusOr<Json> out = [&]() -> absl::StatusOr<Json> {
        absl::StatusOr<Caller> caller = Authenticate(req);
        if (!caller.ok()) return caller.status();
        return (this->*body)(req, *caller);
      }();
      if (out.ok()) {
        WriteJson(res, 200, *out);
      } else {
        WriteError(res, out.status());
      }
      record.Finish(out.status());
    };
  }

  absl::StatusOr<Caller> Authenticate(const httplib::Request& req) const {
    std::optional<std::string_view> authorization;
    std::string value;
    if (req.has_header("Authorization")) {
      value = req.get_header_value("Authorization");
      authorization = value;
    }
    return deps_.auth->Authenticate(authorization, "",
                                    Authenticator::Via::kHttpHeader);
  }

  const std::string& model_name() const { return deps_.weights->name; }

  absl::StatusOr<Json> Models(const httplib::Request&, const Caller&) {
    return ModelListJson(model_name(), created_, deps_.engine->max_context());
  }

  absl::StatusOr<Json> Model(const httplib::Request& req, const Caller&) {
    if (absl::Status s = CheckModel(req.matches[1].str(), model_name());
        !s.ok()) {
      return s;
    }
    return ModelJson(model_name(), created_, deps_.engine->max_context());
  }

  absl::StatusOr<Json> Tokenize(const httplib::Request& req, const Caller&) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<TokenizeRequest> r = ParseTokenizeRequest(*body);
    if (!r.ok()) return r.status();
    return TokenizeJson(*deps_.tokenizer,
                        deps_.tokenizer->Encode(r->content, r->options),
                        r->with_pieces);
  }

  absl::StatusOr<Json> Detokenize(const httplib::Request& req, const Caller&) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseDetokenizeRequest(*body, deps_.tokenizer->vocab_size());
    if (!ids.ok()) return ids.status();
    return Json{{"content", http::Detokenize(*deps_.tokenizer, *ids)}};
  }

  absl::StatusOr<Json> ApplyTemplate(const httplib::Request& req,
                                     const Caller&) {
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<ChatTemplateInput> input = ParseApplyTemplateRequest(*body);
    if (!input.ok()) return input.status();
    // Under --max_prompt_bytes, as a chat completion.
    absl::StatusOr<ChatPrompt> prompt = deps_.engine->ApplyChatTemplate(*input);
    if (!prompt.ok()) return prompt.status();
    return Json{{"prompt", prompt->text}};
  }

  absl::StatusOr<Json> CreateSession(const httplib::Request& req,
                                     const Caller& caller) {
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

  absl::StatusOr<Json> DeleteSession(const httplib::Request& req,
                                     const Caller& caller) {
    const std::string id = req.matches[1].str();
    absl::StatusOr<bool> deleted = Await<bool>([&](Callback<bool> done) {
      deps_.engine->DeleteSession(id, caller.owner, std::move(done));
    });
    if (!deleted.ok()) return deleted.status();
    return Json{{"id", id}, {"object", "session"}, {"deleted", true}};
  }

  // The next event of `g`, cancelling its call once the server stops.
  TokenQueue::Event Wait(Generation& g) {
    while (true) {
      if (std::optional<TokenQueue::Event> event =
              g.queue->Next(kPollInterval)) {
        return *std::move(event);
      }
      if (stopping_.load()) g.call->Cancel();
    }
  }

  // The GenerateParams of a request, or why it cannot run.
  absl::StatusOr<GenerationRequest> Prepare(Endpoint endpoint,
                                            const httplib::Request& req) {
    absl::StatusOr<Caller> caller = Authenticate(req);
    if (!caller.ok()) return caller.status();
    absl::StatusOr<Json> body = Body(req);
    if (!body.ok()) return body.status();
    absl::StatusOr<GenerationRequest> r =
        endpoint == Endpoint::kChatCompletions
            ? ParseChatRequest(*body, options_.default_max_tokens)
            : ParseCompletionRequest(*body, options_.default_max_tokens);
    if (!r.ok()) return r.status();
    if (absl::Status s = CheckModel(r->model, model_name()); !s.ok()) return s;
    if (std::string id = req.get_header_value(kSessionHeader); !id.empty()) {
      r->params.session_id = std::move(id);
    }
    r->params.owner = caller->owner;
    if (auto* chat = std::get_if<ChatInput>(&r->params.prompt)) {
      chat->tools_json = r->tools_json;
    }
    return r;
  }

  void Generate(Endpoint endpoint, const httplib::Request& req,
                httplib::Response& res) {
    auto g = std::make_shared<Generation>();
    g->record = std::make_unique<RequestRecord>(
        deps_.metrics, endpoint == Endpoint::kChatCompletions
                           ? "POST /v1/chat/completions"
                           : "POST /v1/completions");
    absl::StatusOr<GenerationRequest> r = Prepare(endpoint, req);
    if (!r.ok()) {
      WriteError(res, r.status());
      g->record->Finish(r.status());
      return;
    }
    g->meta = ResponseMeta{
        .endpoint = endpoint,
        .id = NewResponseId(endpoint == Endpoint::kChatCompletions ? "chatcmpl-"
                                                                   : "cmpl-"),
        .created = absl::ToUnixSeconds(absl::Now()),
        .model = model_name()};
    g->logprobs = r->logprobs;
    g->include_usage = r->stream && r->include_usage;
    g->queue = std::make_shared<TokenQueue>();
    g->call =
        std::make_shared<GenerateCall>(std::move(r->params), g->queue.get());
    deps_.engine->Submit(g->call);
    const bool stream = r->stream;
    if (!stream) {
      Respond(*g, res);
      return;
    }
    // Errors before the first token (an unknown session, a full queue)
    // are HTTP errors; once a token came, the answer is a 200 stream.
    g->first = Wait(*g);
    if (auto* result = std::get_if<absl::StatusOr<GenerateResult>>(&*g->first);
        result != nullptr && !result->ok()) {
      WriteError(res, result->status());
      g->record->Finish(result->status());
      return;
    }
    if (!g->call->params().session_id.empty()) {
      res.set_header(kSessionHeader, g->call->params().session_id);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        kSseContentType,
        [this, g](size_t, httplib::DataSink& sink) {
          return StreamStep(*g, sink);
        },
        [g](bool) {
          g->call->Cancel();  // no-op when it finished
          g->queue->WaitFinished();
          g->record->Finish(g->status);
        });
  }

  // The non-streaming answer, once the engine finished.
  void Respond(Generation& g, httplib::Response& res) {
    while (true) {
      TokenQueue::Event event = Wait(g);
      if (auto* token = std::get_if<GeneratedToken>(&event)) {
        g.Add(*deps_.tokenizer, *token);
        continue;
      }
      const auto& result = std::get<absl::StatusOr<GenerateResult>>(event);
      if (!result.ok()) {
        WriteError(res, result.status());
        g.record->Finish(result.status());
        return;
      }
      if (!result->session_id.empty()) {
        res.set_header(kSessionHeader, result->session_id);
      }
      WriteJson(res, 200,
                CompletionJson(g.meta, g.text + result->text, *result,
                               g.AllEntries()));
      g.record->Finish(absl::OkStatus());
      return;
    }
  }

  // One turn of httplib's chunked-content loop: waits for the next event
  // (at most kPollInterval) and writes its SSE events. False ends the
  // response: the client is gone (the generation is cancelled).
  bool StreamStep(Generation& g, httplib::DataSink& sink) {
    std::string out;
    const bool chat = g.meta.endpoint == Endpoint::kChatCompletions;
    if (!g.role_sent) {
      g.role_sent = true;
      if (chat) {
        out +=
            SseEvent(ChunkJson(g.meta, {{"role", "assistant"}, {"content", ""}},
                               std::nullopt, "", g.include_usage));
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
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      g.call->Cancel();
      g.status = absl::CancelledError("the client went away");
      return false;
    }
    if (g.done) sink.done();
    return true;
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

  const TlsOptions& tls = options.tls;
  if (tls.enabled()) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        tls.cert_file.c_str(), tls.key_file.c_str(),
        tls.client_ca_file.empty() ? nullptr : tls.client_ca_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cannot serve HTTPS with --tls_cert=%s --tls_key=%s%s", tls.cert_file,
          tls.key_file,
          tls.client_ca_file.empty()
              ? ""
              : absl::StrCat(" --tls_client_ca=", tls.client_ca_file)));
    }
    s->server_ = std::move(ssl);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& server = *s->server_;
  const int threads = std::max(1, options.threads);
  server.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  server.set_payload_max_length(options.max_body_bytes);
  // httplib's default options add SO_REUSEPORT, with which a second kvserve
  // on the same --http_listen started and took half the connections: only
  // SO_REUSEADDR (a restart may bind while old connections linger).
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->handlers_->Register(server);

  // getaddrinfo wants an IPv6 address without its brackets.
  std::string host = hp->host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = hp->port;
  if (port == 0) {
    port = server.bind_to_any_port(host);
  } else if (!server.bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     ": the address is in use or not this machine's"));
  }
  s->port_ = port;
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() {
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

void HttpServer::Stop() {
  if (server_ == nullptr) return;
  handlers_->Stop();
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kvserve::http
