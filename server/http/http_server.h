// HttpServer: the OpenAI-compatible HTTP API (--http_listen), in-process on
// the same Engine as the gRPC service. Like InferenceService it is thin:
// authenticate -> parse (openai_json.h) -> call the engine -> convert the
// status (HttpStatus, the one place) -> record metrics, with `method`
// labels such as "POST /v1/chat/completions".
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
// GET /v1/models/{id}, GET /health, POST /tokenize, POST /detokenize,
// POST /apply-template, POST /sessions, DELETE /sessions/{id}. Every route
// but /health needs `Authorization: Bearer KEY` when the server has API
// keys; the owner is the key's.
//
// Sessions: an `x-session-id` header (or a `session_id` body field)
// continues a kvserve session, so a chat client sends only its new
// messages; without one a request runs on an ephemeral session (the prefix
// cache still reuses KV across requests).
//
// Transport (http_transport.h): Boost.Beast over Asio. Slow and idle
// clients hold a socket, not a thread: the header must arrive within 10 s
// and 32 KiB / 100 fields, the body (chunked or not, gzip or deflate
// decoded) within max_body_bytes, both checked while reading and before
// any handler runs; authentication runs on the header, so an
// unauthenticated client's body is never read. GET /health is answered on
// the I/O threads; every other request runs on one of `threads` workers
// once its body is read. The engine's TokenSink callbacks only push into
// a TokenQueue; the worker waits on it.
//
// Client disconnect: a request whose client closed its connection (seen
// by poll, streaming or not) or whose write failed is cancelled at the
// next engine step.
//
// Thread-safety: Start/Stop/SetServing from one thread; handlers run on the
// workers.
#ifndef KVSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define KVSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/chat/chat_template.h"
#include "core/engine/engine.h"
#include "core/model/weights.h"
#include "core/tokenizer/tokenizer.h"
#include "server/auth.h"
#include "server/http/http_transport.h"
#include "server/metrics.h"
#include "server/tls.h"

namespace kvserve::http {

class HttpServer {
 public:
  struct Options {
    std::string listen;  // "host:port"; port 0 picks a free one
    // enabled(): HTTPS with these files (client_ca_file: mutual TLS).
    TlsOptions tls;
    int threads = 128;  // workers; each running request holds one
    // Larger bodies are refused with 413. 8 MiB holds a full 128k-token
    // conversation as text several times over.
    size_t max_body_bytes = size_t{8} << 20;
    int default_max_tokens = 256;  // when a request sets none
    // Open connections; past it a new one is answered 503 and closed.
    int max_connections = 4096;
  };

  struct Deps {
    Engine* engine;
    const ModelWeights* weights;  // its name is the served model's id
    const Tokenizer* tokenizer;
    Metrics* metrics;
    const Authenticator* auth;
  };

  // Binds the address (not yet serving). INVALID_ARGUMENT for a bad
  // address or TLS files, UNAVAILABLE when the address cannot be bound.
  // REQUIRES: everything in `deps` outlives the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      const Options& options, const Deps& deps);
  ~HttpServer();  // Stop()

  // Serves on threads of its own.
  void Start();
  // /health answers 503 once false (draining).
  void SetServing(bool serving) { serving_.store(serving); }
  // Cancels the generations still running, waits for the workers and stops.
  void Stop();

  int port() const { return port_; }
  bool tls() const { return options_.tls.enabled(); }

 private:
  class Handlers;
  HttpServer(const Options& options, const Deps& deps);

  const Options options_;
  const Deps deps_;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<HttpTransport> transport_;
  int port_ = 0;
  std::atomic<bool> serving_{true};
};

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_HTTP_SERVER_H_
