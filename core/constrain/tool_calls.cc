#include "core/constrain/tool_calls.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/util/json_depth.h"
#include "core/util/quote.h"
#include "nlohmann/json.hpp"

namespace kvserve::constrain {
namespace {

constexpr size_t npos = std::string_view::npos;

bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t SkipWs(std::string_view t, size_t p) {
  while (p < t.size() && IsWs(t[p])) ++p;
  return p;
}

// (Debian's Abseil takes absl::string_view, not std::string_view.)
bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != npos;
}
std::string_view StripLeading(std::string_view s) {
  return s.substr(std::min(SkipWs(s, 0), s.size()));
}
std::string_view StripTrailing(std::string_view s) {
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view Strip(std::string_view s) {
  return StripTrailing(StripLeading(s));
}

// The length of the longest suffix of `t` that is a proper prefix of
// `word` (what may still become `word`).
size_t HeldSuffix(std::string_view t, std::string_view word) {
  for (size_t n = std::min(t.size(), word.size() - 1); n > 0; --n) {
    if (t.substr(t.size() - n) == word.substr(0, n)) return n;
  }
  return 0;
}

// --- JSON, read lexically as far as it is written --------------------------

enum class Scan { kComplete, kIncomplete, kInvalid };

// A string starting at t[p] == '"': its end (past the closing quote).
Scan ScanString(std::string_view t, size_t p, size_t& end) {
  for (size_t i = p + 1; i < t.size(); ++i) {
    if (t[i] == '\\') {
      ++i;
    } else if (t[i] == '"') {
      end = i + 1;
      return Scan::kComplete;
    } else if (static_cast<unsigned char>(t[i]) < 0x20) {
      end = i;
      return Scan::kInvalid;
    }
  }
  end = t.size();
  return Scan::kIncomplete;
}

// A JSON value starting at t[p] (not whitespace): its end (kInvalid: where
// it went wrong, so that [p, end) is what every shorter text read as the
// value too). Brackets and strings are matched, scalars read to the next
// delimiter; the value is not
// validated beyond that (its consumer parses it).
Scan ScanValue(std::string_view t, size_t p, size_t& end) {
  end = t.size();
  if (p >= t.size()) return Scan::kIncomplete;
  const char c = t[p];
  if (c == '"') return ScanString(t, p, end);
  if (c == '{' || c == '[') {
    std::vector<char> open;
    for (size_t i = p; i < t.size(); ++i) {
      const char d = t[i];
      if (d == '"') {
        size_t s;
        const Scan r = ScanString(t, i, s);
        if (r != Scan::kComplete) {
          end = s;
          return r;
        }
        i = s - 1;
      } else if (d == '{' || d == '[') {
        open.push_back(d == '{' ? '}' : ']');
      } else if (d == '}' || d == ']') {
        if (open.empty() || open.back() != d) {
          end = i;
          return Scan::kInvalid;
        }
        open.pop_back();
        if (open.empty()) {
          end = i + 1;
          return Scan::kComplete;
        }
      }
    }
    return Scan::kIncomplete;
  }
  size_t i = p;
  while (i < t.size() &&
         (absl::ascii_isalnum(static_cast<unsigned char>(t[i])) ||
          t[i] == '-' || t[i] == '+' || t[i] == '.')) {
    ++i;
  }
  end = i;
  if (i == p) return Scan::kInvalid;
  return i == t.size() ? Scan::kIncomplete : Scan::kComplete;
}

// The content of a complete JSON string literal; nullopt if malformed.
std::optional<std::string> DecodeString(std::string_view literal) {
  nlohmann::json j = nlohmann::json::parse(literal, nullptr, false);
  if (!j.is_string()) return std::nullopt;
  return j.get<std::string>();
}

std::string Quoted(std::string_view s) {
  std::string q = "\"";
  q.append(s.data(), s.size());
  q.push_back('"');
  return q;
}

// The content of a JSON string literal written as far as t's end (no
// closing quote yet): every complete character and escape.
std::string DecodePartialString(std::string_view t, size_t p) {
  std::string out;
  size_t i = p + 1;
  while (i < t.size()) {
    if (t[i] != '\\') {
      out.push_back(t[i++]);
      continue;
    }
    // An escape: decoded when whole (\uD83D\uDE00 as one).
    size_t n = 2;
    if (i + 1 < t.size() && t[i + 1] == 'u') {
      n = 6;
      if (i + 6 <= t.size() && (t[i + 2] == 'd' || t[i + 2] == 'D') &&
          std::string_view("89abAB").find(t[i + 3]) != npos) {
        n = 12;
      }
    }
    if (i + n > t.size()) break;
    std::optional<std::string> s = DecodeString(Quoted(t.substr(i, n)));
    if (!s.has_value()) break;
    out += *s;
    i += n;
  }
  return out;
}

// One call object as far as written: {"name": ..., "arguments": ..., ...}
// under any of the names below.
struct CallObject {
  Scan state = Scan::kIncomplete;
  size_t end = 0;
  bool first_key_read = false;
  bool first_key_is_call = false;  // name, type or function
  std::optional<std::string> name;
  std::string id;
  // The arguments' JSON text so far; nullopt: not begun.
  std::optional<std::string> arguments;
  bool arguments_complete = false;
};

bool IsNameKey(std::string_view k) { return k == "name" || k == "tool_name"; }
bool IsArgumentsKey(std::string_view k) {
  return k == "arguments" || k == "parameters";
}
bool IsIdKey(std::string_view k) { return k == "id" || k == "tool_call_id"; }

CallObject ScanCallObject(std::string_view t, size_t p) {
  CallObject o;
  o.end = t.size();
  if (p >= t.size()) return o;
  if (t[p] != '{') {
    o.state = Scan::kInvalid;
    return o;
  }
  size_t i = p + 1;
  bool first = true;
  while (true) {
    i = SkipWs(t, i);
    if (i >= t.size()) return o;
    if (t[i] == '}' && first) {
      o.state = Scan::kComplete;
      o.end = i + 1;
      return o;
    }
    if (t[i] != '"') {
      o.state = Scan::kInvalid;
      return o;
    }
    size_t key_end;
    const Scan k = ScanString(t, i, key_end);
    if (k != Scan::kComplete) {
      o.state = k;
      return o;
    }
    const std::optional<std::string> key =
        DecodeString(t.substr(i, key_end - i));
    if (!key.has_value()) {
      o.state = Scan::kInvalid;
      return o;
    }
    if (first) {
      o.first_key_read = true;
      o.first_key_is_call =
          IsNameKey(*key) || *key == "type" || *key == "function";
    }
    first = false;
    i = SkipWs(t, key_end);
    if (i >= t.size()) return o;
    if (t[i] != ':') {
      o.state = Scan::kInvalid;
      return o;
    }
    i = SkipWs(t, i + 1);
    if (i >= t.size()) {
      if (IsArgumentsKey(*key)) o.arguments = "";
      return o;
    }
    size_t value_end;
    const Scan v = ScanValue(t, i, value_end);
    if (v == Scan::kInvalid) {
      // Arguments stay as far as they were read while the text was shorter
      // (a string's content only once whole).
      if (IsArgumentsKey(*key) && !o.arguments_complete) {
        o.arguments =
            t[i] == '"' ? "" : std::string(t.substr(i, value_end - i));
      }
      o.state = Scan::kInvalid;
      return o;
    }
    const std::string_view value = t.substr(i, value_end - i);
    const bool complete = v == Scan::kComplete;
    // A key written twice counts the first time (what was streamed stays).
    if (IsArgumentsKey(*key) && o.arguments_complete) {
      // Read under an earlier key.
    } else if (IsArgumentsKey(*key)) {
      if (value[0] == '"') {
        // Arguments written as a JSON string: its content, once whole.
        std::optional<std::string> s;
        if (complete) s = DecodeString(value);
        o.arguments = s.value_or("");
      } else {
        o.arguments = std::string(value);
      }
      o.arguments_complete = complete;
    } else if (complete && (IsNameKey(*key) || IsIdKey(*key))) {
      std::optional<std::string> s = DecodeString(value);
      if (IsNameKey(*key)) {
        if (!o.name.has_value()) o.name = s;
      } else if (o.id.empty()) {
        // An id may be a number.
        o.id = s.has_value() ? *s : std::string(value);
      }
    }
    if (!complete) return o;
    i = SkipWs(t, value_end);
    if (i >= t.size()) return o;
    if (t[i] == '}') {
      o.state = Scan::kComplete;
      o.end = i + 1;
      return o;
    }
    if (t[i] != ',') {
      o.state = Scan::kInvalid;
      return o;
    }
    ++i;
  }
}

// --- The reply --------------------------------------------------------------

// A run of calls read at one place of the reply.
struct Block {
  Scan state = Scan::kIncomplete;
  size_t end = 0;  // where the reply goes on (kComplete)
  std::vector<ToolCall> calls;
  // An object whose first key says it is no call ({"answer": ...}).
  bool not_a_call_object = false;
};

// Adds `o` to the block when it is a call (its name is known).
bool AddCall(const CallObject& o, Block& b) {
  if (!o.name.has_value()) return false;
  ToolCall c;
  c.id = o.id;
  c.name = *o.name;
  c.arguments = o.arguments.value_or("");
  if (o.state == Scan::kComplete && !o.arguments.has_value()) {
    c.arguments = "{}";
  }
  b.calls.push_back(std::move(c));
  return true;
}

// Expects `word` at t[p] (after whitespace): its end; npos when t ends
// first (on a prefix of it); `bad` set when something else is there.
size_t Expect(std::string_view t, size_t p, std::string_view word, bool& bad) {
  p = SkipWs(t, p);
  const std::string_view rest = t.substr(std::min(p, t.size()));
  if (rest.starts_with(word)) return p + word.size();
  if (!word.starts_with(rest)) bad = true;
  return npos;
}

// A complete block is followed by `closer` (none when empty): past it, or
// incomplete while the text ends on a prefix of it (anything else there
// is text after the block).
void ReadCloser(std::string_view t, std::string_view closer, Block& b) {
  if (closer.empty()) return;
  bool bad = false;
  const size_t e = Expect(t, b.end, closer, bad);
  if (e != npos) {
    b.end = e;
  } else if (!bad) {
    b.state = Scan::kIncomplete;
  }
}

// One object: a call, then `closer` (may be empty).
Block ObjectBlock(std::string_view t, size_t p, std::string_view closer) {
  Block b;
  p = SkipWs(t, p);
  const CallObject o = ScanCallObject(t, p);
  const bool is_call = AddCall(o, b);
  b.not_a_call_object = o.first_key_read && !o.first_key_is_call;
  if (o.state != Scan::kComplete) {
    b.state = o.state == Scan::kInvalid && !is_call ? Scan::kInvalid
                                                    : Scan::kIncomplete;
    if (o.state == Scan::kInvalid && is_call) {
      b.state = Scan::kComplete;  // a named call stands; the rest is text
      b.end = o.end;
    }
    return b;
  }
  if (!is_call) {
    b.state = Scan::kInvalid;
    return b;
  }
  b.end = o.end;
  b.state = Scan::kComplete;
  ReadCloser(t, closer, b);
  return b;
}

// A JSON array of call objects, then `closer` (may be empty).
Block ArrayBlock(std::string_view t, size_t p, std::string_view closer) {
  Block b;
  p = SkipWs(t, p);
  if (p >= t.size()) return b;
  if (t[p] != '[') {
    b.state = Scan::kInvalid;
    return b;
  }
  size_t i = p + 1;
  while (true) {
    i = SkipWs(t, i);
    if (i >= t.size()) return b;
    if (t[i] == ']' && b.calls.empty()) break;
    const CallObject o = ScanCallObject(t, i);
    const bool is_call = AddCall(o, b);
    if (o.state == Scan::kIncomplete) return b;
    if (o.state == Scan::kInvalid || !is_call) {
      b.state = b.calls.empty() ? Scan::kInvalid : Scan::kComplete;
      b.end = o.end;
      return b;
    }
    i = SkipWs(t, o.end);
    if (i >= t.size()) return b;
    if (t[i] == ',') {
      ++i;
      continue;
    }
    if (t[i] != ']') {
      b.state = Scan::kComplete;
      b.end = i;
      return b;
    }
    break;
  }
  b.end = i + 1;
  b.state = Scan::kComplete;
  ReadCloser(t, closer, b);
  return b;
}

std::string JsonQuoted(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Llama 3's <|python_tag|>: JSON calls, NAME.call(key="value", ...) for a
// built-in tool, or else code for the interpreter ("python", {"code"}).
Block PythonTagBlock(std::string_view t, size_t p, bool partial) {
  p = SkipWs(t, p);
  if (p >= t.size()) return Block{};
  if (t[p] == '{') return ObjectBlock(t, p, "");
  size_t i = p;
  while (
      i < t.size() &&
      (absl::ascii_isalnum(static_cast<unsigned char>(t[i])) || t[i] == '_')) {
    ++i;
  }
  constexpr std::string_view kCall = ".call(";
  const std::string_view after = t.substr(i);
  Block b;
  if (i > p && after.starts_with(kCall)) {
    ToolCall c;
    c.name = std::string(t.substr(p, i - p));
    const size_t close = t.find(')', i + kCall.size());
    if (close == npos) {
      b.calls.push_back(std::move(c));
      return b;
    }
    // key="value" or key=value pairs.
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    std::string_view list =
        t.substr(i + kCall.size(), close - i - kCall.size());
    while (!list.empty()) {
      const size_t comma = std::min(list.find(','), list.size());
      const std::string_view pair = list.substr(0, comma);
      list.remove_prefix(std::min(comma + 1, list.size()));
      const size_t eq = pair.find('=');
      if (eq == npos) continue;
      std::string key(Strip(pair.substr(0, eq)));
      std::string_view value = Strip(pair.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      args[key] = std::string(value);
    }
    c.arguments = args.dump(-1, ' ', false,
                            nlohmann::ordered_json::error_handler_t::replace);
    b.calls.push_back(std::move(c));
    b.state = Scan::kComplete;
    b.end = close + 1;
    return b;
  }
  if (partial && kCall.starts_with(after)) return b;  // NAME.call( may come
  // Code, to the end of the reply.
  ToolCall c;
  c.name = "python";
  std::string code = JsonQuoted(t.substr(p));
  if (partial) code.pop_back();  // the closing quote comes with the end
  c.arguments = "{\"code\": ";
  c.arguments += code;
  if (!partial) {
    c.arguments += "}";
    b.state = Scan::kComplete;
    b.end = t.size();
  }
  b.calls.push_back(std::move(c));
  return b;
}

// DeepSeek R1: after <｜tool▁calls▁begin｜>, calls until
// <｜tool▁calls▁end｜>.
Block DeepSeekBlock(std::string_view t, size_t p) {
  constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  constexpr std::string_view kSep = "<｜tool▁sep｜>";
  constexpr std::string_view kFence = "```json";
  constexpr std::string_view kFenceEnd = "```";
  constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
  Block b;
  size_t i = p;
  while (true) {
    bool bad = false;
    size_t e = Expect(t, i, kCallsEnd, bad);
    if (e != npos) {
      b.state = Scan::kComplete;
      b.end = e;
      return b;
    }
    if (!bad) return b;
    bad = false;
    e = Expect(t, i, kCallBegin, bad);
    if (e == npos) {
      if (bad) b.state = b.calls.empty() ? Scan::kInvalid : Scan::kComplete;
      b.end = i;
      return b;
    }
    const size_t sep = t.find(kSep, e);
    if (sep == npos) return b;
    const size_t newline = t.find('\n', sep + kSep.size());
    if (newline == npos) return b;
    ToolCall c;
    c.name = std::string(
        Strip(t.substr(sep + kSep.size(), newline - sep - kSep.size())));
    bad = false;
    size_t args = Expect(t, newline, kFence, bad);
    if (args == npos) {
      b.calls.push_back(std::move(c));
      if (bad) {
        b.state = Scan::kComplete;
        b.end = newline;
      }
      return b;
    }
    args = SkipWs(t, args);
    size_t args_end;
    const Scan v = ScanValue(t, args, args_end);
    // As far as read (kInvalid: up to the fault, as a shorter text was).
    c.arguments = std::string(t.substr(args, args_end - args));
    b.calls.push_back(std::move(c));
    if (v != Scan::kComplete) {
      if (v == Scan::kInvalid) {
        b.state = Scan::kComplete;
        b.end = args_end;
      }
      return b;
    }
    bad = false;
    e = Expect(t, args_end, kFenceEnd, bad);
    if (e != npos) e = Expect(t, e, kCallEnd, bad);
    if (e == npos) {
      if (bad) {
        b.state = Scan::kComplete;
        b.end = args_end;
      }
      return b;
    }
    i = e;
  }
}

// Functionary: ">>>NAME\nARGS" (">>>all\n" opens text) or
// "<function=NAME>ARGS</function>".
Block FunctionaryBlock(std::string_view t, size_t p, bool tagged) {
  Block b;
  const size_t name_end = t.find(tagged ? '>' : '\n', p);
  if (name_end == npos) return b;
  ToolCall c;
  c.name = std::string(Strip(t.substr(p, name_end - p)));
  if (!tagged && c.name == "all") {
    b.state = Scan::kInvalid;  // text: the reply goes on as content
    return b;
  }
  const size_t args = SkipWs(t, name_end + 1);
  size_t args_end;
  const Scan v = ScanValue(t, args, args_end);
  // As far as read (kInvalid: up to the fault, as a shorter text was).
  c.arguments = std::string(t.substr(args, args_end - args));
  b.calls.push_back(std::move(c));
  if (v == Scan::kIncomplete) return b;
  b.state = Scan::kComplete;
  b.end = args_end;
  if (tagged && v == Scan::kComplete) ReadCloser(t, "</function>", b);
  return b;
}

struct Opener {
  std::string_view text;
  // The opener is the call's own first bytes (read again by the block).
  bool part_of_call = false;
  // Only where the reply starts or right after a call.
  bool at_start = false;
};

std::vector<Opener> Openers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kGeneric:
      return {};
    case ToolCallFormat::kLlama3:
      return {{"<|python_tag|>"}, {"{", true, true}};
    case ToolCallFormat::kHermes:
      return {{"<tool_call>"}};
    case ToolCallFormat::kMistral:
      return {{"[TOOL_CALLS]"}};
    case ToolCallFormat::kDeepSeekR1:
      return {{"<｜tool▁calls▁begin｜>"}};
    case ToolCallFormat::kCommandR:
      return {{"<|START_ACTION|>"}};
    case ToolCallFormat::kFunctionaryV3:
      return {{">>>"}, {"<function="}};
  }
  return {};
}

Block ReadBlock(ToolCallFormat f, const Opener& opener, std::string_view t,
                size_t p, bool partial) {
  switch (f) {
    case ToolCallFormat::kLlama3:
      if (opener.part_of_call) {
        Block b = ObjectBlock(t, p, "");
        // Not a call's object (its first key says so): text.
        if (b.not_a_call_object) b.state = Scan::kInvalid;
        return b;
      }
      return PythonTagBlock(t, p, partial);
    case ToolCallFormat::kHermes:
      return ObjectBlock(t, p, "</tool_call>");
    case ToolCallFormat::kMistral:
      return ArrayBlock(t, p, "");
    case ToolCallFormat::kDeepSeekR1:
      return DeepSeekBlock(t, p);
    case ToolCallFormat::kCommandR:
      return ArrayBlock(t, p, "<|END_ACTION|>");
    case ToolCallFormat::kFunctionaryV3:
      return FunctionaryBlock(t, p, opener.text == "<function=");
    case ToolCallFormat::kGeneric:
      break;
  }
  Block b;
  b.state = Scan::kInvalid;
  return b;
}

// The generic format: {"tool_calls": [...]}, {"tool_call": {...}} or
// {"response": "..."}.
void ParseGeneric(std::string_view t, size_t p, bool partial,
                  ParsedReply& out) {
  const size_t start = SkipWs(t, p);
  auto as_text = [&] {
    if (partial) return;  // it may still become JSON the parse reads
    out.content += t.substr(p);
  };
  if (start >= t.size()) return as_text();
  if (t[start] != '{') {
    out.content += t.substr(p);
    return;
  }
  size_t i = SkipWs(t, start + 1);
  size_t key_end;
  if (i >= t.size() || t[i] != '"' ||
      ScanString(t, i, key_end) != Scan::kComplete) {
    if (i < t.size() && t[i] != '"') out.content += t.substr(p);
    return as_text();
  }
  const std::string key(t.substr(i + 1, key_end - i - 2));
  i = SkipWs(t, key_end);
  if (i >= t.size()) return as_text();
  i = SkipWs(t, i + 1);  // past ':'
  if (key == "response") {
    if (i >= t.size()) return;
    if (t[i] != '"') {
      out.content += t.substr(p);  // not a string: the text is the answer
      return;
    }
    // Read leniently (control characters kept), and the same way however
    // much of it is written: up to the closing quote, or all.
    size_t close = i + 1;
    while (close < t.size() && t[close] != '"') {
      close += t[close] == '\\' ? 2 : 1;
    }
    out.content +=
        DecodePartialString(t.substr(0, std::min(close, t.size())), i);
    return;
  }
  Block b;
  if (key == "tool_calls") {
    b = ArrayBlock(t, i, "");
  } else if (key == "tool_call") {
    b = ObjectBlock(t, i, "");
  } else {
    out.content += t.substr(p);  // some other JSON: the answer itself
    return;
  }
  if (b.state == Scan::kInvalid && b.calls.empty()) {
    out.content += t.substr(p);
    return;
  }
  for (ToolCall& c : b.calls) out.calls.push_back(std::move(c));
}

// Appends a text segment to the content: trailing whitespace is held while
// the reply may go on, and dropped before a call.
void AddContent(std::string_view s, bool call_follows, bool partial,
                bool after_call, ParsedReply& out) {
  if (after_call) s = StripLeading(s);
  if (call_follows || partial) s = StripTrailing(s);
  out.content += s;
}

void ParseCalls(ToolCallFormat f, std::string_view t, size_t p, bool partial,
                ParsedReply& out) {
  if (f == ToolCallFormat::kGeneric) return ParseGeneric(t, p, partial, out);
  const std::vector<Opener> openers = Openers(f);
  bool after_call = false;
  bool at_start = true;
  while (true) {
    // The first opener in the rest (an at_start one only right here).
    size_t at = npos;
    const Opener* found = nullptr;
    for (const Opener& o : openers) {
      size_t q;
      if (o.at_start) {
        q = SkipWs(t, p);
        if (after_call && q < t.size() && t[q] == ';') q = SkipWs(t, q + 1);
        if (!at_start || !t.substr(q).starts_with(o.text)) q = npos;
      } else {
        q = t.find(o.text, p);
      }
      if (q < at) {
        at = q;
        found = &o;
      }
    }
    if (found == nullptr) {
      std::string_view rest = t.substr(p);
      if (partial) {
        size_t held = 0;
        for (const Opener& o : openers) {
          if (o.at_start) continue;
          held = std::max(held, HeldSuffix(rest, o.text));
        }
        rest.remove_suffix(held);
      }
      AddContent(rest, false, partial, after_call, out);
      return;
    }
    const size_t body = found->part_of_call ? at : at + found->text.size();
    Block b = ReadBlock(f, *found, t, body, partial);
    if (b.state == Scan::kInvalid && b.calls.empty()) {
      // Not a call: the opener is text.
      const size_t text_end = at + std::max<size_t>(found->text.size(), 1);
      AddContent(t.substr(p, text_end - p), false, false, after_call, out);
      p = text_end;
      after_call = false;
      at_start = false;
      continue;
    }
    AddContent(t.substr(p, at - p), !b.calls.empty() || partial, partial,
               after_call, out);
    for (ToolCall& c : b.calls) out.calls.push_back(std::move(c));
    if (b.state != Scan::kComplete) return;  // the reply's end
    p = b.end;
    after_call = true;
    at_start = true;
  }
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kGeneric:
      return "generic";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kDeepSeekR1:
      return "deepseek_r1";
    case ToolCallFormat::kCommandR:
      return "command_r";
    case ToolCallFormat::kFunctionaryV3:
      return "functionary_v3";
  }
  return "generic";
}

ReplyFormat DetectReplyFormat(std::string_view s) {
  ReplyFormat f;
  if (Contains(s, "<｜tool▁calls▁begin｜>")) {
    f.tools = ToolCallFormat::kDeepSeekR1;
  } else if (Contains(s, "<|START_ACTION|>")) {
    f.tools = ToolCallFormat::kCommandR;
  } else if (Contains(s, ">>>all") || Contains(s, "<function=")) {
    f.tools = ToolCallFormat::kFunctionaryV3;
  } else if (Contains(s, "<tool_call>")) {
    f.tools = ToolCallFormat::kHermes;
  } else if (Contains(s, "[TOOL_CALLS]")) {
    f.tools = ToolCallFormat::kMistral;
  } else if (Contains(s, "<|start_header_id|>") &&
             (Contains(s, "ipython") || Contains(s, "<|python_tag|>"))) {
    f.tools = ToolCallFormat::kLlama3;
  }
  f.renders_tools = Contains(s, "tools");
  f.reasoning = Contains(s, "<think>") || Contains(s, "</think>") ||
                Contains(s, "<|START_THINKING|>");
  return f;
}

std::string GenericToolPrompt(std::string_view tools_json) {
  std::string p = "Tools you can call (parameters as JSON Schema):\n";
  p.append(tools_json.data(), tools_json.size());
  p += "\nAnswer with JSON only: {\"tool_calls\": [{\"name\": ..., "
       "\"arguments\": {...}}]} to call tools, else {\"response\": "
       "\"...\"}.";
  return p;
}

bool ReasoningOpenAfter(std::string_view prompt) {
  prompt = StripTrailing(prompt);
  return prompt.ends_with("<think>") || prompt.ends_with("<|START_THINKING|>");
}

ParsedReply ParseReply(const ParseOptions& options, std::string_view t,
                       bool partial) {
  ParsedReply out;
  size_t p = 0;
  if (options.format.reasoning) {
    const bool command_r = options.format.tools == ToolCallFormat::kCommandR;
    const std::string_view open = command_r ? "<|START_THINKING|>" : "<think>";
    const std::string_view close = command_r ? "<|END_THINKING|>" : "</think>";
    size_t body = npos;
    if (options.format.reasoning_open) {
      body = 0;
    } else {
      const size_t q = SkipWs(t, 0);
      const std::string_view rest = t.substr(q);
      if (rest.starts_with(open)) {
        body = q + open.size();
      } else if (partial && open.starts_with(rest)) {
        return out;  // may still open the block
      }
    }
    if (body != npos) {
      const size_t end = t.find(close, body);
      std::string_view reasoning =
          t.substr(body, end == npos ? npos : end - body);
      if (end == npos && partial) {
        reasoning.remove_suffix(HeldSuffix(reasoning, close));
      }
      const size_t after =
          end == npos ? t.size() : SkipWs(t, end + close.size());
      if (options.split_reasoning) {
        // Trailing whitespace is held while it may be followed by more.
        out.reasoning = std::string(Strip(reasoning));
      } else {
        // Inline: the block as written.
        const size_t shown =
            end == npos ? static_cast<size_t>(reasoning.data() - t.data()) +
                              reasoning.size()
                        : end + close.size();
        out.content = std::string(t.substr(0, shown));
      }
      if (end == npos) return out;
      p = options.split_reasoning ? after : end + close.size();
    }
  }
  if (!options.tools) {
    out.content += t.substr(p);
    return out;
  }
  ParseCalls(options.format.tools, t, p, partial, out);
  if (options.single_call && out.calls.size() > 1) out.calls.resize(1);
  return out;
}

namespace {

bool IsToolName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status ToolError(const std::string& field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "`", field, "` ", absl::string_view(what.data(), what.size())));
}

}  // namespace

absl::StatusOr<std::vector<ToolSpec>> ParseTools(std::string_view tools_json) {
  // Ordered: a schema's properties are written in the client's order.
  JsonDepthLimit<nlohmann::ordered_json> depth;
  const nlohmann::ordered_json tools =
      nlohmann::ordered_json::parse(tools_json, depth.callback(), false);
  if (depth.exceeded()) return depth.Error("`tools`");
  if (!tools.is_array()) return ToolError("tools", "must be an array");
  if (tools.size() > static_cast<size_t>(kMaxTools)) {
    return ToolError("tools", absl::StrCat("holds ", tools.size(),
                                           " functions, at most ", kMaxTools));
  }
  std::vector<ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const nlohmann::ordered_json& t = tools[i];
    if (!t.is_object()) return ToolError(at, "must be an object");
    const auto type = t.find("type");
    if (type != t.end() && !type->is_null() && *type != "function") {
      return ToolError(at + ".type", "must be \"function\"");
    }
    const auto function = t.find("function");
    if (function == t.end() || !function->is_object()) {
      return ToolError(at + ".function", "must be an object");
    }
    ToolSpec spec;
    const auto name = function->find("name");
    if (name != function->end() && name->is_string()) {
      spec.name = name->get<std::string>();
    }
    if (!IsToolName(spec.name)) {
      return ToolError(at + ".function.name",
                       absl::StrCat("must be 1 to 64 letters, digits, '_' or "
                                    "'-', got ",
                                    name == function->end()
                                        ? std::string("none")
                                        : QuoteClientText(name->dump())));
    }
    const auto parameters = function->find("parameters");
    if (parameters != function->end() && !parameters->is_null()) {
      if (!parameters->is_object()) {
        return ToolError(at + ".function.parameters", "must be an object");
      }
      spec.parameters_json = parameters->dump();
    }
    for (const ToolSpec& other : out) {
      if (other.name == spec.name) {
        return ToolError(
            at + ".function.name",
            absl::StrCat(QuoteClientText(spec.name), " names a tool twice"));
      }
    }
    out.push_back(std::move(spec));
  }
  return out;
}

absl::Status CheckToolChoice(const ToolChoice& choice,
                             const std::vector<ToolSpec>& tools) {
  if (choice.mode == ToolChoice::Mode::kRequired && tools.empty()) {
    return ToolError("tool_choice", "\"required\" needs `tools`");
  }
  if (choice.mode == ToolChoice::Mode::kFunction &&
      std::none_of(tools.begin(), tools.end(), [&](const ToolSpec& t) {
        return t.name == choice.function;
      })) {
    return ToolError("tool_choice.function.name",
                     absl::StrCat(QuoteClientText(choice.function),
                                  " is not one of `tools`"));
  }
  return absl::OkStatus();
}

std::string NewToolCallId() {
  static constexpr char kChars[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  absl::BitGen gen;
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) {
    id.push_back(kChars[absl::Uniform<size_t>(gen, 0, sizeof(kChars) - 1)]);
  }
  return id;
}

ReplyDelta ReplyStream::Push(std::string_view piece) {
  // Nothing new to read (a control token, a character not complete yet).
  if (piece.empty()) return ReplyDelta();
  text_ += piece;
  return Advance(/*partial=*/true);
}

void ReplyDelta::Append(const ReplyDelta& later) {
  content += later.content;
  reasoning += later.reasoning;
  for (const Call& c : later.calls) {
    if (!calls.empty() && calls.back().index == c.index) {
      calls.back().arguments += c.arguments;  // one entry per call index
    } else {
      calls.push_back(c);
    }
  }
}

ReplyDelta ReplyStream::PushControl(std::string_view piece) {
  static constexpr std::string_view kMarkers[] = {"<|python_tag|>",
                                                  "[TOOL_CALLS]",
                                                  "<tool_call>",
                                                  "</tool_call>",
                                                  "<|START_ACTION|>",
                                                  "<|END_ACTION|>",
                                                  "<|START_THINKING|>",
                                                  "<|END_THINKING|>",
                                                  "<think>",
                                                  "</think>",
                                                  "<｜tool▁calls▁begin｜>",
                                                  "<｜tool▁calls▁end｜>",
                                                  "<｜tool▁call▁begin｜>",
                                                  "<｜tool▁call▁end｜>",
                                                  "<｜tool▁sep｜>"};
  for (std::string_view m : kMarkers) {
    if (m == piece) return Push(piece);
  }
  return ReplyDelta();
}

ReplyDelta ReplyStream::Finish() { return Advance(/*partial=*/false); }

ReplyDelta ReplyStream::Advance(bool partial) {
  ParsedReply now = ParseReply(options_, text_, partial);
  ReplyDelta d;
  // What grew; a part that would shrink (no parse does) is left as sent.
  auto grow = [](std::string& sent, const std::string& now, std::string& out) {
    if (now.size() > sent.size() && now.starts_with(sent)) {
      out = now.substr(sent.size());
      sent = now;
    }
  };
  grow(sent_.content, now.content, d.content);
  grow(sent_.reasoning, now.reasoning, d.reasoning);
  // Formats whose calls carry their ids (Mistral's templates want them back
  // as written, nine letters and digits) give a call once its id is read,
  // or at the end.
  const bool ids_written = options_.format.tools == ToolCallFormat::kMistral ||
                           options_.format.tools == ToolCallFormat::kCommandR;
  for (size_t i = 0; i < now.calls.size(); ++i) {
    ToolCall& c = now.calls[i];
    ReplyDelta::Call call;
    call.index = static_cast<int>(i);
    if (i >= sent_.calls.size()) {
      if (ids_written && c.id.empty() && partial) break;
      ToolCall added;
      added.id = !c.id.empty() ? c.id
                 : options_.format.tools == ToolCallFormat::kMistral
                     ? NewToolCallId().substr(5, 9)
                     : NewToolCallId();
      added.name = c.name;
      call.id = added.id;
      call.name = added.name;
      sent_.calls.push_back(std::move(added));
    }
    grow(sent_.calls[i].arguments, c.arguments, call.arguments);
    if (!call.id.empty() || !call.arguments.empty()) {
      d.calls.push_back(std::move(call));
    }
  }
  return d;
}

}  // namespace kvserve::constrain
