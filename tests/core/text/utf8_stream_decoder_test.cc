#include "core/text/utf8_stream_decoder.h"

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

// Decodes `chunks` as one stream, returning everything Push and Flush emit,
// and checks each emitted piece is valid UTF-8 on its own.
std::string DecodeChunks(const std::vector<std::string>& chunks) {
  Utf8StreamDecoder decoder;
  std::string out;
  for (const std::string& chunk : chunks) {
    const std::string piece = decoder.Push(chunk);
    EXPECT_TRUE(IsValidUtf8(piece)) << "chunk " << chunk;
    out += piece;
  }
  const std::string tail = decoder.Flush();
  EXPECT_TRUE(IsValidUtf8(tail));
  return out + tail;
}

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view part : parts) out.append(part);
  return out;
}

std::string Decode(std::string_view bytes) {
  return DecodeChunks({std::string(bytes)});
}

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Utf8StreamDecoderTest, AsciiPassesThrough) {
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Push("hello "), "hello ");
  EXPECT_EQ(decoder.Push("world"), "world");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(Utf8StreamDecoderTest, EveryTwoWaySplitOfMixedText) {
  // 1-, 2-, 3- and 4-byte characters: a, é, €, 😀, 𐍈, U+10FFFF.
  const std::string text =
      "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF0\x90\x8D\x88\xF4\x8F\xBF\xBF";
  ASSERT_TRUE(IsValidUtf8(text));
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(DecodeChunks({text.substr(0, cut), text.substr(cut)}), text)
        << "cut at " << cut;
  }
}

TEST(Utf8StreamDecoderTest, EveryThreeWaySplitOfThreeByteChar) {
  const std::string text = "x\xE2\x82\xACy";  // x€y
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      EXPECT_EQ(DecodeChunks(
                    {text.substr(0, a), text.substr(a, b - a), text.substr(b)}),
                text);
    }
  }
}

TEST(Utf8StreamDecoderTest, EmojiByteByByteIsHeldUntilComplete) {
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Push("\xF0"), "");
  EXPECT_EQ(decoder.Push("\x9F"), "");
  EXPECT_EQ(decoder.Push("\x98"), "");
  EXPECT_EQ(decoder.Push("\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(Utf8StreamDecoderTest, CompletedPrefixIsReleasedBeforeHeldTail) {
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Push("ok\xE2\x82"), "ok");
  EXPECT_EQ(decoder.Push("\xAC!"), "\xE2\x82\xAC!");
}

TEST(Utf8StreamDecoderTest, TruncatedTailBecomesOneReplacementAtFlush) {
  for (std::string_view tail : {"\xC3", "\xE2\x82", "\xF0\x9F\x98"}) {
    Utf8StreamDecoder decoder;
    EXPECT_EQ(decoder.Push(Cat({"a", tail})), "a");
    EXPECT_EQ(decoder.Flush(), kFffd);
    // The decoder starts afresh after Flush.
    EXPECT_EQ(decoder.Push("b"), "b");
    EXPECT_EQ(decoder.Flush(), "");
  }
}

TEST(Utf8StreamDecoderTest, InvalidSingleBytes) {
  EXPECT_EQ(Decode("a\x80z"), Cat({"a", kFffd, "z"}));
  EXPECT_EQ(Decode("\xBF\xBF"), Repeat(kFffd, 2));
  EXPECT_EQ(Decode("\xC0\xC1"), Repeat(kFffd, 2));  // never-valid leads
  EXPECT_EQ(Decode("\xF5\xFE\xFF"), Repeat(kFffd, 3));
}

TEST(Utf8StreamDecoderTest, BadContinuationReplacesOnlyTheSubpart) {
  // A truncated 3-byte prefix followed by ASCII: one U+FFFD, then the ASCII.
  EXPECT_EQ(Decode("\xE2\x82z"), Cat({kFffd, "z"}));
  // A lead byte followed by another lead: the second starts a valid char.
  EXPECT_EQ(Decode("\xC3\xC3\xA9"), Cat({kFffd, "\xC3\xA9"}));
  // Split across pushes, the same result.
  EXPECT_EQ(DecodeChunks({"\xF0\x9F", "\x98", "a"}), Cat({kFffd, "a"}));
}

TEST(Utf8StreamDecoderTest, OverlongsAreReplacedPerByte) {
  // Overlong "/" (2-byte and 3-byte): C0 is never valid; after E0 the next
  // byte must be A0..BF, so each byte is its own maximal subpart.
  EXPECT_EQ(Decode("\xC0\xAF"), Repeat(kFffd, 2));
  EXPECT_EQ(Decode("\xE0\x80\xAF"), Repeat(kFffd, 3));
  EXPECT_EQ(Decode("\xF0\x80\x80\xAF"), Repeat(kFffd, 4));
}

TEST(Utf8StreamDecoderTest, SurrogatesAndAboveMaxAreReplaced) {
  EXPECT_EQ(Decode("\xED\xA0\x80"), Repeat(kFffd, 3));      // U+D800
  EXPECT_EQ(Decode("\xED\xBF\xBF"), Repeat(kFffd, 3));      // U+DFFF
  EXPECT_EQ(Decode("\xED\x9F\xBF"), "\xED\x9F\xBF");        // U+D7FF is fine
  EXPECT_EQ(Decode("\xF4\x90\x80\x80"), Repeat(kFffd, 4));  // U+110000
}

TEST(Utf8StreamDecoderTest, UnicodeRecommendedPracticeExample) {
  // Unicode 15, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 decodes
  // to a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
  const std::string bytes =
      "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string_view r = kFffd;
  const std::string expected = Cat({"a", r, r, r, "b", r, "c", r, r, "d"});
  EXPECT_EQ(Decode(bytes), expected);
  std::vector<std::string> single_bytes;
  for (char c : bytes) single_bytes.push_back(std::string(1, c));
  EXPECT_EQ(DecodeChunks(single_bytes), expected);
}

TEST(IsValidUtf8Test, AcceptsWellFormedRejectsOthers) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\x98"));      // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("a\x80"));
}

}  // namespace
}  // namespace kvserve
