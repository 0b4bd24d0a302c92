// Python's str methods over UTF-8 (code points, Python's whitespace and
// line boundaries), for the Jinja interpreter's filters and methods.
#ifndef KVSERVE_CORE_CHAT_JINJA_STRINGS_H_
#define KVSERVE_CORE_CHAT_JINJA_STRINGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::jinja {

// str.strip/lstrip/rstrip; `chars` nullopt: whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right);
// str.split / str.rsplit; `sep` nullopt: runs of whitespace. REQUIRES: sep
// not empty. maxsplit < 0: no limit.
std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right);
// str.splitlines.
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);
// str.replace; count < 0: all. The result's size is checked by the caller
// through `max_bytes` (nullopt when it would exceed it).
std::optional<std::string> PyReplace(std::string_view s, std::string_view old,
                                     std::string_view replacement,
                                     int64_t count, size_t max_bytes);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title
std::string PyCapitalize(std::string_view s);  // str.capitalize
std::string PySwapCase(std::string_view s);
// jinja2's title filter (words start after [-\s({\[<]).
std::string JinjaTitle(std::string_view s);
// markupsafe.escape.
std::string HtmlEscape(std::string_view s);
// Code point index of the first/last `sub` in s[start:end], or -1.
int64_t PyFind(std::string_view s, std::string_view sub, int64_t start,
               int64_t end, bool from_right);
int64_t PyCount(std::string_view s, std::string_view sub, int64_t start,
                int64_t end);
// Python's int(s, base) for 64-bit results; nullopt when invalid or out of
// range.
std::optional<int64_t> PyParseInt(std::string_view s, int base);
// Python's float(s); nullopt when invalid.
std::optional<double> PyParseFloat(std::string_view s);
// Python's str.islower/isupper.
bool PyIsLower(std::string_view s);
bool PyIsUpper(std::string_view s);
// Count of \w+ runs (jinja's wordcount).
int64_t WordCount(std::string_view s);

}  // namespace kvserve::jinja

#endif  // KVSERVE_CORE_CHAT_JINJA_STRINGS_H_
