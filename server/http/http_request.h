// The HTTP API's request framing, apart from its sockets: the limits a
// request header and body must keep, the checks made on a parsed header
// before any handler (or authentication) runs, and the bounded decoding of
// a gzip or deflate body. HttpServer applies them while it reads; Parse()
// applies them to a whole request in memory (tests, the fuzzers).
//
// Request smuggling: Boost.Beast's parser already refuses differing
// Content-Length values, Content-Length beside Transfer-Encoding and a
// Content-Length that is not a number; CheckHeader refuses a
// Transfer-Encoding whose last coding is not chunked, which leaves a
// request's length undefined (RFC 9112 6.1).
#ifndef KVSERVE_SERVER_HTTP_HTTP_REQUEST_H_
#define KVSERVE_SERVER_HTTP_HTTP_REQUEST_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "boost/beast/http/error.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/string_body.hpp"

namespace kvserve::http {

struct HttpLimits {
  // The request line and header fields, in bytes; beyond it 431.
  size_t max_header_bytes = size_t{32} << 10;
  // Header fields; beyond it 431 (200,000 one-byte lines fit in no limit
  // worth having on bytes alone).
  size_t max_header_fields = 100;
  // The body as read (Content-Length or the sum of its chunks) and, when
  // compressed, as decoded; beyond it 413.
  size_t max_body_bytes = size_t{8} << 20;
};

// An answer the framing gives itself, before any handler runs.
struct HttpError {
  int status = 400;
  std::string code;  // the OpenAI error object's `code`
  std::string message;
};

using RequestHeader = boost::beast::http::request_header<>;

// A request as the handlers see it.
struct HttpRequest {
  std::string method{};  // "GET"
  std::string path{};    // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> headers{};  // names lower
  std::string body{};  // decoded (Content-Encoding undone)

  // The first field named `name` (any case), if any.
  std::optional<std::string_view> Header(std::string_view name) const;
};

// The answer for a parser failure while reading the header or the body:
// 431 for header_limit, 413 for body_limit (naming the declared length when
// there is one), else 400 naming what was malformed. `header` is what was
// parsed so far.
HttpError ParserError(const boost::beast::error_code& ec,
                      const RequestHeader& header, const HttpLimits& limits);

// Checks of a complete header, before the body is read: the field count
// (431), a Transfer-Encoding not ending in chunked (400) and a
// Content-Encoding other than identity, gzip or deflate (415).
std::optional<HttpError> CheckHeader(const RequestHeader& header,
                                     const HttpLimits& limits);

// Undoes the header's Content-Encoding (gzip or deflate; identity or none:
// unchanged) in place, stopping with 413 once the output would pass
// `max_bytes`, and 400 for data that does not decode.
std::optional<HttpError> DecodeBody(const RequestHeader& header,
                                    size_t max_bytes, std::string& body);

// The path of a request target, percent-decoded and without its query;
// nullopt for a bad escape.
std::optional<std::string> DecodePath(std::string_view target);

// The header's fields, names in lower case, in order.
std::vector<std::pair<std::string, std::string>> HeaderFields(
    const RequestHeader& header);

// The HttpRequest of a parsed message (the body already decoded).
HttpRequest ToHttpRequest(
    boost::beast::http::request<boost::beast::http::string_body>&& message,
    std::string path);

// One whole request in `wire`, with every check and limit above: its
// HttpRequest, or the error the server would answer. Bytes after the
// request (a pipelined next one) are left; `used`, if given, is set to the
// request's size.
std::variant<HttpRequest, HttpError> Parse(std::string_view wire,
                                           const HttpLimits& limits,
                                           size_t* used = nullptr);

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_HTTP_REQUEST_H_
