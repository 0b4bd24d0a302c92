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
#include "server/convert.h"
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

// One choice of a generation: what it has generated so far.
struct ChoiceState {
  std::string text;
  // The reply read into content, reasoning and tool calls, when parsed.
  std::optional<constrain::ReplyStream> reply;
  std::vector<TokenLogprobEntry> entries;  // when logprobs
  int32_t prev_id = -1;
  // Set when it finished.
  std::optional<absl::StatusOr<GenerateResult>> result;
};

// One generation request, on its worker: n choices of each of its prompts.
struct Generation {
  // The engine holds the queue's sinks by raw pointers until each call's
  // OnFinish: whatever ends the request (an exception too) waits for that.
  ~Generation() {
    if (calls.empty()) return;
    CancelAll();  // a no-op for calls that finished
    queue->WaitFinished();
  }

  void CancelAll() {
    for (auto& call : calls) call->Cancel();
  }
  bool finished() const { return unfinished == 0; }
  const std::string& echo_of(int index) const {
    static const std::string kNone;
    return echo.empty() ? kNone : echo[index / n];
  }

  // What a token added to its choice.
  struct Added {
    std::optional<TokenLogprobEntry> entry;  // its logprob entry, if any
    constrain::ReplyDelta delta;             // when the reply is parsed
  };

  // Adds a token to its choice's text, entries and parsed reply.
  Added Add(const Tokenizer& tokenizer, int index,
            const GeneratedToken& token) {
    ChoiceState& c = choices[index];
    Added added;
    if (logprobs && token.logprobs.has_value()) {
      added.entry = MakeLogprobEntry(tokenizer, c.prev_id, token,
                                     static_cast<int64_t>(c.text.size()));
      c.entries.push_back(*added.entry);
    }
    c.prev_id = token.token_id;
    c.text += token.text;
    if (c.reply.has_value()) {
      // A control token may be a format's marker ("[TOOL_CALLS]").
      if (!token.control.empty()) {
        added.delta = c.reply->PushControl(token.control);
      }
      added.delta.Append(c.reply->Push(token.text));
    }
    return added;
  }

  // Records a choice's result; the first failure cancels the others (the
  // request fails as a whole).
  void Finished(int index, absl::StatusOr<GenerateResult> result) {
    if (!result.ok() && status.ok()) {
      status = result.status();
      CancelAll();
    }
    choices[index].result = std::move(result);
    --unfinished;
  }

  // OpenAI's usage of several choices: each prompt counted once, every
  // choice's completion tokens. REQUIRES: finished() and status.ok().
  Usage TotalUsage() const {
    Usage total;
    for (size_t i = 0; i < choices.size(); ++i) {
      const Usage& u = (*choices[i].result)->usage;
      if (i % n == 0) {
        total.prompt_tokens += u.prompt_tokens;
        total.cached_prompt_tokens += u.cached_prompt_tokens;
      }
      total.generated_tokens += u.generated_tokens;
    }
    return total;
  }

  std::shared_ptr<TokenQueue> queue;
  // Every choice's call: prompt p's choice j is calls[p * n + j].
  std::vector<std::shared_ptr<GenerateCall>> calls;
  std::vector<ChoiceState> choices;
  int n = 1;
  int unfinished = 0;
  ResponseMeta meta;
  bool logprobs = false;
  bool include_usage = false;
  std::unique_ptr<RequestRecord> record;
  // Chat: how each choice's reply is read; nullopt: plain content.
  std::optional<constrain::ParseOptions> parse;
  // echo: each prompt's text, sent before what is generated for it.
  std::vector<std::string> echo;

  // Streaming: the event the handler waited for before answering 200.
  std::optional<TokenQueue::Event> first;
  bool started = false;  // the role (or echo) chunks are sent
  // OK until a choice failed; stays OK once the response was written.
  absl::Status status;
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

  // The next event of `g`, cancelling its calls once the server stops or
  // its client leaves.
  TokenQueue::Event Wait(Generation& g, Responder& res) {
    while (true) {
      if (std::optional<TokenQueue::Event> event =
              g.queue->Next(kPollInterval)) {
        return *std::move(event);
      }
      if (stopping_.load() || res.ClientGone()) g.CancelAll();
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
    if (!r->params.session_id.empty() && !r->more_prompts.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "`prompt` holds %d prompts, and a session takes one turn at a "
          "time: send one prompt per request with x-session-id",
          r->more_prompts.size() + 1));
    }
    r->params.owner = caller.owner;
    if (auto* chat = std::get_if<ChatInput>(&r->params.prompt)) {
      chat->tools_json = r->tools_json;
      absl::StatusOr<std::optional<constrain::ParseOptions>> parse =
          UseTools(deps_.engine->reply_format(), r->tools, r->tool_choice,
                   r->parallel_tool_calls, r->reasoning_inline, r->params);
      if (!parse.ok()) return parse.status();
      r->parse = *std::move(parse);
    }
    return r;
  }

  // Makes the calls of every choice of every prompt (each prompt's first
  // call carrying the prompt's other choices, which share its prefill)
  // and submits them.
  void Submit(Generation& g, GenerationRequest& r) {
    std::vector<Input> prompts;
    prompts.push_back(std::move(r.params.prompt));
    for (Input& p : r.more_prompts) prompts.push_back(std::move(p));
    g.n = r.n;
    const int total = static_cast<int>(prompts.size()) * r.n;
    g.queue = std::make_shared<TokenQueue>(total);
    g.choices.resize(total);
    if (g.parse.has_value()) {
      for (ChoiceState& c : g.choices) c.reply.emplace(*g.parse);
    }
    g.unfinished = total;
    std::vector<std::shared_ptr<GenerateCall>> firsts;
    for (size_t p = 0; p < prompts.size(); ++p) {
      if (r.echo) {
        const auto* ids = std::get_if<std::vector<int32_t>>(&prompts[p]);
        g.echo.push_back(ids != nullptr
                             ? http::Detokenize(*deps_.tokenizer, *ids)
                             : std::get<std::string>(prompts[p]));
      }
      GenerateParams params = r.params;
      params.prompt = std::move(prompts[p]);
      for (int j = 0; j < r.n; ++j) {
        const int index = static_cast<int>(p) * r.n + j;
        auto call = std::make_shared<GenerateCall>(ChoiceParams(params, j),
                                                   g.queue->sink(index));
        if (j == 0) {
          firsts.push_back(call);
        } else {
          firsts.back()->AddChoice(call);
        }
        g.calls.push_back(std::move(call));
      }
    }
    for (auto& call : firsts) deps_.engine->Submit(std::move(call));
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
    g.parse = r->parse;
    g.include_usage = r->stream && r->include_usage;
    const bool stream = r->stream;
    const std::string session_id = r->params.session_id;
    Submit(g, *r);
    if (!stream) {
      Respond(g, res);
      return;
    }
    // Errors before the first token (an unknown session, a full queue)
    // are HTTP errors; once a token came, the answer is a 200 stream.
    g.first = Wait(g, res);
    if (auto* result =
            std::get_if<absl::StatusOr<GenerateResult>>(&g.first->what);
        result != nullptr && !result->ok()) {
      const absl::Status failed = result->status();
      g.CancelAll();
      g.queue->WaitFinished();
      WriteError(res, failed);
      g.record->Finish(failed);
      return;
    }
    HeaderList headers = {{"Cache-Control", "no-cache"}};
    if (!session_id.empty()) headers.emplace_back(kSessionHeader, session_id);
    bool ok = res.StartStream(200, kSseContentType, headers);
    bool done = false;
    while (ok && !done) ok = StreamStep(g, res, done);
    if (ok) ok = res.EndStream();
    g.CancelAll();  // a no-op for calls that finished
    g.queue->WaitFinished();
    g.record->Finish(ok ? g.status
                        : absl::CancelledError("the client went away"));
  }

  // The non-streaming answer, once every choice finished.
  void Respond(Generation& g, Responder& res) {
    while (!g.finished()) {
      TokenQueue::Event event = Wait(g, res);
      if (auto* token = std::get_if<GeneratedToken>(&event.what)) {
        g.Add(*deps_.tokenizer, event.index, *token);
        if (res.ClientGone()) g.CancelAll();
        continue;
      }
      g.Finished(event.index, std::get<absl::StatusOr<GenerateResult>>(
                                  std::move(event.what)));
    }
    if (!g.status.ok()) {
      WriteError(res, g.status);
      g.record->Finish(g.status);
      return;
    }
    HeaderList headers;
    const GenerateResult& first = **g.choices[0].result;
    if (!first.session_id.empty()) {
      headers.emplace_back(kSessionHeader, first.session_id);
    }
    std::vector<ChoiceOutput> choices;
    for (size_t i = 0; i < g.choices.size(); ++i) {
      ChoiceState& c = g.choices[i];
      const GenerateResult& result = **c.result;
      std::optional<constrain::ParsedReply> reply;
      if (c.reply.has_value()) {
        c.reply->Push(result.text);
        c.reply->Finish();
        reply = c.reply->sent();
      }
      choices.push_back(
          {.text = g.echo_of(i) + c.text + result.text,
           .reply = std::move(reply),
           .finish_reason = result.finish_reason,
           .logprobs = g.logprobs ? std::make_optional(std::move(c.entries))
                                  : std::nullopt});
    }
    // Cut short because its client left (and nobody read the answer):
    // counted as cancelled, as a gRPC call whose client left is.
    bool cancelled = false;
    for (const auto& call : g.calls) cancelled = cancelled || call->cancelled();
    const bool delivered =
        !cancelled &&
        WriteJson(res, 200, CompletionJson(g.meta, choices, g.TotalUsage()),
                  headers);
    g.record->Finish(delivered ? absl::OkStatus()
                               : absl::CancelledError("the client went away"));
  }

  // One step of a stream: waits for the next event (at most kPollInterval)
  // and writes its SSE events; `done` once the stream's last event is
  // written. False: the client is gone (the caller cancels the generation).
  bool StreamStep(Generation& g, Responder& res, bool& done) {
    std::string out;
    const bool chat = g.meta.endpoint == Endpoint::kChatCompletions;
    if (!g.started) {
      g.started = true;
      for (int i = 0; i < static_cast<int>(g.choices.size()); ++i) {
        if (chat) {
          out += SseEvent(ChunkJson(g.meta, i,
                                    {{"role", "assistant"}, {"content", ""}},
                                    std::nullopt, "", g.include_usage));
        } else if (!g.echo_of(i).empty()) {
          out += SseEvent(ChunkJson(g.meta, i, {{"content", g.echo_of(i)}},
                                    std::nullopt, "", g.include_usage));
        }
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
      if (stopping_.load()) g.CancelAll();
      if (res.ClientGone()) return false;
    } else if (auto* token = std::get_if<GeneratedToken>(&event->what)) {
      Generation::Added added = g.Add(*deps_.tokenizer, event->index, *token);
      const bool parsed = g.choices[event->index].reply.has_value();
      const bool any = parsed ? !added.delta.empty() : !token->text.empty();
      if (g.status.ok() && (any || added.entry.has_value())) {
        std::optional<std::vector<TokenLogprobEntry>> logprobs;
        if (added.entry.has_value()) {
          logprobs.emplace(1, *std::move(added.entry));
        }
        out += SseEvent(ChunkJson(g.meta, event->index,
                                  parsed ? ReplyDeltaJson(added.delta)
                                         : Json{{"content", token->text}},
                                  logprobs, "", g.include_usage));
      }
    } else {
      const bool failed_before = !g.status.ok();
      g.Finished(event->index, std::get<absl::StatusOr<GenerateResult>>(
                                   std::move(event->what)));
      const auto& result = *g.choices[event->index].result;
      if (result.ok() && g.status.ok()) {
        std::optional<constrain::ReplyStream>& reply =
            g.choices[event->index].reply;
        std::vector<Json> deltas;
        if (!reply.has_value()) {
          if (!result->text.empty()) {
            deltas.push_back({{"content", result->text}});
          }
        } else {
          constrain::ReplyDelta end = reply->Push(result->text);
          end.Append(reply->Finish());
          if (!end.empty()) deltas.push_back(ReplyDeltaJson(end));
        }
        for (const Json& delta : deltas) {
          out += SseEvent(ChunkJson(g.meta, event->index, delta, std::nullopt,
                                    "", g.include_usage));
        }
        const bool called_tools =
            reply.has_value() && !reply->sent().calls.empty();
        out += SseEvent(
            ChunkJson(g.meta, event->index, Json::object(), std::nullopt,
                      OpenAiFinishReason(result->finish_reason, called_tools),
                      g.include_usage));
      } else if (!failed_before && !g.status.ok()) {
        // The first failure ends the stream's content (the other choices
        // are cancelled).
        out += SseEvent(ErrorJson(g.status));
      }
      if (g.finished()) {
        if (g.include_usage && g.status.ok()) {
          out += SseEvent(UsageChunkJson(g.meta, g.TotalUsage()));
        }
        out += kSseDone;
        done = true;
      }
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
