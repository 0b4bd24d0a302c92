// Fuzzes the reading of a model's reply into content, reasoning and tool
// calls (core/constrain/tool_calls.h): the text is the model's, so any
// bytes.
//
// The input's first byte picks the format and options, its second how the
// rest is cut into streamed pieces. The rest is made valid UTF-8 and cut
// between characters, as the engine streams text (Utf8StreamDecoder). Promises
// checked: no crash or hang; the reply streamed piece by piece (ReplyStream)
// ends equal to the reply parsed whole, so every partial parse extended the one
// before (deltas never take back what was sent).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/constrain/tool_calls.h"
#include "core/text/utf8_stream_decoder.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constrain::ParseOptions o;
  o.format.tools = static_cast<constrain::ToolCallFormat>(data[0] % 7);
  o.format.reasoning = data[0] & 0x08;
  o.format.reasoning_open = data[0] & 0x10;
  o.tools = !(data[0] & 0x20);
  o.single_call = data[0] & 0x40;
  o.split_reasoning = !(data[0] & 0x80);
  const size_t piece = 1 + data[1] % 16;
  Utf8StreamDecoder utf8;
  const std::string valid =
      utf8.Push(fuzz::AsView(data + 2, size - 2)) + utf8.Flush();
  const std::string_view text = valid;

  const constrain::ParsedReply whole =
      constrain::ParseReply(o, text, /*partial=*/false);
  constrain::ReplyStream stream(o);
  for (size_t at = 0; at < text.size();) {
    size_t next = std::min(at + piece, text.size());
    while (next < text.size() && (text[next] & 0xC0) == 0x80) ++next;
    stream.Push(text.substr(at, next - at));
    at = next;
  }
  stream.Finish();
  const constrain::ParsedReply& sent = stream.sent();
  FUZZ_CHECK(sent.content == whole.content, "content \"%s\" != \"%s\"",
             sent.content.c_str(), whole.content.c_str());
  FUZZ_CHECK(sent.reasoning == whole.reasoning, "reasoning \"%s\" != \"%s\"",
             sent.reasoning.c_str(), whole.reasoning.c_str());
  FUZZ_CHECK(sent.calls.size() == whole.calls.size(), "%zu calls != %zu",
             sent.calls.size(), whole.calls.size());
  for (size_t i = 0; i < sent.calls.size(); ++i) {
    FUZZ_CHECK(sent.calls[i].name == whole.calls[i].name, "call %zu name", i);
    FUZZ_CHECK(sent.calls[i].arguments == whole.calls[i].arguments,
               "call %zu arguments \"%s\" != \"%s\"", i,
               sent.calls[i].arguments.c_str(),
               whole.calls[i].arguments.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace kvserve
