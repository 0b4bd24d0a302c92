#include "core/util/quote.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

std::string QuoteClientText(std::string_view text) {
  const bool truncated = text.size() > kMaxQuotedClientBytes;
  const std::string_view shown = text.substr(0, kMaxQuotedClientBytes);
  return absl::StrCat("\"", absl::CHexEscape({shown.data(), shown.size()}),
                      truncated ? "…" : "", "\"");
}

}  // namespace kvserve
