// Fuzzes the HTTP framing (server/http/http_request.h) on raw request
// bytes, as the server reads them: request line and header limits,
// Content-Length and chunked bodies, gzip and deflate decoding, and what
// follows a request (pipelining). Promises checked: an error is 400, 413,
// 415 or 431 with a message; an accepted request's body, as decoded, never
// passes the limit.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "server/http/http_request.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::http;
  HttpLimits limits;
  limits.max_header_bytes = 2048;
  limits.max_header_fields = 16;
  limits.max_body_bytes = 4096;
  std::string_view wire(reinterpret_cast<const char*>(data), size);
  // The requests one after another, as a pipelining client sends them.
  for (int i = 0; i < 4 && !wire.empty(); ++i) {
    size_t used = 0;
    std::variant<HttpRequest, HttpError> r = Parse(wire, limits, &used);
    if (const auto* e = std::get_if<HttpError>(&r)) {
      FUZZ_CHECK(e->status == 400 || e->status == 413 || e->status == 415 ||
                     e->status == 431,
                 "status %d: %s", e->status, e->message.c_str());
      FUZZ_CHECK(!e->message.empty() && !e->code.empty(), "empty error");
      return 0;
    }
    const HttpRequest& request = std::get<HttpRequest>(r);
    FUZZ_CHECK(request.body.size() <= limits.max_body_bytes,
               "a body of %zu bytes passed the limit", request.body.size());
    FUZZ_CHECK(!request.method.empty(), "no method");
    FUZZ_CHECK(used > 0 && used <= wire.size(), "used %zu of %zu", used,
               wire.size());
    wire.remove_prefix(used);
  }
  return 0;
}
