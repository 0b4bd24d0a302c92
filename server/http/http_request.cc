#include "server/http/http_request.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/beast/core/buffers_to_string.hpp"
#include "boost/beast/http/parser.hpp"
#include "core/util/quote.h"

namespace kvserve::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

constexpr size_t kInflateChunk = size_t{64} << 10;

HttpError TooLarge(const HttpLimits& limits, std::string_view what) {
  return HttpError{
      413, "payload_too_large",
      absl::StrFormat("the request body %s more than the %d-byte limit", what,
                      limits.max_body_bytes)};
}

// The codings of a comma-separated field, lower case, without "identity".
std::vector<std::string> Codings(std::string_view field) {
  std::vector<std::string> out;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(field.data(), field.size()), ',')) {
    std::string coding = absl::AsciiStrToLower(absl::StripAsciiWhitespace(
        part.substr(0, std::min(part.size(), part.find(';')))));
    if (!coding.empty() && coding != "identity") out.push_back(coding);
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Inflates `in` into `out` (window_bits as zlib's inflateInit2 takes them),
// at most `max_bytes`. Z_STREAM_END, Z_BUF_ERROR (more output than
// max_bytes), or a zlib error.
int Inflate(std::string_view in, int window_bits, size_t max_bytes,
            std::string& out) {
  z_stream zs{};
  if (inflateInit2(&zs, window_bits) != Z_OK) return Z_MEM_ERROR;
  // Room for the whole limit up front: growing by doubling would copy and
  // could hold twice the limit. Pages not written are never resident.
  out.reserve(max_bytes + 1);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (out.size() > max_bytes) {
      rc = Z_BUF_ERROR;
      break;
    }
    // One byte past the limit tells a body of exactly max_bytes from a
    // longer one.
    const size_t room = std::min(kInflateChunk, max_bytes + 1 - out.size());
    const size_t before = out.size();
    out.resize(before + room);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    zs.avail_out = static_cast<uInt>(room);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(before + room - zs.avail_out);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) rc = Z_DATA_ERROR;  // cut off
    if (rc == Z_OK && out.size() > max_bytes) rc = Z_BUF_ERROR;
  }
  if (rc == Z_STREAM_END && zs.avail_in != 0) rc = Z_DATA_ERROR;  // trailing
  if (rc == Z_STREAM_END && out.size() > max_bytes) rc = Z_BUF_ERROR;
  inflateEnd(&zs);
  return rc;
}

}  // namespace

std::optional<std::string_view> HttpRequest::Header(
    std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key,
                               absl::string_view(name.data(), name.size()))) {
      return value;
    }
  }
  return std::nullopt;
}

HttpError ParserError(const beast::error_code& ec, const RequestHeader& header,
                      const HttpLimits& limits) {
  if (ec == bhttp::error::header_limit) {
    return HttpError{
        431, "header_too_large",
        absl::StrFormat("the request line and header fields exceed %d bytes",
                        limits.max_header_bytes)};
  }
  if (ec == bhttp::error::body_limit) {
    const auto length = header.find(bhttp::field::content_length);
    uint64_t declared = 0;
    if (length != header.end() &&
        absl::SimpleAtoi(
            absl::string_view(length->value().data(), length->value().size()),
            &declared)) {
      return TooLarge(limits, absl::StrFormat("is %d bytes,", declared));
    }
    return TooLarge(limits, "is");
  }
  if (ec == bhttp::error::bad_content_length) {
    return HttpError{400, "bad_request",
                     "Content-Length must be one non-negative number, given "
                     "once and not beside Transfer-Encoding"};
  }
  if (ec == bhttp::error::bad_transfer_encoding) {
    return HttpError{400, "bad_request",
                     "Transfer-Encoding may be given once, and not beside "
                     "Content-Length"};
  }
  if (ec == bhttp::error::partial_message) {
    return HttpError{400, "bad_request",
                     "the request ended before its body was complete"};
  }
  return HttpError{400, "bad_request",
                   absl::StrCat("malformed HTTP request: ", ec.message())};
}

std::optional<HttpError> CheckHeader(const RequestHeader& header,
                                     const HttpLimits& limits) {
  const size_t fields =
      static_cast<size_t>(std::distance(header.begin(), header.end()));
  if (fields > limits.max_header_fields) {
    return HttpError{431, "header_too_large",
                     absl::StrFormat("the request has %d header fields, more "
                                     "than the limit of %d",
                                     fields, limits.max_header_fields)};
  }
  const auto te = header.find(bhttp::field::transfer_encoding);
  if (te != header.end()) {
    std::vector<std::string> codings =
        Codings(std::string_view(te->value().data(), te->value().size()));
    if (codings.empty() || codings.back() != "chunked") {
      return HttpError{400, "bad_request",
                       "a request's Transfer-Encoding must end in chunked"};
    }
  }
  const auto ce = header.find(bhttp::field::content_encoding);
  if (ce != header.end()) {
    std::vector<std::string> codings =
        Codings(std::string_view(ce->value().data(), ce->value().size()));
    if (codings.size() > 1 ||
        (codings.size() == 1 && codings[0] != "gzip" &&
         codings[0] != "x-gzip" && codings[0] != "deflate")) {
      return HttpError{
          415, "unsupported_media_type",
          absl::StrCat("Content-Encoding ",
                       QuoteClientText(std::string_view(ce->value().data(),
                                                        ce->value().size())),
                       " is not supported (gzip, deflate or identity)")};
    }
  }
  return std::nullopt;
}

std::optional<HttpError> DecodeBody(const RequestHeader& header,
                                    size_t max_bytes, std::string& body) {
  const auto ce = header.find(bhttp::field::content_encoding);
  if (ce == header.end()) return std::nullopt;
  std::vector<std::string> codings =
      Codings(std::string_view(ce->value().data(), ce->value().size()));
  if (codings.empty()) return std::nullopt;
  const bool gzip = codings[0] != "deflate";
  std::string out;
  // deflate is zlib-wrapped (RFC 9110 8.4.1.2); some clients send it raw.
  int rc = Inflate(body, gzip ? 16 + MAX_WBITS : MAX_WBITS, max_bytes, out);
  if (!gzip && rc == Z_DATA_ERROR) {
    out.clear();
    rc = Inflate(body, -MAX_WBITS, max_bytes, out);
  }
  if (rc == Z_BUF_ERROR) {
    HttpLimits limits;
    limits.max_body_bytes = max_bytes;
    return TooLarge(limits, absl::StrCat("decoded (", codings[0], ") is"));
  }
  if (rc != Z_STREAM_END) {
    return HttpError{
        400, "bad_request",
        absl::StrCat("the request body is not valid ", codings[0], " data")};
  }
  body = std::move(out);
  return std::nullopt;
}

std::optional<std::string> DecodePath(std::string_view target) {
  target = target.substr(0, std::min(target.size(), target.find('?')));
  std::string out;
  out.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] != '%') {
      out.push_back(target[i]);
      continue;
    }
    if (i + 2 >= target.size()) return std::nullopt;
    const int hi = HexValue(target[i + 1]);
    const int lo = HexValue(target[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> HeaderFields(
    const RequestHeader& header) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (const auto& field : header) {
    fields.emplace_back(
        absl::AsciiStrToLower(absl::string_view(field.name_string().data(),
                                                field.name_string().size())),
        std::string(field.value()));
  }
  return fields;
}

HttpRequest ToHttpRequest(bhttp::request<bhttp::string_body>&& message,
                          std::string path) {
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.path = std::move(path);
  request.headers = HeaderFields(message.base());
  request.body = std::move(message.body());
  return request;
}

std::variant<HttpRequest, HttpError> Parse(std::string_view wire,
                                           const HttpLimits& limits,
                                           size_t* used_bytes) {
  const size_t size = wire.size();
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  parser.body_limit(limits.max_body_bytes);
  parser.eager(false);
  // Feeds `wire` to the parser until done(); `cut_off` answers a request
  // that ends first (need_more with nothing left, or nothing consumed).
  auto feed = [&](auto done,
                  const HttpError& cut_off) -> std::optional<HttpError> {
    beast::error_code ec;
    while (!done()) {
      const size_t used =
          parser.put(boost::asio::buffer(wire.data(), wire.size()), ec);
      wire.remove_prefix(used);
      if (ec == bhttp::error::need_more) {
        if (wire.empty() || used == 0) return cut_off;
        continue;
      }
      if (ec) return ParserError(ec, parser.get().base(), limits);
      if (used == 0 && !done()) {
        return HttpError{400, "bad_request", "the parser made no progress"};
      }
    }
    return std::nullopt;
  };
  // The header first, as the server reads it, then the body.
  if (std::optional<HttpError> e =
          feed([&] { return parser.is_header_done(); },
               HttpError{400, "bad_request",
                         "the request ended inside its header"})) {
    return *e;
  }
  if (std::optional<HttpError> e = CheckHeader(parser.get().base(), limits)) {
    return *e;
  }
  parser.eager(true);
  if (std::optional<HttpError> e =
          feed([&] { return parser.is_done(); },
               ParserError(bhttp::error::partial_message, parser.get().base(),
                           limits))) {
    return *e;
  }
  if (used_bytes != nullptr) *used_bytes = size - wire.size();
  bhttp::request<bhttp::string_body> message = parser.release();
  if (std::optional<HttpError> e =
          DecodeBody(message.base(), limits.max_body_bytes, message.body())) {
    return *e;
  }
  std::optional<std::string> path = DecodePath(
      std::string_view(message.target().data(), message.target().size()));
  if (!path.has_value()) {
    return HttpError{400, "bad_request",
                     "the request target has a bad percent escape"};
  }
  return ToHttpRequest(std::move(message), *std::move(path));
}

}  // namespace kvserve::http
