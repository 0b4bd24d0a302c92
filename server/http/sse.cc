#include "server/http/sse.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::http {

std::string SseEvent(const Json& json) {
  // Dump() never emits a raw newline: JSON escapes them inside strings.
  return absl::StrCat("data: ", Dump(json), "\n\n");
}

}  // namespace kvserve::http
