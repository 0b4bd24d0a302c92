// XXH64 and the model fingerprint must never change: session logs and KV
// snapshots on disk carry XXH64 checksums, and clients compare models by
// fingerprint. The values below were computed with the hand-written XXH64
// that libxxhash replaced, so they pin its output exactly.
#include "core/model/fingerprint.h"

#include <cstdint>
#include <string>

#include "core/model/builtin_model.h"
#include "core/model/loader.h"
#include "core/util/mapped_file.h"
#include "core/util/xxhash64.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

constexpr uint64_t kSeedGolden = 0x9E3779B97F4A7C15ULL;

// n bytes: byte i is (31 i + 7) mod 256.
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + 7) & 0xff);
  return s;
}

uint64_t Hash(const std::string& s, uint64_t seed) {
  return Xxh64(s.data(), s.size(), seed);
}

TEST(Xxh64Test, EmptyInput) {
  EXPECT_EQ(Xxh64("", 0, 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Xxh64("", 0, 1), 0xD5AFBA1336A3BE4BULL);
  EXPECT_EQ(Xxh64("", 0, kSeedGolden), 0xC4349FC93C010000ULL);
  // The bytes behind a zero size are never read.
  EXPECT_EQ(Xxh64(nullptr, 0, 0), 0xEF46DB3751D8E999ULL);
}

TEST(Xxh64Test, ShortInputs) {
  EXPECT_EQ(Xxh64("a", 1, 0), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Xxh64("abc", 3, 0), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(Xxh64("abc", 3, 1), 0xBEA9CA8199328908ULL);
  EXPECT_EQ(Xxh64("abc", 3, kSeedGolden), 0x2ED0F59D6B43AC8BULL);
}

// 31, 32 and 37 bytes: just below, at and past one 32-byte stripe.
TEST(Xxh64Test, AroundOneStripe) {
  const std::string p = Pattern(1000);
  EXPECT_EQ(Hash(p.substr(0, 31), 0), 0x4A74F3A1A39AD4A1ULL);
  EXPECT_EQ(Hash(p.substr(0, 31), 1), 0xD7AC4F4BEA4E460AULL);
  EXPECT_EQ(Hash(p.substr(0, 31), kSeedGolden), 0x8137041F5AF88413ULL);
  EXPECT_EQ(Hash(p.substr(0, 32), 0), 0x8D57D6A4671CC43DULL);
  EXPECT_EQ(Hash(p.substr(0, 32), 1), 0x8F666909CFD00CC8ULL);
  EXPECT_EQ(Hash(p.substr(0, 32), kSeedGolden), 0x184EBCF3745CD46CULL);
  EXPECT_EQ(Hash(p.substr(0, 37), 0), 0x5D71D9FC4B676D9FULL);
  EXPECT_EQ(Hash(p.substr(0, 37), 1), 0xEE086A7ED5E10EB9ULL);
  EXPECT_EQ(Hash(p.substr(0, 37), kSeedGolden), 0x2663FCC0301BE7AAULL);
}

TEST(Xxh64Test, ThousandBytePattern) {
  const std::string p = Pattern(1000);
  EXPECT_EQ(Hash(p, 0), 0x99594F4828043D35ULL);
  EXPECT_EQ(Hash(p, 1), 0x31DB8080BC8EB541ULL);
  EXPECT_EQ(Hash(p, kSeedGolden), 0xDA717F741F399F3FULL);
}

TEST(FingerprintTest, ChainsXxh64WithThePreviousStateAsSeed) {
  const std::string p = Pattern(1000);
  Fingerprint f;
  EXPECT_EQ(f.value(), 0u);
  EXPECT_EQ(f.Hex(), "0000000000000000");
  f.Add("abc");
  EXPECT_EQ(f.value(), 0x44BC2CF5AD770999ULL);
  f.Add(p.data(), p.size());
  EXPECT_EQ(f.value(), Hash(p, 0x44BC2CF5AD770999ULL));
  EXPECT_EQ(f.Hex(), "ea44d5c22c87a275");
  // Order matters.
  Fingerprint g;
  g.Add(p.data(), p.size());
  g.Add("abc");
  EXPECT_NE(g.value(), f.value());
}

TEST(FingerprintTest, BuiltinModel) {
  for (const char* dtype : {"auto", "bf16"}) {
    absl::StatusOr<LoadedModel> m =
        LoadRandomModel(BuiltinModelOptions(), dtype);
    ASSERT_TRUE(m.ok()) << m.status();
    // Of the bytes as loaded from the file, whatever they are converted to.
    EXPECT_EQ(m->weights->fingerprint, "61b67545cd0b522e") << dtype;
  }
}

std::string Models() { return kvserve::testing::SharedDir() + "/models/"; }

// The fingerprint of a model file, or "" (with a failure) when it will not
// load; skips when the file is absent.
std::string FileFingerprint(const LoadOptions& options) {
  absl::StatusOr<LoadedModel> m = LoadModel(options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? m->weights->fingerprint : "";
}

#define SKIP_WITHOUT(file)                                  \
  if (!MappedFile::Open(Models() + file).ok()) {            \
    GTEST_SKIP() << "needs " << file << " in " << Models(); \
  }

TEST(FingerprintTest, Stories260KGguf) {
  SKIP_WITHOUT("stories260K.gguf");
  LoadOptions o;
  o.model_path = Models() + "stories260K.gguf";
  EXPECT_EQ(FileFingerprint(o), "682241db3aafc089");
  o.weight_dtype = "bf16";
  EXPECT_EQ(FileFingerprint(o), "682241db3aafc089");
}

TEST(FingerprintTest, Stories260KLlama2c) {
  SKIP_WITHOUT("stories260K.bin");
  SKIP_WITHOUT("tok512.bin");
  LoadOptions o;
  o.model_path = Models() + "stories260K.bin";
  o.tokenizer_path = Models() + "tok512.bin";
  EXPECT_EQ(FileFingerprint(o), "bd7f9098d939c277");
}

TEST(FingerprintTest, Stories260KQ4_0) {
  SKIP_WITHOUT("quant/stories260K-q4_0.gguf");
  LoadOptions o;
  o.model_path = Models() + "quant/stories260K-q4_0.gguf";
  EXPECT_EQ(FileFingerprint(o), "bf24f3837af1eda8");
}

}  // namespace
}  // namespace kvserve
