// Inputs tests/fuzz/utf8_fuzzer.cc found; each test names what broke.
#include <algorithm>
#include <string>

#include "core/text/stop_matcher.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

// A run of stray continuation bytes (invalid UTF-8) whose last byte could
// begin a stop string: the cut used to walk back over the whole run looking
// for a character start, so nothing was released until Flush.
TEST(StopMatcherFuzzRegressionTest, StrayContinuationBytesAreNotHeldForever) {
  StopMatcher matcher({"\x80X"});
  std::string released;
  for (int i = 0; i < 40; ++i) {
    StopMatcher::Result r = matcher.Push("\x80");
    ASSERT_FALSE(r.stopped);
    released += r.text;
    // Held back: shorter than the stop string, plus at most 3 bytes to a
    // character start.
    EXPECT_LE(i + 1 - static_cast<int>(released.size()), 1 + 3) << i;
  }
  released += matcher.Flush();
  EXPECT_EQ(released, std::string(40, '\x80'));
}

// The fuzzer's input: a stop string of 12 bytes, then a lead byte and 60
// continuation bytes pushed in small pieces.
TEST(StopMatcherFuzzRegressionTest, HeldTextStaysBoundedOnLongInvalidRuns) {
  StopMatcher matcher({std::string(12, '\x80') + "X"});
  const std::string text = "\xe0" + std::string(60, '\x80');
  std::string released;
  for (size_t i = 0; i < text.size(); i += 5) {
    StopMatcher::Result r = matcher.Push(text.substr(i, 5));
    ASSERT_FALSE(r.stopped);
    released += r.text;
    const size_t pushed = std::min(text.size(), i + 5);
    EXPECT_LE(pushed - released.size(), 12u + 3u) << "after " << pushed;
  }
  EXPECT_EQ(released + matcher.Flush(), text);
}

}  // namespace
}  // namespace kvserve
