// The HTTP framing rules (server/http/http_request.h) on whole requests in
// memory: header count and size, request smuggling, body limits that hold
// for chunked and compressed bodies, and the decoding of gzip and deflate.
#include "server/http/http_request.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvserve::http {
namespace {

HttpLimits SmallLimits() {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  return limits;
}

// The error Parse answers, failing the test when it accepts the request.
HttpError ErrorOf(std::string_view wire, const HttpLimits& limits) {
  std::variant<HttpRequest, HttpError> r = Parse(wire, limits);
  if (auto* e = std::get_if<HttpError>(&r)) return *e;
  ADD_FAILURE() << "accepted: " << wire.substr(0, 200);
  return HttpError{0, "", ""};
}

HttpRequest RequestOf(std::string_view wire, const HttpLimits& limits) {
  std::variant<HttpRequest, HttpError> r = Parse(wire, limits);
  if (auto* e = std::get_if<HttpError>(&r)) {
    ADD_FAILURE() << e->status << " " << e->message;
    return HttpRequest{};
  }
  return std::get<HttpRequest>(std::move(r));
}

// `data` compressed by zlib: window_bits 16 + 15 is gzip, 15 zlib, -15 raw.
std::string Compress(std::string_view data, int window_bits) {
  z_stream zs{};
  EXPECT_EQ(
      deflateInit2(&zs, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY),
      Z_OK);
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Post(absl::string_view extra_headers, absl::string_view body) {
  return absl::StrCat("POST /tokenize HTTP/1.1\r\nHost: x\r\n", extra_headers,
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

std::string Chunked(absl::string_view extra_headers, size_t chunks,
                    size_t chunk_size) {
  std::string wire =
      absl::StrCat("POST /tokenize HTTP/1.1\r\nHost: x\r\n", extra_headers,
                   "Transfer-Encoding: chunked\r\n\r\n");
  for (size_t i = 0; i < chunks; ++i) {
    absl::StrAppend(&wire, absl::Hex(chunk_size), "\r\n",
                    std::string(chunk_size, 'a'), "\r\n");
  }
  absl::StrAppend(&wire, "0\r\n\r\n");
  return wire;
}

TEST(HttpRequestTest, APlainRequestParses) {
  const HttpRequest r =
      RequestOf(Post("Authorization: Bearer k\r\n", "{\"a\":1}"), HttpLimits{});
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/tokenize");
  EXPECT_EQ(r.body, "{\"a\":1}");
  EXPECT_EQ(r.Header("AUTHORIZATION").value_or(""), "Bearer k");
  EXPECT_FALSE(r.Header("x-session-id").has_value());
}

TEST(HttpRequestTest, ThePathIsDecodedWithoutItsQuery) {
  const HttpRequest r = RequestOf(
      "DELETE /sessions/a%2Fb?x=1 HTTP/1.1\r\nHost: x\r\n\r\n", HttpLimits{});
  EXPECT_EQ(r.path, "/sessions/a/b");
  EXPECT_EQ(DecodePath("/a%zz"), std::nullopt);
  EXPECT_EQ(DecodePath("/a%2"), std::nullopt);
  EXPECT_EQ(DecodePath("/a%41"), "/aA");
}

TEST(HttpRequestTest, TooManyHeaderFieldsAre431) {
  std::string fields;
  for (int i = 0; i < 101; ++i) absl::StrAppend(&fields, "X-", i, ": y\r\n");
  const HttpError e = ErrorOf(Post(fields, "{}"), HttpLimits{});
  EXPECT_EQ(e.status, 431);
  // Host, the 101 and Content-Length.
  EXPECT_TRUE(absl::StrContains(e.message, "103 header fields")) << e.message;
  // 100 are fine (Host is one of them).
  fields.clear();
  for (int i = 0; i < 99; ++i) absl::StrAppend(&fields, "X-", i, ": y\r\n");
  EXPECT_EQ(
      RequestOf(absl::StrCat("GET / HTTP/1.1\r\nHost: x\r\n", fields, "\r\n"),
                HttpLimits{})
          .method,
      "GET");
}

TEST(HttpRequestTest, TwoHundredThousandHeaderLinesAre431) {
  std::string fields;
  for (int i = 0; i < 200000; ++i) fields += "a:\r\n";
  const HttpError e = ErrorOf(Post(fields, "{}"), HttpLimits{});
  EXPECT_EQ(e.status, 431);
  EXPECT_EQ(e.code, "header_too_large");
}

TEST(HttpRequestTest, SmugglingShapesAre400) {
  const HttpLimits limits;
  EXPECT_EQ(
      ErrorOf("POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", limits).status,
      400);
  EXPECT_EQ(ErrorOf("POST / HTTP/1.1\r\nContent-Length: 5\r\n"
                    "Content-Length: 6\r\n\r\nabcdef",
                    limits)
                .status,
            400);
  EXPECT_EQ(ErrorOf("POST / HTTP/1.1\r\nContent-Length: 5\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                    limits)
                .status,
            400);
  EXPECT_EQ(ErrorOf("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                    "Content-Length: 5\r\n\r\n0\r\n\r\n",
                    limits)
                .status,
            400);
  EXPECT_EQ(
      ErrorOf("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nab", limits)
          .status,
      400);
  EXPECT_EQ(ErrorOf("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                    limits)
                .status,
            400);
  // The same length twice is one length.
  EXPECT_EQ(RequestOf("POST / HTTP/1.1\r\nContent-Length: 2\r\n"
                      "Content-Length: 2\r\n\r\nab",
                      limits)
                .body,
            "ab");
}

TEST(HttpRequestTest, ADeclaredBodyOverTheLimitIs413WithItsSize) {
  const HttpError e =
      ErrorOf("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", SmallLimits());
  EXPECT_EQ(e.status, 413);
  EXPECT_EQ(e.code, "payload_too_large");
  EXPECT_EQ(e.message,
            "the request body is 1001 bytes, more than the 1000-byte limit");
  EXPECT_EQ(
      RequestOf(Post("", std::string(1000, 'a')), SmallLimits()).body.size(),
      1000u);
}

TEST(HttpRequestTest, AChunkedBodyOverTheLimitIs413) {
  EXPECT_EQ(ErrorOf(Chunked("", 11, 100), SmallLimits()).status, 413);
  EXPECT_EQ(RequestOf(Chunked("", 10, 100), SmallLimits()).body,
            std::string(1000, 'a'));
}

TEST(HttpRequestTest, GzipAndDeflateBodiesAreDecoded) {
  const std::string json = "{\"content\": \"hello hello hello\"}";
  EXPECT_EQ(RequestOf(Post("Content-Encoding: gzip\r\n",
                           Compress(json, 16 + MAX_WBITS)),
                      HttpLimits{})
                .body,
            json);
  EXPECT_EQ(RequestOf(Post("Content-Encoding: deflate\r\n",
                           Compress(json, MAX_WBITS)),
                      HttpLimits{})
                .body,
            json);
  EXPECT_EQ(RequestOf(Post("Content-Encoding: deflate\r\n",
                           Compress(json, -MAX_WBITS)),
                      HttpLimits{})
                .body,
            json);
  EXPECT_EQ(
      RequestOf(Post("Content-Encoding: identity\r\n", json), HttpLimits{})
          .body,
      json);
}

TEST(HttpRequestTest, AGzipBombIs413) {
  // 200 MB of zeros in ~200 KB; the limit is 8 MiB decoded.
  const std::string bomb =
      Compress(std::string(size_t{200} << 20, '\0'), 16 + MAX_WBITS);
  ASSERT_LT(bomb.size(), size_t{1} << 20);
  const HttpError e =
      ErrorOf(Post("Content-Encoding: gzip\r\n", bomb), HttpLimits{});
  EXPECT_EQ(e.status, 413);
  EXPECT_TRUE(absl::StrContains(e.message, "decoded")) << e.message;
  // Exactly at the limit is fine.
  HttpLimits limits = SmallLimits();
  EXPECT_EQ(RequestOf(Post("Content-Encoding: gzip\r\n",
                           Compress(std::string(1000, 'z'), 16 + MAX_WBITS)),
                      limits)
                .body.size(),
            1000u);
  EXPECT_EQ(ErrorOf(Post("Content-Encoding: gzip\r\n",
                         Compress(std::string(1001, 'z'), 16 + MAX_WBITS)),
                    limits)
                .status,
            413);
}

TEST(HttpRequestTest, BadOrUnknownEncodingsAreRefused) {
  EXPECT_EQ(
      ErrorOf(Post("Content-Encoding: br\r\n", "xx"), HttpLimits{}).status,
      415);
  EXPECT_EQ(
      ErrorOf(Post("Content-Encoding: gzip, gzip\r\n", "xx"), HttpLimits{})
          .status,
      415);
  EXPECT_EQ(ErrorOf(Post("Content-Encoding: gzip\r\n", "not gzip at all"),
                    HttpLimits{})
                .status,
            400);
  // Cut off mid-stream.
  const std::string gz = Compress(std::string(5000, 'q'), 16 + MAX_WBITS);
  EXPECT_EQ(ErrorOf(Post("Content-Encoding: gzip\r\n", gz.substr(0, 10)),
                    HttpLimits{})
                .status,
            400);
}

TEST(HttpRequestTest, TruncatedRequestsAre400) {
  EXPECT_EQ(ErrorOf("POST / HTTP/1.1\r\nContent-Le", HttpLimits{}).status, 400);
  EXPECT_EQ(
      ErrorOf("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", HttpLimits{})
          .status,
      400);
  EXPECT_EQ(ErrorOf("NOT HTTP AT ALL\r\n\r\n", HttpLimits{}).status, 400);
}

}  // namespace
}  // namespace kvserve::http
