// HttpTransport: the HTTP/1.1 (and HTTPS) server under HttpServer, on
// Boost.Beast over Asio: connections are read and written asynchronously
// on a few I/O threads, and only a request whose header and body are
// complete takes a worker thread. A slow or idle client therefore holds a
// socket and at most one header's bytes, never a thread.
//
// Per connection: the request line and header must arrive within
// kHeaderDeadline (one total deadline, not per read), at most
// HttpLimits::max_header_bytes and max_header_fields (431); the app admits
// the request from its header alone (the route, authentication) before any
// body byte is read; the body, chunked or not, must fit max_body_bytes as
// read and as decoded (413) and arrive within kBodyDeadline. A response
// write that makes no progress for kWriteTimeout closes the connection.
// Keep-alive connections wait for their next request under the same header
// deadline (the idle timeout). At most Options::max_connections are open:
// past it a new connection is answered 503 and closed.
//
// Workers answer through Responder, blocking: each write is run on the
// connection's strand and waited for. ClientGone() tells a worker that its
// client closed the connection (poll's POLLRDHUP), so a request can be
// cancelled whether it streams or not.
#ifndef KVSERVE_SERVER_HTTP_HTTP_TRANSPORT_H_
#define KVSERVE_SERVER_HTTP_HTTP_TRANSPORT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/http_request.h"
#include "server/tls.h"

namespace kvserve::http {

inline constexpr std::chrono::seconds kHeaderDeadline{10};
inline constexpr std::chrono::seconds kBodyDeadline{60};
inline constexpr std::chrono::seconds kWriteTimeout{30};
// After an error answer the connection's unread bytes are read and dropped
// for at most this long (and kLingerBytes) before it closes, so that the
// client sees the answer rather than a reset.
inline constexpr std::chrono::seconds kLingerTime{2};
inline constexpr size_t kLingerBytes = size_t{16} << 20;

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// How a worker answers its request. Every call blocks until the bytes are
// written (or the write failed); false means the client is gone.
class Responder {
 public:
  virtual ~Responder() = default;
  // One whole response (Content-Length).
  virtual bool Send(int status, std::string_view content_type, std::string body,
                    const HeaderList& headers = {}) = 0;
  // A streamed response: its header, then Write()s, then EndStream().
  virtual bool StartStream(int status, std::string_view content_type,
                           const HeaderList& headers = {}) = 0;
  virtual bool Write(std::string data) = 0;
  virtual bool EndStream() = 0;
  // True once the client closed (or half-closed) its connection, or a
  // write failed.
  virtual bool ClientGone() = 0;
};

// What the app does with a request, decided from its header.
struct Admission {
  // Set: answer this now (the body unread), e.g. 404, 401 or /health.
  int status = 0;
  std::string body;  // JSON
  // Else: runs on a worker once the body is read and decoded.
  std::function<void(HttpRequest&, Responder&)> run;
};

class HttpTransport {
 public:
  struct Options {
    std::string listen;  // "host:port"; port 0 picks a free one
    TlsOptions tls;
    HttpLimits limits;
    int workers = 128;  // threads that run admitted requests
    int io_threads = 2;
    int max_connections = 4096;
  };
  // Called on an I/O thread with the request's header (body empty). Must
  // not block.
  using AdmitFn = std::function<Admission(const HttpRequest&)>;

  // Binds and listens (not yet accepting): INVALID_ARGUMENT for a bad
  // address or TLS files, UNAVAILABLE naming the address when it cannot be
  // bound (taken: no SO_REUSEPORT, so a second server cannot share it).
  static absl::StatusOr<std::unique_ptr<HttpTransport>> Create(
      const Options& options, AdmitFn admit);
  ~HttpTransport();  // Stop()

  void Start();
  // Refuses new requests (503, connection closed), waits for the workers'
  // requests to end (the caller makes them end), then closes every
  // connection and stops the I/O threads.
  void Stop();

  int port() const { return port_; }

  class Impl;  // the Asio state, in the .cc

 private:
  explicit HttpTransport(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_HTTP_TRANSPORT_H_
