// Server-sent events as OpenAI streams them: each event one
// "data: <json>\n\n", the stream ending with "data: [DONE]\n\n".
#ifndef KVSERVE_SERVER_HTTP_SSE_H_
#define KVSERVE_SERVER_HTTP_SSE_H_

#include <string>

#include "server/http/openai_json.h"

namespace kvserve::http {

inline constexpr char kSseContentType[] = "text/event-stream";
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// One event carrying `json` (serialized on one line, so the event has one
// data line).
std::string SseEvent(const Json& json);

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_SSE_H_
