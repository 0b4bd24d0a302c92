#include "core/text/stop_matcher.h"

#include <string>
#include <vector>

#include "core/text/utf8_stream_decoder.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

struct Streamed {
  std::string text;  // everything released, Flush included when not stopped
  bool stopped = false;
};

Streamed Stream(const std::vector<std::string>& stops,
                const std::vector<std::string>& pieces) {
  StopMatcher matcher(stops);
  Streamed out;
  for (const std::string& piece : pieces) {
    StopMatcher::Result r = matcher.Push(piece);
    out.text += r.text;
    if (r.stopped) {
      out.stopped = true;
      break;
    }
  }
  if (!out.stopped) out.text += matcher.Flush();
  return out;
}

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.Push("abc").text, "abc");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  StopMatcher matcher({"", ""});
  StopMatcher::Result r = matcher.Push("abc");
  EXPECT_EQ(r.text, "abc");
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcherTest, StopInsideOnePiece) {
  StopMatcher matcher({"END"});
  StopMatcher::Result r = matcher.Push("helloENDworld");
  EXPECT_EQ(r.text, "hello");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, PossiblePrefixIsHeldThenReleased) {
  StopMatcher matcher({"END"});
  StopMatcher::Result r = matcher.Push("helloEN");
  EXPECT_EQ(r.text, "hello");
  EXPECT_FALSE(r.stopped);
  r = matcher.Push("Z");
  EXPECT_EQ(r.text, "ENZ");
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcherTest, StopSplitAtEveryBoundary) {
  const std::string text = "say hello<|end|>ignored";
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      const Streamed s =
          Stream({"<|end|>"},
                 {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      EXPECT_TRUE(s.stopped) << a << " " << b;
      EXPECT_EQ(s.text, "say hello") << a << " " << b;
    }
  }
}

TEST(StopMatcherTest, OverlappingPrefix) {
  // "ab" in "aab": the first "a" is released once it can no longer start it.
  StopMatcher matcher({"ab"});
  StopMatcher::Result r = matcher.Push("a");
  EXPECT_EQ(r.text, "");
  r = matcher.Push("a");
  EXPECT_EQ(r.text, "a");
  r = matcher.Push("b");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);

  EXPECT_EQ(Stream({"ab"}, {"aab"}).text, "a");
  EXPECT_EQ(Stream({"aab"}, {"a", "a", "a", "b"}).text, "a");
  EXPECT_EQ(Stream({"abab"}, {"aba", "bab"}).text, "");
}

TEST(StopMatcherTest, MultipleStopsEarliestStartWins) {
  const Streamed s = Stream({"world", "lo w"}, {"hello world"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "hel");
  EXPECT_EQ(Stream({"xyz", "\n\n"}, {"line\n", "\nnext"}).text, "line");
}

TEST(StopMatcherTest, HoldBackIsBoundedByLongestStop) {
  // Each push of "abcde" could start "abcdef", so exactly the previous one
  // is released: nothing is held back for longer than it can matter.
  StopMatcher matcher({"abcdef", "x"});
  EXPECT_EQ(matcher.Push("abcde").text, "");
  for (int i = 0; i < 100; ++i) {
    StopMatcher::Result r = matcher.Push("abcde");
    EXPECT_EQ(r.text, "abcde");
    EXPECT_FALSE(r.stopped);
  }
  EXPECT_EQ(matcher.Push("-").text, "abcde-");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, FlushReturnsHeldTextWhenNoMatch) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.Push("abcST").text, "abc");
  EXPECT_EQ(matcher.Flush(), "ST");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, PushAfterStopReleasesNothing) {
  StopMatcher matcher({"."});
  EXPECT_TRUE(matcher.Push("done.").stopped);
  StopMatcher::Result r = matcher.Push("more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, HeldTextNeverSplitsACharacter) {
  // The stops share é's first byte (C3) but not its second: the matcher must
  // not cut between C3 and A9.
  StopMatcher matcher({"\xC3\xA8!", "\xA9!"});
  StopMatcher::Result r = matcher.Push("caf\xC3\xA9");
  EXPECT_TRUE(IsValidUtf8(r.text));
  std::string all = r.text;
  r = matcher.Push(" ok");
  EXPECT_TRUE(IsValidUtf8(r.text));
  all += r.text + matcher.Flush();
  EXPECT_EQ(all, "caf\xC3\xA9 ok");
}

TEST(StopMatcherTest, MultiByteStopAcrossPieces) {
  // "。" is E3 80 82; pieces arrive as whole characters.
  const Streamed s =
      Stream({"\xE3\x80\x82\xE3\x80\x82"},
             {"\xE6\x97\xA5\xE3\x80\x82", "\xE3\x80\x82\xE6\x97\xA5"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "\xE6\x97\xA5");
}

}  // namespace
}  // namespace kvserve
