// Fuzzes the streaming text stages: Utf8StreamDecoder and StopMatcher.
//
// The input is split (FuzzedDataProvider) into stop strings, chunk sizes and
// the byte stream. Utf8StreamDecoder promises (utf8_stream_decoder.h): each
// Push/Flush returns valid UTF-8, and the concatenation is the same however
// the bytes are chunked (so equal to a one-shot Push + Flush). StopMatcher
// promises (stop_matcher.h): the stream stops at the first push completing a
// stop string (the earliest-starting one among those that push completes),
// the released text plus the final Flush is the input up to that stop string
// (all of it when none occurs), and what it holds back is shorter than the
// longest stop string, extended only to a character start.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/text/stop_matcher.h"
#include "core/text/utf8_stream_decoder.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

// The chunk sizes the provider chose, cycled over `text`.
std::vector<std::string_view> Chunk(std::string_view text,
                                    const std::vector<uint8_t>& sizes) {
  std::vector<std::string_view> out;
  size_t i = 0, k = 0;
  while (i < text.size()) {
    size_t n = sizes.empty() ? 1 : sizes[k++ % sizes.size()] % 9;
    n = std::min(n, text.size() - i);  // 0: an empty push
    out.push_back(text.substr(i, n));
    i += n;
    if (sizes.empty()) continue;
    if (k > 4 * text.size() + 8) {  // all-zero sizes: finish in one push
      out.push_back(text.substr(i));
      break;
    }
  }
  return out;
}

void CheckUtf8(std::string_view bytes, const std::vector<uint8_t>& sizes) {
  Utf8StreamDecoder one_shot;
  const std::string want = one_shot.Push(bytes) + one_shot.Flush();
  FUZZ_CHECK(IsValidUtf8(want), "one-shot decode is not valid UTF-8");
  if (IsValidUtf8(bytes)) {
    FUZZ_CHECK(want == bytes, "valid UTF-8 changed by decoding");
  }
  Utf8StreamDecoder streamed;
  std::string got;
  for (std::string_view chunk : Chunk(bytes, sizes)) {
    const std::string out = streamed.Push(chunk);
    FUZZ_CHECK(IsValidUtf8(out), "Push returned invalid UTF-8");
    got += out;
  }
  const std::string tail = streamed.Flush();
  FUZZ_CHECK(IsValidUtf8(tail), "Flush returned invalid UTF-8");
  got += tail;
  FUZZ_CHECK(got == want, "chunked decode differs from one-shot");
  // Ready for a new stream after Flush.
  FUZZ_CHECK(streamed.Push(bytes) + streamed.Flush() == want,
             "decoder not reset by Flush");
}

void CheckStops(std::string_view text, const std::vector<std::string>& stops,
                const std::vector<uint8_t>& sizes) {
  size_t longest = 0;
  for (const std::string& s : stops) longest = std::max(longest, s.size());
  StopMatcher m(stops);
  std::string got;
  size_t pushed = 0;
  size_t cut = std::string_view::npos;  // where the model says it stops
  for (std::string_view chunk : Chunk(text, sizes)) {
    const size_t before = pushed;
    pushed += chunk.size();
    if (cut == std::string_view::npos) {
      // The model: the first push that completes an occurrence stops; the
      // earliest-starting occurrence among those it completes wins. All of
      // them end inside this chunk.
      for (const std::string& s : stops) {
        if (s.empty() || s.size() > pushed) continue;
        const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
        const size_t at = text.substr(0, pushed).find(s, from);
        if (at != std::string_view::npos) cut = std::min(cut, at);
      }
    }
    const bool was_stopped = m.stopped();
    StopMatcher::Result r = m.Push(chunk);
    if (was_stopped) {
      FUZZ_CHECK(r.stopped && r.text.empty(), "push after stop released text");
    }
    FUZZ_CHECK(r.stopped == m.stopped(), "stopped() disagrees");
    FUZZ_CHECK(r.stopped == (cut != std::string_view::npos),
               "stopped %d after %zu bytes, model says %d", r.stopped, pushed,
               cut != std::string_view::npos);
    got += r.text;
    FUZZ_CHECK(text.substr(0, got.size()) == got,
               "released text is not a prefix of the input");
    if (!r.stopped) {
      const size_t held = pushed - got.size();
      const size_t bound = longest == 0 ? 0 : longest - 1 + 3;
      FUZZ_CHECK(held <= bound, "holds %zu bytes, longest stop %zu", held,
                 longest);
    }
  }
  if (!m.stopped()) got += m.Flush();
  const std::string_view want =
      cut == std::string_view::npos ? text : text.substr(0, cut);
  FUZZ_CHECK(got == want, "released %zu bytes, want %zu", got.size(),
             want.size());
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  std::vector<std::string> stops;
  for (int n = p.ConsumeIntegralInRange(0, 4); n > 0; --n) {
    stops.push_back(p.ConsumeRandomLengthString(12));
  }
  std::vector<uint8_t> sizes =
      p.ConsumeBytes<uint8_t>(p.ConsumeIntegralInRange<size_t>(0, 16));
  const std::string text = p.ConsumeRemainingBytesAsString();
  kvserve::CheckUtf8(text, sizes);
  kvserve::CheckStops(text, stops, sizes);
  return 0;
}
