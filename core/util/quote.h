// How text a client sent is shown in a status message: quoted, escaped and
// cut short, whichever layer writes the message.
#ifndef KVSERVE_CORE_UTIL_QUOTE_H_
#define KVSERVE_CORE_UTIL_QUOTE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace kvserve {

// The most bytes of client input a status message repeats: a message is
// sent as metadata, and a long one would turn the answer into
// RESOURCE_EXHAUSTED ("metadata size exceeds limit").
inline constexpr size_t kMaxQuotedClientBytes = 64;

// `text` as an error message shows it: in double quotes, its first
// kMaxQuotedClientBytes bytes C-escaped (absl::CHexEscape, so the result is
// printable ASCII), then "…" if it was longer.
std::string QuoteClientText(std::string_view text);

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_QUOTE_H_
