#include "server/http/http_transport.h"

#include <poll.h>
#include <sys/resource.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <future>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/thread_pool.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/chunk_encode.hpp"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/serializer.hpp"
#include "boost/beast/http/write.hpp"
#include "boost/beast/ssl/ssl_stream.hpp"
#include "server/http/openai_json.h"
#include "server/settings.h"

namespace kvserve::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

constexpr char kJsonContentType[] = "application/json";
// After an accept failed for want of file descriptors, the next try.
constexpr std::chrono::milliseconds kAcceptRetry{50};

std::string ErrorBody(const HttpError& e) {
  return Dump(ErrorJson(e.status, e.message, e.code));
}

// A parse error of the request (answered 4xx), not a failed socket.
bool IsHttpError(const beast::error_code& ec) {
  return ec.category() ==
             bhttp::make_error_code(bhttp::error::need_more).category() &&
         ec != bhttp::error::end_of_stream;
}

// A slow-client test opens ~1000 sockets; the usual soft limit is 1024.
void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

class ConnectionBase : public Responder {
 public:
  ~ConnectionBase() override = default;
  virtual void Run() = 0;
  // Shuts the socket down on its strand; the descriptor closes with the
  // connection, so a worker's ClientGone never polls a reused one.
  virtual void PostClose() = 0;
};

class HttpTransport::Impl {
 public:
  Impl(const Options& options, AdmitFn admit)
      : options_(options),
        admit_(std::move(admit)),
        workers_(static_cast<size_t>(std::max(1, options.workers))),
        guard_(net::make_work_guard(ioc_)),
        acceptor_(net::make_strand(ioc_)),
        retry_(acceptor_.get_executor()) {}

  absl::Status Init(int* port);
  void Start();
  void Stop();

  const Options& options() const { return options_; }
  net::thread_pool& workers() { return workers_; }
  bool stopping() const { return stopping_.load(); }
  Admission Admit(const HttpRequest& request) { return admit_(request); }

  void Register(ConnectionBase* c, std::weak_ptr<ConnectionBase> weak) {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.emplace(c, std::move(weak));
  }
  void Forget(ConnectionBase* c) {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(c);
  }
  size_t open_connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return connections_.size();
  }

 private:
  void Accept();
  void OnAccept(const beast::error_code& ec, tcp::socket socket);
  void Refuse(tcp::socket socket);

  const Options options_;
  const AdmitFn admit_;
  std::optional<net::ssl::context> ssl_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>>
      connections_;
  net::thread_pool workers_;
  std::vector<std::thread> io_threads_;
  // Last: destroyed first, with the connections its handlers still hold.
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> guard_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_;
};

namespace {

template <bool kTls>
class Connection final : public ConnectionBase,
                         public std::enable_shared_from_this<Connection<kTls>> {
 public:
  using Stream = std::conditional_t<kTls, beast::ssl_stream<beast::tcp_stream>,
                                    beast::tcp_stream>;

  Connection(HttpTransport::Impl* transport, tcp::socket socket,
             net::ssl::context* ssl)
      : transport_(transport), stream_(MakeStream(std::move(socket), ssl)) {
    fd_ = beast::get_lowest_layer(stream_).socket().native_handle();
  }
  ~Connection() override { transport_->Forget(this); }

  void Run() override {
    if constexpr (kTls) {
      Lowest().expires_after(kHeaderDeadline);
      stream_.async_handshake(
          net::ssl::stream_base::server,
          [self = this->shared_from_this()](const beast::error_code& ec) {
            if (ec) return self->Close();
            self->ReadHeader();
          });
    } else {
      ReadHeader();
    }
  }

  void PostClose() override {
    net::post(stream_.get_executor(),
              [self = this->shared_from_this()] { self->Close(); });
  }

  // --- Responder (worker threads) ---------------------------------------

  bool Send(int status, std::string_view content_type, std::string body,
            const HeaderList& headers) override {
    responded_ = true;
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(status), version_);
    SetFields(*res, content_type, headers);
    res->body() = std::move(body);
    res->prepare_payload();
    return RunOnStrand([this, res](std::function<void(bool)> done) {
      bhttp::async_write(
          stream_, *res,
          [res, done](const beast::error_code& ec, size_t) { done(!ec); });
    });
  }

  bool StartStream(int status, std::string_view content_type,
                   const HeaderList& headers) override {
    responded_ = true;
    auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(
        static_cast<bhttp::status>(status), version_);
    SetFields(*res, content_type, headers);
    // HTTP/1.0 has no chunks: the stream ends with the connection.
    if (version_ >= 11) {
      res->chunked(true);
    } else {
      keep_alive_ = false;
      res->keep_alive(false);
    }
    auto sr =
        std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
    return RunOnStrand([this, res, sr](std::function<void(bool)> done) {
      bhttp::async_write_header(
          stream_, *sr,
          [res, sr, done](const beast::error_code& ec, size_t) { done(!ec); });
    });
  }

  bool Write(std::string data) override {
    if (data.empty()) return !ClientGone();
    auto buf = std::make_shared<std::string>(std::move(data));
    return RunOnStrand([this, buf](std::function<void(bool)> done) {
      auto on_write = [buf, done](const beast::error_code& ec, size_t) {
        done(!ec);
      };
      if (version_ >= 11) {
        net::async_write(stream_, bhttp::make_chunk(net::buffer(*buf)),
                         on_write);
      } else {
        net::async_write(stream_, net::buffer(*buf), on_write);
      }
    });
  }

  bool EndStream() override {
    if (version_ < 11) return !ClientGone();
    return RunOnStrand([this](std::function<void(bool)> done) {
      net::async_write(
          stream_, bhttp::make_chunk_last(),
          [done](const beast::error_code& ec, size_t) { done(!ec); });
    });
  }

  bool ClientGone() override {
    if (failed_.load() || closed_.load()) return true;
    pollfd p{.fd = fd_, .events = POLLRDHUP, .revents = 0};
    return ::poll(&p, 1, 0) > 0 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  }

 private:
  static Stream MakeStream(tcp::socket socket, net::ssl::context* ssl) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *ssl);
    } else {
      return Stream(std::move(socket));
    }
  }

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  template <typename Message>
  void SetFields(Message& res, std::string_view content_type,
                 const HeaderList& headers) {
    res.set(bhttp::field::content_type,
            beast::string_view(content_type.data(), content_type.size()));
    for (const auto& [name, value] : headers) res.set(name, value);
    res.keep_alive(keep_alive_);
  }

  // Runs `start(done)` on the strand under a write deadline and waits for
  // done(ok); a failure marks the connection failed.
  bool RunOnStrand(std::function<void(std::function<void(bool)>)> start) {
    if (failed_.load() || closed_.load()) return false;
    std::promise<bool> promise;
    std::future<bool> future = promise.get_future();
    net::post(stream_.get_executor(), [this, self = this->shared_from_this(),
                                       &promise, start = std::move(start)] {
      if (closed_.load()) {
        promise.set_value(false);
        return;
      }
      Lowest().expires_after(kWriteTimeout);
      start([this, &promise](bool ok) {
        Lowest().expires_never();
        if (!ok) failed_.store(true);
        promise.set_value(ok);
      });
    });
    return future.get();
  }

  const HttpLimits& limits() const { return transport_->options().limits; }

  void ReadHeader() {
    if (closed_.load()) return;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(limits().max_header_bytes, UINT32_MAX)));
    parser_->body_limit(limits().max_body_bytes);
    Lowest().expires_after(kHeaderDeadline);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
          self->OnHeader(ec);
        });
  }

  void OnHeader(const beast::error_code& ec) {
    if (closed_.load()) return;
    if (ec) {
      if (IsHttpError(ec)) {
        return Reply(ParserError(ec, parser_->get().base(), limits()));
      }
      return Close();  // gone, timed out or reset: nobody to answer
    }
    const auto& header = parser_->get();
    version_ = header.version();
    keep_alive_ = header.keep_alive();
    if (std::optional<HttpError> e = CheckHeader(header.base(), limits())) {
      return Reply(*e);
    }
    std::optional<std::string> path = DecodePath(
        std::string_view(header.target().data(), header.target().size()));
    if (!path.has_value()) {
      return Reply(HttpError{400, "bad_request",
                             "the request target has a bad percent escape"});
    }
    if (transport_->stopping()) {
      return Reply(
          HttpError{503, "unavailable", "the server is shutting down"});
    }
    // Admitted on the header's fields alone: trailers of a chunked body are
    // never taken for header fields.
    request_ = HttpRequest{.method = std::string(header.method_string()),
                           .path = *std::move(path),
                           .headers = HeaderFields(header.base())};
    Admission admission;
    try {
      admission = transport_->Admit(request_);
    } catch (const std::exception& e) {
      return Reply(HttpError{500, "internal", e.what()});
    }
    if (!admission.run) {
      // The unread body (if any) would be taken for the next request.
      if (!parser_->is_done()) keep_alive_ = false;
      return ReplyNow(admission.status, std::move(admission.body));
    }
    run_ = std::move(admission.run);
    if (parser_->is_done()) return Dispatch();
    const auto expect = header.find(bhttp::field::expect);
    if (expect != header.end() &&
        beast::iequals(expect->value(), "100-continue")) {
      auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(
          bhttp::status::continue_, version_);
      Lowest().expires_after(kWriteTimeout);
      bhttp::async_write(stream_, *cont,
                         [self = this->shared_from_this(), cont](
                             const beast::error_code& ec, size_t) {
                           if (ec) return self->Close();
                           self->ReadBody();
                         });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    Lowest().expires_after(kBodyDeadline);
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
          if (self->closed_.load()) return;
          if (ec) {
            if (IsHttpError(ec) || ec == bhttp::error::end_of_stream) {
              self->keep_alive_ = false;
              return self->Reply(ParserError(
                  ec == bhttp::error::end_of_stream
                      ? beast::error_code(bhttp::error::partial_message)
                      : ec,
                  self->parser_->get().base(), self->limits()));
            }
            return self->Close();
          }
          self->Dispatch();
        });
  }

  // The request is whole: its handler runs on a worker.
  void Dispatch() {
    Lowest().expires_never();
    bhttp::request<bhttp::string_body> message = parser_->release();
    parser_.reset();
    request_.body = std::move(message.body());
    responded_ = false;
    net::post(transport_->workers(),
              [self = this->shared_from_this(), header = message.base(),
               run = std::move(run_), request = std::move(request_)]() mutable {
                self->Work(header, run, request);
              });
  }

  // On a worker.
  void Work(const RequestHeader& header,
            const std::function<void(HttpRequest&, Responder&)>& run,
            HttpRequest& request) {
    if (std::optional<HttpError> e =
            DecodeBody(header, limits().max_body_bytes, request.body)) {
      keep_alive_ = false;
      Send(e->status, kJsonContentType, ErrorBody(*e), {});
    } else {
      try {
        run(request, *this);
      } catch (const std::exception& e) {
        if (!responded_) {
          Send(500, kJsonContentType,
               Dump(ErrorJson(absl::InternalError(e.what()))), {});
        }
        failed_.store(true);  // a stream may be cut mid-way
      } catch (...) {
        failed_.store(true);
      }
    }
    if (!responded_) {
      failed_.store(true);
      Send(500, kJsonContentType,
           Dump(ErrorJson(
               absl::InternalError("the handler ended without a response"))),
           {});
    }
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->closed_.load() || self->failed_.load() || !self->keep_alive_) {
        return self->Close();
      }
      self->ReadHeader();
    });
  }

  // An error answered on the strand; the connection closes after it.
  void Reply(const HttpError& e) {
    keep_alive_ = false;
    ReplyNow(e.status, ErrorBody(e));
  }

  void ReplyNow(int status, std::string body) {
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(status), version_);
    SetFields(*res, kJsonContentType, {});
    res->body() = std::move(body);
    res->prepare_payload();
    Lowest().expires_after(kWriteTimeout);
    bhttp::async_write(stream_, *res,
                       [self = this->shared_from_this(), res](
                           const beast::error_code& ec, size_t) {
                         if (ec) return self->Close();
                         if (!self->keep_alive_) return self->Linger();
                         self->ReadHeader();
                       });
  }

  // Closes after an answer sent before the request was read whole: our
  // side of the connection is shut, and what the client still sends is
  // read and dropped (kLingerTime, kLingerBytes), so that its unread bytes
  // do not make the kernel reset the connection before the client has
  // read the answer.
  void Linger() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().expires_after(kLingerTime);
    Drain(std::make_shared<std::array<char, 16384>>(), 0);
  }

  void Drain(std::shared_ptr<std::array<char, 16384>> scratch, size_t drained) {
    if (closed_.load()) return;
    Lowest().async_read_some(net::buffer(*scratch),
                             [self = this->shared_from_this(), scratch,
                              drained](const beast::error_code& ec, size_t n) {
                               if (ec || drained + n > kLingerBytes)
                                 return self->Close();
                               self->Drain(scratch, drained + n);
                             });
  }

  void Close() {
    if (closed_.exchange(true)) return;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  HttpTransport::Impl* const transport_;
  Stream stream_;
  int fd_ = -1;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest request_;
  std::function<void(HttpRequest&, Responder&)> run_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool responded_ = false;  // by the worker of the current request
  std::atomic<bool> closed_{false};
  std::atomic<bool> failed_{false};
};

}  // namespace

absl::Status HttpTransport::Impl::Init(int* port) {
  absl::StatusOr<HostPort> hp = ParseHostPort(options_.listen);
  if (!hp.ok()) return hp.status();
  const TlsOptions& tls = options_.tls;
  if (tls.enabled()) {
    ssl_.emplace(net::ssl::context::tls_server);
    beast::error_code ec;
    ssl_->set_options(
        net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
            net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
            net::ssl::context::no_tlsv1_1,
        ec);
    if (!ec) ssl_->use_certificate_chain_file(tls.cert_file, ec);
    if (!ec)
      ssl_->use_private_key_file(tls.key_file, net::ssl::context::pem, ec);
    if (!ec && !tls.client_ca_file.empty()) {
      ssl_->load_verify_file(tls.client_ca_file, ec);
      if (!ec) {
        ssl_->set_verify_mode(
            net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert, ec);
      }
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cannot serve HTTPS with --tls_cert=%s --tls_key=%s%s: %s",
          tls.cert_file, tls.key_file,
          tls.client_ca_file.empty()
              ? ""
              : absl::StrCat(" --tls_client_ca=", tls.client_ca_file),
          ec.message()));
    }
  }
  // An IPv6 address without its brackets.
  std::string host = hp->host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  beast::error_code ec;
  tcp::resolver resolver(ioc_);
  auto endpoints = resolver.resolve(host, std::to_string(hp->port),
                                    tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options_.listen, ": ",
        ec ? ec.message() : std::string("the host has no address")));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  // SO_REUSEADDR (a restart need not wait out TIME_WAIT) but never
  // SO_REUSEPORT: a second server on a taken port fails here.
  if (!acceptor_.open(endpoint.protocol(), ec) &&
      !acceptor_.set_option(net::socket_base::reuse_address(true), ec) &&
      !acceptor_.bind(endpoint, ec) &&
      !acceptor_.listen(net::socket_base::max_listen_connections, ec)) {
    *port = acceptor_.local_endpoint().port();
    RaiseFileLimit();
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", options_.listen, ": ", ec.message()));
}

void HttpTransport::Impl::Start() {
  net::post(acceptor_.get_executor(), [this] { Accept(); });
  const int n = std::max(1, options_.io_threads);
  for (int i = 0; i < n; ++i) {
    io_threads_.emplace_back([this] {
      // A handler that throws (none should) costs its connection, not the
      // I/O thread.
      while (true) {
        try {
          ioc_.run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "kvserve: HTTP I/O handler failed: %s\n",
                       e.what());
        }
      }
    });
  }
}

void HttpTransport::Impl::Accept() {
  acceptor_.async_accept(
      net::make_strand(ioc_),
      [this](const beast::error_code& ec, tcp::socket socket) {
        OnAccept(ec, std::move(socket));
      });
}

void HttpTransport::Impl::OnAccept(const beast::error_code& ec,
                                   tcp::socket socket) {
  if (stopping_.load() || !acceptor_.is_open()) return;
  if (ec) {
    // Out of descriptors: waiting lets finished connections free some.
    retry_.expires_after(kAcceptRetry);
    retry_.async_wait([this](const beast::error_code& wait_ec) {
      if (!wait_ec) Accept();
    });
    return;
  }
  if (open_connections() >= static_cast<size_t>(options_.max_connections)) {
    Refuse(std::move(socket));
    Accept();
    return;
  }
  std::shared_ptr<ConnectionBase> connection;
  if (ssl_.has_value()) {
    auto c =
        std::make_shared<Connection<true>>(this, std::move(socket), &*ssl_);
    connection = c;
  } else {
    auto c =
        std::make_shared<Connection<false>>(this, std::move(socket), nullptr);
    connection = c;
  }
  Register(connection.get(), connection);
  connection->Run();
  Accept();
}

// A connection past max_connections: a plain-text 503 (even on the HTTPS
// port, where a TLS client sees a failed handshake) and close.
void HttpTransport::Impl::Refuse(tcp::socket socket) {
  auto refused = std::make_shared<std::pair<tcp::socket, std::string>>(
      std::move(socket), std::string());
  if (!ssl_.has_value()) {
    const std::string body = ErrorBody(HttpError{
        503, "too_many_connections",
        absl::StrFormat("the server holds its limit of %d connections "
                        "(--http_max_connections); try again later",
                        options_.max_connections)});
    refused->second = absl::StrFormat(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: %s\r\n"
        "Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s",
        kJsonContentType, body.size(), body);
  }
  net::async_write(refused->first, net::buffer(refused->second),
                   [refused](const beast::error_code&, size_t) {
                     beast::error_code ignored;
                     refused->first.shutdown(tcp::socket::shutdown_both,
                                             ignored);
                     refused->first.close(ignored);
                   });
}

void HttpTransport::Impl::Stop() {
  stopping_.store(true);
  if (io_threads_.empty()) return;
  std::promise<void> closed;
  net::post(acceptor_.get_executor(), [this, &closed] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    retry_.cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  // Requests still running end (their generations were cancelled), their
  // last writes on I/O threads that still run.
  workers_.join();
  std::vector<std::shared_ptr<ConnectionBase>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [raw, weak] : connections_) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->PostClose();
  open.clear();
  guard_.reset();
  ioc_.stop();
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Create(
    const Options& options, AdmitFn admit) {
  auto impl = std::make_unique<Impl>(options, std::move(admit));
  int port = 0;
  if (absl::Status s = impl->Init(&port); !s.ok()) return s;
  std::unique_ptr<HttpTransport> t(new HttpTransport(std::move(impl)));
  t->port_ = port;
  return t;
}

HttpTransport::~HttpTransport() { Stop(); }

void HttpTransport::Start() { impl_->Start(); }

void HttpTransport::Stop() {
  if (stopped_) return;
  stopped_ = true;
  impl_->Stop();
}

}  // namespace kvserve::http
